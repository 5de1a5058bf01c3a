"""What users deploy, checked from the same observed calls: fp16, int8, optimised graphs
and other onnxruntime providers (``variants`` and ``providers``).

Each variant is built from the exported graph file (so from the export cache on a hit:
the export is not redone), then every observed call of the graph and the probe's unseen
sizes are replayed on it, on each provider, against the same torch outputs as the float32
graph. Every build and replay runs in a fork (:mod:`observer_ci.pipeline.isolated`): an
onnxruntime crash on a converted graph becomes a failed row.

- ``fp16``: ``onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True)``,
  the converter optimum and Olive use, so the graph checked is the one they ship: its op
  block list keeps the ops onnxruntime has no float16 kernel for in float32, and
  ``keep_io_types`` casts at the edges so the float32 feeds replay unchanged.
- ``int8``: ``onnxruntime.quantization.quantize_dynamic`` (int8 weights, uint8 activations
  quantised per call from their range). The dynamo exporter's ``value_info`` carries shapes
  that shape inference rejects once the quantiser rewrites the graph ("Inferred shape and
  existing shape differ"), so it is dropped first; quantize_dynamic infers them again.
- ``optimized``: the model onnxruntime saves at ``ORT_ENABLE_ALL`` (optimum#978), replayed with
  optimisations off so the saved graph is what runs.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from observer_ci.core.errors import error_tail
from observer_ci.core.results import (
    GraphResult,
    ObservationResult,
    ProbeResult,
    VariantResult,
    max_or_none,
)
from observer_ci.core.variants import (
    CPU,
    FLOAT32,
    FP16,
    INT8,
    OPTIMIZED,
    PROVIDERS,
    STATE_EXCEEDED,
    STATE_FAILED,
    STATE_OK,
    STATE_SKIPPED,
    skipped_reason,
)
from observer_ci.pipeline.isolated import Crashed, run_isolated_steps

# The torch device that runs like for like with a provider (torch's latency on it).
TORCH_DEVICES = {"cuda": "cuda", "tensorrt": "cuda"}
_EXTERNAL_DATA_BYTES = 1_800_000_000  # protobuf's 2 GB limit, with room


@dataclass
class Case:
    """One call to replay: the onnxruntime feeds and the torch outputs to compare with."""

    feeds: dict[str, Any]
    expected: list[Any]
    reference_s: float | None = None  # the float32 CPU graph's median latency on it


@dataclass
class Plan:
    """What a graph's variants are checked with (built once per graph, in the parent)."""

    calls: list[Case]
    probe: Case | None = None
    probe_reason: str | None = None  # why the probe is not replayed on the variants
    torch_call: Callable[[str], float | None] | None = None  # device -> torch median latency
    notes: list[str] = field(default_factory=list)


def variant_path(onnx_path: Path, variant: str) -> Path:
    """Where a graph's variant is written: next to it."""
    return onnx_path.with_name(f"{onnx_path.stem}.{variant}.onnx")


def installed_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def file_size(path: Path) -> int:
    """Bytes of an ONNX file and the external data files next to it that it names."""
    from observer_ci.pipeline.export_cache import _external_data_names

    names = [path.name, *_external_data_names(path)]
    return sum((path.parent / n).stat().st_size for n in names)


# -- building -------------------------------------------------------------------------------


def build_variant(variant: str, source: Path, target: Path) -> float:
    """Writes ``variant`` of the graph at ``source`` to ``target``; returns the seconds."""
    begin = time.perf_counter()
    if variant == FP16:
        _build_fp16(source, target)
    elif variant == INT8:
        _build_int8(source, target)
    elif variant == OPTIMIZED:
        _build_optimized(source, target)
    else:
        raise ValueError(f"unknown variant {variant!r}")
    return time.perf_counter() - begin


def _save(model: Any, target: Path) -> None:
    import onnx

    large = model.ByteSize() > _EXTERNAL_DATA_BYTES
    onnx.save(
        model,
        str(target),
        save_as_external_data=large,
        location=f"{target.name}.data" if large else None,
    )


