"""Regression rules: compare a head run with a base run and decide what fails the build.

Absolute gates (``abs_max``, ``rel_max``) apply to head alone, so they work
without a baseline; growth, latency and node-count rules need one. A problem
already present in base is still reported, but never fails the build
("still failing"), so a broken main branch does not block every pull request.
Symptoms of one defect (a failure, a discrepancy, error growth, a failed probe)
count once; a latency change counts only beyond the noise of the timed runs.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from observer_ci.core.constants import MASKED_POSITIONS_ONLY, TORCH_NOT_REPRODUCIBLE
from observer_ci.core.errors import error_headline
from observer_ci.core.results import (
    STATUS_EXPORT_FAILED,
    STATUS_OBSERVE_FAILED,
    STATUS_ORT_FAILED,
    STATUS_SCRIPT_FAILED,
    STATUSES,
    ModelResult,
    PairedLatency,
    RunResults,
    VariantResult,
    max_or_none,
)
from observer_ci.core.tolerances import OutputTolerance, limit_for, outputs_over
from observer_ci.core.variants import (
    CPU,
    FLOAT32,
    STATE_FAILED,
    STATE_SKIPPED,
    VARIANT_TOLERANCES,
)
from observer_ci.report.changes import memory_diff_text, memory_pairs, op_diff_text, op_set_changed
from observer_ci.report.escape import SPAN_UNSAFE
from observer_ci.report.tables import format_bytes, format_seconds, plural

if TYPE_CHECKING:
    from observer_ci.report.history import Band
    from observer_ci.report.policy import Policy


@dataclass(frozen=True)
class Rule:
    """A regression rule: its name (for ``fail_on``), the unit of the values it compares,
    whether it fails the build by default, and what trips it (legend and help text)."""

    name: str
    unit: str  # "status", "error", "ratio", "seconds", "count", "dim" or "state"
    gates_by_default: bool
    trips_when: str


RULE_TABLE: tuple[Rule, ...] = (
    Rule("script_failed", "status", True, "an observation script (or install) failed"),
    Rule(
        "observe_failed",
        "status",
        True,
        "no export signature from the observed calls (no call at all, or calls that disagree)",
    ),
    Rule("export_failed", "status", True, "torch.onnx.export failed"),
    Rule("ort_failed", "status", True, "onnxruntime failed on an observed call"),
    Rule("discrepancy", "error", True, "worst abs/rel error over abs_max/rel_max"),
    Rule(
        TORCH_NOT_REPRODUCIBLE,
        "error",
        True,
        "over abs_max/rel_max, but torch does not reproduce its own recorded outputs",
    ),
    Rule("abs_growth", "error", True, "worst abs error grew by more than abs_growth vs base"),
    Rule("rel_growth", "error", True, "worst rel error grew by more than rel_growth vs base"),
    Rule("dynamic_dim_lost", "dim", True, "a dim dynamic in base is static in head"),
    # Latency and node count only warn by default: shared CI machines are noisy.
    Rule(
        "latency_ratio",
        "seconds",
        False,
        "ORT median latency over latency_ratio_max x base (the paired timing when there is "
        "one), beyond the measured noise",
    ),
    Rule("node_count_growth", "count", False, "ONNX node count over node_growth_max x base"),
    Rule("op_set_changed", "count", False, "an ONNX op type appeared in or vanished from a graph"),
    Rule("size_growth", "count", False, "ONNX file size over size_growth_max x base"),
    Rule(
        "memory_growth",
        "bytes",
        False,
        "the memory a phase added (export, session creation, first run) over "
        "memory_growth_max x base, once over min_memory_mb",
    ),
    Rule("probe_failed", "state", True, "the unseen-shape probe failed or exceeded tolerance"),
    Rule("model_missing", "status", False, "a model present in base is missing from head"),
    Rule(
        "variant_discrepancy",
        "error",
        False,
        "a variant (fp16, int8, optimized) or provider over its tolerances, or failed",
    ),
    # Warnings for a graph that is not what the user thinks (graph_warnings.py): they never
    # gate by default; fail_on can select them.
    Rule("single_call", "warning", False, "one call (or one set of shapes): every dim static"),
    Rule("size_one_dim", "warning", False, "a dim that should be dynamic was 1 in every call"),
    Rule("stand_in_input", "warning", False, "a replayed call used a stand-in for an input"),
    Rule("dim_static_in_onnx", "warning", False, "an observed dynamic dim is static in ONNX"),
    Rule("probe_seen_size", "warning", False, "the probe failed on a dim seen with one size"),
    Rule(
        MASKED_POSITIONS_ONLY,
        "warning",
        False,
        "an error over abs_max/rel_max only at positions an attention / padding mask drops",
    ),
)
RULES_BY_NAME: dict[str, Rule] = {rule.name: rule for rule in RULE_TABLE}
RULES: tuple[str, ...] = tuple(RULES_BY_NAME)
DEFAULT_FAIL_ON: frozenset[str] = frozenset(r.name for r in RULE_TABLE if r.gates_by_default)

MIB = 1 << 20
GROWTH_FLOOR = 1e-7  # base values at or below this are noise: growth rules defer to abs_max
STILL_FAILING = "still failing"

# Failed model status -> rule: each status its rule of the same name.
_FAILURE_RULE = {
    STATUS_SCRIPT_FAILED: "script_failed",
    STATUS_OBSERVE_FAILED: "observe_failed",
    STATUS_EXPORT_FAILED: "export_failed",
    STATUS_ORT_FAILED: "ort_failed",
}
_RULE_ORDER = {rule: i for i, rule in enumerate(RULES)}
_SPLIT_RE = re.compile(r"[,\n;]")


@dataclass
class Thresholds:
    """Limits for the regression rules (see the module docstring)."""

    abs_max: float = 1e-3
    rel_max: float = 1e-1  # the reference observer's rtol (README "Why `rel_max` is 0.1")
    abs_growth: float = 10.0
    rel_growth: float = 10.0
    latency_ratio_max: float = 1.5
    node_growth_max: float = 1.10
    size_growth_max: float = 1.10
    min_latency_s: float = 1e-4
    memory_growth_max: float = 1.5  # the memory a phase added, head over base
    min_memory_mb: float = 16.0  # figures both under this (MiB) are never compared
    # per variant (core.variants.VARIANT_TOLERANCES); ``fp16.abs_max=...`` sets fp16_abs_max
    fp16_abs_max: float = VARIANT_TOLERANCES["fp16"][0]
    fp16_rel_max: float = VARIANT_TOLERANCES["fp16"][1]
    int8_abs_max: float = VARIANT_TOLERANCES["int8"][0]
    int8_rel_max: float = VARIANT_TOLERANCES["int8"][1]
    optimized_abs_max: float = VARIANT_TOLERANCES["optimized"][0]
    optimized_rel_max: float = VARIANT_TOLERANCES["optimized"][1]

    def variant_limits(self, variant: str) -> tuple[float, float]:
        """``(abs_max, rel_max)`` a variant is judged with (float32, or a name this version
        does not know, e.g. from another version's results: the graph's own)."""
        if variant == FLOAT32 or variant not in VARIANT_TOLERANCES:
            return self.abs_max, self.rel_max
        return getattr(self, f"{variant}_abs_max"), getattr(self, f"{variant}_rel_max")


@dataclass
class Regression:
    """One rule that tripped for one model."""

    model: str
    rule: str
    message: str
    base_value: float | str | None
    head_value: float | str | None
    fails_build: bool
    accepted: str = ""  # who or what accepted it (the policy file, a maintainer): never fails


# -- parsing ----------------------------------------------------------------------


def threshold_keys() -> tuple[str, ...]:
    """The keys :func:`parse_thresholds` accepts."""
    return tuple(f.name for f in fields(Thresholds))


def parse_thresholds(text: str | None, base: Thresholds | None = None) -> Thresholds:
    """Parse ``"abs_max=1e-3, latency_ratio_max=2"`` (commas or newlines) over ``base``."""
    result = base if base is not None else Thresholds()
    if not text or not text.strip():
        return dataclasses.replace(result)
    valid = threshold_keys()
    updates: dict[str, float] = {}
    for item in _split(text):
        key, sep, raw = item.partition("=")
        key = key.strip().replace(".", "_", 1)  # fp16.abs_max is fp16_abs_max
        if not sep:
            raise ValueError(f"threshold {item!r} is not key=value; valid keys: {', '.join(valid)}")
        if key not in valid:
            raise ValueError(f"unknown threshold {key!r}; valid keys: {', '.join(valid)}")
        updates[key] = _parse_positive(key, raw.strip())
    return dataclasses.replace(result, **updates)


def _split(text: str) -> list[str]:
    items = (part.strip() for part in _SPLIT_RE.split(text))
    return [item for item in items if item and not item.startswith("#")]


def _parse_positive(key: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"threshold {key!r}: {raw!r} is not a number") from None
    if math.isnan(value) or value < 0:
        raise ValueError(f"threshold {key!r}: {raw!r} must be a non-negative number")
    return value


def parse_fail_on(text: str | None) -> set[str]:
    """Parse the rules that fail the build: ``"all"``, ``"none"``, ``"default"`` or a list.

    Items are comma (or newline) separated and combine: ``"default,latency_ratio"``;
    ``-rule`` removes a rule: ``"all,-model_missing"``. Empty means ``"default"``.
    """
    if text is None or not text.strip():
        return set(DEFAULT_FAIL_ON)
    selected: set[str] = set()
    for item in _split(text.replace(" ", ",")):
        name = item.lower()
        remove = name.startswith("-")
        name = name.lstrip("-")
        rules = _expand_rule_set(name)
        selected = selected - rules if remove else selected | rules
    return selected


def _expand_rule_set(name: str) -> set[str]:
    if name == "all":
        return set(RULES)
    if name == "none":
        return set()
    if name == "default":
        return set(DEFAULT_FAIL_ON)
    if name in _RULE_ORDER:
        return {name}
    valid = ", ".join(("all", "none", "default", *RULES))
    raise ValueError(f"unknown fail-on rule {name!r}; valid: {valid}")


# -- comparison -------------------------------------------------------------------


def compare(
    head: RunResults,
    base: RunResults | None,
    thresholds: Thresholds,
    fail_on: Iterable[str],
    policy: Policy | None = None,
    bands: dict[str, Band] | None = None,
) -> list[Regression]:
    """All regressions of ``head`` (against ``base`` when given), in a stable order.
    With a ``policy``, each model gets its own thresholds and ``fail_on``, and the
    regressions it accepts are reported without failing the build. With history ``bands``
    (:mod:`observer_ci.report.history`), a model's latency is tested against its band."""
    fail_on = set(fail_on)
    base_models = base.by_name() if base is not None else {}
    found: list[Regression] = []
    for model in head.models:
        old = base_models.get(model.name)
        th, rules = thresholds, fail_on
        if policy is not None:
            th = policy.thresholds_for(model.name, thresholds)
            rules = policy.fail_on_for(model.name, fail_on)
        band = (bands or {}).get(model.name)
        outputs = policy.outputs_for(model.name) if policy is not None else ()
        regressions = _compare_model(model, old, th, rules, base is not None, band, outputs)
        found.extend(policy.accept(regressions) if policy is not None else regressions)
    if base is not None:
        head_names = {m.name for m in head.models}
        for old in base.models:
            if old.name not in head_names:
                found.append(_missing(old, fail_on))
    return sorted(found, key=_sort_key)


