"""Memory across commits: earlier runs of the default branch as a statistical band.

``--baseline history:DIR`` reads every ``results.json`` under ``DIR`` (any depth), orders
the runs by their recorded time and keeps the last ``N`` (default 20). The newest is the
base the other rules compare with (error growth, node count, dims). Latency gets a band:
per model, the median and the 10th-90th percentiles of the history's per-run ORT medians.
A model is flagged when its median is over ``latency_ratio_max`` times the history's median
*and* above the band's top (a percentile test, as Bencher's and CodSpeed's bands are: no
distribution is assumed, the band is what the machine actually did). With fewer than
:data:`MIN_RUNS` runs no band is drawn and the newest run is a plain base. Given the
current runner (``core/runner.py``), the band is drawn only from runs of its class (a run
recorded without those facts counts as one), and ``notes`` says how many were left out.

pandas holds the history (runs x models x metrics) and computes the quantiles and the
trend; it is imported here only, lazily, so the parent's start-up, publish mode and plain
reports never load it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from observer_ci.core.results import RunResults, max_or_none
from observer_ci.core.runner import describe_runner, runner_class

HISTORY_PREFIX = "history:"
DEFAULT_RUNS = 20
MIN_RUNS = 3  # a band from fewer runs says nothing about the noise
LOW_Q, HIGH_Q = 0.1, 0.9
logger = logging.getLogger("observer_ci")


@dataclass(frozen=True)
class Band:
    """One model's ORT latency over the history: median and percentile band, in seconds."""

    median: float
    low: float
    high: float
    runs: int


@dataclass
class History:
    """The runs read (oldest first) and the bands drawn from them."""

    runs: list[RunResults]
    bands: dict[str, Band]
    frame: Any  # pandas.DataFrame: run, created_at, commit, model, export_s, ort_s, abs
    notes: list[str] = field(default_factory=list)  # runs left out of the band, and why

    @property
    def latest(self) -> RunResults | None:
        return self.runs[-1] if self.runs else None


def is_history(spec: str | None) -> bool:
    return bool(spec) and str(spec).startswith(HISTORY_PREFIX)


def read_history(
    spec: str | os.PathLike[str],
    last: int = DEFAULT_RUNS,
    runner: Mapping[str, Any] | None = None,
) -> History:
    """The history in ``history:DIR`` (or a plain directory): unreadable files are skipped
    with a warning, never fatal; with ``runner`` (``core.runner.this_runner()``) the band
    is drawn from runs of its class only. Raises ``ValueError`` when ``DIR`` is not a
    directory."""
    text = str(spec)
    folder = Path(text[len(HISTORY_PREFIX) :] if text.startswith(HISTORY_PREFIX) else text)
    if not folder.is_dir():
        raise ValueError(f"history directory not found: {folder}")
    runs = []
    for path in sorted(folder.rglob("results.json")):
        try:
            runs.append(RunResults.read(path))
        except (OSError, ValueError) as e:
            logger.warning("history: %s skipped: %s", path, e)
    runs.sort(key=lambda r: r.created_at or "")
    runs = runs[-max(1, last) :]
    frame = history_frame(runs)
    wanted = runner_class(runner or {})
    if runner is None or wanted is None:  # no runner, or one without every fact
        return History(runs, bands(frame), frame)
    alike = [k for k, r in enumerate(runs) if runner_class(r.environment) in (None, wanted)]
    notes = []
    if len(alike) < len(runs):
        notes.append(
            f"history: {len(runs) - len(alike)} of {len(runs)} runs came from other runners "
            f"and are left out of the latency band (this runner: {describe_runner(runner)})"
        )
    return History(runs, bands(frame[frame["run"].isin(alike)]), frame, notes)


def history_frame(runs: list[RunResults]) -> Any:
    """One row per run and model: the metrics the band and the trend read."""
    import pandas as pd

    rows = []
    for position, run in enumerate(runs):
        for model in run.models:
            export = model.export
            rows.append(
                {
                    "run": position,
                    "created_at": run.created_at,
                    "commit": run.commit,
                    "model": model.name,
                    "export_s": export.seconds if export is not None else None,
                    "ort_s": model.median_ort_latency_s,
                    "abs": max_or_none(o.abs for o in model.observations),
                }
            )
    columns = ["run", "created_at", "commit", "model", "export_s", "ort_s", "abs"]
    return pd.DataFrame(rows, columns=columns)


def bands(frame: Any) -> dict[str, Band]:
    """Per model with at least :data:`MIN_RUNS` latencies: median and 10th-90th band."""
    found: dict[str, Band] = {}
    latencies = frame.dropna(subset=["ort_s"])
    for model, group in latencies.groupby("model", sort=False):
        values = group["ort_s"].astype(float)
        if len(values) < MIN_RUNS:
            continue
        found[str(model)] = Band(
            median=float(values.median()),
            low=float(values.quantile(LOW_Q)),
            high=float(values.quantile(HIGH_Q)),
            runs=len(values),
        )
    return found


def over_band(head_s: float, band: Band, ratio_max: float) -> bool:
    """The history's latency test: over ``ratio_max`` x its median and above its band."""
    return head_s > band.median * ratio_max and head_s > band.high


def trend_section(history: History, head: RunResults, max_models: int = 6) -> str:
    """Mermaid ``xychart-beta`` lines per model (ORT latency in ms over the history's runs,
    this pull request's point last, labelled ``PR``); empty without history."""
    if history.frame is None or history.frame.empty:
        return ""
    charts = []
    for model in head.models[:max_models]:
        rows = history.frame[history.frame["model"] == model.name].dropna(subset=["ort_s"])
        if rows.empty or model.median_ort_latency_s is None:
            continue
        points = [*(rows["ort_s"].astype(float) * 1e3), model.median_ort_latency_s * 1e3]
        labels = [*(str(r + 1) for r in rows["run"]), "PR"]
        top = max(points) * 1.15
        title = f"{_label(model.name)}: ORT latency (ms), last {len(rows)} main runs, then PR"
        charts.append(
            "```mermaid\nxychart-beta\n"
            f'    title "{title}"\n'
            f"    x-axis [{', '.join(labels)}]\n"
            f'    y-axis "ms" 0 --> {top:.3g}\n'
            f"    line [{', '.join(f'{p:.3g}' for p in points)}]\n```"
        )
    if not charts:
        return ""
    return "### Trend\n\n" + "\n\n".join(charts)


def _label(name: str) -> str:
    """A model name safe inside a Mermaid title: letters, digits and ``_-. `` only."""
    kept = "".join(c if c.isalnum() or c in "_-. " else "_" for c in name)
    return kept[:60] or "model"
