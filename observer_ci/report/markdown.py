"""Render a run (and its regressions against a baseline) as the Markdown PR comment.

What a reviewer sees first: the verdict with the commits compared and the run
link, then one summary table (a row per model), the regressions if there are
any, a latency chart, and a collapsed legend stating the thresholds. Every
per-model detail sits in a collapsed ``<details>``, failing models first.

Every piece of text that comes from a model, a script or an exception goes
through :mod:`observer_ci.report.escape` before it reaches the page. The comment must
fit GitHub's 65,536-character limit, so when the full report is too long it is
re-rendered with less detail, level by level (see ``LEVELS``), and as a last
resort hard-cut; the sticky-comment marker always stays on the first line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from observer_ci.core.constants import GITHUB_COMMENT_MAX_CHARS as GITHUB_MAX_CHARS
from observer_ci.core.constants import (
    MARKER,
    MASKED_POSITIONS_ONLY,
    MIN_TIMED_RUNS,
    TORCH_MIN_TIMED_RUNS,
)
from observer_ci.core.results import (
    STATUS_DISCREPANCY,
    STATUS_OK,
    STATUS_SKIPPED,
    STATUSES,
    Cause,
    Diagnosis,
    ExportResult,
    FirstDivergence,
    GraphResult,
    InputInfo,
    ModelResult,
    ObservationResult,
    PairedLatency,
    ProbeResult,
    RunResults,
    quantile,
)
from observer_ci.report.changes import (
    memory_diff_text,
    memory_pairs,
    memory_text,
    moved_outputs,
    op_diff_text,
    version_changes,
)
from observer_ci.report.chart import SOURCE_PAIRED, chart_points, latency_chart
from observer_ci.report.escape import (
    SPAN_UNSAFE,
    code_block,
    escape_cell,
    escape_html,
    escape_message,
    truncate,
)
from observer_ci.report.rules import RULES_BY_NAME, Regression, Thresholds, worst_error
from observer_ci.report.tables import (
    NONE,
    Markup,
    format_bytes,
    format_float,
    format_ratio,
    format_ratio_range,
    format_seconds,
    format_seconds_range,
    format_shape,
    markdown_table,
    plural,
    ratio,
    readable_tensors,
)
from observer_ci.report.variants import has_variants, variants_cell, variants_section

__all__ = [
    "GITHUB_MAX_CHARS",
    "LEVELS",
    "MARKER",
    "TRUNCATION_NOTE",
    "fit_report",
    "report_levels",
    "format_bytes",
    "format_float",
    "format_seconds",
    "render_report",
    "write_report_files",
]

TRUNCATION_NOTE = (
    "Report truncated to fit GitHub's 65,536-character limit; "
    "full report in the job summary/artifact."
)

# Detail levels, from everything to the bare minimum; each drops more than the one before.
LEVEL_FULL = 0
LEVEL_NO_IO = 1  # (1) drop the per-call input/output summaries
LEVEL_SHORT_ERRORS = 2  # (2) error tails and dynamic_shapes cut short
LEVEL_NO_CALLS = 3  # (3) drop per-call tables (the summary table keeps worst and median)
LEVEL_NO_INPUTS = 4  # (4) drop inputs tables and the chart
LEVEL_MINIMAL = 5  # (5) verdict, summary table, regressions: no details, no legend
LEVELS = (
    LEVEL_FULL,
    LEVEL_NO_IO,
    LEVEL_SHORT_ERRORS,
    LEVEL_NO_CALLS,
    LEVEL_NO_INPUTS,
    LEVEL_MINIMAL,
)

_ERROR_CHARS = {LEVEL_FULL: 3000, LEVEL_NO_IO: 3000}
_SHORT_ERROR_CHARS = 400
_SHAPES_CHARS = {LEVEL_FULL: 2000, LEVEL_NO_IO: 2000}
_MAX_OBS_ROWS = 50
_MAX_LISTED_INPUTS = 4  # stand-in names shown per call
_MAX_LISTED_CALLS = 20  # call numbers shown per graph
_MAX_SHAPES = 8
_MAX_DIMS_SHOWN = 4
_MAX_MESSAGE = 300
_MAX_SUMMARY_NAME = 32  # a model name in the summary (in full in its details)
_MAX_DIMS_CHARS = 24  # the dims listed in the summary, then "(+n)"
_URL_RE = re.compile(r"^https?://[^\s<>()\"'`\[\]]+$")
# a workflow run's address names its repository: where our commit links point
_RUN_REPO_RE = re.compile(r"^(https://[^/\s]+/[\w.-]+/[\w.-]+)/actions/runs/\d+")
_SHA_RE = re.compile(r"^[0-9a-fA-F]{7,40}$")
_AUTO_DIM_RE = re.compile(r"^s\d+$")
_DIM_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # not an expression like "a + b"
_NOT_PASSED = "not passed"
_ENV_FIELDS = (
    ("torch", "torch"),
    ("onnx", "onnx"),
    ("onnxruntime", "ORT"),
    ("onnxscript", "onnxscript"),
    ("python", "Python"),
)


# -- small rendering helpers ----------------------------------------------------------


def _inline(text: Any, max_chars: int | None = None) -> str:
    """Escaped single-line text for headings, list items and paragraphs."""
    return escape_cell(text, max_chars, newline=" ")


def _message(text: Any, max_chars: int | None = None) -> str:
    """A message of ours around untrusted parts: its `code` spans render as code."""
    return escape_message(text, max_chars, newline=" ")


def _status_emoji(status: str) -> str:
    if status == STATUS_OK:
        return "✅"
    if status == STATUS_SKIPPED:
        return "⏭️"
    if status == STATUS_DISCREPANCY:
        return "⚠️"
    return "❌"


def _value(rule: str, value: float | str | None) -> str:
    if isinstance(value, str) or value is None:
        return NONE if value is None else value
    definition = RULES_BY_NAME.get(rule)
    if definition is not None and definition.unit == "seconds":
        return format_seconds(value)
    if definition is not None and definition.unit == "bytes":
        return format_bytes(value)
    return format_float(value)


def _regression_icon(reg: Regression) -> str:
    return "❌" if reg.fails_build else "⚠️"


def _short_sha(sha: str, repo_url: str | None = None) -> str | None:
    """A commit as `` `abc1234` `` (a link to it in ``repo_url``, our own link); anything
    that is not a hex SHA is dropped (untrusted)."""
    if not sha or not _SHA_RE.match(sha):
        return None
    return f"[`{sha[:7]}`]({repo_url}/commit/{sha})" if repo_url else f"`{sha[:7]}`"


def _change(new: float | None, old: float | None) -> str:
    """`` (×1.2)`` against base, or "" without a comparable base value."""
    value = ratio(new, old)
    return "" if value is None else f" ({format_ratio(value)})"


def _spread(runs: tuple[float, float] | None) -> str:
    """`` (0.94–1.22 ms)``: the 10th and 90th percentiles of the timed runs, or ""."""
    return "" if runs is None else f" ({format_seconds_range(*runs)})"


def _paired(model: ModelResult | None) -> PairedLatency | None:
    """The model's paired (interleaved) base/head timing, when it has a ratio."""
    paired = model.paired_latency if model is not None else None
    return paired if paired is not None and paired.ratio is not None else None