def _build_fp16(source: Path, target: Path) -> None:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(source))
    _save(convert_float_to_float16(model, keep_io_types=True), target)


def _build_int8(source: Path, target: Path) -> None:
    import logging

    import onnx
    from onnxruntime.quantization import quantize_dynamic

    model = onnx.load(str(source))
    del model.graph.value_info[:]  # stale shapes of the dynamo exporter (see the docstring)
    plain = target.with_name(target.stem + ".prepared.onnx")
    large = model.ByteSize() > _EXTERNAL_DATA_BYTES
    _save(model, plain)
    quiet = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)  # "consider pre-processing": advice, each time
    try:
        quantize_dynamic(str(plain), str(target), use_external_data_format=large)
    finally:
        logging.getLogger().setLevel(quiet)
        for leftover in plain.parent.glob(plain.name + "*"):
            leftover.unlink()


def _build_optimized(source: Path, target: Path) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # the "hardware specific optimisations" warning is expected
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def variant_session(path: Path, provider: str, variant: str, threads: int | None = None) -> Any:
    """A session of ``path`` on ``provider`` (with the CPU as fallback for nodes it lacks);
    the optimised variant runs as saved (no further optimisation)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    if threads:
        options.intra_op_num_threads = threads
    if variant == OPTIMIZED:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    chain = [PROVIDERS[provider]]
    if provider == "tensorrt" and PROVIDERS["cuda"] in ort.get_available_providers():
        chain.append(PROVIDERS["cuda"])  # what TensorRT does not take runs on CUDA, not the CPU
    if provider != CPU:
        chain.append(PROVIDERS[CPU])
    return ort.InferenceSession(str(path), options, providers=chain)


# -- replaying ------------------------------------------------------------------------------


def replay_variant(
    path: Path,
    variant: str,
    provider: str,
    plan: Plan,
    *,
    limits: tuple[float, float],
    hist: tuple[float, ...],
    warmup: int,
    repeat: int,
    threads: int | None = None,
) -> VariantResult:
    """Every call of ``plan`` and its probe on one variant and provider (run in a fork)."""
    from observer_ci.pipeline.diff import max_diff
    from observer_ci.pipeline.replay import run_ort

    atol, rtol = limits
    row = VariantResult(variant=variant, provider=provider, state=STATE_OK)
    row.abs_max, row.rel_max = atol, rtol
    session = variant_session(path, provider, variant, threads)
    begin = time.perf_counter()
    latencies, ratios, worst_abs, worst_rel, errors = [], [], 0.0, 0.0, []
    for k, case in enumerate(plan.calls):
        got, runs = run_ort(session, case.feeds, warmup, repeat)
        median = statistics.median(runs)
        latencies.append(median)
        if case.reference_s:
            ratios.append(median / case.reference_s)
        diff = max_diff(case.expected, got, hist=hist)
        worst_abs, worst_rel = max(worst_abs, diff.abs), max(worst_rel, diff.rel)
        row.calls += 1
        row.calls_within += diff.within(atol, rtol)
        errors.extend(f"call {k}: {e}" for e in diff.errors[:1])
    row.replay_s = time.perf_counter() - begin
    row.abs, row.rel = worst_abs, worst_rel
    row.latency_s = statistics.median(latencies) if latencies else None
    row.latency_ratio = statistics.median(ratios) if ratios else None
    if plan.probe is not None:
        probe = _probe(session, plan.probe, atol, rtol)
        row.probe_state, row.probe_abs, row.probe_rel = probe.state, probe.abs, probe.rel
    else:
        row.probe_state = "not run"
    if errors:
        row.state, row.reason = STATE_FAILED, "; ".join(errors[:3])
    elif row.calls_within < row.calls or row.probe_state == "exceeded tolerance":
        row.state = STATE_EXCEEDED
    return row


def _probe(session: Any, case: Case, atol: float, rtol: float) -> ProbeResult:
    from observer_ci.pipeline.diff import max_diff

    try:
        got = session.run(None, case.feeds)
    except Exception as e:
        return ProbeResult(ran=True, ok=False, error=error_tail(e))
    diff = max_diff(case.expected, got)
    return ProbeResult(
        ran=True, ok=diff.comparable, success=diff.within(atol, rtol), abs=diff.abs, rel=diff.rel
    )


def reference_row(graph: GraphResult, rows: list[ObservationResult]) -> VariantResult:
    """The float32 CPU graph as the main replay measured it (not run again)."""
    latencies = [r.ort_latency_s for r in rows if r.ort_latency_s is not None]
    probe = graph.probe
    probe_ok = probe is None or not probe.ran or probe.success
    if not all(r.ok for r in rows):
        state = STATE_FAILED
    else:
        state = STATE_OK if all(r.success for r in rows) and probe_ok else STATE_EXCEEDED
    return VariantResult(
        variant=FLOAT32,
        provider=CPU,
        state=state,
        abs=max_or_none(r.abs for r in rows),
        rel=max_or_none(r.rel for r in rows),
        calls=len(rows),
        calls_within=sum(r.success for r in rows),
        latency_s=statistics.median(latencies) if latencies else None,
        latency_ratio=1.0 if latencies else None,
        file_size=graph.export.file_size if graph.export else None,
        probe_state=probe.state if probe else "not run",
        probe_abs=probe.abs if probe else None,
        probe_rel=probe.rel if probe else None,
        onnx_path=graph.export.onnx_path if graph.export else None,
    )


# -- one graph ------------------------------------------------------------------------------


def check_graph_variants(
    onnx_path: Path,
    graph: GraphResult,
    rows: list[ObservationResult],
    plan: Plan,
    *,
    variants: tuple[str, ...],
    providers: tuple[str, ...],
    limits: Callable[[str], tuple[float, float]],
    hist: tuple[float, ...],
    warmup: int,
    repeat: int,
    threads: int | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> list[VariantResult]:
    """Rows for every (variant, provider) of one graph: the float32 CPU reference first,
    then each provider (float32 and each variant), unavailable providers as skipped rows."""
    installed = installed_providers()
    imports = preload(variants)
    ready = [p for p in providers if PROVIDERS[p] in installed]

    def replay(variant: str, provider: str, path: Path) -> Any:
        return replay_variant(
            path,
            variant,
            provider,
            plan,
            limits=limits(variant),
            hist=hist,
            warmup=warmup,
            repeat=repeat,
            threads=threads,
        )

    keys, steps = _variant_steps(onnx_path, plan, variants, ready, replay)
    outcome = dict(zip(keys, run_isolated_steps(steps)))
    found = [reference_row(graph, rows)]
    found[0].abs_max, found[0].rel_max = limits(FLOAT32)
    for provider in providers:
        names = [v for v in (FLOAT32, *variants) if not (provider == CPU and v == FLOAT32)]
        if provider not in ready:
            found.append(
                VariantResult(
                    variant=", ".join(names),
                    provider=provider,
                    state=STATE_SKIPPED,
                    reason=skipped_reason(provider, installed),
                )
            )
            continue
        torch_s = outcome.get(("torch", provider))
        if isinstance(torch_s, Crashed):
            plan.notes.append(f"torch not timed on {provider}: {torch_s.reason}")
            torch_s = None
        for variant in names:
            row = _row(variant, provider, onnx_path, outcome, limits(variant))
            if row.convert_s is not None:
                row.convert_s += imports.get(variant, 0.0)
            row.torch_latency_s = torch_s
            found.append(row)
            progress(
                f"{variant} on {provider}: {row.state}"
                + (f", max abs {row.abs:.3g}" if row.abs is not None else "")
                + (f" ({row.reason})" if row.reason else "")
            )
    return found


def _variant_steps(
    onnx_path: Path,
    plan: Plan,
    variants: tuple[str, ...],
    ready: list[str],
    replay: Callable[[str, str, Path], Any],
) -> tuple[list[tuple[str, str]], list[Callable[[], Any]]]:
    """Every step in one fork (a crash costs only its own step), each with its key: torch
    on each device, then each variant built and replayed on each provider."""
    steps: list[Callable[[], Any]] = []
    keys: list[tuple[str, str]] = []
    for provider in ready:
        if TORCH_DEVICES.get(provider) and plan.torch_call is not None:
            steps.append(lambda d=TORCH_DEVICES[provider]: plan.torch_call(d))  # type: ignore[misc]
            keys.append(("torch", provider))
    for variant in (FLOAT32, *variants):
        where = [p for p in ready if not (p == CPU and variant == FLOAT32)]
        if not where:
            continue
        path = onnx_path if variant == FLOAT32 else variant_path(onnx_path, variant)
        if variant != FLOAT32:
            steps.append(lambda v=variant, t=path: build_variant(v, onnx_path, t))
            keys.append(("build", variant))
        for provider in where:
            steps.append(lambda v=variant, p=provider, t=path: replay(v, p, t))
            keys.append((variant, provider))
    return keys, steps


def _row(
    variant: str,
    provider: str,
    onnx_path: Path,
    outcome: dict[tuple[str, str], Any],
    limits: tuple[float, float],
) -> VariantResult:
    """One (variant, provider) row from the steps' outcomes."""
    built = outcome.get(("build", variant), 0.0)
    replayed = outcome.get((variant, provider))
    path = onnx_path if variant == FLOAT32 else variant_path(onnx_path, variant)
    if isinstance(built, Crashed):
        row = VariantResult(variant, provider, STATE_FAILED, reason=f"not built: {built.reason}")
    elif isinstance(replayed, Crashed):
        reason = replayed.reason
        if variant == FP16 and "crashed" in reason:
            reason += (
                f"; the {provider} provider may lack a float16 kernel for an op of this graph: "
                "keep that op in float32 (convert_float_to_float16's op_block_list)"
            )
        row = VariantResult(variant, provider, STATE_FAILED, reason=reason)
    else:
        row = replayed
    row.abs_max, row.rel_max = limits
    if not isinstance(built, Crashed):
        row.convert_s = None if variant == FLOAT32 else built
        row.onnx_path = str(path)
        row.file_size = file_size(path) if path.exists() else None
    return row