ACCEPTED = "accepted in the policy file"


def _sort_key(reg: Regression) -> tuple[str, int, str]:
    return (reg.model, _RULE_ORDER.get(reg.rule, len(RULES)), reg.message)


def _compare_model(
    head: ModelResult,
    base: ModelResult | None,
    th: Thresholds,
    fail_on: set[str],
    has_base_run: bool = False,
    band: Band | None = None,
    outputs: tuple[OutputTolerance, ...] = (),
) -> list[Regression]:
    # Failure, discrepancy, error growth and the probe can all be symptoms of one
    # broken graph: they are folded into one regression (its root cause).
    symptoms: list[Regression] = []
    failure = _failure(head, base, fail_on, has_base_run)
    if failure is not None:
        symptoms.append(failure)
    if outputs and any(o.output_errors for o in head.observations):
        plain = _output_discrepancy(head, base, th, fail_on, outputs)
    else:
        plain = _discrepancy(head, base, th, fail_on)
    explained = _explained_discrepancy(head, base, th, fail_on) if plain else []
    symptoms.extend(explained or plain)
    if base is not None and not explained:  # growth of an explained error says nothing more
        symptoms.extend(_growth(head, base, th, fail_on))
    probe = _probe(head, base, fail_on)
    if probe is not None:
        symptoms.append(probe)
    found = [_root_cause(symptoms)] if symptoms else []
    if base is not None:
        found.extend(_dynamic_dims_lost(head, base, fail_on))
        if band is not None and head.paired_latency is None:
            found.extend(_band_latency(head, band, th, fail_on))
        else:
            found.extend(_latency(head, base, th, fail_on))
        found.extend(_node_count(head, base, th, fail_on))
        found.extend(_op_set(head, base, fail_on))
        found.extend(_size(head, base, th, fail_on))
        found.extend(_memory(head, base, th, fail_on))
    found.extend(_graph_warnings(head, base, fail_on))
    found.extend(_variant_discrepancies(head, base, th, fail_on))
    return found