# -- the report -------------------------------------------------------------------------


class _Renderer:
    """Renders one report at a given detail level, caching the parts shared by levels."""

    def __init__(
        self,
        head: RunResults,
        regressions: list[Regression],
        base: RunResults | None,
        title: str,
        run_url: str | None,
        thresholds: Thresholds,
    ) -> None:
        self.head = head
        self.base = base
        self.title = title
        self.thresholds = thresholds
        self.run_url = run_url if run_url and _URL_RE.match(run_url) else None
        repo = _RUN_REPO_RE.match(self.run_url or "")
        self.repo_url = repo.group(1) if repo else None
        self.regressions = sorted(regressions, key=lambda r: not r.fails_build)
        self.by_model: dict[str, list[Regression]] = {}
        for reg in self.regressions:
            self.by_model.setdefault(reg.model, []).append(reg)
        self.base_models = base.by_name() if base is not None else {}
        # the "ORT vs base" column: with a base, or a paired timing (results merged later)
        self.versus_base = base is not None or any(_paired(m) for m in head.models)
        self._cache: dict[tuple, str] = {}
        self.policy_lines: list[str] = []  # the policy file's entries, for the legend
        self.trend = ""  # Mermaid trend charts over the default branch's history
        self.accepted = ""  # the accept section (report.accepted), report.md and summary

    def cached(self, key: tuple, make: Callable[[], str]) -> str:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    # -- document ----------------------------------------------------------------------

    def render(self, level: int) -> str:
        blocks = [MARKER + "\n" + self.verdict(), self.warnings()]
        blocks.append(self.cached(("summary",), self.summary_table))
        blocks.append(self.cached(("regressions", level), lambda: self.regressions_table(level)))
        blocks.append(self.accepted)  # who accepted which regression, and when
        if level < LEVEL_NO_INPUTS:
            blocks.append(self.cached(("chart",), self.chart))
            blocks.append(self.trend)  # history of the default branch (report.history)
        if level < LEVEL_MINIMAL:
            blocks.append(self.cached(("legend",), self.legend))
            blocks.append(self.details_section(level))
        return "\n\n".join(b for b in blocks if b) + "\n"

    def verdict(self) -> str:
        failing = sum(r.fails_build for r in self.regressions)
        warnings = len(self.regressions) - failing
        icon = "❌" if failing else "✅"
        title = _inline(self.title, 100)
        if failing:
            verb = "fails" if failing == 1 else "fail"
            verdict = f"{plural(failing, 'regression')} {verb} the build"
        else:
            verdict = "no regression fails the build"
        counts = [f"**{plural(len(self.head.models), 'model')}**", *self.status_counts()]
        if warnings:
            counts.append(f"⚠️ {plural(warnings, 'warning')}")
        return f"## {icon} {title}: {verdict}\n\n" + " · ".join(counts) + "  \n" + self.compared()

    def status_counts(self) -> list[str]:
        counts: dict[str, int] = {}
        for model in self.head.models:
            counts[model.status] = counts.get(model.status, 0) + 1
        order = [s for s in STATUSES if s in counts] + sorted(set(counts) - set(STATUSES))
        return [f"{_status_emoji(s)} {counts[s]} {_inline(s, 40)}" for s in order]

    def compared(self) -> str:
        head_sha = _short_sha(self.head.commit, self.repo_url)
        if self.base is None:
            text = f"Head {head_sha}, no baseline" if head_sha else "No baseline"
            text += ": absolute thresholds only."
        else:
            base_sha = _short_sha(self.base.commit, self.repo_url)
            label = _inline(self.base.label, 80) if self.base.label not in ("", "base") else ""
            text = f"Head {head_sha} vs" if head_sha else "Compared with"
            if base_sha:
                text += f" base {base_sha}" + (f" ({label})." if label else ".")
            else:
                text += f" base **{label}**." if label else " the base run."
        if self.run_url:
            text += f" [Workflow run]({self.run_url})"
        return text

    def warnings(self) -> str:
        lines = [f"⚠️ {_message(n, 400)}" for n in self.head.environment.get("notes", []) or []]
        if self.base is not None:
            diff = _environment_diff(self.base.environment, self.head.environment)
            if diff:
                lines.append(f"⚠️ Base environment differs (latencies less comparable): {diff}")
            upgrade = _version_change_line(self.base, self.head)
            if upgrade:
                lines.append(upgrade)
        return "  \n".join(lines)

    # -- summary --------------------------------------------------------------------------

    def summary_table(self) -> str:
        if not self.head.models:
            return "No models were observed."
        ort = "ORT ×base" if self.versus_base else "ORT ×torch"  # the ratio in the cell
        header = ["", "model", "export", "worst abs", "worst rel", ort, "probe"]
        header += ["variants"] * has_variants(self.head)
        rows = [self.summary_row(m) for m in self.ordered_models()]
        return markdown_table(header, rows, max_cell=_MAX_SUMMARY_NAME)

    def summary_row(self, model: ModelResult) -> list[object]:
        old = self.base_models.get(model.name)
        status = _status_emoji(model.status)
        if model.status != STATUS_OK:
            status += " " + _inline(model.status, 40)
        export = _export_cell(model.export, old.export if old else None) + _graphs_suffix(model)
        if model.skip_reason is not None:
            export = "skipped: " + _inline(model.skip_reason, 80)
        row: list[object] = [
            Markup(status),
            model.name,
            Markup(export),
            Markup(_error_cell(model, old, "abs")),
            Markup(_error_cell(model, old, "rel")),
            Markup(_ort_cell(model, old, self.versus_base)),
            Markup(_probe_cell(model.probe)),
        ]
        if has_variants(self.head):
            row.append(Markup(variants_cell(model, self.thresholds)))
        return row

    def regressions_table(self, level: int) -> str:
        if not self.regressions:
            return ""
        limit = {LEVEL_NO_CALLS: 160, LEVEL_NO_INPUTS: 160, LEVEL_MINIMAL: 100}.get(
            level, _MAX_MESSAGE
        )
        # base/head values only when some row has one (warnings such as stand-ins have none)
        values = any(r.base_value is not None or r.head_value is not None for r in self.regressions)
        rows = []
        for r in self.regressions:
            row: list[object] = [Markup(_regression_icon(r)), r.model, r.rule]
            if values:
                row += [_value(r.rule, r.base_value), _value(r.rule, r.head_value)]
            rows.append([*row, Markup(_message(r.message, limit))])
        header = ["", "model", "rule", *(["base", "head"] if values else []), "message"]
        # only warnings: they do not fail the build, and most are not about the base
        heading = (
            "### Regressions" if any(r.fails_build for r in self.regressions) else "### Warnings"
        )
        if self.base is not None and heading == "### Regressions":
            heading += " vs base"
        return f"{heading}\n\n" + markdown_table(header, rows, max_cell=limit)

    def chart(self) -> str:
        order = [m.name for m in self.ordered_models()]
        chart = latency_chart(self.head, self.base, order)
        if not chart:
            return ""
        sources = [p.source for p in chart_points(self.head, self.base, order) if p.source]
        paired = sources.count(SOURCE_PAIRED)
        if not sources:
            what = "in the order of the table; shorter is faster"
        elif paired == len(sources):
            what = "base and head from the paired timing (both timed alternately in one process)"
        elif not paired:
            what = "base and head from their separate runs"
        else:
            what = (
                f"base and head from the paired timing for {paired} of "
                f"{plural(len(sources), 'model')}, from their separate runs for the others"
            )
        return f"_ORT median latency per model ({what})._\n\n{chart}"

    def legend(self) -> str:
        th = self.thresholds
        env = _environment_line(self.head.environment)
        against = self.base is not None
        lines = [
            "<details><summary>How to read this report: columns, thresholds, environment</summary>",
            "",
            "- **export**: wall time of `torch.onnx.export(dynamo=True)` · ONNX node count"
            + (
                "; `(+4)` is the node count's change against base (the time's is in the details)."
                if against
                else "."
            ),
            "- **worst abs / worst rel**: largest difference between torch and onnxruntime "
            "outputs over every replayed call; rel is `|torch - ort| / (|torch| + 1e-3)`.",
            "- **ORT**: median onnxruntime latency of a call over the timed runs; the spread "
            "(10th and 90th percentiles, the noise of this machine) and eager torch's latency "
            "are in each model's details." + _timing_settings(self.head.settings),
        ]
        if self.versus_base:
            lines.append(
                "- **×base**: head/base ORT latency, from the paired timing when there is one "
                "(both graphs timed alternately in one process on head's inputs, the median of "
                "the pair ratios: both see the same machine load); `†`: from the medians of two "
                "separate runs, timed apart (less reliable)."
            )
        else:
            lines.append(
                "- **×torch**: ORT latency ÷ eager torch latency (`×0.5`: ORT takes half the "
                "time); eager torch is the noisier of the two."
            )
        lines += [
            "- **probe**: one run at sizes never observed, proof the dynamic dims work.",
            "- **dynamic dims** (details): symbolic dimensions of the exported graph; names like "
            "`s77` are made up by `torch.export`, and one name is one size in every input.",
            "- **hist** (per call): output elements whose absolute difference exceeds "
            "each bound. **SUCCESS**: the call is within the tolerances below.",
            f"- **Tolerances**: abs ≤ {format_float(th.abs_max)} and rel ≤ "
            f"{format_float(th.rel_max)} (the `discrepancy` rule and SUCCESS).",
            f"- **Against base**: errors may grow ×{format_float(th.abs_growth)} (abs) and "
            f"×{format_float(th.rel_growth)} (rel); latency may grow "
            f"×{format_float(th.latency_ratio_max)} (the paired ratio when there is one) and "
            "is flagged only beyond the noise (paired: head slower in 90% of the pairs; "
            "separate runs: head's 10th percentile over base's 90th); node count may grow "
            f"×{format_float(th.node_growth_max)}, the ONNX file size "
            f"×{format_float(th.size_growth_max)}, the memory a phase adds ×"
            f"{format_float(th.memory_growth_max)} (past {format_float(th.min_memory_mb)} MiB).",
            *(
                [
                    "- **Policy file** (per model, over the values above): "
                    + "; ".join(_inline(line, 200) for line in self.policy_lines[:20])
                ]
                if self.policy_lines
                else []
            ),
            f"- **Environment**: {env}",
            "",
            "</details>",
        ]
        return "\n".join(lines)

    # -- per model ----------------------------------------------------------------------

    def ordered_models(self) -> list[ModelResult]:
        def key(item: tuple[int, ModelResult]) -> tuple[int, int]:
            index, model = item
            regs = self.by_model.get(model.name, [])
            if any(r.fails_build for r in regs):
                return (0, index)
            return (1 if model.status != STATUS_OK or regs else 2, index)

        return [m for _, m in sorted(enumerate(self.head.models), key=key)]

    def details_section(self, level: int) -> str:
        models = self.ordered_models()
        if not models:
            return ""
        parts = ["### Details"] + [self.model_details(i, m, level) for i, m in enumerate(models)]
        return "\n\n".join(parts)

    def ops_changed(self, model: ModelResult) -> str:
        """``**Ops vs base:** +8 Cast, -1 Softmax (gone)`` when the op counts moved."""
        old = self.base.by_name().get(model.name) if self.base is not None else None
        if old is None or old.export is None or model.export is None:
            return ""
        if not old.export.op_counts or not model.export.op_counts:
            return ""
        text = op_diff_text(old.export.op_counts, model.export.op_counts)
        return f"**Ops vs base:** {_inline(text, 400)}" if text else ""

    def memory_changed(self, model: ModelResult) -> str:
        """``**Memory vs base:** export 12 MiB → 20 MiB (×1.63), ...`` (what each phase
        added to the RSS), or ``**Memory:** ...`` without a base."""
        old = self.base_models.get(model.name)
        pairs = memory_pairs(old, model) if old is not None else []
        if pairs:
            text = memory_diff_text(pairs, len(model.graphs))
            return f"**Memory vs base** (added by each phase): {_inline(text, 400)}"
        shown = [(g.name, memory_text(g.footprint)) for g in model.graphs if g.footprint]
        shown = [(name, text) for name, text in shown if text]
        if not shown:
            return ""
        if len(shown) == 1:
            return f"**Memory** (added by each phase): {_inline(shown[0][1], 300)}"
        text = "; ".join(f"{name}: {t}" for name, t in shown[:4])
        return f"**Memory** (added by each phase): {_inline(text, 400)}"

    def model_details(self, index: int, model: ModelResult, level: int) -> str:
        parts = [model.name, model.status] + ([model.script] if model.script else [])
        summary = " · ".join(escape_html(truncate(" ".join(p.split()), 200)) for p in parts)
        blocks = [f"<details><summary>{_status_emoji(model.status)} {summary}</summary>"]
        if model.cause is not None:
            blocks.append(_cause_lines(model.cause))
        blocks.append(diagnosis_lines(model))
        if model.skip_reason is not None:
            blocks.append(
                f"⏭️ Skipped by the policy file, neither exported nor run: "
                f"{_message(model.skip_reason, 400)}"
            )
        if model.notes:
            blocks.append("\n".join(f"- ⚠️ {_message(n, 400)}" for n in model.notes))
        facts = [
            _export_line(
                model.export, old.export if (old := self.base_models.get(model.name)) else None
            ),
            _latency_line(model, self.base_models.get(model.name)),
            _probe_line(model.probe),
            _paired_line(model.paired_latency),
            _phases_line(model),
        ]
        blocks.append("  \n".join(f for f in facts if f))
        changed = "  \n".join(t for t in (self.ops_changed(model), self.memory_changed(model)) if t)
        if changed:
            blocks.append(changed)
        if len(model.graphs) > 1:
            blocks.append(self.cached(("graphs", index), lambda: _graphs_table(model)))
        if level < LEVEL_NO_INPUTS:  # the summary's variants column stays
            blocks.append(
                self.cached(("variants", index), lambda: variants_section(model, self.thresholds))
            )
        if level < LEVEL_NO_INPUTS and model.inputs:
            blocks.append(self.cached(("inputs", index), lambda: _inputs_table(model.inputs)))
        if level < LEVEL_NO_CALLS and model.observations:
            blocks.append(self.cached(("calls", index), lambda: _calls_table(model)))
            if level < LEVEL_NO_IO:
                blocks.append(self.cached(("io", index), lambda: _io_list(model.observations)))
        if model.dynamic_shapes:
            chars = _SHAPES_CHARS.get(level, _SHORT_ERROR_CHARS)
            blocks.append(
                code_block(
                    model.dynamic_shapes,
                    "dynamic_shapes passed to the exporter",
                    max_chars=chars,
                    keep="head",
                )
            )
        blocks.extend(_error_tails(model, _ERROR_CHARS.get(level, _SHORT_ERROR_CHARS)))
        blocks.append("</details>")
        return "\n\n".join(b for b in blocks if b)


