"""Mixture-of-experts models export with ``batched_mm`` experts (switched for the export
only, recorded as a note); float16 / bfloat16 models: their dtype's tolerance, and a cause
with a next step that works where onnxruntime's CPU provider has no kernel."""

import dataclasses

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

import torch  # noqa: E402

from observer_ci.core.results import STATUS_OK, STATUS_ORT_FAILED, RunResults  # noqa: E402
from observer_ci.core.tolerances import DTYPE_TOLERANCES  # noqa: E402
from observer_ci.pipeline.causes import ORT_FAILURE  # noqa: E402
from observer_ci.pipeline.experts import EXPORTABLE, GROUPED, exportable_experts  # noqa: E402
from observer_ci.report.rules import Thresholds, compare  # noqa: E402
from tests.support.families import FAMILIES, assert_served_and_probed, run_examples  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    scripts = ("moe_generate.py", "bf16_model.py")
    return run_examples(tmp_path_factory, *(FAMILIES / s for s in scripts))


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


def test_a_bfloat16_graph_onnxruntime_cannot_run_names_the_kernel_and_a_next_step(runs):
    bf16 = runs["tiny_llama_bf16"]
    assert bf16.status == STATUS_ORT_FAILED and bf16.export.ok
    assert bf16.cause.kind == ORT_FAILURE
    assert "has no bfloat16 kernel for" in bf16.cause.summary
    assert "`model.float()`" in bf16.cause.next_step
    assert bf16.tolerance["dtype"] == "bfloat16"
    # the next step works: the same weights, float32, pass at float32's tolerance
    as_float32 = runs["tiny_llama_bf16_as_float32"]
    assert_served_and_probed(as_float32)
    assert as_float32.tolerance == {}


def test_a_float16_model_is_held_to_its_dtype_tolerance(runs):
    fp16 = runs["tiny_llama_fp16"]
    assert fp16.status == STATUS_OK, fp16.error
    floor = DTYPE_TOLERANCES["float16"]
    assert fp16.tolerance == {"dtype": "float16", **floor}
    assert any("computes in float16" in n and "rel_max" in n for n in fp16.notes)
    worst = max(o.rel for o in fp16.observations)
    # float16 rounds 10 mantissa bits: its error is orders above float32's (1e-7) yet within
    assert 1e-3 < worst <= floor["rel_max"]

    # the parent's discrepancy rule applies the same tolerance, over a user's tighter rel_max
    strict = Thresholds(rel_max=1e-2)

    def rules(model):
        return [r.rule for r in compare(RunResults(models=[model]), None, strict, [])]

    assert rules(fp16) == []
    assert "discrepancy" in rules(dataclasses.replace(fp16, tolerance={}))