def preload(variants: tuple[str, ...]) -> dict[str, float]:
    """Imports the converters here, once: a fork's imports die with it. Returns the
    seconds each variant's converter took to import (0 once imported): part of its build."""
    import importlib
    import sys

    seconds = {}
    for variant, module in ((FP16, "onnxruntime.transformers.float16"), (INT8, _QUANTIZATION)):
        if variant in variants:
            begin = time.perf_counter()
            fresh = module not in sys.modules
            importlib.import_module(module)
            seconds[variant] = time.perf_counter() - begin if fresh else 0.0
    from observer_ci.pipeline import diff, replay  # noqa: F401

    return seconds


_QUANTIZATION = "onnxruntime.quantization"


# -- the plan (torch side, in the parent) ----------------------------------------------------


def make_plan(
    observer: Any,
    session: Any,
    rows: list[ObservationResult],
    *,
    model: Any,
    method_name: str,
    flags: Any,
    probe: ProbeResult | None,
    warmup: int,
    repeat: int,
) -> Plan:
    """The feeds, torch outputs and float32 latencies of a graph's calls, and the probe's
    sizes (the plan the main probe used, rebuilt; torch runs it once here)."""
    from observer_ci.pipeline.diff import flatten_outputs
    from observer_ci.pipeline.replay import match_feeds

    onnx_inputs = [i.name for i in session.get_inputs()]
    names = observer.leaf_names()
    calls = []
    for local, row in enumerate(rows):
        feeds = match_feeds(onnx_inputs, names, observer.infer_arguments(local, flat=True))
        expected = flatten_outputs(observer.observations[local].outputs)
        calls.append(Case(feeds, [_array(e) for e in expected], row.ort_latency_s))
    plan = Plan(calls=calls)
    plan.probe, plan.probe_reason = _probe_case(observer, session, model, method_name, flags, probe)

    def torch_call(device: str) -> float | None:
        return _time_torch_on(device, model, method_name, observer, warmup, repeat)

    plan.torch_call = torch_call
    return plan


