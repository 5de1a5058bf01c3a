"""The results schema: what a run produced, serialised to ``results.json``.

Every other module speaks in these dataclasses: the runner fills them, the
report renders them, the baseline compares two of them. Bump
``SCHEMA_VERSION`` on any incompatible change.
"""

from __future__ import annotations

import json
import math
import os
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from observer_ci.core.exceptions import ResultsSchemaError

SCHEMA_VERSION = 3
# Versions ``from_dict`` reads: 2 added ``GraphResult.variants`` (older files have none);
# 3 adds optional fields with defaults (older files load with those defaults):
#   ModelResult.diagnosis / GraphResult.diagnosis (why a graph disagrees, issue 19);
#   Diagnosis.torch_abs / valid_rel / masked_rel / cause (the self-check, the mask split);
#   FirstDivergence.op_abs / note (the error at the diverging node, what its line is);
#   ModelResult.skip_reason (status "skipped"), ObservationResult.output_errors,
#   GraphResult.footprint (peak memory, session creation time), RunResults.peak_rss_bytes
#   (issue 24);
READABLE_SCHEMA_VERSIONS = (1, 2, 3)

# Model statuses, from best to worst.
STATUS_OK = "ok"
STATUS_SKIPPED = "skipped"  # the policy file skips the model (ModelResult.skip_reason)
STATUS_DISCREPANCY = "discrepancy"  # ORT ran but outputs differ beyond tolerance
STATUS_PROBE_FAILED = "probe_failed"  # observed calls pass, an unseen size breaks the graph
STATUS_ORT_FAILED = "ort_failed"  # export ok, onnxruntime failed on at least one observation
STATUS_EXPORT_FAILED = "export_failed"
STATUS_OBSERVE_FAILED = "observe_failed"  # inference of args / dynamic shapes failed
STATUS_SCRIPT_FAILED = "script_failed"  # the observation script raised
STATUSES = (
    STATUS_OK,
    STATUS_SKIPPED,
    STATUS_DISCREPANCY,
    STATUS_PROBE_FAILED,
    STATUS_ORT_FAILED,
    STATUS_EXPORT_FAILED,
    STATUS_OBSERVE_FAILED,
    STATUS_SCRIPT_FAILED,
)


@dataclass
class Cause:
    """Why something failed, in the user's terms, and what to change (``causes.py``)."""

    kind: str  # data_dependent_branch, unsupported_op, unregistered_type, ..., unknown
    summary: str  # one sentence: what broke
    next_step: str | None = None  # what to change
    user_frame: str | None = None  # "file.py:12: code" where the trace passes through user code


@dataclass
class GraphWarning:
    """The graph works but is not what the user probably thinks (a warning rule)."""

    rule: str  # a rule name of ``rules.RULE_TABLE``; ``fail_on`` can select it
    message: str
    next_step: str | None = None


@dataclass
class InputInfo:
    """One flattened model input as observed across calls."""

    name: str
    dtype: str | None
    shapes: list[list[int] | None]  # one per observation, None where the input was absent
    dynamic_dims: list[int] = field(default_factory=list)
    dim_names: list[str] = field(default_factory=list)  # one per dynamic dim (dim_names.py)