# -- summary cells ----------------------------------------------------------------------


def _export_cell(
    export: ExportResult | None, old: ExportResult | None, *, nodes_word: bool = False
) -> str:
    """``2.5 s · 12 (+0)``: time and node count (``12 nodes`` with ``nodes_word``)."""
    if export is None:
        return NONE
    if not export.ok:
        return "❌ failed"
    text = format_seconds(export.seconds)  # its change against base is in the details
    if export.node_count is not None:
        text += f" · {plural(export.node_count, 'node') if nodes_word else export.node_count}"
        if old is not None and old.ok and old.node_count is not None:
            text += f" ({export.node_count - old.node_count:+d})"
    return text


def _error_cell(model: ModelResult, old: ModelResult | None, metric: str) -> str:
    value = worst_error(model, metric)
    text = format_float(value)
    if old is not None and value is not None:
        change = _change(value, worst_error(old, metric))
        text += "" if change == f" ({format_ratio(1.0)})" else change
    return text


def _timing_settings(settings: dict[str, object]) -> str:
    """How the timed runs were made, as results.json recorded it (older files: nothing)."""
    if "torch_threads" not in settings:
        return ""

    def threads(value: object) -> str:
        if not isinstance(value, int) or value <= 0:
            return "its default threads"
        return f"{value} thread" + ("s" if value != 1 else "")

    text = (
        f" torch timed with {threads(settings.get('torch_threads'))}, onnxruntime with "
        f"{threads(settings.get('ort_threads'))}"
    )
    budget = settings.get("time_budget_s")
    if budget:
        least = settings.get("min_timed_runs")
        least = least if isinstance(least, dict) else {}
        text += (
            f"; up to {settings.get('repeat')} timed runs per call, fewer (at least "
            f"{least.get('onnxruntime', MIN_TIMED_RUNS)}) once a call has used {budget}s "
            f"(torch: at least {least.get('torch', TORCH_MIN_TIMED_RUNS)} within half of it)"
        )
    return text + "."


