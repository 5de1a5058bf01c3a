"""A tiny random Llama with a ``DynamicCache`` exported with ``torch.onnx.export(dynamo=True)``.

Checks the forward kwargs ``generate`` sends, the pytree registration of ``DynamicCache``
(``observer_ci.observing.pytrees``), the ONNX input/output names and onnxruntime against torch on
decode-step inputs and on a prefill step fed as an empty (0-length) cache.
See notes/llama-cache-findings.md. About 10 s on CPU.
"""

from __future__ import annotations

import inspect
import time
import warnings

import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree

transformers = pytest.importorskip(
    "transformers", reason="needs the optional transformers extra (pip install '.[transformers]')"
)
ort = pytest.importorskip("onnxruntime")

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.cache_utils import DynamicCache  # noqa: E402

from observer_ci.observing.pytrees import (  # noqa: E402
    cache_dynamic_shapes,
    describe_cache,
    make_dynamic_cache,
    register_transformers_pytrees,
)

N_LAYERS, KV_HEADS, HEAD_DIM, VOCAB = 2, 2, 16, 1000
ATOL = 1e-4
INPUT_NAMES = [
    "input_ids",
    "attention_mask",
    "position_ids",
    "past_key_values_key_cache_0",
    "past_key_values_key_cache_1",
    "past_key_values_value_cache_0",
    "past_key_values_value_cache_1",
]
OUTPUT_NAMES = ["logits"] + [
    f"present_{kind}_{i}" for kind in ("key_cache", "value_cache") for i in range(N_LAYERS)
]


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=N_LAYERS,
        num_attention_heads=4,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(config).eval()


def step_inputs(batch: int, past: int, seq: int, seed: int = 1) -> dict:
    """Inputs of one forward call: ``past`` cached tokens, ``seq`` new ones."""
    gen = torch.Generator().manual_seed(seed)
    cache = make_dynamic_cache(
        [
            (
                torch.randn(batch, KV_HEADS, past, HEAD_DIM, generator=gen),
                torch.randn(batch, KV_HEADS, past, HEAD_DIM, generator=gen),
            )
            for _ in range(N_LAYERS)
        ]
    )
    return {
        "input_ids": torch.randint(0, VOCAB, (batch, seq), generator=gen),
        "attention_mask": torch.ones(batch, past + seq, dtype=torch.int64),
        "position_ids": torch.arange(past, past + seq).expand(batch, -1).contiguous(),
        "past_key_values": cache,
    }


def ort_feeds(sess, inputs: dict) -> dict[str, np.ndarray]:
    leaves = pytree.tree_leaves(inputs)
    names = [i.name for i in sess.get_inputs()]
    assert len(names) == len(leaves)
    return {name: leaf.numpy() for name, leaf in zip(names, leaves, strict=True)}


def torch_outputs(model, inputs: dict) -> list[np.ndarray]:
    # The forward appends to the cache in place: give it a copy.
    inputs = dict(inputs)
    cache = inputs["past_key_values"]
    inputs["past_key_values"] = pytree.tree_unflatten(*pytree.tree_flatten(cache))
    with torch.no_grad():
        out = model(**inputs)
    return [t.numpy() for t in [out.logits, *pytree.tree_leaves(out.past_key_values)]]


def max_diff(got: list[np.ndarray], expected: list[np.ndarray]) -> float:
    assert [g.shape for g in got] == [e.shape for e in expected]
    return max(float(np.abs(g - e).max()) for g, e in zip(got, expected, strict=True))


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    register_transformers_pytrees()
    return tiny_llama()