@dataclass
class ExportResult:
    """Outcome of ``torch.onnx.export(dynamo=True)``."""

    ok: bool
    error: str | None = None  # the tail of the message, never the full traceback
    seconds: float | None = None
    opset: int | None = None
    node_count: int | None = None
    file_size: int | None = None  # bytes, model + external data
    onnx_path: str | None = None
    input_names: list[str] = field(default_factory=list)
    input_dims: dict[str, list[int | str]] = field(default_factory=dict)  # symbolic dims as str
    output_names: list[str] = field(default_factory=list)
    sample_index: int | None = None  # the observed call used as export sample
    output_dims: dict[str, list[int | str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # e.g. axes that kept torch's symbols
    cause: Cause | None = None  # why the export failed
    failed_samples: list[str] = field(default_factory=list)  # "call 2: <error>" tried before
    cached: bool = False  # restored from the export cache (seconds = the lookup)
    cache_key: str | None = None  # the export cache key, when a cache was used
    op_counts: dict[str, int] = field(default_factory=dict)  # "Cast": 8, "com.microsoft.X": 1
    initializer_bytes: int | None = None  # the weights' bytes as stored in the graph


@dataclass
class ObservationResult:
    """Replay of one observed call in onnxruntime, compared with torch."""

    index: int
    ok: bool  # onnxruntime ran and the comparison could be made
    success: bool = False  # ok and within atol / rtol
    error: str | None = None
    abs: float | None = None
    rel: float | None = None
    hist: dict[str, int] = field(default_factory=dict)  # ">0.1" -> count of elements
    n_none: int = 0
    n_empty: int = 0
    torch_latency_s: float | None = None  # median over repeats
    ort_latency_s: float | None = None  # median over repeats
    torch_latencies_s: list[float] = field(default_factory=list)  # every timed run
    ort_latencies_s: list[float] = field(default_factory=list)  # every timed run
    inputs: str = ""
    outputs: str = ""
    cause: Cause | None = None  # why onnxruntime failed on this call
    family: str | None = None  # the graph that served this call (see ModelResult.graphs)
    stand_ins: list[str] = field(default_factory=list)  # absent inputs fed as 0-length tensors
    note: str | None = None  # how the call was served when not as observed
    # output name -> [abs, rel], when the policy file gives the model per-output tolerances
    output_errors: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class ProbeResult:
    """Run on dynamic sizes never observed: proof that the dynamic dims work."""

    ran: bool
    ok: bool = False
    success: bool = False
    error: str | None = None
    reason: str | None = None  # why it did not run (e.g. no dynamic dimension)
    shapes: dict[str, list[int]] = field(default_factory=dict)
    abs: float | None = None
    rel: float | None = None
    cause: Cause | None = None  # which dim and size broke the graph

    @property
    def state(self) -> str:
        """``not run``, ``success``, ``failed`` or ``exceeded tolerance``."""
        if not self.ran:
            return "not run"
        if self.success:
            return "success"
        return "exceeded tolerance" if self.ok else "failed"


@dataclass
class PairedLatency:
    """Base and head ONNX graphs timed alternately in one process on the head's inputs."""

    ratio: float | None = None  # median of head/base over the pairs
    base_s: float | None = None  # median over calls of the per-call median
    head_s: float | None = None
    ratio_low: float | None = None  # 10th percentile of the pair ratios
    ratio_high: float | None = None  # 90th percentile
    rounds: int = 0
    calls: int = 0
    reason: str | None = None  # why there is no ratio


@dataclass
class VariantResult:
    """One variant of a graph (fp16, int8, optimized, float32) on one onnxruntime provider,
    replayed on every observed call of the graph and the probe (``pipeline/variants.py``)."""

    variant: str  # core.variants: float32, fp16, int8, optimized
    provider: str  # core.variants.PROVIDERS key: cpu, cuda, ...
    state: str  # core.variants: ok, exceeded tolerance, failed, skipped
    reason: str | None = None  # why skipped or failed
    abs: float | None = None  # worst over the replayed calls
    rel: float | None = None
    abs_max: float | None = None  # the tolerances it was judged with
    rel_max: float | None = None
    calls: int = 0  # calls replayed
    calls_within: int = 0  # of which within the tolerances
    latency_s: float | None = None  # median over calls of each call's median
    latency_ratio: float | None = None  # median over calls of this / the float32 CPU graph
    torch_latency_s: float | None = None  # torch on the provider's device (cuda), when run
    file_size: int | None = None  # bytes, model + external data
    convert_s: float | None = None  # building the variant
    replay_s: float | None = None  # replaying every call (warm-up and timed runs)
    probe_state: str | None = None  # ProbeResult.state of the probe's sizes on this variant
    probe_abs: float | None = None
    probe_rel: float | None = None
    onnx_path: str | None = None

    @property
    def success(self) -> bool:
        return self.state == "ok"


@dataclass
class FirstDivergence:
    """The earliest module (in execution order) whose output parts from torch's while its
    inputs agree, located by comparing intermediate values (``pipeline/divergence.py``)."""

    module: str  # module path, "encoder.layers.1.self_attn"; "" for the root module
    module_class: str = ""  # "MultiheadAttention"
    onnx_ops: list[str] = field(default_factory=list)  # op types where the values first part
    onnx_nodes: list[str] = field(default_factory=list)  # the node names there
    abs: float | None = None  # the error at the module's output
    source: str | None = None  # "file.py:12: code" of the forward line that produced it
    known_case: str | None = None  # core.constants key: topk_ties, nonzero_order, rounding...
    next_step: str | None = None
    call_index: int | None = None  # the observed call compared (None for the probe)
    where: str = "replay"  # "replay" or "probe" (an unseen size)
    op_abs: float | None = None  # the error at the first ONNX node that parts from torch
    note: str | None = None  # what the line is: "runs only while exporting"...


@dataclass
class Diagnosis:
    """Why a graph disagrees with torch, found only for a model over its tolerance."""

    torch_reproducible: bool | None = None  # eager torch re-run reproduces its own outputs
    torch_reason: str | None = None  # why not: training mode, random ops, module state...
    mask_input: str | None = None  # the mask input the error was split by
    valid_abs: float | None = None  # worst error over positions the mask keeps
    masked_abs: float | None = None  # worst error over positions the mask drops
    first_divergence: FirstDivergence | None = None
    probe_divergence: FirstDivergence | None = None  # the same at the probe's unseen size
    seconds: float | None = None  # what the diagnosis cost
    notes: list[str] = field(default_factory=list)  # what could not be checked, and why
    torch_abs: float | None = None  # max abs between torch's recorded outputs and a re-run
    valid_rel: float | None = None  # worst rel error over positions the mask keeps
    masked_rel: float | None = None  # worst rel error over positions the mask drops
    cause: Cause | None = None  # the verdict: torch_not_reproducible, masked_positions_only...


@dataclass
class Footprint:
    """What one graph cost the child (``pipeline/memory.py``): the peak RSS of each phase over
    the RSS when it began (what the phase added; bytes), the process's peak during it, and
    the session's creation time. None: not measured (an export restored from the cache)."""

    export_bytes: int | None = None  # torch.onnx.export and saving the file
    session_bytes: int | None = None  # creating the onnxruntime session
    run_bytes: int | None = None  # the session's first run, on the call with the most input
    export_peak: int | None = None  # the process's RSS high-water mark during each phase
    session_peak: int | None = None
    run_peak: int | None = None
    session_seconds: float | None = None
    method: str | None = None  # "hwm" (kernel high-water mark, reset per phase) or "sampled"


@dataclass
class GraphResult:
    """One exported graph and the family of observed calls it serves."""

    name: str  # Hugging Face role name where it matches (decoder_with_past_model), else model
    observation_indices: list[int] = field(default_factory=list)
    reason: str = ""  # why these calls need a graph of their own
    export: ExportResult | None = None
    probe: ProbeResult | None = None
    abs: float | None = None  # max abs error over the calls replayed on this graph
    rel: float | None = None
    success: bool | None = None  # every call replayed on it within the tolerances
    variants: list[VariantResult] = field(default_factory=list)  # with ``variants``/``providers``
    diagnosis: Diagnosis | None = None  # set only when this graph's calls exceed the tolerance
    footprint: Footprint | None = None  # peak memory of its phases (not for a merged graph)


@dataclass
class ModelResult:
    """Everything measured for one observed model (or one failed script)."""

    name: str
    script: str
    status: str
    error: str | None = None
    method_name: str = "forward"
    n_observations: int = 0
    inputs: list[InputInfo] = field(default_factory=list)
    dynamic_shapes: str | None = None  # repr of what was passed to the exporter
    export: ExportResult | None = None
    observations: list[ObservationResult] = field(default_factory=list)
    probe: ProbeResult | None = None
    phase_seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # hints for the reader (training mode, ...)
    cause: Cause | None = None  # why the model failed and what to change (first in the report)
    warnings: list[GraphWarning] = field(default_factory=list)
    paired_latency: PairedLatency | None = None  # set with ``baseline: base`` (paired.py)
    graphs: list[GraphResult] = field(default_factory=list)  # one per call family; [0] = export
    # {"dtype", "abs_max", "rel_max"} when a float16/bfloat16 model is held to its dtype's
    tolerance: dict[str, Any] = field(default_factory=dict)
    diagnosis: Diagnosis | None = None  # set only when the model exceeds its tolerance
    skip_reason: str | None = None  # why the policy file skips it (status "skipped")

    @property
    def median_ort_latency_s(self) -> float | None:
        return _median_or_none(o.ort_latency_s for o in self.observations)

    @property
    def median_torch_latency_s(self) -> float | None:
        return _median_or_none(o.torch_latency_s for o in self.observations)

    def latency_range(self, runtime: str) -> tuple[float, float] | None:
        """``(p10, p90)`` of the ``"ort"`` or ``"torch"`` timed runs, the median over
        calls of each; None when no call recorded its runs (older results)."""
        runs = [getattr(o, f"{runtime}_latencies_s") for o in self.observations]
        ranges = [(quantile(r, 0.1), quantile(r, 0.9)) for r in runs if r]
        if not ranges:
            return None
        low = _median_or_none(lo for lo, _ in ranges)
        high = _median_or_none(hi for _, hi in ranges)
        assert low is not None and high is not None
        return low, high


@dataclass
class RunResults:
    """A whole run: environment fingerprint plus one entry per model."""

    models: list[ModelResult] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    label: str = ""  # e.g. "head", "base", or a matrix job name
    created_at: str = ""
    commit: str = ""  # the commit the scripts ran on, when known
    settings: dict[str, Any] = field(default_factory=dict)  # tolerances, timing used
    peak_rss_bytes: int | None = None  # the child's peak RSS over the run (memory.py)

    def by_name(self) -> dict[str, ModelResult]:
        return {m.name: m for m in self.models}

    def to_dict(self) -> dict[str, Any]:
        return _clean_floats(asdict(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False, allow_nan=False)

    def write(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json(), encoding="utf-8")
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, strict: bool = False) -> RunResults:
        """The one results reader. Lenient (our own files): unknown keys are ignored.
        ``strict`` (untrusted payloads): every field is checked against its annotation
        first, and every status is a known one; :class:`ResultsSchemaError` says where."""
        if strict:
            check_schema(data)
        version = data.get("schema_version")
        if version not in READABLE_SCHEMA_VERSIONS:
            raise ValueError(
                f"results schema_version {version!r} is not supported (expected one of "
                f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))})"
            )
        models = [_model_from_dict(m) for m in data.get("models", [])]
        return cls(
            models=models,
            environment=dict(data.get("environment", {})),
            schema_version=version,
            label=data.get("label", ""),
            created_at=data.get("created_at", ""),
            commit=str(data.get("commit", "") or ""),
            settings=dict(data.get("settings", {}) or {}),
            peak_rss_bytes=data.get("peak_rss_bytes"),
        )

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> RunResults:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from e
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object")
        try:
            return cls.from_dict(data)
        except (TypeError, AttributeError, KeyError) as e:  # e.g. "models": "abc"
            raise ValueError(f"{path}: malformed results ({type(e).__name__}: {e})") from e