def _root_cause(symptoms: list[Regression]) -> Regression:
    """One regression for symptoms of one cause: the first that fails the build (else the
    first), in rule order, its message naming the others."""
    primary = next((r for r in symptoms if r.fails_build), symptoms[0])
    others = [r for r in symptoms if r is not primary]
    if not others:
        return primary
    also = "; ".join(r.message for r in others)
    message = f"{primary.message} (also: {also})"
    return dataclasses.replace(primary, message=message)


def _graph_warnings(
    head: ModelResult, base: ModelResult | None, fail_on: set[str]
) -> list[Regression]:
    """The warnings the runner stored on the model; one present in base never fails."""
    old = {(w.rule, w.message) for w in base.warnings} if base is not None else set()
    return [
        _reg(head, w.rule, w.message, None, None, fail_on, preexisting=(w.rule, w.message) in old)
        for w in head.warnings
    ]


def _reg(
    model: ModelResult,
    rule: str,
    message: str,
    base_value: float | str | None,
    head_value: float | str | None,
    fail_on: set[str],
    *,
    preexisting: bool = False,
) -> Regression:
    fails = rule in fail_on and not preexisting
    return Regression(model.name, rule, message, base_value, head_value, fails)


def _status_rank(status: str | None) -> int:
    return STATUSES.index(status) if status in STATUSES else -1


