"""The results schema: what a run produced, serialised to ``results.json``.

Every other module speaks in these dataclasses: the runner fills them, the
report renders them, the baseline compares two of them. Bump
``SCHEMA_VERSION`` on any incompatible change.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

# Model statuses, from best to worst.
STATUS_OK = "ok"
STATUS_DISCREPANCY = "discrepancy"  # ORT ran but outputs differ beyond tolerance
STATUS_PROBE_FAILED = "probe_failed"  # observed calls pass, an unseen size breaks the graph
STATUS_ORT_FAILED = "ort_failed"  # export ok, onnxruntime failed on at least one observation
STATUS_EXPORT_FAILED = "export_failed"
STATUS_OBSERVE_FAILED = "observe_failed"  # inference of args / dynamic shapes failed
STATUS_SCRIPT_FAILED = "script_failed"  # the observation script raised
STATUSES = (
    STATUS_OK,
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
    def from_dict(cls, data: dict[str, Any]) -> RunResults:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"results schema_version {version!r} is not supported (expected {SCHEMA_VERSION})"
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
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
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
    return model


def _graph_from_dict(data: dict[str, Any]) -> GraphResult:
    graph = _build(GraphResult, data)
    graph.export = _build(ExportResult, data.get("export"))
    graph.probe = _build(ProbeResult, data.get("probe"))
    for part in (graph.export, graph.probe):
        if part is not None and isinstance(part.cause, dict):
            part.cause = _build(Cause, part.cause)
    return graph
