"""Caches that are not key/value (Mamba's convolution and SSM states, hybrid and indexed
layers): flattened by their tensor attributes, exported as graph inputs and outputs; an
input whose tensors reach no graph input is never ``ok``."""

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

from observer_ci import observe  # noqa: E402
from observer_ci.core.results import STATUS_DISCREPANCY  # noqa: E402
from observer_ci.observing import structure  # noqa: E402
from observer_ci.observing.pytrees import register_transformers_pytrees  # noqa: E402
from observer_ci.observing.registry import take_registered  # noqa: E402
from observer_ci.observing.state_layers import hidden_tensors  # noqa: E402
from observer_ci.pipeline.causes import DROPPED_STATE  # noqa: E402
from observer_ci.pipeline.model_steps import process_model  # noqa: E402
from tests.support.families import (  # noqa: E402
    FAMILIES,
    FAST,
    assert_served_and_probed,
    run_examples,
)

STATES = [
    "cache_params_conv_states_0",
    "cache_params_conv_states_1",
    "cache_params_recurrent_states_0",
    "cache_params_recurrent_states_1",
]


@pytest.fixture(scope="module")
def mamba(tmp_path_factory):
    return run_examples(tmp_path_factory, FAMILIES / "mamba_generate.py")["tiny_mamba"]


def test_mamba_decode_graph_takes_and_returns_every_layer_state(mamba):
    assert_served_and_probed(mamba)
    graphs = {g.name: g for g in mamba.graphs}
    assert set(graphs) == {"decoder_model", "decoder_with_past_model", "decoder_model_merged"}
    past = graphs["decoder_with_past_model"].export
    assert [n for n in past.input_names if n.startswith("cache_params")] == STATES
    assert past.input_dims["cache_params_conv_states_0"] == ["batch_size", 32, 4]
    assert past.input_dims["cache_params_recurrent_states_1"] == ["batch_size", 32, 4]
    assert len(past.output_names) == 1 + len(STATES)  # logits and the updated states
    # the prefill starts from no state; its Python loop over the prompt fixes its length
    prefill = graphs["decoder_model"].export
    assert not any(n.startswith("cache_params") for n in prefill.input_names)
    assert prefill.input_dims["input_ids"] == ["batch_size", 3]
    assert len(prefill.output_names) == 1 + len(STATES)
    assert any("decoder_model: exported with the sizes of its own calls" in n for n in mamba.notes)


def _layer(cls_name, **tensors):
    from transformers import cache_utils

    layer = getattr(cache_utils, cls_name)()
    if "keys" in tensors:
        layer.update(tensors.pop("keys"), tensors.pop("values"))
    if "indexer_keys" in tensors:
        layer.update_indexer(tensors.pop("indexer_keys"))
    if "conv_states" in tensors:
        layer.update_conv_state(tensors.pop("conv_states"))
    if "recurrent_states" in tensors:
        layer.update_recurrent_state(tensors.pop("recurrent_states"))
    return layer


