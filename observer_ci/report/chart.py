"""A Mermaid chart of ORT against torch latency per model (GitHub renders it in comments).

One number per model, ORT latency as a percentage of torch latency, so a 13 µs
MLP and a 250 µs decoder share one axis; bars are head, a line is base. With a paired
(interleaved) base/head timing, base's point is head's divided by the paired head/base
ratio (like with like); otherwise it is base's own separate run. Model
names are untrusted: only letters, digits, space, ``.``, ``-`` and ``_`` reach
the chart (no quote, bracket, ``%%`` directive or backtick can break it).
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from observer_ci.core.results import ModelResult, RunResults

SOURCE_PAIRED = "paired"
SOURCE_SEPARATE = "separate runs"
MAX_CHART_MODELS = 12  # more labels than this do not fit a comment's width
MAX_LABEL_CHARS = 18
_UNSAFE_LABEL_RE = re.compile(r"[^A-Za-z0-9 ._-]+")


def chart_label(name: str) -> str:
    """A model name reduced to characters that are inert inside a quoted Mermaid string."""
    label = " ".join(_UNSAFE_LABEL_RE.sub("_", name).split())
    if len(label) > MAX_LABEL_CHARS:
        label = label[: MAX_LABEL_CHARS - 2].rstrip() + ".."
    return label or "model"


def _percent(model: ModelResult | None) -> float | None:
    if model is None:
        return None
    ort, torch = model.median_ort_latency_s, model.median_torch_latency_s
    if ort is None or torch is None or torch <= 0 or math.isnan(ort) or math.isnan(torch):
        return None
    return 100.0 * ort / torch


def _unique(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    result = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        result.append(label if seen[label] == 1 else f"{label} {seen[label]}")
    return result


def _number(value: float) -> str:
    return f"{value:.2g}" if value < 10 else f"{value:.0f}"


class ChartPoint(NamedTuple):
    name: str
    head: float  # ORT as percent of torch
    base: float | None
    source: str | None  # SOURCE_PAIRED or SOURCE_SEPARATE when ``base`` is set


def _base_point(model: ModelResult, head: float, base: ModelResult | None) -> ChartPoint:
    paired = model.paired_latency
    if paired is not None and paired.ratio is not None and paired.ratio > 0:
        return ChartPoint(model.name, head, head / paired.ratio, SOURCE_PAIRED)
    value = _percent(base)
    return ChartPoint(model.name, head, value, None if value is None else SOURCE_SEPARATE)


def chart_points(head: RunResults, base: RunResults | None = None) -> list[ChartPoint]:
    """The models the chart shows (in run order); empty when it would say nothing (fewer
    than two models with both latencies and no base to compare with) or not fit."""
    base_models = base.by_name() if base is not None else {}
    points = []
    for model in head.models:
        percent = _percent(model)
        if percent is not None:
            points.append(_base_point(model, percent, base_models.get(model.name)))
    compared = [p for p in points if p.base is not None]
    if compared:
        points = compared
    elif len(points) < 2:
        return []
    if len(points) > MAX_CHART_MODELS:
        return []
    if max(max(p.head, p.base or 0.0) for p in points) < 1.0:
        return []  # every bar would be invisible next to torch's 100%
    return points


def latency_chart(head: RunResults, base: RunResults | None = None) -> str:
    """The ```` ```mermaid ```` block of :func:`chart_points`, or "" when there are none."""
    points = chart_points(head, base)
    if not points:
        return ""
    labels = _unique([chart_label(p.name) for p in points])
    heads = [p.head for p in points]
    bases = [p.base for p in points if p.base is not None]
    top = max(100.0, *heads, *bases)
    top = float(math.ceil(top * 1.1 / 10) * 10)
    title = "ORT latency as percent of torch latency"
    title += ", bars head, line base" if bases else ", lower is faster"
    lines = [
        "```mermaid",
        "xychart-beta",
        f'    title "{title}"',
        "    x-axis [" + ", ".join(f'"{label}"' for label in labels) + "]",
        f'    y-axis "percent of torch" 0 --> {top:.0f}',
        "    bar [" + ", ".join(_number(h) for h in heads) + "]",
    ]
    if bases:
        lines.append("    line [" + ", ".join(_number(b) for b in bases) + "]")
    lines.append("```")
    return "\n".join(lines)
