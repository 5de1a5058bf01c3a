"""Render a run (and its regressions against a baseline) as the Markdown PR comment.

Every piece of text that comes from a model, a script or an exception goes
through :mod:`observer_ci.escape` before it reaches a table or a paragraph.
The comment must fit GitHub's 65,536-character limit, so when the full report
is too long it is re-rendered with less detail, level by level, and as a last
resort hard-cut; the sticky-comment marker always stays on the first line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from observer_ci.constants import GITHUB_COMMENT_MAX_CHARS as GITHUB_MAX_CHARS
from observer_ci.constants import MARKER
from observer_ci.escape import code_block, escape_cell
from observer_ci.results import (
    STATUS_DISCREPANCY,
    STATUS_OK,
    STATUSES,
    ExportResult,
    InputInfo,
    ModelResult,
    ObservationResult,
    ProbeResult,
    RunResults,
)
from observer_ci.rules import RULES_BY_NAME, Regression, worst_error

TRUNCATION_NOTE = (
    "Report truncated to fit GitHub's 65,536-character limit; "
    "full report in the job summary/artifact."
)
NONE = "–"

# Detail levels, from everything to the bare minimum.
LEVEL_FULL = 0
LEVEL_NO_IO = 1  # (1) drop per-observation inputs/outputs strings
LEVEL_SHORT_ERRORS = 2  # (2) shorten error tails
LEVEL_OBS_SUMMARY = 3  # (3) per-observation tables -> one summary line per model
LEVEL_NO_INPUTS = 4  # (4) drop inputs tables
LEVEL_MINIMAL = 5  # (5) headline + regressions + status lines
LEVELS = (
    LEVEL_FULL,
    LEVEL_NO_IO,
    LEVEL_SHORT_ERRORS,
    LEVEL_OBS_SUMMARY,
    LEVEL_NO_INPUTS,
    LEVEL_MINIMAL,
)

_ERROR_CHARS = {LEVEL_FULL: 3000, LEVEL_NO_IO: 3000}
_SHORT_ERROR_CHARS = 400
_MAX_OBS_ROWS = 50
_MAX_SHAPES = 8
_MAX_MESSAGE = 300
_PADDING_RE = re.compile(r" {2,}\|")
_URL_RE = re.compile(r"^https?://[^\s<>()\"'`\[\]]+$")
_ENV_FIELDS = (
    ("torch", "torch"),
    ("onnx", "onnx"),
    ("onnxruntime", "ORT"),
    ("onnxscript", "onnxscript"),
    ("python", "Python"),
)


# -- number formatting --------------------------------------------------------------


def format_float(value: float | int | None) -> str:
    """Compact number: ``3.2e-07``, ``0.0123``, ``42``; None is ``–``."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if value != value:  # NaN
        return "nan"
    return f"{value:.3g}"


def format_seconds(seconds: float | None) -> str:
    """Human duration: ``12.3 ms``, ``4.56 µs``, ``2.5 s``, ``3 min 5 s``; None is ``–``."""
    if seconds is None:
        return NONE
    if seconds != seconds:
        return "nan"
    if seconds == 0:
        return "0 s"
    magnitude = abs(seconds)
    if magnitude >= 60:
        minutes, rest = divmod(round(magnitude), 60)
        sign = "-" if seconds < 0 else ""
        return f"{sign}{minutes} min {rest} s"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if magnitude >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_bytes(size: int | float | None) -> str:
    """Human size in binary units: ``512 B``, ``1.5 KiB``, ``12.3 MiB``; None is ``–``."""
    if size is None:
        return NONE
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def format_ratio(value: float | None) -> str:
    """``1.52×``; None is ``–``."""
    return NONE if value is None else f"{format_float(value)}×"


def format_shape(shape: Iterable[int | str] | None) -> str:
    """``2×8``; a scalar is ``()``; a missing input is ``–``."""
    if shape is None:
        return NONE
    dims = [str(d) for d in shape]
    return "×".join(dims) if dims else "()"


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


# -- small rendering helpers ----------------------------------------------------------


def _inline(text: Any, max_chars: int | None = None) -> str:
    """Escaped single-line text for headings, list items and paragraphs."""
    return escape_cell(text, max_chars, newline=" ")