def _failure(
    head: ModelResult, base: ModelResult | None, fail_on: set[str], has_base_run: bool
) -> Regression | None:
    rule = _FAILURE_RULE.get(head.status)
    if rule is None:
        return None
    detail = head.cause.summary if head.cause else error_headline(_error_of(head))
    base_status = base.status if base is not None else None
    if base is not None and _status_rank(base_status) >= _status_rank(head.status):
        if base_status == head.status:
            message = f"{STILL_FAILING} ({head.status})"
        else:
            message = f"{STILL_FAILING}: {head.status}, was {base_status} in base"
        message += f": {detail}" if detail else ""
        return _reg(head, rule, message, base_status, head.status, fail_on, preexisting=True)
    if base is None:
        prefix = f"{head.status} (new model)" if has_base_run else ""
    else:
        prefix = f"{head.status}, was {base_status} in base"
    message = ": ".join(p for p in (prefix, detail) if p) or head.status
    return _reg(head, rule, message, base_status, head.status, fail_on)


def _error_of(model: ModelResult) -> str | None:
    if model.error:
        return model.error
    if model.export is not None and model.export.error:
        return model.export.error
    for obs in model.observations:
        if obs.error:
            return obs.error
    return None


def worst_error(model: ModelResult, metric: str) -> float | None:
    """Largest ``"abs"`` or ``"rel"`` error over observations; NaN wins (unlike ``max``)."""
    return max_or_none(getattr(o, metric) for o in model.observations)


def _exceeds(value: float | None, limit: float) -> bool:
    return value is not None and (math.isnan(value) or value > limit)


def _discrepancy(
    head: ModelResult, base: ModelResult | None, th: Thresholds, fail_on: set[str]
) -> list[Regression]:
    found = []
    for metric, configured in (("abs", th.abs_max), ("rel", th.rel_max)):
        limit = limit_for(head.tolerance, metric, configured)  # a float16 model's are larger
        value = worst_error(head, metric)
        if not _exceeds(value, limit):
            continue
        old = None if base is None else worst_error(base, metric)
        message = f"max {metric} error {value:.3g} > {metric}_max {limit:.3g}"
        preexisting = _exceeds(old, limit)
        if preexisting:
            message = f"{STILL_FAILING}: {message} (base {old:.3g})"
        found.append(
            _reg(head, "discrepancy", message, old, value, fail_on, preexisting=preexisting)
        )
    located = head.diagnosis.first_divergence if head.diagnosis is not None else None
    if found and located is not None:  # where the values first part (the diagnosis)
        module = located.module or "the model"
        shown = module if any(c in module for c in SPAN_UNSAFE) else f"`{module}`"
        found[0].message += f"; the values first part in {shown}"
    return found