def _latency_text(model: ModelResult, runtime: str) -> str:
    """``1 ms (0.94–1.22 ms)``: the median and the spread of the timed runs."""
    median = getattr(model, f"median_{runtime}_latency_s")
    return format_seconds(median) + (_spread(model.latency_range(runtime)) if median else "")


def _ort_cell(model: ModelResult, old: ModelResult | None, versus_base: bool) -> str:
    """One number and one ratio: ``660 µs ×1.6`` against base (``†``: separate runs),
    or ``21 µs ×0.44`` against eager torch when there is no base."""
    median = model.median_ort_latency_s
    text = format_seconds(median)
    change = _ort_versus_base(model, old) if versus_base else None
    if change is not None:
        return f"{text} {format_ratio(change[0], digits=2)}{'' if change[1] else '†'}"
    if not versus_base:
        versus_torch = ratio(median, model.median_torch_latency_s)
        if versus_torch is not None:
            return f"{text} {format_ratio(versus_torch, digits=2)}"
    return text


def _ort_versus_base(model: ModelResult, old: ModelResult | None) -> tuple[float, bool] | None:
    """Head/base ORT latency and whether it is paired (interleaved), or None."""
    paired = _paired(model)
    if paired is not None and paired.ratio is not None:
        return paired.ratio, True
    if old is None:
        return None
    change = ratio(model.median_ort_latency_s, old.median_ort_latency_s)
    return None if change is None else (change, False)


