"""The first divergence on a tiny left-padded Llama (random weights, no hub).

Left padding makes the padded query rows attend to nothing: torch and onnxruntime fill
them differently, an error confined to positions the attention mask drops. With the mask
given, the search judges kept positions first: a real divergence at kept positions (an
export-only branch in one MLP) is still found behind the padding noise, and the padding
alone is named as such.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from observer_ci.core.constants import MASKED_POSITIONS  # noqa: E402
from observer_ci.pipeline.divergence import locate_first_divergence  # noqa: E402
from observer_ci.pipeline.onnx_exporter import onnx_export  # noqa: E402

pytestmark = pytest.mark.transformers


class ExportOnlyMLP(torch.nn.Module):
    """Wraps a decoder layer's MLP; scales its output only while exporting."""

    def __init__(self, mlp: torch.nn.Module) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, x):
        y = self.mlp(x)
        if torch.compiler.is_exporting():
            y = y * 1.5  # the MLP's export-only branch
        return y


def tiny_llama(bad_layer: int | None) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
    )
    model = LlamaForCausalLM(config).eval()
    if bad_layer is not None:
        layer = model.model.layers[bad_layer]
        layer.mlp = ExportOnlyMLP(layer.mlp)
    return model


def locate(model, tmp_path: Path):
    ids = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 7, dtype=torch.int64)
    mask[0, :3] = 0  # left padding
    kwargs = {"input_ids": ids, "attention_mask": mask, "use_cache": False}
    path = tmp_path / "llama.onnx"
    onnx_export(model, (), kwargs, None, 20).save(str(path))
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    return locate_first_divergence(
        model, str(path), (), kwargs, feeds, 1e-4, 0.1, valid=mask.numpy() == 1
    )


def test_left_padding_alone_is_named_at_the_first_attention(tmp_path):
    found = locate(tiny_llama(None), tmp_path)
    assert found is not None
    assert (found.module, found.module_class) == ("model.layers.0.self_attn", "LlamaAttention")
    assert found.known_case == MASKED_POSITIONS
    assert found.source.split(":")[0].endswith("modeling_llama.py")


def test_a_wrong_mlp_is_found_behind_the_padding(tmp_path):
    found = locate(tiny_llama(1), tmp_path)
    assert found is not None
    assert (found.module, found.module_class) == ("model.layers.1.mlp", "ExportOnlyMLP")
    assert found.source.endswith("y = y * 1.5  # the MLP's export-only branch")
    assert found.known_case is None and "did not run this line" in found.note