def _table(header: list[str], rows: list[list[Any]], max_chars: int = _MAX_MESSAGE) -> str:
    """A pipe table of raw values; every cell (and header) is escaped here."""
    cols = [escape_cell(h, newline=" ") for h in header]
    body = [[escape_cell(cell, max_chars) for cell in row] for row in rows]
    import pandas as pd  # noqa: PLC0415 - rendering only; the report helper replaces it

    frame = pd.DataFrame(body, columns=cols, dtype=object)
    return _compact(frame.to_markdown(index=False, disable_numparse=True))


def _compact(table: str) -> str:
    """Drop tabulate's column padding: it can double a wide table's size for nothing.

    Safe because escaped cells never contain a raw ``|``.
    """
    lines = table.split("\n")
    if len(lines) > 1:
        lines[1] = re.sub(r"-{3,}", "---", lines[1])
    return "\n".join(_PADDING_RE.sub(" |", line) for line in lines)


def _status_emoji(status: str) -> str:
    if status == STATUS_OK:
        return "✅"
    if status == STATUS_DISCREPANCY:
        return "⚠️"
    return "❌"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _value(rule: str, value: float | str | None) -> str:
    if isinstance(value, str) or value is None:
        return NONE if value is None else value
    definition = RULES_BY_NAME.get(rule)
    if definition is not None and definition.unit == "seconds":
        return format_seconds(value)
    return format_float(value)