def _latency_line(model: ModelResult, old: ModelResult | None) -> str:
    """ORT and torch medians with their spread, and their change against base."""
    if model.median_ort_latency_s is None and model.median_torch_latency_s is None:
        return ""
    parts = [f"ORT {_latency_text(model, 'ort')}", f"torch {_latency_text(model, 'torch')}"]
    versus_torch = ratio(model.median_ort_latency_s, model.median_torch_latency_s)
    if versus_torch is not None:
        parts.append(f"ORT/torch {format_ratio(versus_torch)}")
    if old is not None:
        for runtime in ("ort", "torch"):
            change = ratio(
                getattr(model, f"median_{runtime}_latency_s"),
                getattr(old, f"median_{runtime}_latency_s"),
            )
            if change is not None:
                name = "ORT" if runtime == "ort" else "torch"
                parts.append(f"{name} vs base's separate run {format_ratio(change)}")
    return "**Latency:** " + " · ".join(parts)


def _probe_cell(probe: ProbeResult | None) -> str:
    if probe is None:
        return NONE
    if not probe.ran:
        return "not run"
    if probe.success:
        return "✅"
    if _masked_only(probe):
        return "⚠️ masked"
    return "❌ tolerance" if probe.ok else "❌ failed"


def _masked_only(probe: ProbeResult) -> bool:
    """The probe's error lies only at positions its mask drops (a warning)."""
    return probe.cause is not None and probe.cause.kind == MASKED_POSITIONS_ONLY


def _dims_cell(export: ExportResult | None) -> str:
    """The distinct symbolic dims of the exported inputs: ``batch, seq`` or ``s77``."""
    if export is None or not export.ok:
        return NONE
    found = [d for dims in export.input_dims.values() for d in dims if isinstance(d, str)]
    if not found:
        return "none"
    # an expression of other dims ("past_sequence_length + sequence_length") is no new dim
    names = list(dict.fromkeys(d for d in found if _DIM_NAME_RE.match(d))) or list(
        dict.fromkeys(found)
    )
    named = [n for n in names if not _AUTO_DIM_RE.match(n)] or names
    shown: list[str] = []
    for name in named[:_MAX_DIMS_SHOWN]:
        if shown and len(", ".join([*shown, name])) > _MAX_DIMS_CHARS:
            break
        shown.append(name)
    hidden = len(names) - len(shown)
    return ", ".join(_inline(n, _MAX_DIMS_CHARS) for n in shown) + (
        f" (+{hidden})" if hidden else ""
    )


# -- per-model details --------------------------------------------------------------------


def _environment_line(env: dict[str, Any]) -> str:
    items = [f"{label} {_inline(env[key], 40)}" for key, label in _ENV_FIELDS if env.get(key)]
    if env.get("processor"):
        items.append(f"CPU {_inline(env['processor'], 80)}")
    if env.get("cpu_count"):
        items.append(f"{_inline(env['cpu_count'], 10)} cores")
    if env.get("torch_threads"):
        items.append(f"{_inline(env['torch_threads'], 10)} torch threads")
    for part in env.get("parts", []) or []:
        if isinstance(part, dict):
            label = _inline(part.get("label", ""), 60)
            items.append(f"{label}: {_environment_line(part.get('environment') or {})}")
    return " · ".join(items) if items else NONE


def _version_change_line(base: RunResults, head: RunResults) -> str:
    """The packages the pull request moved, and the models whose outputs moved with them."""
    changes = version_changes(base, head)
    if not changes:
        return ""
    moved = moved_outputs(base, head)
    text = "📦 Versions changed: " + ", ".join(
        f"{p} {_inline(old, 40)} → {_inline(new, 40)}" for p, (old, new) in changes.items()
    )
    if moved:
        shown = ", ".join(
            f"{_inline(name, 80)} (abs {format_float(a)} → {format_float(b)})"
            for name, a, b in moved[:5]
        )
        more = f" and {len(moved) - 5} more" if len(moved) > 5 else ""
        return f"{text}; outputs that moved with it: {shown}{more}."
    return f"{text}; no model's worst error moved with it."


def _environment_diff(base: dict[str, Any], head: dict[str, Any]) -> str:
    keys = [key for key, _ in _ENV_FIELDS] + ["processor", "cpu_count", "torch_threads"]
    diffs = [
        f"{key} {_inline(base.get(key), 40)} → {_inline(head.get(key), 40)}"
        for key in keys
        if key in base and key in head and base.get(key) != head.get(key)
    ]
    return " · ".join(diffs)


def _shapes_seen(info: InputInfo) -> str:
    distinct = list(
        dict.fromkeys(_NOT_PASSED if s is None else format_shape(s) for s in info.shapes)
    )
    text = ", ".join(distinct[:_MAX_SHAPES])
    if len(distinct) > _MAX_SHAPES:
        text += f", … (+{len(distinct) - _MAX_SHAPES})"
    return text or NONE