def _explained_discrepancy(
    head: ModelResult, base: ModelResult | None, th: Thresholds, fail_on: set[str]
) -> list[Regression]:
    """A discrepancy its diagnosis explains, under its own rule: torch not reproducing its
    own outputs, or an error only at masked positions (the kept ones within the limits)."""
    diagnosis = head.diagnosis
    over = _discrepancy(head, base, th, set())
    if diagnosis is None or not over:
        return []
    abs_limit = limit_for(head.tolerance, "abs", th.abs_max)
    rel_limit = limit_for(head.tolerance, "rel", th.rel_max)
    figures = "; ".join(r.message.removeprefix(f"{STILL_FAILING}: ") for r in over)
    preexisting = base is not None and (
        _exceeds(worst_error(base, "abs"), abs_limit)
        or _exceeds(worst_error(base, "rel"), rel_limit)
    )
    if diagnosis.torch_reproducible is False:
        rule = TORCH_NOT_REPRODUCIBLE
        why = f": {diagnosis.torch_reason}" if diagnosis.torch_reason else ""
        message = f"{figures}, but torch does not reproduce its own recorded outputs{why}"
    elif (
        diagnosis.mask_input
        and not _exceeds(diagnosis.valid_abs, abs_limit)
        and not _exceeds(diagnosis.valid_rel, rel_limit)
    ):
        rule = MASKED_POSITIONS_ONLY
        message = (
            f"{figures}, only at positions the mask `{diagnosis.mask_input}` drops (max abs "
            f"{diagnosis.valid_abs:.3g} at the positions it keeps)"
        )
    else:
        return []
    if preexisting:
        message = f"{STILL_FAILING}: {message}"
    value = worst_error(head, "abs")
    old = None if base is None else worst_error(base, "abs")
    return [_reg(head, rule, message, old, value, fail_on, preexisting=preexisting)]


def _output_discrepancy(
    head: ModelResult,
    base: ModelResult | None,
    th: Thresholds,
    fail_on: set[str],
    outputs: tuple[OutputTolerance, ...],
) -> list[Regression]:
    """``discrepancy`` of a model whose outputs have their own tolerances (the policy
    file's): each output judged by its worst error over the calls, the worst over-limit
    output of each metric reported."""
    found = []
    for metric in ("abs", "rel"):
        over = _outputs_over(head, th, outputs, metric)
        if not over:
            continue
        name, value, limit = max(over, key=lambda o: (math.isnan(o[1]), o[1] / (o[2] or 1e-30)))
        others = f" (and {plural(len(over) - 1, 'other output')})" if len(over) > 1 else ""
        message = f"output {name}: max {metric} error {value:.3g} > {metric}_max {limit:.3g}"
        message += others
        old = None if base is None else worst_error(base, metric)
        preexisting = base is not None and bool(_outputs_over(base, th, outputs, metric))
        if preexisting:
            message = f"{STILL_FAILING}: {message}"
        found.append(
            _reg(head, "discrepancy", message, old, value, fail_on, preexisting=preexisting)
        )
    return found


def _outputs_over(
    model: ModelResult, th: Thresholds, outputs: tuple[OutputTolerance, ...], metric: str
) -> list[tuple[str, float, float]]:
    """(output, worst error over the calls, its limit) of the outputs over their limit."""
    abs_max = limit_for(model.tolerance, "abs", th.abs_max)
    rel_max = limit_for(model.tolerance, "rel", th.rel_max)
    worst: dict[str, tuple[float, float]] = {}
    for o in model.observations:
        for name, m, value, limit in outputs_over(o.output_errors, outputs, abs_max, rel_max):
            if m == metric and (name not in worst or value != value or value > worst[name][0]):
                worst[name] = (value, limit)
    return [(name, value, limit) for name, (value, limit) in sorted(worst.items())]