def _array(value: Any) -> Any:
    from observer_ci.pipeline.diff import comparable_array

    return comparable_array(value)


def _probe_case(
    observer: Any,
    session: Any,
    model: Any,
    method_name: str,
    flags: Any,
    probe: ProbeResult | None,
) -> tuple[Case | None, str | None]:
    import torch

    from observer_ci.pipeline.diff import flatten_outputs
    from observer_ci.pipeline.probe import plan_sizes, synthesize
    from observer_ci.pipeline.replay import match_feeds

    if probe is None or not probe.ran:
        return None, "the float32 graph's probe did not run"
    dynamic = observer.dynamic_dims(flags)
    sizes = dict(plan_sizes(observer, dynamic)).get(probe.reason or "")
    if sizes is None:
        return None, "the probe's sizes could not be rebuilt"
    flat = synthesize(observer.infer_arguments(flat=True), sizes)
    args, kwargs = observer.call_arguments(flat)
    try:
        with torch.no_grad():
            expected = flatten_outputs(getattr(model, method_name)(*args, **kwargs))
        feeds = match_feeds([i.name for i in session.get_inputs()], observer.leaf_names(), flat)
    except Exception as e:
        return None, f"probe inputs not rebuilt: {error_tail(e, 200)}"
    return Case(feeds, [_array(e) for e in expected]), None