def max_or_none(values) -> float | None:
    """Largest value; NaN wins (a NaN error must never hide behind a small one)."""
    vals = [v for v in values if v is not None]
    if any(math.isnan(v) for v in vals):
        return math.nan
    return max(vals) if vals else None


def quantile(values, q: float) -> float:
    """The ``q`` quantile (0..1) of non-empty ``values``, linearly interpolated (as numpy)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    position = q * (len(ordered) - 1)
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def _median_or_none(values) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def _clean_floats(obj: Any) -> Any:
    """JSON has no NaN/inf: encode them as strings so the file stays valid JSON."""
    if isinstance(obj, float):
        if math.isnan(obj):
            return "nan"
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, dict):
        return {k: _clean_floats(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean_floats(v) for v in obj]
    return obj


def _float_in(value: Any) -> Any:
    if isinstance(value, str) and value in _NON_FINITE:
        return float(value)
    return value


def _build(cls, data: dict[str, Any] | None):
    if data is None:
        return None
    names = {f.name for f in fields(cls)}
    return cls(**{k: _float_in(v) for k, v in data.items() if k in names})


def _model_from_dict(data: dict[str, Any]) -> ModelResult:
    model = _build(ModelResult, data)
    for key in ("name", "script", "status"):
        if not isinstance(getattr(model, key), str):
            raise ValueError(f"a model's {key!r} must be a string, got {getattr(model, key)!r:.80}")
    model.inputs = [_build(InputInfo, i) for i in data.get("inputs", [])]
    model.export = _build(ExportResult, data.get("export"))
    model.observations = [_build(ObservationResult, o) for o in data.get("observations", [])]
    model.probe = _build(ProbeResult, data.get("probe"))
    model.cause = _build(Cause, data.get("cause"))
    model.warnings = [_build(GraphWarning, w) for w in data.get("warnings", [])]
    for part in (model.export, model.probe, *model.observations):
        if part is not None and isinstance(part.cause, dict):
            part.cause = _build(Cause, part.cause)
    model.paired_latency = _build(PairedLatency, data.get("paired_latency"))
    model.graphs = [_graph_from_dict(g) for g in data.get("graphs", [])]
    model.diagnosis = _diagnosis_from_dict(data.get("diagnosis"))
    return model


def _diagnosis_from_dict(data: dict[str, Any] | None) -> Diagnosis | None:
    diagnosis = _build(Diagnosis, data)
    if diagnosis is not None and data is not None:
        diagnosis.first_divergence = _build(FirstDivergence, data.get("first_divergence"))
        diagnosis.probe_divergence = _build(FirstDivergence, data.get("probe_divergence"))
        diagnosis.cause = _build(Cause, data.get("cause"))
    return diagnosis


def _graph_from_dict(data: dict[str, Any]) -> GraphResult:
    graph = _build(GraphResult, data)
    graph.export = _build(ExportResult, data.get("export"))
    graph.probe = _build(ProbeResult, data.get("probe"))
    graph.variants = [_build(VariantResult, v) for v in data.get("variants") or []]
    graph.diagnosis = _diagnosis_from_dict(data.get("diagnosis"))
    graph.footprint = _build(Footprint, data.get("footprint"))
    for part in (graph.export, graph.probe):
        if part is not None and isinstance(part.cause, dict):
            part.cause = _build(Cause, part.cause)
    return graph


# -- the strict mode: a schema check driven by the dataclasses' annotations -------------

_NON_FINITE = ("nan", "inf", "-inf")  # how results.json spells them


def check_schema(data: Any) -> None:
    """Raises :class:`ResultsSchemaError` unless ``data`` has the results schema's types."""
    _check_dataclass(RunResults, data, "results")
    for i, model in enumerate(data.get("models", [])):
        if model["status"] not in STATUSES:
            raise ResultsSchemaError(f"results.models[{i}].status is not a known status")