def _growth(
    head: ModelResult, base: ModelResult, th: Thresholds, fail_on: set[str]
) -> list[Regression]:
    found = []
    for rule, metric, factor in (
        ("abs_growth", "abs", th.abs_growth),
        ("rel_growth", "rel", th.rel_growth),
    ):
        new, old = worst_error(head, metric), worst_error(base, metric)
        if new is None or old is None or math.isnan(old) or old <= GROWTH_FLOOR:
            continue
        if math.isnan(new) or new / old > factor:
            ratio = "nan" if math.isnan(new) else f"{new / old:.3g}"
            message = f"max {metric} error grew ×{ratio} (> ×{factor:.3g}): {old:.3g} → {new:.3g}"
            found.append(_reg(head, rule, message, old, new, fail_on))
    return found


def dynamic_dims(model: ModelResult) -> dict[str, dict[str, dict[int, str]]]:
    """Dynamic dims per source: ``{"observed"|"export": {input: {dim: label}}}``."""
    observed = {info.name: {int(d): "dynamic" for d in info.dynamic_dims} for info in model.inputs}
    exported: dict[str, dict[int, str]] = {}
    if model.export is not None and model.export.ok:
        for name, dims in model.export.input_dims.items():
            exported[name] = {i: d for i, d in enumerate(dims) if isinstance(d, str)}
    return {"observed": observed, "export": exported}


def _static_size(model: ModelResult, source: str, name: str, dim: int) -> int | str | None:
    """The head size of a dim that is not dynamic there, or None if head lacks that dim."""
    if source == "export":
        dims = model.export.input_dims.get(name) if model.export and model.export.ok else None
        return dims[dim] if dims is not None and dim < len(dims) else None
    for info in model.inputs:
        if info.name == name:
            sizes = {s[dim] for s in info.shapes if s is not None and dim < len(s)}
            if not sizes:
                return None
            return sizes.pop() if len(sizes) == 1 else "static"
    return None


def _dynamic_dims_lost(head: ModelResult, base: ModelResult, fail_on: set[str]) -> list[Regression]:
    old_dims, new_dims = dynamic_dims(base), dynamic_dims(head)
    lost: dict[tuple[str, int], list] = {}  # (input, dim) -> [base label, head size, sources]
    for source in ("observed", "export"):
        for name, dims in old_dims[source].items():
            for dim, label in dims.items():
                if dim in new_dims[source].get(name, {}):
                    continue
                size = _static_size(head, source, name, dim)
                if size is None:
                    continue
                entry = lost.setdefault((name, dim), [label, size, []])
                if label != "dynamic":  # prefer the exporter's symbolic name
                    entry[0] = label
                entry[2].append(source)
    found = []
    for (name, dim), (label, size, sources) in sorted(lost.items()):
        message = (
            f"input {name!r} dim {dim} was dynamic in base ({label}) "
            f"but is static in head ({size}; {', '.join(sources)})"
        )
        found.append(_reg(head, "dynamic_dim_lost", message, label, size, fail_on))
    return found


def _latency(
    head: ModelResult, base: ModelResult, th: Thresholds, fail_on: set[str]
) -> list[Regression]:
    """Head/base ORT latency: the paired (interleaved) timing when there is one, else the
    medians of the two separate runs; flagged over ``latency_ratio_max`` and beyond noise."""
    paired = head.paired_latency
    if paired is not None and paired.ratio is not None:  # timed interleaved: like with like
        return _paired_latency(head, paired, th, fail_on)
    new, old = head.median_ort_latency_s, base.median_ort_latency_s
    if new is None or old is None or old <= 0:
        return []
    new_runs, old_runs = head.latency_range("ort"), base.latency_range("ort")
    noise = None
    if new_runs is not None and old_runs is not None:
        # within the noise: head's fast runs are no slower than base's slow runs
        noise = (
            new_runs[0] <= old_runs[1],
            f"head's 10th percentile {format_seconds(new_runs[0])} > "
            f"base's 90th {format_seconds(old_runs[1])}",
        )
    return _slower(head, th, fail_on, new / old, old, new, "separate runs", noise)


def _band_latency(
    head: ModelResult, band: Band, th: Thresholds, fail_on: set[str]
) -> list[Regression]:
    """Head's ORT median against the history's band (``history.over_band``)."""
    from observer_ci.report.history import over_band

    new = head.median_ort_latency_s
    if new is None or band.median <= 0 or max(new, band.median) < th.min_latency_s:
        return []
    if not over_band(new, band, th.latency_ratio_max):
        return []
    message = (
        f"ORT median latency ×{new / band.median:.3g} (> ×{th.latency_ratio_max:.3g}) the median "
        f"of the last {band.runs} main runs ({format_seconds(band.median)} → "
        f"{format_seconds(new)}), above their 10th-90th percentile band "
        f"({format_seconds(band.low)}–{format_seconds(band.high)})"
    )
    return [_reg(head, "latency_ratio", message, band.median, new, fail_on)]


