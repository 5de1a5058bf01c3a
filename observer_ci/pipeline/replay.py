"""Replay observed calls in onnxruntime and in torch; timing and feeds."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from observer_ci.core.constants import (
    MIN_TIMED_RUNS,
    SLOW_RUN_SHARE,
    TIGHT_SPREAD,
    TORCH_MIN_TIMED_RUNS,
)
from observer_ci.core.errors import error_tail
from observer_ci.core.exceptions import FeedError
from observer_ci.core.results import ObservationResult
from observer_ci.core.tolerances import OutputTolerance
from observer_ci.observing import structure
from observer_ci.pipeline.causes import explain_ort_failure
from observer_ci.pipeline.diff import Diff, flatten_outputs, judge_outputs, max_diff, output_names
from observer_ci.pipeline.ort_session import make_session

if TYPE_CHECKING:
    from observer_ci.observing.observer import InputObserver


def feed_array(t: torch.Tensor) -> np.ndarray:
    """An onnxruntime feed with the tensor's exact dtype. bfloat16 cannot be widened here
    (the graph expects bfloat16) and numpy has no such dtype, so it is refused clearly."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        raise FeedError(
            "bfloat16 inputs cannot be fed to onnxruntime through numpy (and its CPU kernels "
            "mostly lack bfloat16): observe the model in float32 or float16 to check it"
        )
    return t.contiguous().numpy()


def match_feeds(
    onnx_inputs: Sequence[str], names: Sequence[str], tensors: Sequence[torch.Tensor]
) -> dict[str, np.ndarray]:
    """Feeds by name; inputs the exporter renamed are matched by position among the rest."""
    if len(names) != len(tensors):
        raise FeedError(f"{len(names)} names for {len(tensors)} tensors")
    by_name = dict(zip(names, tensors))
    feeds: dict[str, np.ndarray] = {}
    unmatched_onnx = [n for n in onnx_inputs if n not in by_name]
    unused = [n for n in names if n not in set(onnx_inputs)]
    for n in onnx_inputs:
        if n in by_name:
            feeds[n] = feed_array(by_name[n])
    if unmatched_onnx:
        if len(unmatched_onnx) != len(unused):
            raise FeedError(
                f"ONNX inputs {unmatched_onnx[:5]} match no observed input; "
                f"unmatched observed inputs: {unused[:5]}"
            )
        for onnx_name, name in zip(unmatched_onnx, unused):
            feeds[onnx_name] = feed_array(by_name[name])
    return feeds


def time_call(fn: Callable[[], Any], warmup: int = 1, repeat: int = 5) -> tuple[Any, float]:
    """Runs ``fn`` ``warmup`` times untimed then ``repeat`` times; returns last result, median."""
    result, durations = time_runs(fn, warmup, repeat)
    return result, statistics.median(durations)


