"""A graph that runs without part of its inputs' tensors is never ``ok``.

An observed call may pass an object that keeps tensors its flattening does not reach (a
cache class no pytree opens, a cache layer type nothing rebuilds). The export then traces
the model without them and the replay feeds neither side that state, so the numbers can
match while the graph is not the model. Every such call fails, with the input, its type
and where the tensors are (recorded while observing, see ``Observation.hidden``).
"""

from __future__ import annotations

from observer_ci.core.results import ModelResult
from observer_ci.observing import registry
from observer_ci.pipeline.causes import explain_dropped_state


def fail_dropped_state(entry: registry.ObservedModel, result: ModelResult) -> list[int]:
    """Marks the rows of calls whose inputs kept tensors out of the graph as failed;
    returns their call numbers."""
    failed = []
    by_index = {row.index: row for row in result.observations}
    for i, obs in enumerate(entry.observer.observations):
        if not obs.hidden or i not in by_index:
            continue
        name, (holder, paths) = next(iter(obs.hidden.items()))
        row = by_index[i]
        row.success = False
        row.cause = explain_dropped_state(name, holder, paths)
        row.error = row.error or f"input {name!r} keeps tensors the graph does not take"
        failed.append(i)
    for graph in result.graphs:
        if any(i in failed for i in graph.observation_indices):
            graph.success = False
    return failed