def _time_torch_on(
    device: str, model: Any, method_name: str, observer: Any, warmup: int, repeat: int
) -> float | None:
    """torch's median latency over the observed calls with the model and inputs on
    ``device`` (None when that device is not there)."""
    import torch
    from torch.utils import _pytree as pytree

    if device == "cuda" and not torch.cuda.is_available():
        return None
    moved = copy.deepcopy(model).to(device)
    method = getattr(moved, method_name)
    medians = []
    with torch.no_grad():
        for obs in observer.observations:
            args, kwargs = pytree.tree_map(
                lambda t: t.to(device) if isinstance(t, torch.Tensor) else t,
                (obs.args, obs.kwargs),
            )
            runs = []
            for k in range(warmup + max(1, repeat)):
                torch.cuda.synchronize()
                begin = time.perf_counter()
                method(*args, **kwargs)
                torch.cuda.synchronize()
                if k >= warmup:
                    runs.append(time.perf_counter() - begin)
            medians.append(statistics.median(runs))
    return statistics.median(medians) if medians else None


# -- the hook (FamilyServer.serve) -----------------------------------------------------------


def serve_variants(
    entry: Any,
    config: Any,
    observer: Any,
    flags: Any,
    session: Any,
    graph: GraphResult,
    rows: dict[int, ObservationResult],
    onnx_path: Path,
    progress: Callable[[str], None],
) -> list[str]:
    """Fills ``graph.variants`` when the run asks for variants or other providers; returns
    notes for the model."""
    graph_rows = [rows[i] for i in graph.observation_indices if i in rows]
    if not graph_rows or not all(r.ok for r in graph_rows):
        graph.variants = [reference_row(graph, graph_rows)]
        return ["variants not checked: the float32 graph did not run on every call"]
    plan = make_plan(
        observer,
        session,
        graph_rows,
        model=entry.model,
        method_name=entry.method_name,
        flags=flags,
        probe=graph.probe,
        warmup=config.warmup,
        repeat=config.repeat,
    )
    graph.variants = check_graph_variants(
        onnx_path,
        graph,
        graph_rows,
        plan,
        variants=config.variants,
        providers=config.providers,
        limits=config.variant_limits,
        hist=config.hist,
        warmup=config.warmup,
        repeat=config.repeat,
        threads=config.threads,
        progress=lambda text: progress(f"{entry.name} [{graph.name}] {text}"),
    )
    notes = list(plan.notes)
    if plan.probe_reason and graph.probe is not None and graph.probe.ran:
        notes.append(f"variants of {graph.name}: probe not replayed ({plan.probe_reason})")
    return notes


def wanted(config: Any) -> bool:
    """True when the run asks for a variant or a provider other than the CPU alone."""
    return bool(config.variants) or tuple(config.providers) != (CPU,)