def _regression_icon(reg: Regression) -> str:
    return "❌" if reg.fails_build else "⚠️"


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
    ) -> None:
        self.head = head
        self.base = base
        self.title = title
        self.run_url = run_url if run_url and _URL_RE.match(run_url) else None
        self.regressions = sorted(regressions, key=lambda r: not r.fails_build)
        self.by_model: dict[str, list[Regression]] = {}
        for reg in self.regressions:
            self.by_model.setdefault(reg.model, []).append(reg)
        self.base_models = base.by_name() if base is not None else {}
        self._cache: dict[tuple, str] = {}

    def cached(self, key: tuple, make: Callable[[], str]) -> str:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    # -- document ----------------------------------------------------------------------

    def render(self, level: int) -> str:
        blocks = [MARKER + "\n" + self.headline()]
        if level < LEVEL_MINIMAL:
            blocks.append(self.environment())
        blocks.append(self.regressions_section(level))
        if level < LEVEL_MINIMAL and self.base is not None:
            blocks.append(self.latency_section())
        blocks.append(self.models_section(level))
        return "\n\n".join(b for b in blocks if b) + "\n"

    def headline(self) -> str:
        failing = sum(r.fails_build for r in self.regressions)
        warnings = len(self.regressions) - failing
        icon = "❌" if failing else "✅"
        title = _inline(self.title, 100)
        if failing:
            verb = "fails" if failing == 1 else "fail"
            verdict = f"{_plural(failing, 'regression')} {verb} the build"
        else:
            verdict = "no regression fails the build"
        counts = self.status_counts()
        lines = [f"## {icon} {title}: {verdict}", ""]
        summary = f"**{_plural(len(self.head.models), 'model')}**"
        summary += f" · {counts}" if counts else ""
        summary += f" · {_plural(failing, 'failing regression')} · {_plural(warnings, 'warning')}"
        lines.append(summary)
        lines.append(self.baseline_line())
        return "\n".join(lines)

    def status_counts(self) -> str:
        counts: dict[str, int] = {}
        for model in self.head.models:
            counts[model.status] = counts.get(model.status, 0) + 1
        order = [s for s in STATUSES if s in counts] + sorted(set(counts) - set(STATUSES))
        return " · ".join(f"{_status_emoji(s)} {counts[s]} {_inline(s, 40)}" for s in order)

    def baseline_line(self) -> str:
        if self.base is None:
            text = "No baseline: absolute thresholds only."
        else:
            label = _inline(self.base.label or "base", 80)
            text = (
                f"Compared with baseline **{label}** ({_plural(len(self.base.models), 'model')})."
            )
        if self.run_url:
            text += f" [Workflow run]({self.run_url})"
        return text

    def environment(self) -> str:
        env = self.head.environment
        lines = [f"**Environment:** {_environment_line(env)}"]
        for note in env.get("notes", []) or []:
            lines.append(f"⚠️ {_inline(note, 400)}")
        for part in env.get("parts", []) or []:
            if isinstance(part, dict):
                label = _inline(part.get("label", ""), 60)
                lines.append(f"- {label}: {_environment_line(part.get('environment') or {})}")
        if self.base is not None:
            diff = _environment_diff(self.base.environment, env)
            if diff:
                lines.append(f"⚠️ Base environment differs (latencies less comparable): {diff}")
        return "\n".join(lines)

    # -- regressions ------------------------------------------------------------------

    def regressions_section(self, level: int) -> str:
        heading = "### Regressions vs baseline" if self.base is not None else "### Regressions"
        if not self.regressions:
            return f"{heading}\n\nNo regressions."
        limit = {LEVEL_OBS_SUMMARY: 160, LEVEL_NO_INPUTS: 160, LEVEL_MINIMAL: 100}.get(
            level, _MAX_MESSAGE
        )
        rows = [
            [
                _regression_icon(r),
                r.model,
                r.rule,
                _value(r.rule, r.base_value),
                _value(r.rule, r.head_value),
                r.message,
            ]
            for r in self.regressions
        ]
        header = ["", "model", "rule", "base", "head", "message"]
        table = self.cached(("regressions", limit), lambda: _table(header, rows, limit))
        return f"{heading}\n\n{table}"

    def latency_section(self) -> str:
        rows = []
        for model in self.head.models:
            old = self.base_models.get(model.name)
            if old is None:
                continue
            b, h = old.median_ort_latency_s, model.median_ort_latency_s
            if b is None and h is None:
                continue
            rows.append(
                [model.name, format_seconds(b), format_seconds(h), format_ratio(_ratio(h, b))]
            )
        if not rows:
            return ""
        header = ["model", "base ORT median", "head ORT median", "ratio"]
        table = self.cached(("latency",), lambda: _table(header, rows))
        return f"### Latency vs baseline\n\n{table}"

    # -- models -------------------------------------------------------------------------

    def ordered_models(self) -> list[ModelResult]:
        def key(item: tuple[int, ModelResult]) -> tuple[int, int]:
            index, model = item
            regs = self.by_model.get(model.name, [])
            if any(r.fails_build for r in regs):
                return (0, index)
            return (1 if model.status != STATUS_OK or regs else 2, index)

        return [m for _, m in sorted(enumerate(self.head.models), key=key)]

    def models_section(self, level: int) -> str:
        models = self.ordered_models()
        if not models:
            return "### Models\n\nNo models were observed."
        if level >= LEVEL_MINIMAL:
            lines = [f"- {self.status_line(m)}" for m in models]
            return "### Models\n\n" + "\n".join(lines)
        parts = ["### Models"] + [self.model_section(i, m, level) for i, m in enumerate(models)]
        return "\n\n".join(parts)

    def status_line(self, model: ModelResult) -> str:
        regs = self.by_model.get(model.name, [])
        status = f"{_status_emoji(model.status)} {_inline(model.status, 40)}"
        text = f"{status} · **{_inline(model.name, 200)}**"
        if model.script:
            text += f" · {_inline(model.script, 200)}"
        failing = sum(r.fails_build for r in regs)
        if failing:
            text += f" · ❌ {_plural(failing, 'regression')}"
        if len(regs) - failing:
            text += f" · ⚠️ {_plural(len(regs) - failing, 'warning')}"
        return text

    def model_section(self, index: int, model: ModelResult, level: int) -> str:
        blocks = [f"#### {self.status_line(model)}"]
        if model.notes and level < LEVEL_MINIMAL:
            blocks.append("  \n".join(f"⚠️ {_inline(n, 400)}" for n in model.notes))
        if level < LEVEL_NO_INPUTS and model.inputs:
            blocks.append(self.cached(("inputs", index), lambda: _inputs_table(model.inputs)))
        if level < LEVEL_OBS_SUMMARY and model.observations:
            with_io = level < LEVEL_NO_IO
            blocks.append(
                self.cached(
                    ("obs", index, with_io),
                    lambda: _observations_table(model.observations, with_io),
                )
            )
        elif model.observations:
            blocks.append(_observations_summary(model))
        blocks.append(_probe_line(model.probe))
        blocks.append(_export_line(model.export))
        if level < LEVEL_SHORT_ERRORS:
            extra = _extra_lines(model, level)
            if extra:
                blocks.append(extra)
        regs = self.by_model.get(model.name, [])
        if regs and level < LEVEL_OBS_SUMMARY:
            blocks.append(self.cached(("model_regs", index), lambda: _model_regressions(regs)))
        tails = _error_tails(model, _ERROR_CHARS.get(level, _SHORT_ERROR_CHARS))
        blocks.extend(tails)
        return "\n\n".join(blocks)


