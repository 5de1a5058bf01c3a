"""Tolerances by the dtype a model computes in: one home for the documented defaults.

A float16 or bfloat16 model rounds every intermediate result (10 and 7 mantissa bits):
torch and onnxruntime, adding in other orders, differ by far more than float32's
``abs_max`` (1e-3). Its calls are compared with the larger of the configured tolerance
and the floor below; ``results.json`` records the one used (``ModelResult.tolerance``)
and the ``discrepancy`` rule applies it. Torch-free.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Any

# (output name glob, abs_max, rel_max) of the policy file; None: the model's
OutputTolerance = tuple[str, float | None, float | None]

# dtype -> the smallest abs_max / rel_max its calls are held to
DTYPE_TOLERANCES: dict[str, dict[str, float]] = {
    "float16": {"abs_max": 1e-2, "rel_max": 1e-1},
    "bfloat16": {"abs_max": 5e-2, "rel_max": 2e-1},
}


def dtype_tolerance(dtype: str | None, abs_max: float, rel_max: float) -> dict[str, Any]:
    """``{"dtype", "abs_max", "rel_max"}`` for a low-precision ``dtype``, ``{}`` otherwise
    (the configured tolerances apply unchanged)."""
    floor = DTYPE_TOLERANCES.get(dtype or "")
    if floor is None:
        return {}
    return {
        "dtype": dtype,
        "abs_max": max(abs_max, floor["abs_max"]),
        "rel_max": max(rel_max, floor["rel_max"]),
    }


def limit_for(tolerance: dict[str, Any], metric: str, configured: float) -> float:
    """The ``abs`` / ``rel`` limit a model is held to: its dtype's, else the configured."""
    value = tolerance.get(f"{metric}_max") if tolerance else None
    return configured if not isinstance(value, (int, float)) else max(configured, value)


def output_limits(
    name: str, outputs: Sequence[OutputTolerance], abs_max: float, rel_max: float
) -> tuple[float, float]:
    """``(abs_max, rel_max)`` of output ``name``: the last matching glob's values, the
    model's where it sets none."""
    for pattern, a, r in outputs:
        if fnmatch.fnmatchcase(name, pattern):
            abs_max = abs_max if a is None else a
            rel_max = rel_max if r is None else r
    return abs_max, rel_max


def outputs_over(
    errors: dict[str, list[float]],
    outputs: Sequence[OutputTolerance],
    abs_max: float,
    rel_max: float,
) -> list[tuple[str, str, float, float]]:
    """(output, "abs"|"rel", error, limit) of each output over its own tolerance;
    ``errors`` is ``{name: [abs, rel]}`` (``ObservationResult.output_errors``). NaN is over."""
    over = []
    for name, values in errors.items():
        limits = output_limits(name, outputs, abs_max, rel_max)
        for metric, value, limit in zip(("abs", "rel"), values, limits):
            if value != value or value > limit:
                over.append((name, metric, value, limit))
    return over
