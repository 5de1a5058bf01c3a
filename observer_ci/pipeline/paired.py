"""Base and head ONNX graphs timed interleaved in one process, on the same inputs.

Two runs timed in two processes (in turn or side by side) see different machine load; a
latency ratio between them measures the machine as much as the change. Here the head run
saves the onnxruntime inputs of its observed calls next to its ONNX file; afterwards one
process loads both graphs and runs base, head, head, base, ... on each call's inputs. The
ratio is the median over those pairs (:class:`observer_ci.core.results.PairedLatency`).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from observer_ci.core.constants import FEEDS_MAX_BYTES
from observer_ci.core.errors import error_tail
from observer_ci.core.results import PairedLatency, RunResults

FEEDS_SUFFIX = ".feeds.npz"
_NAMES = "__names__"


def feeds_path(onnx_path: str | Path) -> Path:
    """Where the run saves the inputs of ``onnx_path``'s calls."""
    return Path(str(onnx_path) + FEEDS_SUFFIX)


def save_feeds(feeds: list[dict[str, np.ndarray]], onnx_path: str | Path) -> Path:
    """Saves one feed dict per observed call for :func:`time_pair`."""
    arrays: dict[str, Any] = {}
    names = []
    for i, feed in enumerate(feeds):
        names.append(list(feed))
        for j, value in enumerate(feed.values()):
            arrays[f"c{i}_{j}"] = value
    arrays[_NAMES] = np.array(json.dumps(names))
    path = feeds_path(onnx_path)
    np.savez(path, **arrays)
    return path


def save_feeds_within(
    feeds: list[dict[str, np.ndarray]], onnx_path: str | Path, max_bytes: int = FEEDS_MAX_BYTES
) -> str | None:
    """Saves the first calls whose inputs, with the ``*.feeds.npz`` already next to
    ``onnx_path`` (the run's other models), stay within ``max_bytes``. Returns a note naming
    the calls left out, ``None`` when every call was saved."""
    target = feeds_path(onnx_path)
    others = target.parent.glob("*" + FEEDS_SUFFIX)
    used = sum(p.stat().st_size for p in others if p.is_file() and p != target)
    kept: list[dict[str, np.ndarray]] = []
    total = used
    for feed in feeds:
        size = sum(int(a.nbytes) for a in feed.values())
        if total + size > max_bytes:
            break
        kept.append(feed)
        total += size
    if kept:
        save_feeds(kept, onnx_path)
    else:
        target.unlink(missing_ok=True)  # an earlier run's inputs must not be paired
    if len(kept) == len(feeds):
        return None
    many = len(feeds) - len(kept) > 1
    left_out = f"calls {len(kept)}-{len(feeds) - 1}" if many else f"call {len(kept)}"
    timing = (
        f"paired base/head timing uses calls 0-{len(kept) - 1} only"
        if kept
        else "latency_ratio compares the separate runs"
    )
    return (
        f"inputs of {left_out} not saved for paired timing: the run's saved inputs would "
        f"pass {max_bytes / 2**20:.0f} MB; {timing}"
    )


def load_feeds(path: str | Path) -> list[dict[str, np.ndarray]]:
    with np.load(path, allow_pickle=False) as data:
        names = json.loads(str(data[_NAMES]))
        return [{n: data[f"c{i}_{j}"] for j, n in enumerate(call)} for i, call in enumerate(names)]


def time_pair(
    base_onnx: str | Path,
    head_onnx: str | Path,
    feeds: list[dict[str, np.ndarray]],
    *,
    rounds: int = 10,
    warmup: int = 2,
    threads: int | None = None,
) -> PairedLatency:
    """Runs both graphs alternately on every call's feeds; never raises."""
    from observer_ci.pipeline.ort_session import make_session

    try:
        base = make_session(base_onnx, threads=threads)
        head = make_session(head_onnx, threads=threads)
        base_names = {i.name for i in base.get_inputs()}
        for feed in feeds:
            if set(feed) != base_names:
                return PairedLatency(
                    reason="the base graph takes other inputs than the head graph: "
                    f"{sorted(base_names ^ set(feed))[:6]}"
                )
        base_times: list[list[float]] = [[] for _ in feeds]
        head_times: list[list[float]] = [[] for _ in feeds]
        ratios: list[float] = []
        for feed in feeds:
            for _ in range(max(0, warmup)):
                base.run(None, feed)
                head.run(None, feed)
        for r in range(max(1, rounds)):
            for k, feed in enumerate(feeds):
                order = ((base, base_times), (head, head_times))
                for session, times in order if r % 2 == 0 else order[::-1]:
                    begin = time.perf_counter()
                    session.run(None, feed)
                    times[k].append(time.perf_counter() - begin)
                ratios.append(head_times[k][-1] / max(base_times[k][-1], 1e-12))
    except Exception as e:
        return PairedLatency(reason=f"paired timing failed: {error_tail(e)}")
    return PairedLatency(
        base_s=statistics.median(statistics.median(t) for t in base_times),
        head_s=statistics.median(statistics.median(t) for t in head_times),
        ratio=statistics.median(ratios),
        ratio_low=float(np.quantile(ratios, 0.1)),
        ratio_high=float(np.quantile(ratios, 0.9)),
        rounds=max(1, rounds),
        calls=len(feeds),
    )


def pair_results(
    base: RunResults, head: RunResults, *, rounds: int = 10, threads: int | None = None
) -> int:
    """Fills ``paired_latency`` of every head model that base also exported; returns how many
    were timed."""
    base_models = base.by_name()
    timed = 0
    for model in head.models:
        old = base_models.get(model.name)
        if old is None or not _has_onnx(old) or not _has_onnx(model):
            continue
        path = feeds_path(model.export.onnx_path)  # type: ignore[union-attr]
        if not path.is_file():
            model.paired_latency = PairedLatency(reason="the head run saved no inputs")
            continue
        model.paired_latency = time_pair(
            old.export.onnx_path,  # type: ignore[union-attr]
            model.export.onnx_path,  # type: ignore[union-attr]
            load_feeds(path),
            rounds=rounds,
            threads=threads,
        )
        timed += model.paired_latency.ratio is not None
    return timed


def _has_onnx(model: Any) -> bool:
    export = model.export
    return bool(export and export.ok and export.onnx_path and Path(export.onnx_path).is_file())