def _environment_line(env: dict[str, Any]) -> str:
    items = [f"{label} {_inline(env[key], 40)}" for key, label in _ENV_FIELDS if env.get(key)]
    if env.get("processor"):
        items.append(f"CPU {_inline(env['processor'], 80)}")
    if env.get("cpu_count"):
        items.append(f"{_inline(env['cpu_count'], 10)} cores")
    if env.get("torch_threads"):
        items.append(f"{_inline(env['torch_threads'], 10)} torch threads")
    return " · ".join(items) if items else NONE


def _environment_diff(base: dict[str, Any], head: dict[str, Any]) -> str:
    keys = [key for key, _ in _ENV_FIELDS] + ["processor", "cpu_count", "torch_threads"]
    diffs = [
        f"{key} {_inline(base.get(key), 40)} → {_inline(head.get(key), 40)}"
        for key in keys
        if key in base and key in head and base.get(key) != head.get(key)
    ]
    return " · ".join(diffs)


def _shapes_seen(info: InputInfo) -> str:
    distinct = list(dict.fromkeys(format_shape(s) for s in info.shapes))
    text = ", ".join(distinct[:_MAX_SHAPES])
    if len(distinct) > _MAX_SHAPES:
        text += f", … (+{len(distinct) - _MAX_SHAPES})"
    return text or NONE


def _inputs_table(inputs: list[InputInfo]) -> str:
    rows = [
        [
            info.name,
            info.dtype or NONE,
            _shapes_seen(info),
            ", ".join(str(d) for d in info.dynamic_dims) or NONE,
        ]
        for info in inputs
    ]
    return _table(["input", "dtype", "shapes seen", "dynamic dims"], rows)


def _hist(hist: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in hist.items()) or NONE


def _success(obs: ObservationResult) -> str:
    if obs.success:
        return "✅"
    return "❌" if obs.ok else "❌ ORT failed"


def _observations_table(observations: list[ObservationResult], with_io: bool) -> str:
    header = ["#", "abs", "rel", "hist", "torch", "ORT", "speedup", "SUCCESS"]
    show_io = with_io and any(o.inputs or o.outputs for o in observations)
    if show_io:
        header += ["inputs", "outputs"]
    rows = []
    for obs in observations[:_MAX_OBS_ROWS]:
        row = [
            obs.index,
            format_float(obs.abs),
            format_float(obs.rel),
            _hist(obs.hist),
            format_seconds(obs.torch_latency_s),
            format_seconds(obs.ort_latency_s),
            format_ratio(_ratio(obs.torch_latency_s, obs.ort_latency_s)),
            _success(obs),
        ]
        if show_io:
            row += [obs.inputs or NONE, obs.outputs or NONE]
        rows.append(row)
    table = _table(header, rows, 200)
    hidden = len(observations) - _MAX_OBS_ROWS
    if hidden > 0:
        table += f"\n\n… {_plural(hidden, 'more observation')} not shown."
    return table


def _observations_summary(model: ModelResult) -> str:
    obs = model.observations
    passed = sum(o.success for o in obs)
    speedup = _ratio(model.median_torch_latency_s, model.median_ort_latency_s)
    parts = [
        f"{passed}/{len(obs)} success",
        f"max abs {format_float(worst_error(model, 'abs'))}",
        f"max rel {format_float(worst_error(model, 'rel'))}",
        f"ORT median {format_seconds(model.median_ort_latency_s)}",
        f"speedup {format_ratio(speedup)}",
    ]
    return "**Observations:** " + " · ".join(parts)


def _probe_line(probe: ProbeResult | None) -> str:
    label = "**Unseen-shape probe:**"
    if probe is None:
        return f"{label} {NONE}"
    if not probe.ran:
        reason = _inline(probe.reason, 200) if probe.reason else "no reason given"
        return f"{label} not run ({reason})"
    shapes = ", ".join(f"{_inline(k, 80)}: {format_shape(v)}" for k, v in probe.shapes.items())
    if probe.success:
        icon = "✅"
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


