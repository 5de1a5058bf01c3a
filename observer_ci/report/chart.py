"""A Mermaid chart of ORT latency per model (GitHub renders it in comments).

Bars are the ORT median latency of each model, in one unit on one axis, in the order of
the summary table, drawn horizontally so the labels sit one per line and never run into
each other; every label carries its value. With a base, each model gets a base bar and a
head bar, side by side and labelled so (one series: Mermaid draws a second series' zero as a
stub): from the paired (interleaved) timing when there is one (both
graphs in one process, like with like), otherwise each run's own median. Nothing is
divided by eager torch latency, the noisiest number of a run. Model names are untrusted:
only letters, digits, space, ``.``, ``-``, ``_`` and parentheses reach the chart (no quote, bracket,
``%%`` directive or backtick can break it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import NamedTuple

from observer_ci.core.results import ModelResult, RunResults
from observer_ci.report.tables import format_seconds

SOURCE_PAIRED = "paired"
SOURCE_SEPARATE = "separate runs"
MAX_CHART_MODELS = 12  # more than this is a list, not a picture: the table says it
MAX_LABEL_CHARS = 32  # one label per line (horizontal bars): room for a matrix leg
_UNSAFE_LABEL_RE = re.compile(r"[^A-Za-z0-9 ._()-]+")
_BRACKETS = str.maketrans("[]{}<>", "()()()")  # a matrix leg's "[label]" reads as "(label)"
_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"))


def chart_label(name: str) -> str:
    """A model name reduced to characters that are inert inside a quoted Mermaid string."""
    label = " ".join(_UNSAFE_LABEL_RE.sub("_", name.translate(_BRACKETS)).split())
    if len(label) > MAX_LABEL_CHARS:
        label = label[: MAX_LABEL_CHARS - 2].rstrip() + ".."
    return label or "model"


def _seconds(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) or value <= 0 else value


def _unique(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    result = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        result.append(label if seen[label] == 1 else f"{label} {seen[label]}")
    return result


class ChartPoint(NamedTuple):
    name: str
    head: float  # ORT median latency, seconds
    base: float | None  # base's, seconds, when compared
    source: str | None  # SOURCE_PAIRED or SOURCE_SEPARATE when ``base`` is set


def _point(model: ModelResult, base: ModelResult | None) -> ChartPoint | None:
    paired = model.paired_latency
    if paired is not None and paired.ratio is not None:
        head, base_s = _seconds(paired.head_s), _seconds(paired.base_s)
        if head is not None and base_s is not None:
            return ChartPoint(model.name, head, base_s, SOURCE_PAIRED)
    head = _seconds(model.median_ort_latency_s)
    if head is None:
        return None
    base_s = _seconds(base.median_ort_latency_s) if base is not None else None
    return ChartPoint(model.name, head, base_s, None if base_s is None else SOURCE_SEPARATE)


def chart_points(
    head: RunResults, base: RunResults | None = None, order: Sequence[str] | None = None
) -> list[ChartPoint]:
    """The models the chart shows, in ``order`` (model names; run order by default).

    With a base, the models compared with it; without one (or none comparable), every
    model with an ORT latency, when there are at least two. Empty when there is nothing to
    show or more than :data:`MAX_CHART_MODELS`."""
    base_models = base.by_name() if base is not None else {}
    models = head.by_name()
    names = [n for n in (order or [m.name for m in head.models]) if n in models]
    points = [p for n in names if (p := _point(models[n], base_models.get(n))) is not None]
    compared = [p for p in points if p.base is not None]
    if compared:
        points = compared
    elif len(points) < 2:
        return []
    return points if len(points) <= MAX_CHART_MODELS else []


def _unit(top: float) -> tuple[float, str]:
    return next(((scale, unit) for scale, unit in _UNITS if top >= scale), _UNITS[-1])


def _number(value: float) -> str:
    """Three significant digits, never in exponent notation (Mermaid reads no ``1e+03``)."""
    if value == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:.0f}"


def latency_chart(
    head: RunResults, base: RunResults | None = None, order: Sequence[str] | None = None
) -> str:
    """The ```` ```mermaid ```` block of :func:`chart_points`, or "" when there are none."""
    points = chart_points(head, base, order)
    if not points:
        return ""
    compared = any(p.base is not None for p in points)
    top = max(max(p.head, p.base or 0.0) for p in points)
    scale, unit = _unit(top)
    names = _unique([chart_label(p.name) for p in points])
    labels: list[str] = []
    bars: list[float] = []
    for name, p in zip(names, points):
        if compared:
            labels += [
                f"{name} base {format_seconds(p.base)}",
                f"{name} head {format_seconds(p.head)}",
            ]
            bars += [(p.base or 0.0) / scale, p.head / scale]
        else:
            labels.append(f"{name} {format_seconds(p.head)}")
            bars.append(p.head / scale)
    axis_top = float(f"{top / scale * 1.15:.2g}")
    title = "ORT median latency per model" + (", base and head" if compared else "")
    lines = [
        "```mermaid",
        "xychart-beta horizontal",
        f'    title "{title}"',
        "    x-axis [" + ", ".join(f'"{label}"' for label in labels) + "]",
        f'    y-axis "{unit}" 0 --> {_number(axis_top)}',
    ]
    lines.append("    bar [" + ", ".join(_number(b) for b in bars) + "]")
    lines.append("```")
    return "\n".join(lines)