def test_every_layer_family_flattens_by_its_tensors_and_rebuilds():
    from transformers.cache_utils import DynamicCache

    register_transformers_pytrees()
    kv = {"keys": torch.rand(1, 2, 3, 4), "values": torch.rand(1, 2, 3, 4)}
    cache = DynamicCache()
    cache.layers = [
        _layer("LinearAttentionLayer", conv_states=torch.rand(1, 8, 4)),  # conv only (LFM2)
        _layer("DynamicLayer", **kv),
        _layer(
            "LinearAttentionAndFullAttentionLayer",
            **kv,
            conv_states=torch.rand(1, 8, 4),
            recurrent_states=torch.rand(1, 8, 5),
        ),  # fmt: skip
        _layer("DynamicIndexedLayer", **kv, indexer_keys=torch.rand(1, 3, 6)),
        _layer("LinearAttentionLayer"),  # not initialised yet
    ]
    names = structure.leaf_names("past_key_values", cache)
    assert names == [
        "past_key_values_key_cache_0",
        "past_key_values_key_cache_1",
        "past_key_values_key_cache_2",
        "past_key_values_value_cache_0",
        "past_key_values_value_cache_1",
        "past_key_values_value_cache_2",
        "past_key_values_conv_states_0",
        "past_key_values_conv_states_1",
        "past_key_values_recurrent_states_0",
        "past_key_values_indexer_keys_0",
    ]
    leaves, spec = pytree.tree_flatten(cache)
    assert hidden_tensors(cache, leaves) == []
    copy = pytree.tree_unflatten([t.clone() for t in leaves], spec)
    assert [type(a).__name__ for a in copy.layers] == [type(b).__name__ for b in cache.layers]
    for old, new in zip(cache.layers, copy.layers):
        for attr in ("keys", "values", "conv_states", "recurrent_states", "indexer_keys"):
            a, b = getattr(old, attr, None), getattr(new, attr, None)
            assert (a is None and b is None) or torch.equal(a, b), attr
        for flag in ("is_initialized", "has_previous_state", "is_conv_states_initialized"):
            assert getattr(old, flag, None) == getattr(new, flag, None), flag
    assert copy.get_seq_length(1) == 3
    assert copy.layers[0].has_previous_state and not copy.layers[4].has_previous_state
    # the context survives serialisation (torch.export.save of a program taking it)
    assert pytree.treespec_loads(pytree.treespec_dumps(spec)) == spec


class LossyState:
    """A state whose pytree registration leaves its tensor out (as observer-ci's cache
    flattening did for Mamba: the stored calls, the export and the replay all lost it)."""

    def __init__(self, h=None):
        self.h = h


class Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = torch.nn.Linear(4, 4)

    def forward(self, x, state=None):
        h = torch.zeros_like(x) if state is None or state.h is None else state.h
        return torch.tanh(self.cell(x) + h)


@pytest.fixture
def lossy_state():
    pytree.register_pytree_node(
        LossyState,
        lambda state: ([], None),
        lambda children, context: LossyState(),
        flatten_with_keys_fn=lambda state: ([], None),
    )
    yield LossyState
    pytree._deregister_pytree_node(LossyState)


def test_a_graph_without_its_inputs_state_is_never_ok(tmp_path, lossy_state):
    torch.manual_seed(0)
    model = Recurrent().eval()
    with torch.no_grad(), observe(model, name="stateful", store_n_calls=3):
        for n in (2, 3, 4):  # a zero state: with or without it, the same outputs
            model(torch.rand(n, 4), state=lossy_state(torch.zeros(n, 4)))
    (entry,) = take_registered()
    result = process_model(entry, tmp_path, config=FAST, progress=lambda _message: None)
    # the export ran without the state and the numbers match ...
    assert all(o.ok and o.abs is not None and o.abs < 1e-4 for o in result.observations)
    # ... and the verdict still fails, naming the input, its type and the lost tensor
    assert result.status == STATUS_DISCREPANCY
    assert result.cause.kind == DROPPED_STATE
    assert "input 'state' (a LossyState)" in result.cause.summary
    assert "state.h (LossyState)" in result.cause.summary
    assert all(not o.success and o.cause.kind == DROPPED_STATE for o in result.observations)
    assert all(not g.success for g in result.graphs)


def test_a_cache_subclass_no_pytree_opens_is_reported_with_its_layers():
    from transformers.cache_utils import DynamicCache

    register_transformers_pytrees()

    class MyCache(DynamicCache):
        pass

    cache = MyCache()
    cache.layers = [_layer("LinearAttentionLayer", conv_states=torch.rand(1, 8, 4))]
    assert hidden_tensors(cache, pytree.tree_leaves(cache), "cache_params") == [
        "cache_params.layers[0].conv_states (LinearAttentionLayer)"
    ]