@pytest.fixture(scope="module")
def exported(model):
    """Exports with decode-step inputs: seq=3 (seq=1 fails, see the notes), past=5."""
    inputs = step_inputs(batch=2, past=5, seq=3)
    cache = inputs["past_key_values"]
    dynamic_shapes = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"},
        "position_ids": {0: "batch", 1: "seq"},
        "past_key_values": cache_dynamic_shapes(cache, "batch", "past"),
    }
    assert dynamic_shapes["past_key_values"] == [[{0: "batch", 2: "past"}] * N_LAYERS] * 2
    begin = time.perf_counter()
    with warnings.catch_warnings():
        # "The axis name: batch will not be used, since it shares the same shape ...": benign
        warnings.simplefilter("ignore", UserWarning)
        program = torch.onnx.export(
            model,
            (),
            kwargs=inputs,
            dynamic_shapes=dynamic_shapes,
            output_names=OUTPUT_NAMES,
            dynamo=True,
            verbose=False,
        )
    duration = time.perf_counter() - begin
    sess = ort.InferenceSession(
        program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return program, sess, duration


@pytest.mark.transformers
def test_generate_forward_kwargs(model):
    calls = []
    original = model.forward

    def wrapper(*args, **kwargs):
        calls.append((args, describe_cache(kwargs["past_key_values"]), dict(kwargs)))
        return original(*args, **kwargs)

    wrapper.__signature__ = inspect.signature(original)
    model.forward = wrapper
    try:
        input_ids = torch.randint(0, VOCAB, (2, 5))
        with torch.no_grad():
            model.generate(
                input_ids,
                attention_mask=torch.ones(2, 5, dtype=torch.int64),
                max_new_tokens=4,
                do_sample=False,
                pad_token_id=0,
            )
    finally:
        del model.forward
    assert len(calls) == 4
    for step, (args, cache, kwargs) in enumerate(calls):
        assert args == ()
        assert set(kwargs) == {
            "input_ids",
            "attention_mask",
            "position_ids",
            "past_key_values",
            "use_cache",
            "logits_to_keep",
            "return_dict",
        }
        assert isinstance(kwargs["past_key_values"], DynamicCache)
        assert kwargs["use_cache"] is True and kwargs["logits_to_keep"] == 1
        seq = 5 if step == 0 else 1
        past = 0 if step == 0 else 4 + step
        assert kwargs["input_ids"].shape == (2, seq)
        assert kwargs["position_ids"].shape == (2, seq)
        assert kwargs["attention_mask"].shape == (2, past + seq)
        assert cache["n_layers"] == N_LAYERS and cache["seq_length"] == past
        if step == 0:
            # prefill: layers exist but are lazily initialised, nothing to flatten
            assert [layer["keys"] for layer in cache["layers"]] == [None, None]
        else:
            assert cache["layers"][0]["keys"] == (2, KV_HEADS, past, HEAD_DIM)
    # generate passes the same cache object to every step
    assert len({id(kwargs["past_key_values"]) for _, _, kwargs in calls}) == 1


@pytest.mark.transformers
def test_dynamic_cache_pytree(model):
    assert register_transformers_pytrees() == []  # idempotent
    inputs = step_inputs(batch=2, past=3, seq=1)
    paths = [pytree.keystr(p) for p, _ in pytree.tree_flatten_with_path(inputs)[0]]
    assert paths[3:] == [
        "['past_key_values']['key_cache'][0]",
        "['past_key_values']['key_cache'][1]",
        "['past_key_values']['value_cache'][0]",
        "['past_key_values']['value_cache'][1]",
    ]
    leaves, spec = pytree.tree_flatten(inputs["past_key_values"])
    rebuilt = pytree.tree_unflatten(leaves, spec)
    assert isinstance(rebuilt, DynamicCache) and rebuilt.get_seq_length() == 3
    assert pytree.treespec_loads(pytree.treespec_dumps(spec)) == spec
    # the cache generate creates for the prefill step flattens to nothing
    assert pytree.tree_leaves(DynamicCache(config=model.config)) == []
    # an empty cache made of 0-length tensors keeps the decode structure
    empty = make_dynamic_cache([(torch.zeros(2, KV_HEADS, 0, HEAD_DIM),) * 2] * N_LAYERS)
    assert empty.get_seq_length() == 0
    assert pytree.tree_structure(empty) == spec


@pytest.mark.transformers
def test_export_names(exported):
    program, sess, _duration = exported  # speed lives in benchmarks/, not in tests
    assert [i.name for i in sess.get_inputs()] == INPUT_NAMES
    assert [o.name for o in sess.get_outputs()] == OUTPUT_NAMES
    shapes = {i.name: i.shape for i in sess.get_inputs()}
    assert shapes["input_ids"] == ["batch", "seq"]
    assert shapes["past_key_values_key_cache_0"] == ["batch", KV_HEADS, "past", HEAD_DIM]
    assert sess.get_outputs()[1].shape == ["batch", KV_HEADS, "past + seq", HEAD_DIM]


@pytest.mark.transformers
@pytest.mark.parametrize(
    ("batch", "past", "seq"),
    [(2, 5, 3), (2, 5, 1), (1, 7, 1), (3, 1, 2)],
    ids=["export-shape", "decode", "decode-batch1", "past1"],
)
def test_ort_matches_torch_decode(model, exported, batch, past, seq):
    _, sess, _ = exported
    inputs = step_inputs(batch, past, seq, seed=batch * 100 + past * 10 + seq)
    got = sess.run(None, ort_feeds(sess, inputs))
    assert got[1].shape == (batch, KV_HEADS, past + seq, HEAD_DIM)
    assert max_diff(got, torch_outputs(model, inputs)) < ATOL


@pytest.mark.transformers
def test_ort_prefill_with_empty_cache(model, exported):
    """The prefill step, fed as a 0-length cache, matches the lazily initialised cache."""
    _, sess, _ = exported
    inputs = step_inputs(batch=2, past=0, seq=5)
    got = sess.run(None, ort_feeds(sess, inputs))
    prefill = dict(inputs, past_key_values=DynamicCache(config=model.config))
    assert max_diff(got, torch_outputs(model, prefill)) < ATOL
