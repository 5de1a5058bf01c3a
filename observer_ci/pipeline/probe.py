"""Unseen-shape probe: run torch and onnxruntime on dynamic sizes never observed.

Sizes are chosen by plans tried in order until torch eager accepts the inputs:
1. extrapolate one step from the last two complete calls (keeps relations such as
   ``mask_len == cache_len + input_len`` that hold between calls);
2. grow every dynamic dim by one past the largest size seen;
3. grow only dynamic dims 0 (batch).

Outputs that echo model state (Qwen2-VL's ``rope_deltas``, set by generate()) are computed
from the probe's inputs in torch as in the graph (``state_outputs_recomputed``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from observer_ci.core.constants import MASKED_POSITIONS_ONLY
from observer_ci.core.dim_names import dim_classes
from observer_ci.core.errors import error_tail
from observer_ci.core.results import Cause, ProbeResult
from observer_ci.core.tolerances import OutputTolerance
from observer_ci.observing.observer import InputObserver
from observer_ci.pipeline.causes import (
    BrokenDim,
    explain_masked_only,
    explain_probe_failure,
    explain_probe_mismatch,
    explain_probe_rounding,
    probe_sizes,
)
from observer_ci.pipeline.diagnosis import uses_fast_path
from observer_ci.pipeline.diff import Diff, flatten_outputs, judge_outputs, max_diff, output_names
from observer_ci.pipeline.export_patches import state_outputs_recomputed
from observer_ci.pipeline.masks import split_errors
from observer_ci.pipeline.replay import match_feeds

Plan = dict[tuple[int, int], int]  # (leaf index, dim) -> new size


def plan_sizes(observer: InputObserver, dynamic: list[list[int]]) -> list[tuple[str, Plan]]:
    """Candidate size plans, most faithful first; each changes at least one size."""
    calls = [observer.aligned_inputs(i) for i in range(observer.num_obs())]
    base = calls[observer.best_index()]
    keys = [(j, d) for j, dims in enumerate(dynamic) for d in dims]
    seen: dict[tuple[int, int], set[int]] = {
        (j, d): {f[j].shape[d] for f in calls if f[j] is not None} for j, d in keys
    }
    plans: list[tuple[str, Plan]] = []
    complete = [f for f in calls if all(t is not None for t in f)]
    if len(complete) >= 2:
        a, b = complete[-2], complete[-1]
        plan = {(j, d): max(1, 2 * b[j].shape[d] - a[j].shape[d]) for j, d in keys}
        # a batch dim flagged dynamic never varied: grow it too (the same for every input)
        grown_batch = max((max(seen[k]) for k in keys if k[1] == 0), default=0) + 1
        for key in keys:
            if key[1] == 0 and plan[key] in seen[key]:
                plan[key] = grown_batch
        plans.append(("extrapolated from the last two calls", plan))
    grow = {(j, d): max(seen[(j, d)]) + 1 for j, d in keys}
    plans.append(("every dynamic dim grown past the largest seen", grow))
    batch = {(j, d): max(seen[(j, d)]) + 1 for j, d in keys if d == 0}
    for j, d in keys:
        if d != 0 and base[j] is not None:
            batch[(j, d)] = base[j].shape[d]
    plans.append(("dynamic dim 0 grown past the largest seen", batch))
    useful = []
    for label, plan in plans:
        if any(size not in seen[key] for key, size in plan.items()) and plan not in [
            p for _, p in useful
        ]:
            useful.append((label, plan))
    return useful


def synthesize(base: list[torch.Tensor], plan: Plan, seed: int = 0) -> list[torch.Tensor]:
    """New tensors with the planned shapes and values resembling the observed ones."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for j, t in enumerate(base):
        shape = [plan.get((j, d), s) for d, s in enumerate(t.shape)]
        out.append(_like(t, shape, generator))
    return out


def _like(t: torch.Tensor, shape: list[int], generator: torch.Generator) -> torch.Tensor:
    if list(t.shape) == shape:
        return t.clone()
    if t.numel() == 0 or 0 in shape:
        return torch.zeros(shape, dtype=t.dtype)
    if t.dtype == torch.bool:
        return torch.full(shape, bool(t.flatten()[0]), dtype=torch.bool)
    if t.is_floating_point():
        std = float(t.float().std()) if t.numel() > 1 else 1.0
        mean = float(t.float().mean())
        values = torch.randn(shape, generator=generator) * (std or 1.0) + mean
        return values.to(t.dtype)
    if t.dim() >= 1 and t.shape[-1] > 1 and _is_arange(t):
        start = int(t.reshape(-1, t.shape[-1])[0, 0])
        row = torch.arange(start, start + shape[-1], dtype=t.dtype)
        return row.expand(*shape).clone()
    return _edge_extended(t, shape)


