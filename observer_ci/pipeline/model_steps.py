"""One observed model, in named steps: infer, plan families, serve each, verdict."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from observer_ci.core.constants import MASKED_POSITIONS_ONLY
from observer_ci.core.dim_names import name_dims
from observer_ci.core.errors import error_headline, error_tail
from observer_ci.core.logs import log_failure
from observer_ci.core.logs import progress as progress_line
from observer_ci.core.results import (
    STATUS_DISCREPANCY,
    STATUS_EXPORT_FAILED,
    STATUS_OBSERVE_FAILED,
    STATUS_OK,
    STATUS_ORT_FAILED,
    STATUS_PROBE_FAILED,
    ModelResult,
    ObservationResult,
    ProbeResult,
    max_or_none,
)
from observer_ci.core.tolerances import dtype_tolerance
from observer_ci.observing import registry
from observer_ci.observing.families import (
    ROLE_DECODER,
    ROLE_DECODER_WITH_PAST,
    ROLE_SINGLE,
    Family,
    name_families,
    plan_families,
    split_family,
)
from observer_ci.observing.pytrees import register_if_imported
from observer_ci.pipeline.causes import (
    add_sample_difference,
    explain_exception,
    never_called,
)
from observer_ci.pipeline.config import Progress, RunConfig
from observer_ci.pipeline.diagnosis import summarize as summarize_diagnosis
from observer_ci.pipeline.dropped_state import fail_dropped_state
from observer_ci.pipeline.family_server import FamilyServer, stand_in_failures
from observer_ci.pipeline.graph_warnings import graph_warnings
from observer_ci.pipeline.phases import Phases
from observer_ci.pipeline.precision import low_precision_dtype
from observer_ci.pipeline.self_check import training_modules


def _has_training_behaviour(model: object) -> bool:
    """True when a submodule in training mode behaves differently than in eval mode."""
    return bool(training_modules(model))


def model_notes(entry: registry.ObservedModel) -> list[str]:
    """Hints a reader needs to interpret the numbers."""
    notes = []
    if _has_training_behaviour(entry.model):
        notes.append(
            "the model was in training mode: dropout and batch norm differ between runs; "
            "call model.eval() in the observation script"
        )
    # The exported signature takes every argument some call passed a tensor for (the
    # calls that did not are fed empty tensors): only the rest is really not exported.
    exported = {name for obs in entry.observer.observations for name in obs.named}
    ignored: dict[str, str] = {}
    for obs in entry.observer.observations:
        for name, why in obs.ignored.items():
            if name not in exported:
                ignored.setdefault(name, why)
    if ignored:
        shown = ", ".join(f"{n} ({why})" for n, why in list(ignored.items())[:8])
        notes.append(f"arguments not exported as inputs (the export uses their defaults): {shown}")
    return notes


def process_model(
    entry: registry.ObservedModel,
    out_dir: Path,
    *,
    config: RunConfig,
    progress: Progress = progress_line,
) -> ModelResult:
    """Infer, export, replay in onnxruntime, probe unseen shapes: one ModelResult."""
    obs = entry.observer
    result = ModelResult(
        name=entry.name,
        script=entry.script,
        status=STATUS_OK,
        method_name=entry.method_name,
        n_observations=obs.num_obs(),
        notes=model_notes(entry),
    )
    phase = Phases(result)
    register_if_imported()  # ModelOutput classes first used during the script get key paths
    with phase("infer"):
        if not infer_inputs(entry, result, progress):
            return result
    config = held_to_dtype(entry, result, config)
    families = plan(entry, result)
    if families is None:
        return result
    server = FamilyServer(entry, out_dir, config, phase, progress, single=len(families) == 1)
    serve_families(entry, result, families, server)
    if export_failed(entry, result, progress):
        return result
    if config.merge_decoders:
        add_merged_decoder(result, server)
    fail_dropped_state(entry, result)  # a graph without its inputs' state is never ok
    decide(result)
    summarize_diagnosis(result)
    result.warnings = graph_warnings(result)
    total = sum(v for k, v in result.phase_seconds.items() if k != "script")
    progress(f"{entry.name}: {result.status} ({total:.1f}s)")
    return result


def infer_inputs(entry: registry.ObservedModel, result: ModelResult, progress: Progress) -> bool:
    """Step 1: the export inputs, their dynamic dims and names (False: the row says why)."""
    obs = entry.observer
    if not obs.num_obs() and obs.refusal is None:  # else the refusal says why
        result.status, result.cause = STATUS_OBSERVE_FAILED, never_called(entry.method_name)
        result.error = result.cause.summary
        progress(f"{entry.name}: {result.cause.summary}")
        return False
    try:
        result.inputs = obs.input_summaries(entry.set_batch_dimension_for)
        names = name_dims(obs, entry.set_batch_dimension_for)
        for info, named in zip(result.inputs, names):
            info.dim_names = [named[d] for d in info.dynamic_dims]
        result.dynamic_shapes = repr(
            obs.infer_dynamic_shapes(entry.set_batch_dimension_for, named=True)
        )
    except Exception as e:
        result.status, result.error = STATUS_OBSERVE_FAILED, error_tail(e)
        result.cause = explain_exception(e, observer=obs)
        headline = f"{entry.name}: cannot infer export inputs: {result.cause.summary}"
        log_failure(headline, result.error, f"{entry.name}: the error", progress)
        return False
    return True


def held_to_dtype(
    entry: registry.ObservedModel, result: ModelResult, config: RunConfig
) -> RunConfig:
    """A float16 / bfloat16 model's calls are compared at its dtype's tolerances
    (``core/tolerances.py``), recorded in the result and stated in a note."""
    dtype = low_precision_dtype(entry.model, entry.observer)
    tolerance = dtype_tolerance(dtype, config.atol, config.rtol)
    if not tolerance:
        return config
    result.tolerance = tolerance
    result.notes.append(
        f"the model computes in {dtype}: its calls are compared at abs_max "
        f"{tolerance['abs_max']:g} and rel_max {tolerance['rel_max']:g} ({dtype}'s floor; "
        f"float32 models: {config.atol:g} and {config.rtol:g})"
    )
    return dataclasses.replace(config, atol=tolerance["abs_max"], rtol=tolerance["rel_max"])


def plan(entry: registry.ObservedModel, result: ModelResult) -> list[Family] | None:
    """Step 2: the call families, one graph each (None: the row says why)."""
    try:
        return plan_families(entry.observer, entry.set_batch_dimension_for)
    except Exception as e:
        result.status, result.error = STATUS_OBSERVE_FAILED, error_tail(e)
        result.cause = explain_exception(e, observer=entry.observer)
        return None


def serve_families(
    entry: registry.ObservedModel,
    result: ModelResult,
    families: list[Family],
    server: FamilyServer,
) -> None:
    """Step 3: every family exported, replayed and probed; calls that failed only on
    stand-ins split into families of their own; rows and graph figures filled in."""
    obs = entry.observer
    rows: dict[int, ObservationResult] = {}
    served_families: list[Family] = []
    queue = list(families)
    while queue:
        family = queue.pop(0)
        if not family.name:
            family.name = f"{ROLE_SINGLE}_{len(served_families) + len(queue) + 1}"
        graph, served = server.serve(family)
        moved = stand_in_failures(graph, served)
        if moved:
            family, *extra = split_family(family, obs, moved, entry.set_batch_dimension_for)
            graph.observation_indices = family.indices
            for i in moved:
                served.pop(i)
            server.single = False
            queue.extend(extra)
        result.graphs.append(graph)
        served_families.append(family)
        rows.update(served)
    if len(result.graphs) > 1:
        server.rename(result.graphs, name_families(served_families), rows)
    result.observations = [rows[i] for i in sorted(rows)]
    for graph in result.graphs:
        graph_rows = [rows[i] for i in graph.observation_indices if i in rows]
        if graph_rows:
            graph.abs = max_or_none(r.abs for r in graph_rows)
            graph.rel = max_or_none(r.rel for r in graph_rows)
            graph.success = all(r.success for r in graph_rows)
    main = result.graphs[0]
    result.export, result.probe = main.export, main.probe
    for graph in result.graphs:
        if graph.export is not None:
            result.notes.extend(n for n in graph.export.notes if n not in result.notes)
    result.notes.extend(server.notes)


def export_failed(entry: registry.ObservedModel, result: ModelResult, progress: Progress) -> bool:
    """Step 4: a graph that failed to export makes the row ``export_failed``."""
    failed = [g for g in result.graphs if g.export is None or not g.export.ok]
    if not failed:
        return False
    g = failed[0]
    error = (g.export.error if g.export else None) or "export failed"
    result.status = STATUS_EXPORT_FAILED
    result.error = error if len(result.graphs) == 1 else f"graph {g.name}: {error}"
    result.cause = g.export.cause if g.export else None
    result.warnings = graph_warnings(result)
    summary = result.cause.summary if result.cause else error_headline(result.error)
    headline = f"{entry.name}: export failed: {summary}"
    log_failure(headline, result.error, f"{entry.name}: the error", progress)
    return True


def add_merged_decoder(result: ModelResult, server: FamilyServer) -> None:
    """Step 5: ``decoder_model_merged`` when the families are a decoder and its past."""
    merged = server.merge(result.graphs)
    if merged is None:
        return
    result.graphs.append(merged)
    if not merged.success:
        why = (
            merged.reason
            if merged.export is None
            else (f"did not match torch on every call (max abs {merged.abs:.3g})")
        )
        result.notes.append(
            f"{merged.name}: {why}; use {ROLE_DECODER} and {ROLE_DECODER_WITH_PAST}"
        )


def decide(result: ModelResult) -> None:
    """Step 6: the verdict from the replayed calls, then from the probes."""
    result.status = _status(result.observations)
    if result.status != STATUS_OK:
        result.error = next((o.error for o in result.observations if o.error), None)
        result.cause = next((o.cause for o in result.observations if o.cause), None)
        samples = {
            i: g.export.sample_index
            for g in result.graphs
            if g.export is not None
            for i in g.observation_indices
        }
        for o in result.observations:
            sample = samples.get(o.index)
            if o.cause is not None and sample is not None:
                add_sample_difference(o.cause, result.inputs, o.index, sample)
        return
    probe = next((g.probe for g in result.graphs if _probe_failed(g.probe)), None)
    if probe is not None:
        result.status, result.error = STATUS_PROBE_FAILED, probe.error
        result.cause = probe.cause


def _probe_failed(probe: ProbeResult | None) -> bool:
    """A probe over the tolerance fails the model, unless only at masked positions (the
    ``masked_positions_only`` warning says so instead)."""
    if probe is None or not probe.ran or probe.success:
        return False
    return probe.cause is None or probe.cause.kind != MASKED_POSITIONS_ONLY


def _status(observations: list[ObservationResult]) -> str:
    if any(o.ort_latency_s is None for o in observations):
        return STATUS_ORT_FAILED
    if not all(o.success for o in observations):
        return STATUS_DISCREPANCY
    return STATUS_OK
