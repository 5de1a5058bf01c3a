"""Discrepancy measures: floats always, explicit mismatch errors."""

import numpy as np
import torch

from observer_ci.pipeline.diff import flatten_outputs, max_diff


def test_exact_match_is_float_zero_and_within_tolerance():
    x = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    d = max_diff([x], [x.numpy()])
    assert d.abs == 0.0 and isinstance(d.abs, float) and isinstance(d.rel, float)
    assert d.within(atol=1e-4, rtol=0.1)
    assert d.n == 6


def test_abs_rel_and_histogram_counts():
    e = np.array([1.0, 2.0, 0.0, 10.0], dtype=np.float32)
    g = np.array([1.0, 2.05, 0.2, 10.0], dtype=np.float32)
    d = max_diff([e], [g], hist=(0.1, 0.01))
    assert abs(d.abs - 0.2) < 1e-6
    assert abs(d.rel - 0.2 / 1e-3) < 1  # |d| / (|e| + 1e-3) at e == 0
    assert d.hist == {">0.1": 1, ">0.01": 2}
    assert not d.within(atol=1e-4, rtol=0.1)


def test_none_outputs_are_skipped_not_counted_as_inf():
    out = {"logits": torch.ones(2), "aux": None}
    flat = flatten_outputs(out)
    assert len(flat) == 1
    d = max_diff(flat, [np.ones(2, dtype=np.float32)])
    assert d.abs == 0.0 and d.comparable


def test_shape_mismatch_is_reported_explicitly():
    d = max_diff([np.zeros((2, 3), np.float32)], [np.zeros((2, 4), np.float32)])
    assert not d.comparable
    assert "shape differs" in d.errors[0] and "(2, 3)" in d.errors[0]
    assert not d.within(1.0, 1.0)


def test_dtype_mismatch_is_reported_but_values_still_compared():
    d = max_diff([np.ones(3, np.int64)], [np.ones(3, np.int32)])
    assert any("dtype differs" in e for e in d.errors)
    assert d.abs == 0.0 and d.n == 3


def test_nan_mismatch_is_reported_and_matching_nans_are_fine():
    e = np.array([np.nan, 1.0], np.float32)
    assert max_diff([e], [e.copy()]).comparable
    d = max_diff([e], [np.array([0.0, 1.0], np.float32)])
    assert d.dnan == 1 and "NaN differs" in d.errors[0]


def test_output_count_mismatch_and_trailing_empty_outputs():
    one = np.ones(2, np.float32)
    assert max_diff([one], [one, np.zeros((0,), np.float32)]).comparable
    d = max_diff([one, one], [one])
    assert "output count differs" in d.errors[0]
