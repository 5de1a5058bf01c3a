"""Why a graph disagrees with torch: run only for a graph whose replay exceeds the tolerance
(a healthy model pays nothing). Three checks, cheapest first:

(a) torch against itself (``self_check.py``): a model that does not reproduce its own
    recorded outputs is not the exporter's fault;
(b) the error split by the call's attention / padding mask (``masks.py``): an error only at
    padded positions is a warning, not a failing discrepancy;
(c) the first diverging module (``divergence.py``), when torch reproduces itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from observer_ci.core.constants import MASKED_POSITIONS_ONLY, TORCH_NOT_REPRODUCIBLE
from observer_ci.core.errors import error_tail
from observer_ci.core.results import (
    STATUS_DISCREPANCY,
    STATUS_PROBE_FAILED,
    Cause,
    Diagnosis,
    FirstDivergence,
    GraphResult,
    ModelResult,
    ObservationResult,
    ProbeResult,
    max_or_none,
)
from observer_ci.pipeline.causes import PROBE_FAILURE, explain_masked_only, probe_sizes
from observer_ci.pipeline.diff import flatten_outputs
from observer_ci.pipeline.masks import MaskSplit, find_mask, split_errors
from observer_ci.pipeline.replay import match_feeds
from observer_ci.pipeline.self_check import SelfCheck, check_torch_against_itself

FIRST_DIVERGENCE = "first_divergence"  # the cause kind naming the module where values part
# modules whose eager fast path computes padded positions differently (nested tensors)
_FAST_PATH_MODULES = (
    torch.nn.TransformerEncoder,
    torch.nn.TransformerEncoderLayer,
    torch.nn.MultiheadAttention,
)


def failing_calls(indices: list[int], rows: dict[int, ObservationResult]) -> list[tuple[int, int]]:
    """``(local, call number)`` of the calls onnxruntime ran that disagree with torch
    (failures to run have causes); ``indices[local]`` is the call number of local call
    ``local``. Empty: nothing to diagnose."""
    return [(k, i) for k, i in enumerate(indices) if i in rows and _failing(rows[i])]


def _failing(row: ObservationResult) -> bool:
    return not row.success and row.ort_latency_s is not None


@dataclass
class SessionStep:
    """What the diagnosis needs of the graph's replay session, taken before it is closed:
    the failing calls' error split by their mask and the worst call's feeds. The session
    is released before the first-divergence run opens one of its own (two copies of a
    large model's weights at a time, not three)."""

    failing: list[tuple[int, int]] = field(default_factory=list)  # (local, call number)
    split: MaskSplit | None = None
    feeds: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def session_step(
    observer: Any,
    indices: list[int],
    failing: list[tuple[int, int]],
    rows: dict[int, ObservationResult],
    session: Any,
) -> SessionStep:
    """The part of the diagnosis that runs the replay ``session`` on the ``failing`` calls
    (:func:`failing_calls`, not empty): the last use of the session."""
    step = SessionStep(failing=failing)
    step.split, step.feeds = _mask_split(observer, indices, failing, rows, session, step.notes)
    return step


def diagnose_graph(
    model: Any,
    method: Callable[..., Any],
    observer: Any,
    indices: list[int],
    rows: dict[int, ObservationResult],
    step: SessionStep,
    onnx_path: str,
    *,
    atol: float,
    rtol: float,
    method_name: str = "forward",
    probe_call: tuple[Any, ...] | None = None,
) -> Diagnosis | None:
    """The diagnosis of one graph from its replayed ``rows`` (model call number -> row;
    ``indices[local]`` is the call number of ``observer``'s call ``local``), what
    :func:`session_step` took from its session, and the ``(args, kwargs, feeds)`` of
    unseen sizes where the probe disagreed; None when every call and the probe agree.
    Never raises: what could not be checked is a note."""
    failing = step.failing
    if not failing and probe_call is None:
        return None
    begin = time.perf_counter()
    diagnosis = Diagnosis()
    if not failing:  # the observed calls agree: only the probe's sizes to locate
        _locate_probe(model, onnx_path, probe_call, atol, rtol, method_name, diagnosis)
        diagnosis.seconds = time.perf_counter() - begin
        return diagnosis if diagnosis.probe_divergence or diagnosis.notes else None
    local, index = max(failing, key=lambda call: _severity(rows[call[1]]))
    observation = observer.observations[local]
    expected = flatten_outputs(observation.outputs)
    check = check_torch_against_itself(
        model, method, observation.args, observation.kwargs, expected, atol=atol, rtol=rtol
    )
    diagnosis.torch_reproducible, diagnosis.torch_abs = check.reproducible, check.abs
    diagnosis.torch_reason = check.reason
    diagnosis.notes.extend(check.notes)
    diagnosis.notes.extend(step.notes)
    split, feeds = step.split, step.feeds
    if split is not None:
        diagnosis.mask_input = split.mask
        diagnosis.valid_abs, diagnosis.valid_rel = split.valid_abs, split.valid_rel
        diagnosis.masked_abs, diagnosis.masked_rel = split.masked_abs, split.masked_rel
    if check.reproducible is not False:  # torch varying by itself: nothing to locate
        if feeds is not None:
            call = (observation.args, observation.kwargs, feeds)
            kept = _kept_positions(observer, local, expected)
            diagnosis.first_divergence = _locate(
                model, onnx_path, call, atol, rtol, method_name, index, diagnosis, kept
            )
        _locate_probe(model, onnx_path, probe_call, atol, rtol, method_name, diagnosis)
    diagnosis.cause = diagnosis_cause(diagnosis, check, split, model, index, atol, rtol)
    diagnosis.seconds = time.perf_counter() - begin
    return diagnosis


def _locate_probe(
    model: Any,
    onnx_path: str,
    probe_call: tuple[Any, ...] | None,
    atol: float,
    rtol: float,
    method_name: str,
    diagnosis: Diagnosis,
) -> None:
    if probe_call is not None:
        diagnosis.probe_divergence = _locate(
            model, onnx_path, probe_call, atol, rtol, method_name, None, diagnosis
        )


def _severity(row: ObservationResult) -> float:
    value = row.abs if row.abs is not None else float("inf")
    return float("inf") if value != value else value  # NaN first


def _mask_split(
    observer: Any,
    indices: list[int],
    failing: list[tuple[int, int]],
    rows: dict[int, ObservationResult],
    session: Any,
    notes: list[str],
) -> tuple[MaskSplit | None, dict[str, Any] | None]:
    """The failing calls' error split by their mask (calls without one count as kept
    positions, calls that agree too); the worst call's feeds for the locator."""
    names = observer.leaf_names()
    onnx_inputs = [i.name for i in session.get_inputs()]
    total: MaskSplit | None = None
    unsplit: list[ObservationResult] = [rows[i] for i in indices if i in rows and rows[i].success]
    worst_feeds = None
    worst = max(failing, key=lambda call: _severity(rows[call[1]]))
    for local, index in failing:
        try:
            feeds = match_feeds(onnx_inputs, names, observer.infer_arguments(local, flat=True))
            got = session.run(None, feeds)
        except Exception as e:
            notes.append(f"call {index} not split by its mask: {error_tail(e, 200)}")
            unsplit.append(rows[index])
            continue
        if (local, index) == worst:
            worst_feeds = feeds
        expected = flatten_outputs(observer.observations[local].outputs)
        split = split_errors(names, observer.aligned_inputs(local), expected, got)
        if split is None:
            unsplit.append(rows[index])
        elif total is None:
            total = split
        else:
            total.add(split)
    if total is not None:  # a call that could not be compared is an error where it counts
        total.valid_abs = max_or_none([total.valid_abs, *(_kept_error(r, "abs") for r in unsplit)])
        total.valid_rel = max_or_none([total.valid_rel, *(_kept_error(r, "rel") for r in unsplit)])
    return total, worst_feeds


def _kept_positions(observer: Any, local: int, expected: list[Any]) -> np.ndarray | None:
    """Where the call's padding / attention mask keeps a position (batch x sequence), for
    the locator to judge modules there first; None without such a mask."""
    found = find_mask(observer.leaf_names(), observer.aligned_inputs(local), expected)
    if found is None or found[1].ndim != 2:
        return None
    return ~found[1]


def _kept_error(row: ObservationResult, metric: str) -> float:
    """A call without a mask split: its whole error, infinite when not comparable."""
    value = getattr(row, metric)
    return float("inf") if not row.ok or value is None else value


def _locate(
    model: Any,
    onnx_path: str,
    call: tuple[Any, ...],
    atol: float,
    rtol: float,
    method_name: str,
    index: int | None,
    diagnosis: Diagnosis,
    kept: np.ndarray | None = None,
) -> FirstDivergence | None:
    """The first diverging module (``pipeline/divergence.py``, when installed) on the
    ``(args, kwargs, feeds)`` of an observed call (``index``) or the probe's (``None``)."""
    args, kwargs, feeds = call
    try:
        from observer_ci.pipeline.divergence import locate_first_divergence
    except ImportError:
        return None
    try:
        return locate_first_divergence(
            model,
            str(onnx_path),
            args,
            kwargs,
            feeds,
            atol,
            rtol,
            method_name=method_name,
            call_index=index,
            where="replay" if index is not None else "probe",
            valid=kept,
        )
    except Exception as e:  # a hint: its failure never changes the verdict
        diagnosis.notes.append(f"first divergence not located: {error_tail(e, 300)}")
        return None


def diagnosis_cause(
    diagnosis: Diagnosis,
    check: SelfCheck,
    split: MaskSplit | None,
    model: Any,
    call: int,
    atol: float,
    rtol: float,
) -> Cause | None:
    """The verdict: torch not reproducing itself first, then padding, then the module."""
    if check.reproducible is False:
        why = f", likely because {check.reason}" if check.reason else " (no reason found)"
        return Cause(
            TORCH_NOT_REPRODUCIBLE,
            f"torch does not reproduce its own recorded outputs: re-run on the inputs recorded "
            f"for call {call}, it differs from them by max abs {check.abs:.3g}{why}; the ONNX "
            "graph is compared with those outputs, so the exporter is not to blame",
            check.next_step
            or "make the model's outputs depend on its inputs alone (eval mode, no state "
            "kept between calls), then observe again",
        )
    if split is not None and split.masked_only(atol, rtol):
        return explain_masked_only(
            split.mask, split.masked_abs, split.valid_abs, uses_fast_path(model)
        )
    found = diagnosis.first_divergence
    if found is None:
        return None
    ops = f" at ONNX {', '.join(found.onnx_ops[:3])}" if found.onnx_ops else ""
    error = f" (max abs {found.abs:.3g} at its output)" if found.abs is not None else ""
    return Cause(
        FIRST_DIVERGENCE,
        f"torch and onnxruntime first part in `{found.module or 'the model'}` "
        f"({found.module_class}){ops}{error}, while its inputs agree",
        found.next_step
        or "compare that module's forward with its ONNX translation (an export-only branch, "
        "`torch.compiler.is_exporting()`, or an op whose semantics differ)",
        found.source,
    )


def uses_fast_path(model: Any) -> bool:
    """The model holds a module whose eager fast path fills padded positions its own way."""
    modules = model.modules() if isinstance(model, torch.nn.Module) else ()
    return any(isinstance(m, _FAST_PATH_MODULES) for m in modules)


def summarize(result: ModelResult) -> None:
    """The model's diagnosis from its graphs' (a model of one graph: on the model only),
    and its cause when the discrepancy has none yet."""
    diagnosed = [g for g in result.graphs if g.diagnosis is not None]
    if not diagnosed:
        return
    if len(result.graphs) == 1:
        result.diagnosis, diagnosed[0].diagnosis = diagnosed[0].diagnosis, None
    else:
        result.diagnosis = _merged(result.graphs, diagnosed)
    cause = result.diagnosis.cause if result.diagnosis else None
    if result.status == STATUS_DISCREPANCY and result.cause is None and cause is not None:
        result.cause = cause
    if result.diagnosis is not None and result.diagnosis.torch_reproducible is False:
        for graph in result.graphs:
            _probe_cannot_judge(graph.probe, result.diagnosis)
    found = result.diagnosis.probe_divergence if result.diagnosis else None
    if result.status == STATUS_PROBE_FAILED and result.cause is not None and found is not None:
        _name_the_module(result.cause, found)


def _name_the_module(cause: Cause, found: FirstDivergence) -> None:
    """A failed probe's cause names the module where the values first part at its sizes."""
    if cause.kind != PROBE_FAILURE:
        return
    ops = f" at ONNX {', '.join(found.onnx_ops[:3])}" if found.onnx_ops else ""
    cause.summary += (
        f"; at those sizes the values first part in `{found.module or 'the model'}` "
        f"({found.module_class}){ops}"
    )
    cause.user_frame = cause.user_frame or found.source
    cause.next_step = found.next_step or cause.next_step


def _probe_cannot_judge(probe: ProbeResult | None, diagnosis: Diagnosis) -> None:
    """A probe that disagrees with a torch that does not reproduce itself blames no size."""
    if probe is None or not probe.ok or probe.success or probe.cause is None:
        return
    if probe.cause.kind != PROBE_FAILURE:
        return
    probe.cause = Cause(
        TORCH_NOT_REPRODUCIBLE,
        f"at sizes never observed ({probe_sizes(probe.shapes)}) onnxruntime and torch "
        "disagree, but torch does not reproduce its own outputs on the observed calls "
        "either: the probe cannot judge the graph",
        diagnosis.cause.next_step if diagnosis.cause else None,
    )


def _merged(graphs: list[GraphResult], diagnosed: list[GraphResult]) -> Diagnosis:
    """Worst of the graphs' diagnoses; the errors of graphs without a mask split count as
    kept positions."""
    ds = [g.diagnosis for g in diagnosed if g.diagnosis is not None]
    unreproducible = [d for d in ds if d.torch_reproducible is False]
    masked = [d for d in ds if d.mask_input]
    merged = Diagnosis(
        torch_reproducible=not unreproducible,
        torch_reason=unreproducible[0].torch_reason if unreproducible else None,
        torch_abs=max_or_none(d.torch_abs for d in ds),
        first_divergence=next((d.first_divergence for d in ds if d.first_divergence), None),
        seconds=sum(d.seconds or 0.0 for d in ds),
        notes=[f"graph {g.name}: {n}" for g in diagnosed if g.diagnosis for n in g.diagnosis.notes],
    )
    if masked:
        merged.mask_input = masked[0].mask_input
        merged.valid_abs = max_or_none(_kept(g, "abs") for g in graphs)
        merged.valid_rel = max_or_none(_kept(g, "rel") for g in graphs)
        merged.masked_abs = max_or_none(d.masked_abs for d in masked)
        merged.masked_rel = max_or_none(d.masked_rel for d in masked)
    causes = [d.cause for d in ds if d.cause is not None]
    kinds = {c.kind for c in causes}
    if TORCH_NOT_REPRODUCIBLE in kinds:
        merged.cause = next(c for c in causes if c.kind == TORCH_NOT_REPRODUCIBLE)
    elif causes and kinds == {MASKED_POSITIONS_ONLY} and len(causes) == len(ds):
        merged.cause = causes[0]
    else:
        merged.cause = next((c for c in causes if c.kind != MASKED_POSITIONS_ONLY), None)
    return merged


def _kept(graph: GraphResult, metric: str) -> float | None:
    d = graph.diagnosis
    if d is not None and d.mask_input:
        return d.valid_abs if metric == "abs" else d.valid_rel
    return graph.abs if metric == "abs" else graph.rel