def _dynamic_dims_cell(info: InputInfo) -> str:
    """``0 (batch_size), 1 (sequence_length)``; plain indices without names."""
    names = info.dim_names if len(info.dim_names) == len(info.dynamic_dims) else []
    if not names:
        return ", ".join(str(d) for d in info.dynamic_dims) or NONE
    return ", ".join(f"{d} ({n})" for d, n in zip(info.dynamic_dims, names))


def _cause_lines(cause: Cause) -> str:
    """Cause, the user's line and the next step: what a reader should read first."""
    lines = [f"**Cause:** {_message(cause.summary, 500)}"]
    if cause.user_frame:
        lines.append(f"**Your code:** {_message(_as_code(cause.user_frame, 300))}")
    if cause.next_step:
        lines.append(f"**Next step:** {_message(cause.next_step, 500)}")
    return "  \n".join(lines)  # two trailing spaces: a hard line break


def diagnosis_lines(model: ModelResult) -> str:
    """What the diagnosis of a model over its tolerance found (issue 19), a line a check."""
    found: list[tuple[str | None, Diagnosis | None]] = []
    if model.diagnosis is not None:
        found.append((None, model.diagnosis))
    if len(model.graphs) > 1:
        found += [(g.name, g.diagnosis) for g in model.graphs if g.diagnosis is not None]
    blocks = []
    for graph, diagnosis in found:
        assert diagnosis is not None
        where = f" of graph {_code(graph, 80)}" if graph else ""
        took = f" ({format_seconds(diagnosis.seconds)})" if diagnosis.seconds is not None else ""
        lines = [f"**Diagnosis{where}**{took}:"]
        lines += [f"- {line}" for line in diagnosis_facts(diagnosis, _code, _message)]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _code(text: str, max_chars: int) -> str:
    """Untrusted ``text`` as Markdown: a code span, or escaped text when it holds what a
    span refuses."""
    return _message(_as_code(text, max_chars)) if _spannable(text) else _inline(text, max_chars)


def _spannable(text: str) -> bool:
    return not any(c in text for c in SPAN_UNSAFE)


def _plain_code(text: str, max_chars: int) -> str:
    return f"`{truncate(' '.join(text.split()), max_chars)}`"


def _plain(text: str, max_chars: int | None = None) -> str:
    return text


def diagnosis_facts(
    diagnosis: Diagnosis,
    code: Callable[[str, int], str] = _plain_code,
    message: Callable[..., str] = _plain,
) -> list[str]:
    """One line per check of a diagnosis. ``code`` renders an untrusted name, ``message``
    one of our messages (whose `code` spans hold the untrusted parts): plain text by
    default (``observer-ci explain``), escaped Markdown in the report."""
    facts = []
    if diagnosis.torch_reproducible is True:
        facts.append("torch against itself: a re-run reproduces its recorded outputs")
    elif diagnosis.torch_reproducible is False:
        figure = f" (max abs {diagnosis.torch_abs:.3g})" if diagnosis.torch_abs is not None else ""
        why = f": {message(diagnosis.torch_reason, 400)}" if diagnosis.torch_reason else ""
        facts.append(
            f"torch against itself: a re-run differs from its recorded outputs{figure}{why}"
        )
    if diagnosis.mask_input:
        kept, dropped = format_float(diagnosis.valid_abs), format_float(diagnosis.masked_abs)
        facts.append(
            f"mask {code(diagnosis.mask_input, 80)}: max abs {kept} at the positions it "
            f"keeps, {dropped} at those it drops"
        )
    for label, found in (
        ("first divergence", diagnosis.first_divergence),
        ("first divergence at the probe's sizes", diagnosis.probe_divergence),
    ):
        if found is not None:
            facts.append(f"{label}: {_divergence_text(found, code, message)}")
    facts += [f"note: {message(n, 300)}" for n in diagnosis.notes[:4]]
    return facts


def _divergence_text(
    found: FirstDivergence, code: Callable[[str, int], str], message: Callable[..., str]
) -> str:
    text = code(found.module or "the model", 120)
    if found.module_class:
        text += f" ({code(found.module_class, 60)})"
    if found.onnx_ops:
        text += " at ONNX " + ", ".join(code(op, 40) for op in found.onnx_ops[:3])
    if found.abs is not None:
        text += f", max abs {found.abs:.3g}"
    if found.call_index is not None:
        text += f" (call {found.call_index})"
    if found.source:
        text += f"; your code: {code(found.source, 200)}"
    if found.known_case:
        text += f"; known case: {code(found.known_case, 40)}"
    if found.next_step:
        text += f"; next step: {message(found.next_step, 400)}"
    return text


def _as_code(text: str, max_chars: int) -> str:
    """``text`` between backticks: a code span, or plain text when it holds what a span
    refuses (:data:`~observer_ci.report.escape.SPAN_UNSAFE`)."""
    text = truncate(" ".join(text.split()), max_chars)
    return text if any(c in text for c in SPAN_UNSAFE) else f"`{text}`"


def _inputs_table(inputs: list[InputInfo]) -> str:
    rows = [
        [
            info.name,
            info.dtype.removeprefix("torch.") if info.dtype else NONE,
            _shapes_seen(info),
            _dynamic_dims_cell(info),
        ]
        for info in inputs
    ]
    return markdown_table(["input", "dtype", "shapes seen", "dynamic dims"], rows)


def _hist(hist: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in hist.items()) or NONE


def _success(obs: ObservationResult) -> str:
    if obs.success:
        return "✅"
    return "❌" if obs.ok else "❌ ORT failed"


def _call_latency(median: float | None, runs: list[float]) -> str:
    if not runs or not median:
        return format_seconds(median)
    return format_seconds(median) + _spread((quantile(runs, 0.1), quantile(runs, 0.9)))


