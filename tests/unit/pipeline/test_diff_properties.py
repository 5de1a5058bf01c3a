"""max_diff against a direct numpy computation, and at its exact edges (bins, tolerances)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from observer_ci.pipeline.diff import REL_EPSILON, flatten_outputs, max_diff

HIST = (0.5, 0.01, 1e-4)

NOISE = np.array([0.0, 1e-5, -3e-3, 0.02, 0.5, -2.0, 7.0], np.float32)
shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


def nested(leaves: st.SearchStrategy) -> st.SearchStrategy:
    """Outputs as models return them: leaves inside tuples, lists and dicts."""
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, min_size=1, max_size=3),
            st.tuples(inner, inner),
            st.dictionaries(st.sampled_from("abc"), inner, min_size=1, max_size=3),
        ),
        max_leaves=5,
    )


layouts = nested(shapes)


@st.composite
def expected_and_got(draw) -> tuple[object, list[np.ndarray]]:
    """A nested output of float32 arrays and a perturbed copy of its flat leaves.

    Hypothesis draws the nesting, the shapes and a seed; numpy fills the values (drawing
    every element through Hypothesis costs ~100 ms an example).
    """
    layout = draw(layouts)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    expected = _fill(layout, rng)
    got = [
        (leaf + rng.choice(NOISE, size=leaf.shape)).astype(np.float32).reshape(leaf.shape)
        for leaf in flatten_outputs(expected)
    ]
    return expected, got


def _fill(layout, rng):
    if isinstance(layout, tuple) and all(isinstance(d, int) for d in layout):  # a shape
        scale = rng.choice([1e-3, 1.0, 1e3])
        return (rng.standard_normal(layout) * scale).astype(np.float32).reshape(layout)
    if isinstance(layout, dict):
        return {k: _fill(v, rng) for k, v in layout.items()}
    return type(layout)(_fill(v, rng) for v in layout)


def direct(expected: list[np.ndarray], got: list[np.ndarray]) -> dict[str, float]:
    """The same measures written the plain way, over all elements of all outputs."""
    e = np.concatenate([x.astype(np.float64).ravel() for x in expected] + [np.zeros(0)])
    g = np.concatenate([x.astype(np.float64).ravel() for x in got] + [np.zeros(0)])
    d = np.abs(e - g)
    return {
        "abs": float(d.max()) if d.size else 0.0,
        "rel": float((d / (np.abs(e) + REL_EPSILON)).max()) if d.size else 0.0,
        "sum": float(d.sum()),
        "n": d.size,
        **{f">{h:g}": int(np.count_nonzero(d > h)) for h in HIST},
    }


@given(expected_and_got())
def test_abs_rel_sum_and_histogram_agree_with_numpy(case):
    expected, got = case
    flat = flatten_outputs(expected)
    diff = max_diff(flat, got, hist=HIST)
    want = direct(flat, got)
    assert diff.comparable, diff.errors
    assert diff.abs == want["abs"] and diff.rel == want["rel"]
    assert diff.sum == pytest.approx(want["sum"], rel=1e-12, abs=1e-12)
    assert diff.n == want["n"]
    assert diff.hist == {k: want[k] for k in diff.hist}
    assert diff.within(want["abs"], want["rel"])


@given(expected_and_got())
def test_torch_tensors_on_either_side_give_the_same_measures(case):
    expected, got = case
    flat = flatten_outputs(expected)
    as_numpy = max_diff(flat, got, hist=HIST)
    as_torch = max_diff([torch.from_numpy(x) for x in flat], [torch.from_numpy(g) for g in got])
    assert (as_torch.abs, as_torch.rel, as_torch.n) == (as_numpy.abs, as_numpy.rel, as_numpy.n)
    assert as_torch.dev == 0 and as_torch.comparable


# -- exact edges -------------------------------------------------------------------------


def test_an_element_exactly_on_a_bin_edge_is_not_above_it():
    expected = np.zeros(4, np.float32)
    got = np.array([0.5, np.nextafter(np.float32(0.5), np.float32(1)), 0.25, 0.0], np.float32)
    diff = max_diff([expected], [got], hist=(0.5, 0.25))
    assert diff.hist == {">0.5": 1, ">0.25": 2}


def test_within_is_inclusive_at_both_tolerances():
    diff = max_diff([np.array([1.0], np.float32)], [np.array([1.5], np.float32)])
    assert diff.abs == 0.5
    assert diff.within(0.5, diff.rel)
    assert not diff.within(math.nextafter(0.5, 0), diff.rel)
    assert not diff.within(0.5, math.nextafter(diff.rel, 0))


def test_the_worst_output_need_not_be_the_last_and_counts_add_up():
    outputs = [np.array([0.0, 0.0], np.float32), np.array([1.0], np.float32)]
    got = [np.array([0.75, 0.0625], np.float32), np.array([1.0625], np.float32)]
    diff = max_diff(outputs, got, hist=(0.5, 0.05))
    assert diff.abs == 0.75  # from the first output
    assert diff.rel == pytest.approx(0.75 / REL_EPSILON)
    assert diff.sum == 0.75 + 0.0625 + 0.0625
    assert diff.n == 3
    assert diff.hist == {">0.5": 1, ">0.05": 3}


def test_a_single_element_output_is_compared():
    diff = max_diff([torch.tensor(2.0)], [np.array(2.5, np.float32)])
    assert (diff.abs, diff.n) == (0.5, 1)


def test_bfloat16_expected_is_compared_as_float():
    expected = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    diff = max_diff([expected], [torch.tensor([1.0, 2.5], dtype=torch.bfloat16)])
    assert diff.comparable and diff.abs == 0.5 and diff.dev == 0


def test_nan_on_one_side_is_an_error_and_kept_out_of_abs():
    expected = [np.array([np.nan, 1.0, 5.0], np.float32), np.array([np.nan], np.float32)]
    got = [np.array([0.0, np.nan, 5.25], np.float32), np.array([0.0], np.float32)]
    diff = max_diff(expected, got)
    assert diff.dnan == 3  # two in the first output, one in the second: counts add up
    assert [e.split(":")[0] for e in diff.errors] == ["output 0", "output 1"]
    assert diff.abs == 0.25 and diff.n == 1  # only the element both sides have


def test_infinities_equal_on_both_sides_match_and_differing_ones_are_errors():
    inf = np.float32(np.inf)
    same = max_diff([np.array([inf, -inf, 1.0], np.float32)], [np.array([inf, -inf, 1.0])])
    assert same.abs == 0.0 and same.n == 1
    assert not [e for e in same.errors if "infinite" in e]
    for other in (-inf, 1.0):
        diff = max_diff([np.array([inf, 1.0], np.float32)], [np.array([other, 1.0], np.float32)])
        assert diff.errors == ["output 0: infinite values differ"]
        assert diff.abs == math.inf and diff.rel == math.inf and diff.n == 2


def test_trailing_empty_outputs_are_dropped_only_past_the_expected_count():
    one, empty = np.ones(2, np.float32), np.zeros((0, 3), np.float32)
    assert max_diff([one, empty], [one, empty]).comparable  # an expected empty output stays
    assert max_diff([one], [one, empty, empty]).comparable
    extra = max_diff([one], [one, empty, one])  # a real extra output behind an empty one
    assert extra.errors == ["output count differs: expected 1, got 3"]


def test_as_row_lists_every_measure_as_float_and_joins_errors():
    diff = max_diff(
        [np.array([0.0, 1.0], np.float32), np.ones(2, np.int64)],
        [np.array([0.25, 1.0], np.float32), np.ones(2, np.int32)],
        hist=(0.1,),
    )
    row = diff.as_row()
    assert row == {
        "abs": 0.25,
        "rel": 0.25 / REL_EPSILON,
        "sum": 0.25,
        "n": 4.0,
        "dnan": 0.0,
        "dev": 0.0,
        ">0.1": 1.0,
        "error": "output 1: dtype differs: expected int64, got int32",
    }
    assert all(type(v) is float for k, v in row.items() if k != "error")
    assert "error" not in max_diff([np.ones(1)], [np.ones(1)]).as_row()


def test_as_row_joins_several_errors_with_semicolons():
    row = max_diff([np.ones(2), np.ones(3)], [np.ones(3), np.ones(2)]).as_row()
    assert row["error"] == (
        "output 0: shape differs: expected (2,), got (3,); "
        "output 1: shape differs: expected (3,), got (2,)"
    )