def _edge_extended(t: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """Integer inputs (token ids, masks, image grids) keep their values, cut or extended
    by repeating the last entry of each dim: random ids would change how many image
    tokens a prompt has, which a vision-language model checks against its image."""
    out = t
    for d, size in enumerate(shape):
        index = torch.arange(size).clamp(max=t.shape[d] - 1)
        out = out.index_select(d, index)
    return out.clone()


def _is_arange(t: torch.Tensor) -> bool:
    steps = t.diff(dim=-1)
    return bool((steps == 1).all())


def run_probe(
    observer: InputObserver,
    method: Callable[..., Any],
    session,
    *,
    set_batch_dimension_for: Any = None,
    atol: float = 1e-4,
    rtol: float = 0.1,
    on_mismatch: Callable[[tuple[Any, ...], dict[str, Any], dict[str, Any]], None] | None = None,
    outputs: Sequence[OutputTolerance] = (),
) -> ProbeResult:
    """Runs the first plan torch eager accepts through onnxruntime and compares (each
    output at its own tolerance with ``outputs``, the policy file's);
    ``on_mismatch(args, kwargs, feeds)`` hears of unseen sizes where they disagree (not only
    at masked positions): the diagnosis locates the module there."""
    dynamic = observer.dynamic_dims(set_batch_dimension_for)
    if not any(dynamic):
        return ProbeResult(ran=False, reason="no dynamic dimension to probe")
    names = observer.leaf_names()
    base = observer.infer_arguments(flat=True)
    onnx_inputs = [i.name for i in session.get_inputs()]
    rejections = []
    for label, plan in plan_sizes(observer, dynamic):
        flat = synthesize(base, plan)
        args, kwargs = observer.call_arguments(flat)
        try:
            with torch.no_grad(), state_outputs_recomputed(getattr(method, "__self__", None)):
                produced = method(*args, **kwargs)
        except Exception as e:
            rejections.append(f"{label}: torch rejected it ({error_tail(e, 300)})")
            continue
        shapes = {n: list(t.shape) for n, t in zip(names, flat)}
        try:
            feeds = match_feeds(onnx_inputs, names, flat)
            got = session.run(None, feeds)
        except Exception as e:
            broken = _broken_dims(observer, method, session, base, plan, set_batch_dimension_for)
            return ProbeResult(
                ran=True,
                ok=False,
                error=error_tail(e),
                shapes=shapes,
                reason=label,
                cause=explain_probe_failure(error_tail(e), broken),
            )
        expected = flatten_outputs(produced)
        judged = (expected, got, output_names(produced), outputs)
        probe = _compared(method, names, flat, judged, shapes, atol, rtol, label)
        located = probe.cause is not None and probe.cause.kind != MASKED_POSITIONS_ONLY
        if located and on_mismatch is not None:
            on_mismatch(args, kwargs, feeds)
        return probe
    return ProbeResult(
        ran=False,
        reason="no unseen sizes torch accepts: " + " | ".join(rejections)
        if rejections
        else ("every planned size was already observed"),
    )


def _compared(
    method: Callable[..., Any],
    names: list[str],
    flat: list[torch.Tensor],
    judged: tuple[list[Any], list[Any], list[str], Sequence[OutputTolerance]],
    shapes: dict[str, list[int]],
    atol: float,
    rtol: float,
    label: str,
) -> ProbeResult:
    """The probe's verdict from torch's and onnxruntime's outputs at the planned sizes
    (``judged``: expected, got, the output names and their own tolerances)."""
    expected, got, output_names_, outputs = judged
    diff = max_diff(expected, got)
    within, _ = judge_outputs(diff, output_names_, atol, rtol, outputs)
    return ProbeResult(
        ran=True,
        ok=diff.comparable,
        success=within,
        error="; ".join(diff.errors) or None,
        shapes=shapes,
        abs=diff.abs,
        rel=diff.rel,
        reason=label,
        cause=None
        if within
        else _mismatch_cause(method, names, flat, expected, got, diff, shapes, atol, rtol),
    )


def _mismatch_cause(
    method: Callable[..., Any],
    names: list[str],
    flat: list[torch.Tensor],
    expected: list[Any],
    got: list[Any],
    diff: Diff,
    shapes: dict[str, list[int]],
    atol: float,
    rtol: float,
) -> Cause:
    """Padding when the error lies only where the call's mask drops positions (the probe's
    mask is made up from the observed ones), rounding when it is within ``abs_max`` and over
    ``rel_max`` only, else what the export sample's sizes decided (``diff``: the verdict's)."""
    split = split_errors(names, flat, expected, got)
    if split is not None and split.masked_only(atol, rtol):
        model = getattr(method, "__self__", method)
        where = f"at sizes never observed ({probe_sizes(shapes)}) "
        return explain_masked_only(
            split.mask, split.masked_abs, split.valid_abs, uses_fast_path(model), where
        )
    if diff.comparable and diff.abs <= atol and diff.rel > rtol:
        return explain_probe_rounding(shapes, diff.abs, diff.rel, atol, rtol)
    return explain_probe_mismatch(shapes, diff.abs)


def _broken_dims(
    observer: InputObserver,
    method: Callable[..., Any],
    session,
    base: list[torch.Tensor],
    plan: Plan,
    set_batch_dimension_for: Any,
) -> list[BrokenDim]:
    """The named dims that break onnxruntime when only they take their planned size."""
    names = observer.leaf_names()
    onnx_inputs = [i.name for i in session.get_inputs()]
    broken = []
    for cls in dim_classes(observer, set_batch_dimension_for):
        alone = {k: plan[k] for k in cls.keys if k in plan and plan[k] != base[k[0]].shape[k[1]]}
        if not alone:
            continue
        flat = synthesize(base, alone)
        args, kwargs = observer.call_arguments(flat)
        try:
            with torch.no_grad():
                method(*args, **kwargs)
        except Exception:
            continue  # torch itself needs the other dims to move too
        try:
            session.run(None, match_feeds(onnx_inputs, names, flat))
        except Exception:
            axes = [f"{names[j]} dim {d}" for j, d in cls.keys]
            seen = sorted({s for s in cls.sizes if s is not None})
            broken.append(BrokenDim(cls.name, axes, next(iter(alone.values())), seen))
    return broken