def _calls_table(model: ModelResult) -> str:
    observations = model.observations
    by_graph = len(model.graphs) > 1
    stand_ins = any(obs.stand_ins for obs in observations)
    header = ["call", "abs", "rel", "hist", "ORT", "torch", "SUCCESS"]  # as in the summary
    header += ["graph"] * by_graph + ["fed as empty"] * stand_ins
    rows = []
    for obs in observations[:_MAX_OBS_ROWS]:
        row: list[object] = [
            obs.index,
            format_float(obs.abs),
            format_float(obs.rel),
            _hist(obs.hist),
            _call_latency(obs.ort_latency_s, obs.ort_latencies_s),
            _call_latency(obs.torch_latency_s, obs.torch_latencies_s),
            Markup(_success(obs)),
        ]
        if by_graph:
            row.append(obs.family or NONE)
        if stand_ins:
            row.append(", ".join(obs.stand_ins[:_MAX_LISTED_INPUTS]) or NONE)
        rows.append(row)
    table = markdown_table(header, rows, max_cell=200)
    hidden = len(observations) - _MAX_OBS_ROWS
    if hidden > 0:
        table += f"\n\n… {plural(hidden, 'more call')} not shown."
    return table


def _graphs_suffix(model: ModelResult) -> str:
    return f" · {len(model.graphs)} graphs" if len(model.graphs) > 1 else ""


def _graphs_table(model: ModelResult) -> str:
    """One row per exported graph: the calls it serves and why it exists."""
    header = ["graph", "calls", "export", "max abs", "probe", "why a graph of its own"]
    rows = [
        [
            graph.name,
            _calls_list(graph.observation_indices),
            Markup(_export_cell(graph.export, None, nodes_word=True)),
            Markup(_graph_abs_cell(graph)),
            Markup(_probe_cell(graph.probe)),
            graph.reason or "the main graph",
        ]
        for graph in model.graphs
    ]
    return "**Graphs (one per call family):**\n\n" + markdown_table(header, rows, max_cell=300)


def _graph_abs_cell(graph: GraphResult) -> str:
    if graph.abs is None:
        return NONE
    return format_float(graph.abs) + ("" if graph.success is not False else " ❌")


def _calls_list(indices: list[int]) -> str:
    shown = ", ".join(str(i) for i in indices[:_MAX_LISTED_CALLS])
    hidden = len(indices) - _MAX_LISTED_CALLS
    return shown + (f" (+{hidden})" if hidden > 0 else "")


def _io_list(observations: list[ObservationResult]) -> str:
    items = [
        f"- call {o.index}: {_inline(readable_tensors(o.inputs) or NONE, 300)} → "
        f"{_inline(readable_tensors(o.outputs) or NONE, 300)}"
        for o in observations[:_MAX_OBS_ROWS]
        if o.inputs or o.outputs
    ]
    return "**Inputs → outputs per call:**\n\n" + "\n".join(items) if items else ""


def _probe_line(probe: ProbeResult | None) -> str:
    label = "**Unseen-shape probe:**"
    if probe is None:
        return f"{label} {NONE}"
    if not probe.ran:
        reason = _inline(probe.reason, 200) if probe.reason else "no reason given"
        return f"{label} not run ({reason})"
    shapes = ", ".join(
        f"{_inline(k, 80)}: {_inline(format_shape(v), 120)}" for k, v in probe.shapes.items()
    )
    if probe.success:
        icon = "✅"
    elif _masked_only(probe):
        icon = "⚠️ exceeded tolerance only at masked positions"
    elif probe.ok:
        icon = "❌ exceeded tolerance"
    else:
        icon = "❌ failed"
    parts = [icon]
    if shapes:
        parts.append(shapes)
    if probe.abs is not None or probe.rel is not None:
        parts.append(f"abs {format_float(probe.abs)} · rel {format_float(probe.rel)}")
    if probe.error and not probe.success:
        first = next((ln for ln in reversed(probe.error.splitlines()) if ln.strip()), "")
        parts.append(_inline(first, 200))
    return f"{label} " + " · ".join(parts)


def _onnx_inputs(export: ExportResult) -> str:
    names = list(dict.fromkeys([*export.input_names, *export.input_dims]))
    items = []
    for name in names:
        dims = export.input_dims.get(name)
        items.append(_inline(name, 80) + (f" ({_inline(format_shape(dims), 120)})" if dims else ""))
    return ", ".join(items)


def _export_line(export: ExportResult | None, old: ExportResult | None = None) -> str:
    label = "**Export:**"
    if export is None:
        return f"{label} not attempted"
    if not export.ok:
        return f"{label} ❌ failed after {format_seconds(export.seconds)}"
    change = _change(export.seconds, old.seconds) if old is not None and old.ok else ""
    parts = [
        "✅ cached" if export.cached else f"✅ {format_seconds(export.seconds)}{change}",
        f"opset {format_float(export.opset)}",
        f"{format_float(export.node_count)} nodes",
        format_bytes(export.file_size),
    ]
    if export.failed_samples and export.sample_index is not None:
        tried = ", ".join(_inline(f.split(":", 1)[0], 20) for f in export.failed_samples)
        parts.append(f"sample: call {export.sample_index} ({tried} failed to trace)")
    parts.append(f"dynamic dims: {_dims_cell(export)}")
    inputs = _onnx_inputs(export)
    if inputs:
        parts.append(f"ONNX inputs: {inputs}")
    return f"{label} " + " · ".join(parts)


def _paired_line(paired: PairedLatency | None) -> str:
    """What the interleaved base/head timing found, or why there is none."""
    label = "**Paired ORT timing (base and head interleaved):**"
    if paired is None:
        return ""
    if paired.ratio is None:
        reason = _inline(paired.reason, 200) if paired.reason else "no reason given"
        return f"{label} not available ({reason}); ×base is from separate runs"
    parts = [f"head/base {format_ratio(paired.ratio)}"]
    if paired.ratio_low is not None and paired.ratio_high is not None:
        parts[0] += f" ({format_ratio_range(paired.ratio_low, paired.ratio_high)})"
    parts.append(f"base {format_seconds(paired.base_s)} → head {format_seconds(paired.head_s)}")
    parts.append(f"{plural(paired.rounds, 'round')} × {plural(paired.calls, 'call')}")
    return f"{label} " + " · ".join(parts)


