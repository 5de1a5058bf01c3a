"""Discrepancies between expected (torch) and obtained (onnxruntime) outputs.

Always floats, never ints: an exact match is ``abs == 0.0``. Shape, dtype, count
and NaN mismatches are reported as explicit errors rather than folded into inf. Torch is
imported only where a torch tensor is met: ``observer-ci replay`` compares numpy arrays
and runs without torch installed (README, "Reproducer bundles").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from observer_ci.core.tolerances import outputs_over

if TYPE_CHECKING:
    import torch

REL_EPSILON = 1e-3


@dataclass
class Diff:
    """Largest absolute / relative error over all compared outputs."""

    abs: float = 0.0
    rel: float = 0.0
    sum: float = 0.0
    n: int = 0  # number of compared elements
    dnan: int = 0  # elements where exactly one side is NaN
    dev: int = 0  # expected tensors not on the CPU (onnxruntime runs on the CPU here)
    hist: dict[str, int] = field(default_factory=dict)  # ">0.1" -> elements above
    errors: list[str] = field(default_factory=list)
    outputs: list[tuple[float, float]] = field(default_factory=list)  # (abs, rel) per output

    @property
    def comparable(self) -> bool:
        """True when every output could be compared element by element."""
        return not self.errors

    def within(self, atol: float, rtol: float) -> bool:
        """No error, and abs <= atol and rel <= rtol."""
        return self.comparable and self.abs <= atol and self.rel <= rtol

    def as_row(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "abs": self.abs,
            "rel": self.rel,
            "sum": self.sum,
            "n": float(self.n),
            "dnan": float(self.dnan),
            "dev": float(self.dev),
        }
        row.update({k: float(v) for k, v in self.hist.items()})
        if self.errors:
            row["error"] = "; ".join(self.errors)
        return row


def flatten_outputs(value: Any) -> list[torch.Tensor | np.ndarray]:
    """Tensor leaves of a nested output; None and non-tensors dropped."""
    import torch
    from torch.utils import _pytree as pytree

    leaves = pytree.tree_flatten(value)[0]
    return [t for t in leaves if isinstance(t, (torch.Tensor, np.ndarray))]


def comparable_array(t: torch.Tensor | np.ndarray) -> np.ndarray:
    """An array to compare values with: bfloat16 is widened to float32 (exact), since
    numpy has no bfloat16. Feeding onnxruntime is another matter: see ``replay.feed_array``."""
    if isinstance(t, np.ndarray):
        return t
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy()


def hist_key(threshold: float) -> str:
    return f">{threshold:g}"


def max_diff(
    expected: Sequence[Any], got: Sequence[Any], hist: Sequence[float] = (0.1, 0.01)
) -> Diff:
    """Compares two flat output lists element-wise, output by output."""
    diff = Diff(hist={hist_key(h): 0 for h in hist})
    # a torch tensor off the CPU (numpy arrays have no device): no torch import for numpy
    diff.dev = sum(getattr(getattr(e, "device", None), "type", "cpu") != "cpu" for e in expected)
    expected = [comparable_array(e) for e in expected]
    got = [comparable_array(g) for g in got]
    got = _drop_trailing_empty(expected, got)
    if len(expected) != len(got):
        diff.errors.append(f"output count differs: expected {len(expected)}, got {len(got)}")
    for k, (e, g) in enumerate(zip(expected, got)):
        _compare_one(k, e, g, hist, diff)
    return diff


def _drop_trailing_empty(expected: list[np.ndarray], got: list[np.ndarray]) -> list[np.ndarray]:
    got = list(got)
    while len(got) > len(expected) and got[-1].size == 0:
        got.pop()
    return got


def _compare_one(k: int, e: np.ndarray, g: np.ndarray, hist: Sequence[float], diff: Diff) -> None:
    if e.shape != g.shape:
        diff.errors.append(f"output {k}: shape differs: expected {e.shape}, got {g.shape}")
        diff.outputs.append((math.inf, math.inf))
        return
    if e.dtype != g.dtype:
        diff.errors.append(f"output {k}: dtype differs: expected {e.dtype}, got {g.dtype}")
    if e.size == 0:
        diff.outputs.append((0.0, 0.0))
        return
    e64 = e.astype(np.float64)
    g64 = g.astype(np.float64)
    nan_e, nan_g = np.isnan(e64), np.isnan(g64)
    dnan = int(np.count_nonzero(nan_e != nan_g))
    if dnan:
        diff.dnan += dnan
        diff.errors.append(f"output {k}: NaN differs at {dnan} element(s)")
    both = ~(nan_e | nan_g)
    inf_mismatch = np.isinf(e64) | np.isinf(g64)
    same_inf = inf_mismatch & (e64 == g64)
    if np.any(inf_mismatch & ~same_inf & both):
        diff.errors.append(f"output {k}: infinite values differ")
    mask = both & ~same_inf
    d = np.abs(e64[mask] - g64[mask])
    d = np.where(np.isfinite(d), d, np.inf)
    one = (math.inf, math.inf) if dnan else (0.0, 0.0)
    if d.size:
        with np.errstate(invalid="ignore"):
            rel = d / (np.abs(e64[mask]) + REL_EPSILON)
        rel = np.where(np.isnan(rel), np.inf, rel)  # inf / inf: an infinite error stays infinite
        one = (max(one[0], float(d.max())), max(one[1], float(rel.max())))
        diff.abs = max(diff.abs, float(d.max()))
        diff.rel = max(diff.rel, float(rel.max()))
        diff.sum += float(d.sum())
        for h in hist:
            diff.hist[hist_key(h)] += int(np.count_nonzero(d > h))
    diff.outputs.append(one)
    diff.n += int(mask.sum())


def output_names(value: Any) -> list[str]:
    """The names of :func:`flatten_outputs`' tensors: their dotted path in the output
    (``logits``, ``past_key_values.key_cache.0``); a lone tensor is ``output``."""
    import torch
    from torch.utils import _pytree as pytree

    paths = pytree.tree_flatten_with_path(value)[0]
    names = []
    for path, leaf in paths:
        if isinstance(leaf, (torch.Tensor, np.ndarray)):
            names.append(".".join(_key_text(k) for k in path) or "output")
    return names


def _key_text(key: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def judge_outputs(
    diff: Diff,
    names: Sequence[str],
    atol: float,
    rtol: float,
    outputs: Sequence[tuple[str, float | None, float | None]],
) -> tuple[bool, dict[str, list[float]]]:
    """Success of a call whose outputs have their own tolerances (``outputs``: the policy
    file's (glob, abs_max, rel_max)), and ``{name: [abs, rel]}`` per output; without
    ``outputs``, :meth:`Diff.within` and no per-output figures."""
    if not outputs:
        return diff.within(atol, rtol), {}
    padded = [*names, *(str(k) for k in range(len(names), len(diff.outputs)))]
    errors = {name: [a, r] for name, (a, r) in zip(padded, diff.outputs)}
    return diff.comparable and not outputs_over(errors, outputs, atol, rtol), errors