def _paired_latency(
    head: ModelResult, paired: PairedLatency, th: Thresholds, fail_on: set[str]
) -> list[Regression]:
    """The paired ratio is the median over base/head pairs timed alternately; it is beyond
    the noise when head was slower in at least 90% of the pairs (10th percentile > 1)."""
    assert paired.ratio is not None
    noise = None
    if paired.ratio_low is not None:
        # within the noise: base was as fast as head in over 10% of the pairs
        noise = (
            paired.ratio_low <= 1.0,
            f"head slower in 90% of the pairs: 10th percentile ×{paired.ratio_low:.3g}",
        )
    how = f"paired: timed interleaved, {paired.rounds} rounds × {plural(paired.calls, 'call')}"
    return _slower(head, th, fail_on, paired.ratio, paired.base_s, paired.head_s, how, noise)


def _slower(
    head: ModelResult,
    th: Thresholds,
    fail_on: set[str],
    ratio: float,
    old: float | None,
    new: float | None,
    how: str,
    noise: tuple[bool, str] | None,
) -> list[Regression]:
    """The ``latency_ratio`` rule once a timing gave its ratio: quiet when both medians are
    under ``min_latency_s``, the ratio is within ``latency_ratio_max`` or ``noise`` says
    "within the noise" (``(True, _)``); ``noise`` is None when the timing cannot tell."""
    if new is not None and old is not None and max(new, old) < th.min_latency_s:
        return []
    if ratio <= th.latency_ratio_max or (noise is not None and noise[0]):
        return []
    message = (
        f"ORT median latency ×{ratio:.3g} (> ×{th.latency_ratio_max:.3g}, {how}): "
        f"{format_seconds(old)} → {format_seconds(new)}"
    )
    if noise is not None:
        message += f", beyond the noise ({noise[1]})"
    return [_reg(head, "latency_ratio", message, old, new, fail_on)]


def _node_count(
    head: ModelResult, base: ModelResult, th: Thresholds, fail_on: set[str]
) -> list[Regression]:
    new = head.export.node_count if head.export is not None else None
    old = base.export.node_count if base.export is not None else None
    if new is None or old is None or old <= 0:
        return []
    ratio = new / old
    if ratio <= th.node_growth_max:
        return []
    message = f"ONNX node count ×{ratio:.3g} (> ×{th.node_growth_max:.3g}): {old} → {new}"
    return [_reg(head, "node_count_growth", message, old, new, fail_on)]


def _op_set(head: ModelResult, base: ModelResult, fail_on: set[str]) -> list[Regression]:
    changed = op_set_changed(base, head)
    if changed is None:
        return []
    new, gone = changed
    parts = ([f"new {', '.join(new[:6])}"] if new else []) + (
        [f"gone {', '.join(gone[:6])}"] if gone else []
    )
    counts = op_diff_text(base.export.op_counts, head.export.op_counts)  # type: ignore[union-attr]
    message = f"ONNX op types changed ({'; '.join(parts)}): {counts}"
    return [_reg(head, "op_set_changed", message, len(gone), len(new), fail_on)]


def _size(
    head: ModelResult, base: ModelResult, th: Thresholds, fail_on: set[str]
) -> list[Regression]:
    new = head.export.file_size if head.export is not None else None
    old = base.export.file_size if base.export is not None else None
    if not new or not old or new / old <= th.size_growth_max:
        return []
    message = (
        f"ONNX file size ×{new / old:.3g} (> ×{th.size_growth_max:.3g}): "
        f"{format_bytes(old)} → {format_bytes(new)}"
    )
    return [_reg(head, "size_growth", message, old, new, fail_on)]


def _memory(
    head: ModelResult, base: ModelResult, th: Thresholds, fail_on: set[str]
) -> list[Regression]:
    """One ``memory_growth`` per model: the phases whose added memory grew over
    ``memory_growth_max`` x base, ignoring figures both under ``min_memory_mb``."""
    floor = th.min_memory_mb * MIB
    grown = [
        (graph, phase, old, new)
        for graph, phase, old, new in memory_pairs(base, head)
        if max(old, new) >= floor and new > max(old, 1) * th.memory_growth_max
    ]
    if not grown:
        return []
    _, _, old, new = max(grown, key=lambda g: g[3] - g[2])
    message = f"peak memory grew (> ×{th.memory_growth_max:.3g}): " + memory_diff_text(
        grown, len(head.graphs)
    )
    return [_reg(head, "memory_growth", message, old, new, fail_on)]


