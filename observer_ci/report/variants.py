"""The report's variants: one row per variant and provider under each model, and the
summary column (present only when some model has variants)."""

from __future__ import annotations

from observer_ci.core.results import ModelResult, RunResults, VariantResult
from observer_ci.core.variants import STATE_FAILED, STATE_SKIPPED
from observer_ci.report.rules import Thresholds, variant_problem
from observer_ci.report.tables import (
    NONE,
    Markup,
    format_bytes,
    format_float,
    format_ratio,
    format_seconds,
    markdown_table,
)

HEADER = [
    "",
    "variant",
    "provider",
    "max abs",
    "max rel",
    "calls within",
    "probe",
    "ORT",
    "vs float32 CPU",
    "torch on device",
    "file size",
    "built in",
]


def has_variants(run: RunResults) -> bool:
    """True when some graph of some model recorded variants (the summary column shows)."""
    return any(g.variants for m in run.models for g in m.graphs)


def _icon(variant: VariantResult, thresholds: Thresholds) -> str:
    if variant.state == STATE_SKIPPED:
        return "⏭️"
    if variant.state == STATE_FAILED:
        return "❌"
    return "⚠️" if variant_problem(variant, thresholds) else "✅"


def variants_cell(model: ModelResult, thresholds: Thresholds) -> str:
    """The summary column: ``✅ 3`` when every variant is within its tolerances, else the
    variants that are not (``⚠️ int8/cpu``), and how many providers were skipped."""
    rows = [v for g in model.graphs for v in g.variants]
    if not rows:
        return NONE
    bad = [v for v in rows if variant_problem(v, thresholds)]
    skipped = sum(v.state == STATE_SKIPPED for v in rows)
    checked = len(rows) - skipped
    parts = []
    if bad:
        names = sorted({f"{v.variant}/{v.provider}" for v in bad})
        parts.append("⚠️ " + ", ".join(names[:4]) + (" …" if len(names) > 4 else ""))
    else:
        parts.append(f"✅ {checked}")
    if skipped:
        parts.append(f"⏭️ {skipped} skipped")
    return " · ".join(parts)


def _probe(variant: VariantResult) -> str:
    if variant.probe_state is None:
        return NONE
    if variant.probe_abs is None:
        return variant.probe_state
    return f"{variant.probe_state} ({format_float(variant.probe_abs)})"


def _row(variant: VariantResult, thresholds: Thresholds) -> list[object]:
    icon = Markup(_icon(variant, thresholds))
    if variant.state in (STATE_SKIPPED, STATE_FAILED):
        reason = variant.reason or variant.state
        blank = [NONE] * (len(HEADER) - 4)
        return [icon, variant.variant, variant.provider, reason, *blank]
    calls = f"{variant.calls_within}/{variant.calls}" if variant.calls else NONE
    return [
        icon,
        variant.variant,
        variant.provider,
        format_float(variant.abs),
        format_float(variant.rel),
        calls,
        _probe(variant),
        format_seconds(variant.latency_s),
        format_ratio(variant.latency_ratio),
        format_seconds(variant.torch_latency_s),
        format_bytes(variant.file_size),
        format_seconds(variant.convert_s),
    ]


def variants_section(model: ModelResult, thresholds: Thresholds) -> str:
    """The variants table of one model ("" without variants): a table per graph."""
    graphs = [g for g in model.graphs if g.variants]
    if not graphs:
        return ""
    blocks = []
    for graph in graphs:
        title = "**Variants**" if len(model.graphs) == 1 else f"**Variants of {graph.name}**"
        rows = [_row(v, thresholds) for v in graph.variants]
        blocks.append(f"{title}:\n\n" + markdown_table(HEADER, rows, max_cell=200))
    limits = ", ".join(
        f"{name} abs ≤ {format_float(a)}, rel ≤ {format_float(r)}"
        for name in dict.fromkeys(v.variant for g in graphs for v in g.variants)
        if "," not in name
        for a, r in [thresholds.variant_limits(name)]
    )
    blocks.append(
        "_Each variant replays every observed call and the probe against the same torch "
        f"outputs; tolerances: {limits} (`thresholds` such as `fp16.abs_max=1e-2`). "
        "**vs float32 CPU**: the median over calls of the variant's latency over the float32 "
        "graph's on the CPU provider._"
    )
    return "\n\n".join(blocks)
