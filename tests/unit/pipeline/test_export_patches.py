"""The export patches and graph clean-ups on their own: each gives torch's numbers, is
found by the code it replaces, and is in place only while its block runs."""

import pytest
import torch

from observer_ci.pipeline import onnx_translations
from observer_ci.pipeline.export_patches import applicable_patches, export_patches
from observer_ci.pipeline.grid_patches import _attention_by_frame_as_one, _frames, sample_grid_rows


class Dangling(torch.nn.Module):
    def forward(self, x):
        unused = torch.sum(torch.mul(x, 2))  # noqa: F841 - what a dropped assertion leaves behind
        return x + 1


def test_unread_nodes_fed_by_erased_ones_are_erased_transitively():
    traced = torch.fx.symbolic_trace(Dangling())
    graph = traced.graph
    (summed,) = [n for n in graph.nodes if n.target is torch.sum]
    onnx_translations._erase_unread(graph, [summed])
    left = [n.target for n in graph.nodes if n.op == "call_function"]
    assert torch.sum not in left and torch.mul not in left
    assert len(left) == 1  # x + 1, read by the output: kept
    assert torch.equal(traced(torch.ones(2)), torch.full((2,), 2.0))


def test_dead_checks_removed_only_while_the_block_runs():
    from torch.onnx._internal.exporter import _fx_passes

    original = _fx_passes.remove_assertion_nodes
    with onnx_translations.dead_checks_removed():
        assert _fx_passes.remove_assertion_nodes is not original
    assert _fx_passes.remove_assertion_nodes is original


@pytest.mark.parametrize(
    ("grid", "row"),
    [
        (torch.tensor([[1, 4, 4], [1, 4, 4]]), [(1, 4, 4)]),  # one row, repeated per image
        (torch.tensor([[1, 4, 4], [1, 4, 8]]), [(1, 4, 4), (1, 4, 8)]),  # this grid only
        (torch.tensor([[1.0, 4.0, 4.0]]), None),
        (None, None),
    ],
)
def test_sample_grid_rows(grid, row):
    assert sample_grid_rows(((), {"image_grid_thw": grid})) == row


class FakeCache:
    def __init__(self, previous):
        self.previous = previous

    def has_previous_state(self):
        return self.previous


class HybridModel(torch.nn.Module):
    def _update_mamba_mask(self, attention_mask, past_key_values):
        mamba_mask = attention_mask
        if (past_key_values is not None and past_key_values.has_previous_state()) or (
            attention_mask is not None and torch.all(attention_mask == 1)
        ):
            mamba_mask = None
        return mamba_mask


def test_mamba_mask_kept_while_exporting_only():
    model, ones = HybridModel(), torch.ones(2, 3, dtype=torch.long)
    assert [(c, n) for c, n, _ in applicable_patches(model)] == [
        (HybridModel, "_update_mamba_mask")
    ]
    with export_patches(model) as names:
        assert names == ["HybridModel._update_mamba_mask"]
        assert model._update_mamba_mask(ones, FakeCache(False)) is ones  # kept: x * 1 == x
        assert model._update_mamba_mask(ones, FakeCache(True)) is None  # cached: as before
    assert model._update_mamba_mask(ones, FakeCache(False)) is None


def test_vision_attention_by_frame_as_one_matches_the_split_attention():
    pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")
    from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig

    config = Qwen2VLVisionConfig(embed_dim=16, num_heads=2, depth=1)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    attention = qwen.VisionAttention(config).eval()
    for rows, images in (([(1, 4, 4)], 3), ([(1, 4, 4), (2, 2, 4)], 1)):  # one row, two rows
        frames = _frames(rows)
        length = frames.shape[0] * images
        hidden = torch.randn(length, 16)
        angles = torch.randn(length, 4)  # half the head dim (16 / 2 heads)
        embeddings = (torch.cat([angles] * 2, -1).cos(), torch.cat([angles] * 2, -1).sin())
        sizes = torch.bincount(frames).repeat(images)
        cu_seqlens = torch.nn.functional.pad(sizes.cumsum(0), (1, 0)).int()
        patched = _attention_by_frame_as_one(qwen.VisionAttention.forward, frames)
        with torch.no_grad():
            expected = attention(hidden, cu_seqlens=cu_seqlens, position_embeddings=embeddings)
            got = patched(attention, hidden, cu_seqlens, embeddings)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)


def test_every_translation_and_patch_is_listed_in_the_readme():
    from pathlib import Path

    from observer_ci.pipeline.onnx_translations import translated_op_names

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    for name in translated_op_names():
        assert f"`{name}`" in readme
    for construct in (
        "list(image_features)",
        "_update_mamba_mask",
        "image_grid_thw",
        "rope_deltas",
    ):
        assert construct in readme
