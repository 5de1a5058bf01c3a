"""A Mermaid chart of ORT against torch latency per model (GitHub renders it in comments).

One number per model, ORT latency as a percentage of torch latency, so a 13 µs
MLP and a 250 µs decoder share one axis; bars are head, a line is base. Model
names are untrusted: only letters, digits, space, ``.``, ``-`` and ``_`` reach
the chart (no quote, bracket, ``%%`` directive or backtick can break it).
"""

from __future__ import annotations

import math
import re

from observer_ci.results import ModelResult, RunResults

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


def latency_chart(head: RunResults, base: RunResults | None = None) -> str:
    """The ```` ```mermaid ```` block, or "" when it would say nothing (fewer than two
    models with both latencies and no base to compare with) or not fit."""
    base_models = base.by_name() if base is not None else {}
    points = [(m.name, _percent(m), _percent(base_models.get(m.name))) for m in head.models]
    points = [p for p in points if p[1] is not None]
    compared = [p for p in points if p[2] is not None]
    if compared:
        points = compared
    elif len(points) < 2:
        return ""
    if len(points) > MAX_CHART_MODELS:
        return ""
    if max(max(h or 0.0, b or 0.0) for _, h, b in points) < 1.0:
        return ""  # every bar would be invisible next to torch's 100%
    labels = _unique([chart_label(name) for name, _, _ in points])
    heads = [h for _, h, _ in points if h is not None]
    bases = [b for _, _, b in compared if b is not None]
    top = max(100.0, *heads, *bases)
    top = float(math.ceil(top * 1.1 / 10) * 10)
    title = "ORT latency as percent of torch latency"
    title += ", bars head, line base" if compared else ", lower is faster"
    lines = [
        "```mermaid",
        "xychart-beta",
        f'    title "{title}"',
        "    x-axis [" + ", ".join(f'"{label}"' for label in labels) + "]",
        f'    y-axis "percent of torch" 0 --> {top:.0f}',
        "    bar [" + ", ".join(_number(h) for h in heads) + "]",
    ]
    if compared:
        lines.append("    line [" + ", ".join(_number(b) for b in bases) + "]")
    lines.append("```")
    return "\n".join(lines)
