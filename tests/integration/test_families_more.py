"""Families the first examples did not cover (issue 12, "build for the family"): a hybrid
sliding/full cache (Gemma 2), an encoder with an optional input (BERT), generate() with
batch 1 and 2 (Qwen2), mixture-of-experts blocks, a StaticCache that no pytree opens, and
``**kwargs`` names torch.export cannot take."""

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

import torch  # noqa: E402

from observer_ci import observe  # noqa: E402
from observer_ci.core.results import STATUS_EXPORT_FAILED  # noqa: E402
from observer_ci.observing.observer import InputObserver  # noqa: E402
from observer_ci.observing.registry import take_registered  # noqa: E402
from observer_ci.pipeline.causes import (  # noqa: E402
    INPUT_NAME,
    UNREGISTERED_TYPE,
    UNSUPPORTED_OP,
    explain_exception,
)
from observer_ci.pipeline.model_steps import process_model  # noqa: E402
from tests.support.families import (  # noqa: E402
    FAMILIES,
    FAST,
    assert_served_and_probed,
    run_examples,
)

SCRIPTS = ("gemma2_hybrid_cache.py", "bert_optional_token_types.py", "qwen2_batch_1_and_2.py")


@pytest.fixture(scope="module")
def more(tmp_path_factory):
    return run_examples(tmp_path_factory, *(FAMILIES / s for s in SCRIPTS))


def test_hybrid_sliding_and_full_cache_matches_torch(more):
    # before: every decode step was 0.1-0.3 off, the capped layer's mask offset was lost
    gemma = more["gemma2_hybrid"]
    assert_served_and_probed(gemma)
    graphs = {g.name: g for g in gemma.graphs}
    assert set(graphs) == {"decoder_model", "decoder_with_past_model", "decoder_model_merged"}
    assert graphs["decoder_model"].observation_indices == [0]
    # the capped (sliding) layer stays static, the full layer's past length is dynamic
    dims = graphs["decoder_with_past_model"].export.input_dims
    assert dims["past_key_values_key_cache_0"][2] == 3  # sliding_window - 1
    assert isinstance(dims["past_key_values_key_cache_1"][2], str)
    # each graph is judged on its own calls: the decode graph's static sequence is fine
    assert not [w for w in gemma.warnings if w.rule == "dim_static_in_onnx"]


def test_encoder_call_without_an_optional_input_gets_its_own_graph(more):
    bert = more["bert_token_types"]
    assert_served_and_probed(bert)
    graphs = {g.name: g for g in bert.graphs}
    assert set(graphs) == {"model", "model_without_token_type_ids"}
    alone = graphs["model_without_token_type_ids"]
    assert alone.observation_indices == [1] and "absent and empty differently" in alone.reason
    assert "token_type_ids" not in alone.export.input_names
    assert "token_type_ids" in graphs["model"].export.input_names


def test_generate_with_batch_1_and_2_shares_one_graph(more):
    qwen = more["qwen2_batch_1_and_2"]
    assert_served_and_probed(qwen)
    assert [g.name for g in qwen.graphs] == ["model"] and qwen.n_observations == 6
    assert qwen.export.sample_index == 3  # the batch-2 prefill, not a batch of 1
    assert [o.index for o in qwen.observations if o.stand_ins] == [0, 3]  # the prefills
    assert qwen.export.input_dims["input_ids"] == ["batch_size", "sequence_length"]


def test_a_static_cache_no_pytree_opens_is_named_with_a_next_step():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        pad_token_id=0,
        eos_token_id=1,
    )
    model = LlamaForCausalLM(config).eval()
    observer = InputObserver()
    ids = torch.randint(2, 64, (1, 4))
    with torch.no_grad(), observer(model, store_n_calls=2):
        model.generate(ids, cache_implementation="static", max_new_tokens=2, do_sample=False)
    ignored = observer.observations[0].ignored
    assert ignored["past_key_values"] == "StaticCache"  # the type, not "no tensor"
    # whatever torch.export then says, the dropped cache is the cause
    cause = explain_exception(
        RuntimeError("The size of tensor a (s69) must match"), observer=observer
    )
    assert cause.kind == UNREGISTERED_TYPE
    assert "'past_key_values' is a StaticCache" in cause.summary
    assert "cache_implementation" in cause.next_step


def _processed(model, calls, name, out):
    with torch.no_grad(), observe(model, name=name, store_n_calls=len(calls)):
        for kwargs in calls:
            model(**kwargs)
    (entry,) = take_registered()
    return process_model(entry, out, config=FAST, progress=lambda _message: None)


def _moe_block(experts_implementation):
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    config = MixtralConfig(
        hidden_size=16, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2
    )
    config._experts_implementation = experts_implementation
    torch.manual_seed(0)
    block = MixtralSparseMoeBlock(config).eval()
    with torch.no_grad():  # a block alone is not initialised by a model's post_init
        for parameter in block.parameters():
            parameter.normal_(std=0.1)
    return block


def test_mixture_of_experts_names_the_implementation_that_exports(tmp_path):
    calls = [{"hidden_states": torch.randn(2, n, 16)} for n in (5, 7)]
    # transformers' default experts kernel: no ONNX translation, and the row says what to do
    grouped = _processed(_moe_block("grouped_mm"), calls, "moe_grouped_mm", tmp_path)
    assert grouped.status == STATUS_EXPORT_FAILED
    assert grouped.cause.kind == UNSUPPORTED_OP and "MixtralExperts" in grouped.cause.summary
    assert 'set_experts_implementation("batched_mm")' in grouped.cause.next_step
    # the advice holds: the same block with batched_mm exports and matches torch
    batched = _processed(_moe_block("batched_mm"), calls, "moe_batched_mm", tmp_path)
    assert batched.status == "ok", batched.error
    assert all(o.success and o.abs < 1e-4 for o in batched.observations)
    assert batched.probe.success


class KeywordsOnly(torch.nn.Module):
    def forward(self, **inputs):
        return sum(v.sum(dim=-1) for v in inputs.values())


def test_a_kwargs_name_that_is_no_identifier_is_named_with_a_next_step(tmp_path):
    hostile = "x|<b>@y"
    calls = [{hostile: torch.randn(n, 4), "z": torch.randn(n, 4)} for n in (2, 3)]
    model = _processed(KeywordsOnly(), calls, "<img src=x>|@octocat", tmp_path)
    assert model.status == STATUS_EXPORT_FAILED
    assert model.cause.kind == INPUT_NAME and repr(hostile) in model.cause.summary
    assert model.export.failed_samples[1:] == []  # the name fails every sample: tried once