def _phases_line(model: ModelResult) -> str:
    if not model.phase_seconds:
        return ""
    phases = " · ".join(
        f"{_inline(k, 40)} {format_seconds(v)}" for k, v in model.phase_seconds.items()
    )
    return f"**Time:** {phases}"


def _error_tails(model: ModelResult, max_chars: int) -> list[str]:
    sources: list[tuple[str, str | None]] = [("Error", model.error)]
    if model.export is not None:
        sources.append(("Export error", model.export.error))
    sources += [(f"Call {o.index} error", o.error) for o in model.observations]
    if model.probe is not None:
        sources.append(("Probe error", model.probe.error))
    seen: set[str] = set()
    blocks = []
    for summary, text in sources:
        if not text or text in seen:
            continue
        seen.add(text)
        blocks.append(code_block(text, summary, max_chars=max_chars))
    return blocks


# -- fitting ------------------------------------------------------------------------------


def _hard_cut(text: str, max_chars: int) -> str:
    """``text`` cut at a line boundary, plus the truncation note, in ``max_chars`` at most."""
    note = f"\n\n{TRUNCATION_NOTE}\n"
    minimal = f"{MARKER}\n{TRUNCATION_NOTE}\n"
    if len(minimal) >= max_chars:
        return minimal[:max_chars]
    cut = text[: max_chars - len(note)]
    newline = cut.rfind("\n")
    if newline > len(MARKER):
        cut = cut[:newline]
    cut = cut.rstrip()
    if len(cut) <= len(MARKER):
        return minimal
    result = cut + note
    return result


def _level_texts(renderer: _Renderer) -> Iterator[tuple[int, str]]:
    """Each level's text as it would be posted (with the note when detail was dropped)."""
    yield LEVEL_FULL, renderer.render(LEVEL_FULL)
    note = f"\n{TRUNCATION_NOTE}\n"
    for level in LEVELS[1:]:
        yield level, renderer.render(level) + note


def report_levels(
    head: RunResults,
    regressions: list[Regression],
    base: RunResults | None = None,
    **options: Any,
) -> list[str]:
    """The text of every detail level, most detailed first (what fitting chooses from)."""
    return [text for _, text in _level_texts(_renderer(head, regressions, base, **options))]


def fit_report(
    head: RunResults,
    regressions: list[Regression],
    base: RunResults | None = None,
    *,
    max_chars: int | None = GITHUB_MAX_CHARS,
    **options: Any,
) -> tuple[str, int | None]:
    """The most detailed level that fits ``max_chars``: ``(text, level)``; level None
    means even the minimal level did not fit and the text was hard-cut."""
    if max_chars is not None and max_chars <= 0:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    renderer = _renderer(head, regressions, base, **options)
    for level, text in _level_texts(renderer):
        if max_chars is None or len(text) <= max_chars:
            return text, level
    assert max_chars is not None  # without a limit the first level fits
    return _hard_cut(renderer.render(LEVEL_MINIMAL), max_chars), None


def _renderer(
    head: RunResults,
    regressions: list[Regression],
    base: RunResults | None,
    *,
    title: str = "observer-ci",
    run_url: str | None = None,
    thresholds: Thresholds | None = None,
    policy_lines: list[str] | None = None,
    trend: str = "",
    accepted: str = "",
) -> _Renderer:
    renderer = _Renderer(head, regressions, base, title, run_url, thresholds or Thresholds())
    renderer.policy_lines = list(policy_lines or [])
    renderer.trend = trend
    renderer.accepted = accepted
    return renderer


def render_report(
    head: RunResults,
    regressions: list[Regression],
    base: RunResults | None = None,
    *,
    max_chars: int | None = GITHUB_MAX_CHARS,
    title: str = "observer-ci",
    run_url: str | None = None,
    thresholds: Thresholds | None = None,
    policy_lines: list[str] | None = None,
    trend: str = "",
    accepted: str = "",
) -> str:
    """The Markdown PR comment (see the module docstring).

    ``max_chars=None`` renders everything (report.md, job summary). Longer than
    ``max_chars``, it is re-rendered with less detail (see ``LEVELS``) and
    finally hard-cut; a truncation note is then appended. Never longer than
    ``max_chars``. ``thresholds`` are the ones the regressions were computed with
    (stated in the legend).
    """
    options: dict[str, Any] = {
        "title": title,
        "run_url": run_url,
        "thresholds": thresholds,
        "policy_lines": policy_lines,
        "trend": trend,
        "accepted": accepted,
    }
    return fit_report(head, regressions, base, max_chars=max_chars, **options)[0]


def report_files(out: Path, base: RunResults | None, *, write_results: bool = True) -> str:
    """What :func:`write_report_files` writes, for a "wrote ..." line: ``a, b and c``."""
    names = ["results.json", "base-results.json"] if base is not None else ["results.json"]
    paths = [str(out / n) for n in (names if write_results else [])] + [str(out / "report.md")]
    return ", ".join(paths[:-1]) + (" and " if len(paths) > 1 else "") + paths[-1]


def write_report_files(
    out: Path,
    head: RunResults,
    regressions: list[Regression],
    base: RunResults | None = None,
    *,
    run_url: str | None = None,
    write_results: bool = True,
    title: str = "observer-ci",
    thresholds: Thresholds | None = None,
    policy_lines: list[str] | None = None,
    trend: str = "",
    accepted: str = "",
) -> str:
    """Writes ``results.json`` first (and ``base-results.json``), then the full
    ``report.md``; returns the report. Called before anything is posted."""
    out.mkdir(parents=True, exist_ok=True)
    if write_results:
        head.write(out / "results.json")
        if base is not None:
            base.write(out / "base-results.json")
    options: dict[str, Any] = {
        "title": title,
        "run_url": run_url,
        "thresholds": thresholds,
        "policy_lines": policy_lines,
        "trend": trend,
        "accepted": accepted,
    }
    report = render_report(head, regressions, base, max_chars=None, **options)
    (out / "report.md").write_text(report, encoding="utf-8")
    return report