def _probe(head: ModelResult, base: ModelResult | None, fail_on: set[str]) -> Regression | None:
    probe = head.probe
    if probe is None or not probe.ran or probe.success:
        return None
    state = probe.state
    detail = probe.cause.summary if probe.cause else error_headline(probe.error)
    rule = "probe_failed"
    if probe.cause is not None and probe.cause.kind == MASKED_POSITIONS_ONLY:
        rule = MASKED_POSITIONS_ONLY  # padding at the probe's sizes: a warning
    message = f"unseen-shape probe {state}" + (f": {detail}" if detail else "")
    old = base.probe if base is not None else None
    preexisting = old is not None and old.ran and not old.success
    base_value = None if old is None else old.state
    if preexisting:
        message = f"{STILL_FAILING}: {message}"
    return _reg(head, rule, message, base_value, state, fail_on, preexisting=preexisting)


def variant_problem(variant: VariantResult, th: Thresholds) -> str | None:
    """What is wrong with one variant row under ``th`` (None: fine, skipped or the
    float32 CPU reference, which the ``discrepancy`` rule judges)."""
    if variant.state == STATE_SKIPPED or (variant.variant, variant.provider) == (FLOAT32, CPU):
        return None
    if variant.state == STATE_FAILED:
        return f"failed: {error_headline(variant.reason) or 'no detail'}"
    atol, rtol = th.variant_limits(variant.variant)
    key = "" if variant.variant == FLOAT32 else f"{variant.variant}."
    over = [
        f"{what} {metric} {value:.3g} > {key}{metric}_max {limit:.3g}"
        for what, metric, value, limit in (
            ("max", "abs", variant.abs, atol),
            ("max", "rel", variant.rel, rtol),
            ("probe", "abs", variant.probe_abs, atol),
            ("probe", "rel", variant.probe_rel, rtol),
        )
        if _exceeds(value, limit)
    ]
    if not over:
        return None
    within = f" ({variant.calls - variant.calls_within}/{variant.calls} calls over)"
    return "; ".join(over) + (within if variant.calls else "")


def _variant_discrepancies(
    head: ModelResult, base: ModelResult | None, th: Thresholds, fail_on: set[str]
) -> list[Regression]:
    """One ``variant_discrepancy`` per variant and provider of a graph beyond its
    tolerances; one that was already beyond them in base is still failing."""
    old = {
        (g.name, v.variant, v.provider): v
        for g in (base.graphs if base is not None else [])
        for v in g.variants
    }
    found = []
    for graph in head.graphs:
        for variant in graph.variants:
            problem = variant_problem(variant, th)
            if problem is None:
                continue
            where = f"graph {graph.name}: " if len(head.graphs) > 1 else ""
            message = f"{where}{variant.variant} on {variant.provider}: {problem}"
            before = old.get((graph.name, variant.variant, variant.provider))
            preexisting = before is not None and variant_problem(before, th) is not None
            if preexisting:
                message = f"{STILL_FAILING}: {message}"
            base_abs = before.abs if before is not None else None
            found.append(
                _reg(
                    head,
                    "variant_discrepancy",
                    message,
                    base_abs,
                    variant.abs,
                    fail_on,
                    preexisting=preexisting,
                )
            )
    return found


def _missing(base: ModelResult, fail_on: set[str]) -> Regression:
    message = "model present in base is missing from head"
    return _reg(base, "model_missing", message, base.status, None, fail_on)


def compare_files(
    base_path: str | os.PathLike[str] | None,
    head_path: str | os.PathLike[str],
    thresholds: Thresholds | None = None,
    fail_on: Iterable[str] | None = None,
) -> list[Regression]:
    """Read two ``results.json`` files and :func:`compare` them (``base_path`` may be None)."""
    head = RunResults.read(head_path)
    base = RunResults.read(base_path) if base_path is not None else None
    rules = DEFAULT_FAIL_ON if fail_on is None else fail_on
    return compare(head, base, thresholds or Thresholds(), rules)
