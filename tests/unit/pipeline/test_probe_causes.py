"""What the probe's red says when onnxruntime disagrees with torch at unseen sizes: a small
absolute error over rel_max only near 0 is rounding, a large one a different computation."""

from __future__ import annotations

import numpy as np
import torch

from observer_ci.pipeline.diff import max_diff
from observer_ci.pipeline.probe import _mismatch_cause

SHAPES = {"x": [4, 10]}
INPUTS = (["x"], [torch.zeros(4, 10)])


def cause_of(expected: list[float], got: list[float], atol: float = 1e-3, rtol: float = 1e-1):
    e, g = [np.array(expected, np.float32)], [np.array(got, np.float32)]
    diff = max_diff(e, g)
    return _mismatch_cause(torch.nn.Identity(), *INPUTS, e, g, diff, SHAPES, atol, rtol)


def test_an_error_within_abs_max_over_rel_max_near_zero_is_rounding_with_its_figures():
    cause = cause_of([2e-4, 0.5], [2e-4 + 4e-4, 0.5])  # abs 4e-4 <= 1e-3, rel 0.33 > 0.1
    assert cause.kind == "probe_failure"
    assert "rounding where outputs are near 0" in cause.summary
    assert "0.0004" in cause.summary and "abs_max 0.001" in cause.summary
    assert "rel_max 0.1" in cause.summary and "branch" in cause.summary  # says what it is not
    assert "rel_max: 0.67" in cause.next_step


def test_an_error_over_abs_max_is_still_what_the_export_sample_decided():
    cause = cause_of([0.0, 0.5], [0.0, 0.9])
    assert "a branch on a size" in cause.summary and "rounding" not in cause.summary
    assert "max abs error 0.4" in cause.summary
