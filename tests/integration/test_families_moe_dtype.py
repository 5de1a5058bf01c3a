"""Mixture-of-experts models export with ``batched_mm`` experts (switched for the export
only, recorded as a note)."""

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

import torch  # noqa: E402

from observer_ci.pipeline.experts import EXPORTABLE, GROUPED, exportable_experts  # noqa: E402
from tests.support.families import FAMILIES, assert_served_and_probed, run_examples  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_examples(tmp_path_factory, FAMILIES / "moe_generate.py")


def test_moe_experts_export_as_batched_mm_and_match(runs):
    moe = runs["tiny_qwen3_moe"]
    assert_served_and_probed(moe)
    assert [g.name for g in moe.graphs] == ["model"]
    assert any(f"exported with `{EXPORTABLE}` experts" in n for n in moe.notes)
    assert moe.export.failed_samples == []  # no sample failed on grouped_mm first


def test_the_switch_is_scoped_to_the_export():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        vocab_size=32,
        hidden_size=8,
        intermediate_size=16,
        moe_intermediate_size=4,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=4,
        num_experts=2,
        num_experts_per_tok=1,
    )
    model = Qwen3MoeForCausalLM(config).eval()
    assert model.config._experts_implementation == GROUPED
    with exportable_experts(model) as notes:
        assert model.config._experts_implementation == EXPORTABLE
        assert len(notes) == 1
    assert model.config._experts_implementation == GROUPED
    with exportable_experts(torch.nn.Linear(2, 2)) as notes:  # not a MoE model: no note
        assert notes == []
