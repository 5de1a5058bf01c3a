"""Masks by name and value, aligned over outputs, and the error split by them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from observer_ci.pipeline.masks import align, dropped_positions, masked_value, split_errors


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("attention_mask", False),  # Hugging Face: 0 = masked
        ("decoder_attention_mask", False),
        ("mask", False),
        ("src_key_padding_mask", True),  # torch: True = padded
        ("key_padding_mask", True),
        ("padding_mask", True),
        ("src_mask", None),  # a [seq, seq] attention pattern, not positions
        ("attn_mask", None),
        ("input_ids", None),
    ],
)
def test_which_value_means_masked_is_decided_by_the_name(name, value):
    assert masked_value(name) is value


def test_only_bool_or_0_1_integer_masks_that_drop_something_count():
    hf = torch.tensor([[0, 1, 1], [1, 1, 1]])
    assert dropped_positions("attention_mask", hf).tolist() == [[True, False, False]] + [
        [False] * 3
    ]
    padded = torch.tensor([[False, False, True]])
    assert dropped_positions("key_padding_mask", padded).tolist() == [[False, False, True]]
    assert dropped_positions("attention_mask", torch.ones(2, 3, dtype=torch.int64)) is None
    assert dropped_positions("attention_mask", torch.tensor([[0, 2, 1]])) is None  # not 0/1
    assert dropped_positions("attention_mask", torch.tensor([[0.0, 1.0]])) is None  # float
    assert dropped_positions("input_ids", hf) is None


def test_alignment_over_outputs_prefix_or_one_cache_axis():
    dropped = np.array([[True, False, False], [False, False, False]])
    hidden = align(dropped, (2, 3, 5))
    assert hidden.shape == (2, 3, 5) and hidden[0, 0].all() and not hidden[0, 1].any()
    cache = align(dropped, (2, 4, 3, 7))  # [batch, heads, seq, dim]
    assert cache.shape == (2, 4, 3, 7) and cache[0, :, 0].all() and not cache[1].any()
    seq_first = align(dropped, (3, 2, 5))  # torch's default [seq, batch, hidden]
    assert seq_first.shape == (3, 2, 5) and seq_first[0, 0].all() and not seq_first[1, 0].any()
    assert not seq_first[:, 1].any()
    assert align(dropped, (2, 4, 3, 3)) is None  # two axes of size seq: ambiguous
    assert align(dropped, (5, 3)) is None  # another batch


def _split(expected, got, mask=None):
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]]) if mask is None else mask
    return split_errors(["x", "attention_mask"], [torch.zeros(1), mask], expected, got)


def test_an_error_only_at_masked_positions_is_masked_only():
    expected = np.zeros((2, 3, 4), dtype=np.float32)
    got = expected.copy()
    got[0, 2] = 0.5  # the position attention_mask drops
    got[1, 1] = 1e-6
    split = _split([expected], [got])
    assert split.mask == "attention_mask"
    assert split.masked_abs == pytest.approx(0.5) and split.valid_abs == pytest.approx(1e-6)
    assert split.masked_only(1e-4, 1e-2)


def test_an_error_at_kept_positions_is_not_excused():
    expected = np.zeros((2, 3, 4), dtype=np.float32)
    got = expected.copy()
    got[0, 2] = 0.5
    got[1, 0] = 0.2  # a kept position
    assert not _split([expected], [got]).masked_only(1e-4, 1e-2)
    # an output the mask does not align with counts as kept positions
    other = np.ones((7,), dtype=np.float32)
    masked = expected.copy()
    masked[0, 2] = 0.5
    split = _split([expected, other], [masked, other + 0.3])
    assert split.valid_abs == pytest.approx(0.3, rel=1e-5) and not split.masked_only(1e-4, 1e-2)


def test_nan_on_one_side_is_an_infinite_error_where_it_lies():
    expected = np.zeros((2, 3), dtype=np.float32)
    got = expected.copy()
    got[0, 2] = np.nan
    split = _split([expected], [got])
    assert split.masked_abs == np.inf and split.valid_abs == 0.0
    assert split.masked_only(1e-4, 1e-2)


def test_no_mask_no_split():
    expected = [np.zeros((2, 3), dtype=np.float32)]
    assert split_errors(["x"], [torch.zeros(2, 3)], expected, expected) is None
    ones = torch.ones(2, 3, dtype=torch.int64)  # masks nothing
    assert _split(expected, expected, mask=ones) is None


def test_outputs_that_cannot_be_compared_are_never_excused():
    expected = np.zeros((2, 3), dtype=np.float32)
    masked = expected.copy()
    masked[0, 2] = 0.5
    extra = np.ones((2, 3), dtype=np.float32)
    assert _split([expected], [masked, extra]).valid_abs == np.inf  # count differs
    assert _split([expected], [masked.astype(np.float64)]).valid_abs == np.inf  # dtype
    assert _split([expected], [masked[:, :2]]).valid_abs == np.inf  # shape
    trailing = _split([expected], [masked, np.zeros((0,), dtype=np.float32)])
    assert trailing.masked_only(1e-4, 1e-2)  # onnxruntime's trailing empty output
