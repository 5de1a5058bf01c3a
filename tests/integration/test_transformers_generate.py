"""generate() of a random tiny Llama with a DynamicCache, observed end to end."""

import pytest
import torch

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

from observer_ci.core.results import STATUS_OK  # noqa: E402
from observer_ci.pipeline.config import RunConfig  # noqa: E402
from observer_ci.pipeline.scripts import run_script  # noqa: E402
from tests.support import REPO_ROOT

SCRIPT = REPO_ROOT / "examples" / "tiny_llama_generate.py"


def one_layer_llama():
    """A one-layer random Llama (vocabulary of 100) for observer-only checks."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    out = tmp_path_factory.mktemp("llama")
    (model,) = run_script(
        str(SCRIPT), out, config=RunConfig(warmup=1, repeat=2), progress=lambda m: None
    )
    return model


@pytest.mark.transformers
def test_generate_prefill_and_decode_share_one_graph(llama):
    assert llama.status == STATUS_OK, llama.error
    names = [i.name for i in llama.inputs]
    assert names[:3] == ["input_ids", "attention_mask", "position_ids"]
    assert names[3:] == [
        "past_key_values_key_cache_0",
        "past_key_values_key_cache_1",
        "past_key_values_value_cache_0",
        "past_key_values_value_cache_1",
    ]
    dyn = {i.name: i.dynamic_dims for i in llama.inputs}
    # the sequence / cache length varied; the batch is flagged by set_batch_dimension_for
    assert dyn["input_ids"] == [0, 1] and dyn["attention_mask"] == [0, 1]
    assert all(dyn[n] == [0, 2] for n in names[3:])
    # the prefill call had an empty cache: absent in the observation, 0-length when replayed
    prefill = llama.observations[0]
    assert prefill.n_none == 4 and prefill.success
    assert all(o.success and o.abs < 1e-4 for o in llama.observations)
    assert "logits_to_keep" in llama.dynamic_shapes  # generate's constant
    # scalars whose default is None are not inputs: the report says so
    assert any("use_cache (scalar bool)" in n for n in llama.notes), llama.notes


@pytest.mark.transformers
def test_prefill_is_the_first_sample_tried(llama):
    # transformers' sdpa path branches on `seq > 1`: a seq=1 decode call cannot be the sample;
    # the ranking puts the prefill first, so no decode call is tried (and fails) before it
    assert llama.export.sample_index == 0
    assert llama.export.failed_samples == []
    assert [g.name for g in llama.graphs] == ["model"]
    assert {o.family for o in llama.observations} == {"model"}
    prefill = llama.observations[0]
    assert prefill.stand_ins and "stand-ins" in prefill.note
    dims = llama.export.input_dims
    assert isinstance(dims["past_key_values_key_cache_0"][2], str)
    assert all(isinstance(dims[name][0], str) for name in dims)  # the batch is symbolic


@pytest.mark.transformers
def test_probe_runs_an_unseen_cache_length(llama):
    probe = llama.probe
    assert probe.ran and probe.success, probe
    seen = {s[2] for i in llama.inputs[3:] for s in i.shapes if s}
    assert probe.shapes["past_key_values_key_cache_0"][2] not in seen
    assert probe.shapes["attention_mask"][1] == probe.shapes["past_key_values_key_cache_0"][2] + 1
    assert {s[0] for s in probe.shapes.values()} == {3}  # a batch size never observed (2)


@pytest.mark.transformers
def test_observer_rebuilds_an_empty_cache_for_the_prefill_call():
    from observer_ci import InputObserver

    model = one_layer_llama()
    obs = InputObserver()
    with torch.no_grad(), obs(model):
        model.generate(torch.randint(3, 100, (1, 4)), max_new_tokens=3, do_sample=False)
    assert obs.num_obs() == 3
    prefill = obs.infer_arguments(0)
    cache = prefill["past_key_values"]
    assert type(cache).__name__ == "DynamicCache"
    assert cache.layers[0].keys.shape == (1, 1, 0, 16)
    assert "forward" not in vars(model)


@pytest.mark.transformers
def test_generate_graph_has_one_name_per_dimension_and_no_anonymous_symbol(llama):
    import re

    dims = llama.export.input_dims
    assert {dims[name][0] for name in dims} == {"batch_size"}  # every batch axis, one name
    assert dims["input_ids"] == ["batch_size", "sequence_length"]
    assert dims["attention_mask"] == ["batch_size", "past_sequence_length + sequence_length"]
    assert dims["past_key_values_key_cache_0"] == ["batch_size", 2, "past_sequence_length", 16]
    anonymous = re.compile(r"\bs\d+\b")
    assert not [d for ds in dims.values() for d in ds if anonymous.search(str(d))]
    # outputs carry the names too (the present cache grows by the new tokens)
    present = [ds for name, ds in llama.export.output_dims.items() if len(ds) == 4]
    assert present and all(
        ds == ["batch_size", 2, "past_sequence_length + sequence_length", 16] for ds in present
    )
    names = {i.name: i.dim_names for i in llama.inputs}
    assert names["position_ids"] == ["batch_size", "sequence_length"]


@pytest.mark.transformers
def test_readme_snippet_exports_generate_from_the_prefill():
    # the README's own snippet (infer, then torch.onnx.export) on generate() with four stored
    # calls: infer_arguments() picks the prefill, not a decode call that cannot trace
    from observer_ci import InputObserver

    model = one_layer_llama()
    input_ids = torch.randint(3, 100, (2, 6))
    obs = InputObserver()
    with torch.no_grad(), obs(model, store_n_calls=5):
        model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=4,
            do_sample=False,
            pad_token_id=0,
        )
    assert obs.num_obs() == 4
    args, kwargs = obs.infer_arguments(as_args_kwargs=True)
    assert args == () and kwargs["input_ids"].shape == (2, 6)  # the prefill
    ds = obs.infer_dynamic_shapes(set_batch_dimension_for=True)
    with torch.no_grad():
        program = torch.onnx.export(model, args, kwargs=kwargs, dynamic_shapes=ds, dynamo=True)
    rows = obs.check_discrepancies(program)
    assert [r["SUCCESS"] for r in rows] == [True] * 4, rows
