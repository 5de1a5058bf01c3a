"""Replay observed calls in onnxruntime and in torch; timing and feeds."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import onnxruntime as ort
import torch

from observer_ci import structure
from observer_ci.diff import Diff, flatten_outputs, max_diff

if TYPE_CHECKING:
    from observer_ci.observer import InputObserver


class FeedError(ValueError):
    """The observed inputs cannot be matched with the ONNX model's inputs."""


def make_session(onnx_model: str | onnx.ModelProto, threads: int | None = None):
    """A CPU onnxruntime session from a path or a ModelProto."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    source = onnx_model.SerializeToString() if isinstance(onnx_model, onnx.ModelProto) else str(
        onnx_model
    )
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        raise FeedError("bfloat16 inputs cannot be fed to onnxruntime through numpy")
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
            feeds[n] = to_numpy(by_name[n])
    if unmatched_onnx:
        if len(unmatched_onnx) != len(unused):
            raise FeedError(
                f"ONNX inputs {unmatched_onnx[:5]} match no observed input; "
                f"unmatched observed inputs: {unused[:5]}"
            )
        for onnx_name, name in zip(unmatched_onnx, unused):
            feeds[onnx_name] = to_numpy(by_name[name])
    return feeds


def time_call(fn: Callable[[], Any], warmup: int = 1, repeat: int = 5) -> tuple[Any, float]:
    """Runs ``fn`` ``warmup`` times untimed then ``repeat`` times; returns last result, median."""
    for _ in range(max(0, warmup)):
        fn()
    durations = []
    result = None
    for _ in range(max(1, repeat)):
        begin = time.perf_counter()
        result = fn()
        durations.append(time.perf_counter() - begin)
    return result, statistics.median(durations)


def time_torch_call(
    method: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    warmup: int = 1,
    repeat: int = 5,
) -> tuple[Any, float]:
    """Times a torch call on fresh clones (models may mutate inputs, e.g. caches)."""
    durations = []
    result = None
    with torch.no_grad():
        for k in range(max(0, warmup) + max(1, repeat)):
            a, kw = structure.clone_tree(args), structure.clone_tree(kwargs)
            begin = time.perf_counter()
            result = method(*a, **kw)
            if k >= warmup:
                durations.append(time.perf_counter() - begin)
    return result, statistics.median(durations)


def run_ort(session, feeds: dict[str, np.ndarray], warmup: int, repeat: int):
    """Runs a session with warm-up and repeats; returns (outputs, median seconds)."""
    return time_call(lambda: session.run(None, feeds), warmup=warmup, repeat=repeat)


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
    """Rows as returned by ``InputObserver.check_discrepancies``."""
    try:
        session = make_session(onnx_model)
    except Exception as e:  # every failure is a row
        return [{"index": -1, "SUCCESS": False, "error": f"{type(e).__name__}: {e}"}]
    onnx_inputs = [i.name for i in session.get_inputs()]
    names = observer.leaf_names()
    rows = []
    indices = range(observer.num_obs())
    if progress_bar:
        try:
            from tqdm import tqdm

            indices = tqdm(indices)
        except ImportError:
            pass
    for index in indices:
        obs = observer.observations[index]
        row = replay_one(
            observer, session, onnx_inputs, names, index, atol, rtol, hist, warmup, repeat
        )
        row["duration_torch"] = obs.latency_s
        if include_io:
            row["outputs_torch"] = structure.tensor_summary(obs.outputs)
        else:
            row.pop("inputs", None)
            row.pop("outputs_ort", None)
        rows.append(row)
    return rows


def replay_one(
    observer: InputObserver,
    session,
    onnx_inputs: list[str],
    names: list[str],
    index: int,
    atol: float,
    rtol: float,
    hist: tuple[float, ...],
    warmup: int,
    repeat: int,
) -> dict[str, Any]:
    """One observation through onnxruntime, compared with its stored torch outputs."""
    layout_flat = observer._layout().flat[index]
    row: dict[str, Any] = {
        "index": index,
        "n_inputs": len(onnx_inputs),
        "n_none": sum(t is None for t in layout_flat),
        "n_empty": sum(t is None or t.numel() == 0 for t in layout_flat),
    }
    try:
        flat = observer.infer_arguments(index, flat=True)
        row["inputs"] = structure.tensor_summary(dict(zip(names, flat)))
        feeds = match_feeds(onnx_inputs, names, flat)
        got, seconds = run_ort(session, feeds, warmup, repeat)
    except Exception as e:
        row.update(SUCCESS=False, error=f"{type(e).__name__}: {e}", ort_duration=None)
        return row
    row["ort_duration"] = seconds
    row["outputs_ort"] = structure.tensor_summary([torch.from_numpy(g) for g in got])
    expected = flatten_outputs(observer.observations[index].outputs)
    diff: Diff = max_diff(expected, got, hist=hist)
    row.update(diff.as_row())
    row["SUCCESS"] = diff.within(atol, rtol)
    return row