def time_runs(
    fn: Callable[..., Any],
    warmup: int = 1,
    repeat: int = 5,
    budget_s: float | None = None,
    prepare: Callable[[], tuple[Any, ...]] = tuple,
    min_runs: int = MIN_TIMED_RUNS,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[Any, list[float]]:
    """Runs ``fn`` ``warmup`` times untimed then up to ``repeat`` times; returns the last
    result and every timed duration (the spread tells noise from a real change). Each run
    calls ``fn(*prepare())``, ``prepare`` untimed (fresh clones of inputs a model mutates).

    With ``budget_s``, a call that is slow for its budget stops early: the warm-up ends once
    it has used half the budget or after one slow run (:data:`SLOW_RUN_SHARE` of the
    budget), and timing once ``min_runs`` runs are in and either the timed runs have used
    the budget or slow runs agree within :data:`TIGHT_SPREAD` (a large model is timed
    ``min_runs`` times, a small one ``repeat``). ``clock``: seconds, for the tests."""
    begin = clock()
    for _ in range(max(0, warmup)):
        start = clock()
        fn(*prepare())
        now = clock()
        if budget_s is not None and (
            now - begin > budget_s / 2 or now - start >= SLOW_RUN_SHARE * budget_s
        ):
            break
    durations: list[float] = []
    result = None
    for k in range(max(1, repeat)):
        arguments = prepare()
        start = clock()
        result = fn(*arguments)
        durations.append(clock() - start)
        if budget_s is not None and k + 1 >= min_runs and _enough(durations, budget_s):
            break
    return result, durations


def _enough(durations: list[float], budget_s: float) -> bool:
    """The timed runs have used the budget, or slow runs already agree."""
    if sum(durations) >= budget_s:
        return True
    median = statistics.median(durations)
    steady = max(durations) - min(durations) <= TIGHT_SPREAD * median
    return min(durations) >= SLOW_RUN_SHARE * budget_s and steady


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` for a block (``None``: unchanged). One
    thread by default when timing: on a shared runner a parallel region waits for its
    slowest thread, which another job may have descheduled (seen: 4-60 ms steps)."""
    if threads is None or threads == torch.get_num_threads():
        yield
        return
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def time_torch_call(
    method: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    warmup: int = 1,
    repeat: int = 5,
    budget_s: float | None = None,
    threads: int | None = None,
) -> tuple[Any, list[float]]:
    """Times a torch call on fresh clones (models may mutate inputs, e.g. caches);
    returns the last result and every timed duration. With ``budget_s``, torch gets half
    of it and :data:`TORCH_MIN_TIMED_RUNS` runs at least (its latency judges nothing)."""

    def prepare() -> tuple[Any, ...]:
        return structure.clone_tree(args), structure.clone_tree(kwargs)

    def call(a: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        return method(*a, **kw)

    with torch.no_grad(), torch_threads(threads):
        half = budget_s / 2 if budget_s is not None else None
        return time_runs(call, warmup, repeat, half, prepare, min_runs=TORCH_MIN_TIMED_RUNS)


def run_ort(session, feeds: dict[str, np.ndarray], warmup: int, repeat: int, budget_s=None):
    """Runs a session with warm-up and repeats; returns (outputs, every timed duration)."""
    return time_runs(lambda: session.run(None, feeds), warmup, repeat, budget_s)


@dataclass
class Replay:
    """One observation replayed: the result row plus what the reference API also reports."""

    result: ObservationResult
    diff: Diff | None = None
    ort_outputs: list[np.ndarray] | None = None


def replay_observation(
    observer: InputObserver,
    index: int,
    session,
    *,
    atol: float,
    rtol: float,
    hist: tuple[float, ...],
    warmup: int,
    repeat: int,
    method: Callable[..., Any] | None = None,
    budget_s: float | None = None,
    threads: int | None = None,
    outputs: Sequence[OutputTolerance] = (),
) -> Replay:
    """One stored call through onnxruntime (and torch when ``method`` is given), compared
    with the outputs stored at observation time; ``outputs``: per-output tolerances (the
    policy file's). Never raises: errors go in the result."""
    flat_observed = observer.aligned_inputs(index)
    observation = observer.observations[index]
    row = ObservationResult(index=index, ok=False)
    row.n_none = sum(t is None for t in flat_observed)
    row.n_empty = sum(t is None or t.numel() == 0 for t in flat_observed)
    row.outputs = structure.tensor_summary(observation.outputs)
    replay = Replay(row)
    if method is not None:
        try:
            _, row.torch_latencies_s = time_torch_call(
                method, observation.args, observation.kwargs, warmup, repeat, budget_s, threads
            )
            row.torch_latency_s = statistics.median(row.torch_latencies_s)
        except Exception as e:
            row.error = f"torch replay failed: {error_tail(e)}"
    names = observer.leaf_names()
    try:
        flat = observer.infer_arguments(index, flat=True)
        row.inputs = structure.tensor_summary(dict(zip(names, flat)))
        feeds = match_feeds([i.name for i in session.get_inputs()], names, flat)
        replay.ort_outputs, row.ort_latencies_s = run_ort(session, feeds, warmup, repeat, budget_s)
        row.ort_latency_s = statistics.median(row.ort_latencies_s)
    except Exception as e:
        row.error = error_tail(e) + _absent_hint(names, flat_observed)
        row.cause = explain_ort_failure(
            error_tail(e), call=index, stand_ins=_stand_ins(names, flat_observed, observer, index)
        )
        return replay
    diff = max_diff(flatten_outputs(observation.outputs), replay.ort_outputs, hist=hist)
    replay.diff = diff
    row.ok = diff.comparable
    row.abs, row.rel, row.hist = diff.abs, diff.rel, dict(diff.hist)
    names_out = output_names(observation.outputs)
    row.success, row.output_errors = judge_outputs(diff, names_out, atol, rtol, outputs)
    if diff.errors:
        row.error = "; ".join(diff.errors)
    return replay


def _stand_ins(
    names: list[str], flat_observed: list[torch.Tensor | None], observer: InputObserver, index: int
) -> list[tuple[str, list[int]]]:
    """(name, shape fed) of the inputs this call did not pass."""
    if all(t is not None for t in flat_observed):
        return []
    try:
        filled = observer.infer_arguments(index, flat=True)
    except Exception:
        return [(n, []) for n, t in zip(names, flat_observed) if t is None]
    return [(n, list(f.shape)) for n, t, f in zip(names, flat_observed, filled) if t is None]


def _absent_hint(names: list[str], flat: list[torch.Tensor | None]) -> str:
    absent = [n for n, t in zip(names, flat) if t is None]
    if not absent:
        return ""
    return (
        f" (this call did not pass {absent[:5]}; the exported graph takes every input, "
        "so they were filled with empty tensors: the model may treat None and empty "
        "differently)"
    )


def check_observer(
    observer: InputObserver,
    onnx_model: Any,
    *,
    atol: float,
    rtol: float,
    hist: tuple[float, ...],
    progress_bar: bool,
    include_io: bool,
    warmup: int,
    repeat: int,
) -> list[dict[str, Any]]:
    """Rows as returned by ``InputObserver.check_discrepancies`` (reference format)."""
    try:
        session = make_session(onnx_model)
    except Exception as e:  # every failure is a row
        return [{"index": -1, "SUCCESS": False, "error": error_tail(e)}]
    n_inputs = len(session.get_inputs())
    indices: Any = range(observer.num_obs())
    if progress_bar:
        try:
            from tqdm import tqdm

            indices = tqdm(indices)
        except ImportError:
            pass
    rows = []
    for index in indices:
        replay = replay_observation(
            observer,
            index,
            session,
            atol=atol,
            rtol=rtol,
            hist=hist,
            warmup=warmup,
            repeat=repeat,
        )
        rows.append(_reference_row(replay, observer, n_inputs, include_io))
    return rows


def _reference_row(
    replay: Replay, observer: InputObserver, n_inputs: int, include_io: bool
) -> dict[str, Any]:
    r = replay.result
    row: dict[str, Any] = {}
    if replay.diff is not None:
        row.update(replay.diff.as_row())
    if r.error:
        row["error"] = r.error
    row.update(
        SUCCESS=r.success,
        index=r.index,
        duration_torch=observer.observations[r.index].latency_s,
        ort_duration=r.ort_latency_s,
        n_inputs=n_inputs,
        n_none=r.n_none,
        n_empty=r.n_empty,
    )
    if include_io:
        row["inputs"] = r.inputs
        row["outputs_torch"] = r.outputs
        if replay.ort_outputs is not None:
            row["outputs_ort"] = structure.tensor_summary(
                [torch.from_numpy(np.asarray(g)) for g in replay.ort_outputs]
            )
    return row