def _check_dataclass(cls: type, data: Any, path: str) -> None:
    if not isinstance(data, dict):
        raise ResultsSchemaError(f"{path} must be an object")
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if f.name not in data:
            required = f.default is MISSING and f.default_factory is MISSING
            if required:
                raise ResultsSchemaError(f"{path}.{f.name} is missing")
            continue
        _check(data[f.name], hints[f.name], f"{path}.{f.name}")


def _check(value: Any, hint: Any, path: str) -> None:
    if not _matches(value, hint, path):
        raise ResultsSchemaError(f"{path} has the wrong type")


def _matches(value: Any, hint: Any, path: str) -> bool:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches_quietly(value, arg, path) for arg in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return type(value) is int
    if hint is float:
        return type(value) in (int, float) or value in _NON_FINITE
    if hint is str:
        return isinstance(value, str)
    if origin is list:
        if not isinstance(value, list):
            return False
        for i, item in enumerate(value):
            _check(item, args[0], f"{path}[{i}]")
        return True
    if origin is dict:
        if not isinstance(value, dict):
            return False
        for key, item in value.items():
            _check(item, args[1], f"{path}[{key!r:.40}]")
        return True
    if isinstance(hint, type) and is_dataclass(
        hint
    ):  # a nested part of the schema (ModelResult, ExportResult, ...)
        _check_dataclass(hint, value, path)
        return True
    raise AssertionError(f"no schema check for {hint!r}")  # a new field type above


def _matches_quietly(value: Any, hint: Any, path: str) -> bool:
    try:
        return _matches(value, hint, path)
    except ResultsSchemaError:
        return False
