"""What changed between base and head beyond the numbers: ONNX op types, memory, package
versions.

Torch-free: reads two :class:`~observer_ci.core.results.RunResults`. The op-type diff feeds
the ``op_set_changed`` rule and the model details, the memory pairs the ``memory_growth``
rule and the details' "Memory vs base" line; the version diff names which models' outputs
moved with an upgrade (outputs changing after a torch or onnxruntime upgrade are a classic:
the verdict should say so, not leave the reader to guess).
"""

from __future__ import annotations

import math

from observer_ci.core.results import Footprint, ModelResult, RunResults, max_or_none
from observer_ci.report.tables import format_bytes

VERSIONED = ("torch", "onnx", "onnxruntime", "onnxscript", "transformers")
MOVED_FACTOR = 10.0  # a worst abs error this many times the base's (or from 0) has moved
_SHOWN_OPS = 8
# phase label -> Footprint field (pipeline/memory.py measures them in the child)
MEMORY_PHASES = {"export": "export_bytes", "session": "session_bytes", "run": "run_bytes"}


def op_count_diff(base: dict[str, int], head: dict[str, int]) -> dict[str, int]:
    """Head minus base count per op type, only the types whose count changed."""
    return {
        op: head.get(op, 0) - base.get(op, 0)
        for op in sorted(set(base) | set(head))
        if head.get(op, 0) != base.get(op, 0)
    }


def op_diff_text(base: dict[str, int], head: dict[str, int]) -> str:
    """``+8 Cast, -1 Softmax (gone), +2 Gelu (new)``, largest changes first."""
    diff = op_count_diff(base, head)
    ordered = sorted(diff.items(), key=lambda item: (-abs(item[1]), item[0]))
    parts = []
    for op, delta in ordered[:_SHOWN_OPS]:
        tag = " (new)" if op not in base else " (gone)" if op not in head else ""
        parts.append(f"{delta:+d} {op}{tag}")
    if len(ordered) > _SHOWN_OPS:
        parts.append(f"and {len(ordered) - _SHOWN_OPS} more")
    return ", ".join(parts)


def op_set_changed(base: ModelResult, head: ModelResult) -> tuple[list[str], list[str]] | None:
    """(op types new in head, op types gone from it), or ``None`` when either side has no
    op counts (an older results.json, a failed export) or the set of types is the same."""
    old = base.export.op_counts if base.export is not None else {}
    new = head.export.op_counts if head.export is not None else {}
    if not old or not new or set(old) == set(new):
        return None
    return sorted(set(new) - set(old)), sorted(set(old) - set(new))


def version_changes(base: RunResults, head: RunResults) -> dict[str, tuple[str, str]]:
    """Package -> (base version, head version) for the packages whose version differs."""
    changes = {}
    for package in VERSIONED:
        old, new = base.environment.get(package), head.environment.get(package)
        if old and new and old != new:
            changes[package] = (str(old), str(new))
    return changes


def moved_outputs(base: RunResults, head: RunResults) -> list[tuple[str, float, float]]:
    """(model, base worst abs, head worst abs) of the models whose outputs moved."""
    old_by_name = {m.name: m for m in base.models}
    moved = []
    for model in head.models:
        old = old_by_name.get(model.name)
        if old is None:
            continue
        before, after = _worst_abs(old), _worst_abs(model)
        if before is None or after is None or math.isnan(before):
            continue
        if math.isnan(after) or after > max(before, 1e-12) * MOVED_FACTOR:
            moved.append((model.name, before, after))
    return moved


def _worst_abs(model: ModelResult) -> float | None:
    return max_or_none(o.abs for o in model.observations)


def memory_pairs(base: ModelResult, head: ModelResult) -> list[tuple[str, str, int, int]]:
    """(graph, phase, base bytes, head bytes) of every phase measured on both sides, graph
    by graph (by name); an export restored from the cache on either side has no pair."""
    old: dict[str, Footprint] = {g.name: g.footprint for g in base.graphs if g.footprint}
    pairs = []
    for graph in head.graphs:
        before = old.get(graph.name)
        if graph.footprint is None or before is None:
            continue
        for phase, attribute in MEMORY_PHASES.items():
            a, b = getattr(before, attribute), getattr(graph.footprint, attribute)
            if isinstance(a, int) and isinstance(b, int):
                pairs.append((graph.name, phase, a, b))
    return pairs


def memory_text(footprint: Footprint) -> str:
    """``export 1.5 MiB · session 64 KiB in 0.9 ms · first run 196 KiB``: what each phase
    added to the RSS (its peak over its start)."""
    parts = []
    for phase, attribute in MEMORY_PHASES.items():
        value = getattr(footprint, attribute)
        if value is None:
            continue
        text = f"{'first run' if phase == 'run' else phase} {format_bytes(value)}"
        if phase == "session" and footprint.session_seconds is not None:
            text += f" in {footprint.session_seconds * 1e3:.3g} ms"
        parts.append(text)
    return " · ".join(parts)


def memory_diff_text(pairs: list[tuple[str, str, int, int]], graphs: int) -> str:
    """``export 12 MiB → 20 MiB (×1.63), run 1 MiB → 1 MiB``; the graph named when the
    model has several."""
    parts = []
    for graph, phase, old, new in pairs:
        where = f"{graph} " if graphs > 1 else ""
        ratio = f" (×{new / old:.3g})" if old > 0 and new != old else ""
        parts.append(f"{where}{phase} {format_bytes(old)} → {format_bytes(new)}{ratio}")
    return ", ".join(parts)
