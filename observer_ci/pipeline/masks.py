"""Attention and padding masks: which input is one, which of its values means "masked",
and the error between torch and onnxruntime split over the positions it keeps and drops.

The one home of this knowledge (issue 19): the diagnosis of a failing replay and the
unseen-shape probe both split their error here, so padding is never blamed on the graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from observer_ci.pipeline.diff import REL_EPSILON, comparable_array

# Name endings of a mask whose True / 1 marks a padded position (torch's
# ``key_padding_mask``, ``src_key_padding_mask``); any other ``*mask`` keeps its 1 / True
# positions (Hugging Face's ``attention_mask``: 0 = masked).
DROP_WHEN_TRUE = ("padding_mask", "pad_mask")
# Masks over pairs of positions (``[seq, seq]`` attention patterns), not over positions.
NOT_PADDING = ("src_mask", "tgt_mask", "memory_mask", "attn_mask", "causal_mask")


def masked_value(name: str) -> bool | None:
    """The value that marks a masked position in the input ``name`` (True or False: for an
    integer mask 1 or 0), or None when the name is not a padding / attention mask's."""
    low = name.lower()
    if not low.endswith("mask") or low.endswith(NOT_PADDING):
        return None
    return low.endswith(DROP_WHEN_TRUE)


@dataclass
class MaskSplit:
    """The worst errors over the positions a mask keeps and those it drops."""

    mask: str  # the input's name
    valid_abs: float = 0.0
    valid_rel: float = 0.0
    masked_abs: float = 0.0
    masked_rel: float = 0.0

    def masked_only(self, atol: float, rtol: float) -> bool:
        """The kept positions agree and the dropped ones do not."""
        valid = self.valid_abs <= atol and self.valid_rel <= rtol
        return valid and (self.masked_abs > atol or self.masked_rel > rtol)

    def add(self, other: MaskSplit) -> None:
        """Worst of both (the figures of several calls)."""
        self.valid_abs = max(self.valid_abs, other.valid_abs)
        self.valid_rel = max(self.valid_rel, other.valid_rel)
        self.masked_abs = max(self.masked_abs, other.masked_abs)
        self.masked_rel = max(self.masked_rel, other.masked_rel)


def dropped_positions(name: str, value: Any) -> np.ndarray | None:
    """Where the mask input ``name`` drops a position (a bool array of its shape), or None
    when it is no mask: not a mask's name, not bool or 0/1 integers, or dropping nothing."""
    drop_value = masked_value(name)
    if drop_value is None or not isinstance(value, torch.Tensor) or value.dim() < 1:
        return None
    if value.dtype != torch.bool and (value.is_floating_point() or value.is_complex()):
        return None
    array = value.detach().cpu().numpy()
    if array.dtype != np.bool_:
        if not np.isin(array, (0, 1)).all():
            return None
        array = array.astype(bool)
    dropped = array if drop_value else ~array
    return dropped if dropped.any() else None


def align(dropped: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``dropped`` broadcast over an output of ``shape``: when its shape prefixes the
    output's (``[batch, seq]`` of ``[batch, seq, hidden]``), or a ``[batch, seq]`` mask
    over an output whose batch is axis 0 or 1 and whose seq is exactly one other axis
    (torch's sequence-first ``[seq, batch, hidden]``, a cache ``[batch, heads, seq, dim]``)."""
    k = dropped.ndim
    if tuple(shape[:k]) == dropped.shape:
        return np.broadcast_to(dropped.reshape(dropped.shape + (1,) * (len(shape) - k)), shape)
    if k != 2 or len(shape) < 2:
        return None
    batch, seq = dropped.shape
    for batch_axis in (0, 1):
        if shape[batch_axis] != batch:
            continue
        seq_axes = [a for a in range(len(shape)) if a != batch_axis and shape[a] == seq]
        if len(seq_axes) == 1:
            moved = dropped if batch_axis < seq_axes[0] else dropped.T
            view = [1] * len(shape)
            view[min(batch_axis, seq_axes[0])], view[max(batch_axis, seq_axes[0])] = moved.shape
            return np.broadcast_to(moved.reshape(view), shape)
    return None


def find_mask(
    names: Sequence[str], inputs: Sequence[Any], outputs: Sequence[Any]
) -> tuple[str, np.ndarray] | None:
    """The first input that is a mask over the positions of at least one output."""
    shapes = [tuple(np.shape(comparable_array(o))) for o in outputs]
    for name, value in zip(names, inputs):
        dropped = dropped_positions(name, value)
        if dropped is not None and any(align(dropped, s) is not None for s in shapes):
            return name, dropped
    return None


def split_errors(
    names: Sequence[str], inputs: Sequence[Any], expected: Sequence[Any], got: Sequence[Any]
) -> MaskSplit | None:
    """The error of one call split by its mask (None: the call has no mask). Outputs the
    mask does not align with count as kept positions (their error is never excused), and
    outputs that cannot be compared (count, shape or dtype differs) as an infinite error
    there."""
    found = find_mask(names, inputs, expected)
    if found is None:
        return None
    name, dropped = found
    split = MaskSplit(name)
    expected = [comparable_array(e) for e in expected]
    got = [comparable_array(g) for g in got]
    while len(got) > len(expected) and got[-1].size == 0:
        got.pop()  # onnxruntime's trailing empty outputs, as diff.max_diff drops them
    if len(got) != len(expected):
        split.valid_abs = split.valid_rel = np.inf
    for e, g in zip(expected, got):
        if e.shape != g.shape or e.dtype != g.dtype:
            split.valid_abs = split.valid_rel = np.inf
            continue
        e64, g64 = e.astype(np.float64), g.astype(np.float64)
        if e64.size == 0:
            continue
        error, rel = _elementwise(e64, g64)
        where = align(dropped, e64.shape)
        masked = np.zeros(e64.shape, dtype=bool) if where is None else where
        if (~masked).any():
            split.valid_abs = max(split.valid_abs, float(error[~masked].max()))
            split.valid_rel = max(split.valid_rel, float(rel[~masked].max()))
        if masked.any():
            split.masked_abs = max(split.masked_abs, float(error[masked].max()))
            split.masked_rel = max(split.masked_rel, float(rel[masked].max()))
    return split


def _elementwise(e: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Absolute and relative error per element, as ``diff.max_diff`` measures them: a NaN
    on one side only is an infinite error, equal infinities none."""
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(e - g)
        same = (e == g) | (np.isnan(e) & np.isnan(g))
        error = np.where(same, 0.0, error)
        error = np.where(np.isnan(error), np.inf, error)
        rel = error / (np.abs(np.nan_to_num(e, nan=0.0)) + REL_EPSILON)
        rel = np.where(np.isnan(rel), np.inf, rel)
    return error, rel