def _export_line(export: ExportResult | None) -> str:
    label = "**Export:**"
    if export is None:
        return f"{label} not attempted"
    if not export.ok:
        return f"{label} ❌ failed after {format_seconds(export.seconds)}"
    parts = [
        f"✅ {format_seconds(export.seconds)}",
        f"opset {format_float(export.opset)}",
        f"{format_float(export.node_count)} nodes",
        format_bytes(export.file_size),
    ]
    if export.failed_samples and export.sample_index is not None:
        tried = ", ".join(_inline(f.split(":", 1)[0], 20) for f in export.failed_samples)
        parts.append(f"sample: call {export.sample_index} ({tried} failed to trace)")
    inputs = _onnx_inputs(export)
    if inputs:
        parts.append(f"ONNX inputs: {inputs}")
    return f"{label} " + " · ".join(parts)


def _extra_lines(model: ModelResult, level: int) -> str:
    lines = []
    if model.phase_seconds:
        phases = " · ".join(
            f"{_inline(k, 40)} {format_seconds(v)}" for k, v in model.phase_seconds.items()
        )
        lines.append(f"**Phases:** {phases}")
    if model.dynamic_shapes and level < LEVEL_NO_IO:
        lines.append(f"**dynamic_shapes:** {_inline(model.dynamic_shapes, 300)}")
    return "  \n".join(lines)  # two trailing spaces: a hard line break


def _model_regressions(regs: list[Regression]) -> str:
    rows = [
        [
            _regression_icon(r),
            r.rule,
            _value(r.rule, r.base_value),
            _value(r.rule, r.head_value),
            r.message,
        ]
        for r in regs
    ]
    return _table(["", "rule", "base", "head", "message"], rows)


def _error_tails(model: ModelResult, max_chars: int) -> list[str]:
    sources: list[tuple[str, str | None]] = [("Error", model.error)]
    if model.export is not None:
        sources.append(("Export error", model.export.error))
    sources += [(f"Observation {o.index} error", o.error) for o in model.observations]
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


def _hard_cut(text: str, max_chars: int) -> str:
    """Cut ``text`` at a line boundary so that it plus the note fits in ``max_chars``."""
    note = f"\n\n{TRUNCATION_NOTE}\n"
    minimal = f"{MARKER}\n{TRUNCATION_NOTE}\n"
    if len(minimal) >= max_chars:
        return minimal[:max_chars]
    room = max_chars - len(note)
    cut = text[:room]
    newline = cut.rfind("\n")
    if newline > len(MARKER):
        cut = cut[:newline]
    if len(cut) < len(MARKER):
        return minimal
    return cut.rstrip() + note


def render_report(
    head: RunResults,
    regressions: list[Regression],
    base: RunResults | None = None,
    *,
    max_chars: int | None = GITHUB_MAX_CHARS,
    title: str = "observer-ci",
    run_url: str | None = None,
) -> str:
    """The Markdown PR comment: marker, headline, regressions, environment, models.

    ``max_chars=None`` renders everything (report.md, job summary). Longer than
    ``max_chars``, it is re-rendered with less detail (see ``LEVELS``)
    and finally hard-cut; a truncation note is then appended. Never longer than
    ``max_chars``.
    """
    if max_chars is not None and max_chars <= 0:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    renderer = _Renderer(head, regressions, base, title, run_url)
    text = renderer.render(LEVEL_FULL)
    if max_chars is None or len(text) <= max_chars:
        return text
    note = f"\n{TRUNCATION_NOTE}\n"
    for level in LEVELS[1:]:
        text = renderer.render(level) + note
        if len(text) <= max_chars:
            return text
    return _hard_cut(renderer.render(LEVEL_MINIMAL), max_chars)


def write_report_files(
    out: Path,
    head: RunResults,
    regressions: list[Regression],
    base: RunResults | None = None,
    *,
    run_url: str | None = None,
    write_results: bool = True,
    title: str = "observer-ci",
) -> str:
    """Writes ``results.json`` first (and ``base-results.json``), then the full
    ``report.md``; returns the report. Called before anything is posted."""
    out.mkdir(parents=True, exist_ok=True)
    if write_results:
        head.write(out / "results.json")
        if base is not None:
            base.write(out / "base-results.json")
    report = render_report(head, regressions, base, max_chars=None, title=title, run_url=run_url)
    (out / "report.md").write_text(report, encoding="utf-8")
    return report
