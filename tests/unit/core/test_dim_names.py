"""Named dynamic dims from observed calls (no export here; the ONNX axes are tested in
tests/integration/test_causes.py and the example runs)."""

import onnx
import pytest
import torch
from onnx import TensorProto, helper

from observer_ci import InputObserver
from observer_ci.core.dim_names import name_dims, name_onnx_axes, rename_symbols


class Encoder(torch.nn.Module):
    def forward(self, input_ids, attention_mask):
        return input_ids * attention_mask


class Decoder(torch.nn.Module):
    def forward(self, input_ids, attention_mask, past_key):
        return input_ids.sum() + attention_mask.sum() + past_key.sum()


class Seq2Seq(torch.nn.Module):
    def forward(self, input_ids, decoder_input_ids):
        return input_ids.sum() + decoder_input_ids.sum()


class Features(torch.nn.Module):
    def forward(self, x, lengths):
        return x.sum() + lengths.sum()


def ids(b, s):
    return torch.ones(b, s, dtype=torch.int64)


def observe(model, calls, **kwargs):
    obs = InputObserver()
    with obs(model, **kwargs):
        for kw in calls:
            model(**kw)
    return obs


def test_encoder_inputs_share_batch_and_sequence_names():
    obs = observe(
        Encoder(),
        [
            dict(input_ids=ids(2, 7), attention_mask=ids(2, 7)),
            dict(input_ids=ids(3, 9), attention_mask=ids(3, 9)),
        ],
    )
    names = name_dims(obs)
    assert names == [
        {0: "batch_size", 1: "sequence_length"},
        {0: "batch_size", 1: "sequence_length"},
    ]
    shapes = obs.infer_dynamic_shapes(named=True)
    assert shapes["attention_mask"] == {0: "batch_size", 1: "sequence_length"}
    # the default keeps the reference's Dim.DYNAMIC
    assert obs.infer_dynamic_shapes()["input_ids"] == {
        0: torch.export.Dim.DYNAMIC,
        1: torch.export.Dim.DYNAMIC,
    }


def test_mask_spanning_cache_and_new_tokens_is_a_sum():
    def call(b, past, seq):
        return dict(
            input_ids=ids(b, seq),
            attention_mask=ids(b, past + seq),
            past_key=torch.zeros(b, 2, past, 4),
        )

    obs = observe(Decoder(), [call(2, 5, 3), call(2, 8, 1), call(2, 9, 1)])
    names = name_dims(obs, set_batch_dimension_for=True)
    assert names[0] == {0: "batch_size", 1: "sequence_length"}
    assert names[1] == {0: "batch_size", 1: "past_sequence_length + sequence_length"}
    assert names[2] == {0: "batch_size", 2: "past_sequence_length"}


def test_encoder_decoder_lengths_and_generic_names():
    obs = observe(
        Seq2Seq(),
        [
            dict(input_ids=ids(2, 7), decoder_input_ids=ids(2, 3)),
            dict(input_ids=ids(2, 9), decoder_input_ids=ids(2, 4)),
        ],
    )
    assert name_dims(obs) == [{1: "encoder_sequence_length"}, {1: "decoder_sequence_length"}]
    feats = observe(
        Features(),
        [
            dict(x=torch.zeros(2, 5, 3), lengths=ids(2, 1)),
            dict(x=torch.zeros(4, 6, 3), lengths=ids(4, 1)),
        ],
    )
    # dim 0 varies together: one batch; x's dim 1 has no role: a generic name
    assert name_dims(feats) == [{0: "batch_size", 1: "x_dim1"}, {0: "batch_size"}]


def test_onnx_axes_renamed_inputs_outputs_and_expressions():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["s23", "s70"])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["s43", "s53"])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["s23", "s53 + s70"])
    node = helper.make_node("Identity", ["x"], ["out"])
    proto = helper.make_model(helper.make_graph([node], "g", [x, mask], [out]))
    per_leaf = [{0: "batch_size", 1: "sequence_length"}, {0: "batch_size", 1: "total"}]
    mapping, notes = name_onnx_axes(proto, ["x", "mask"], per_leaf)
    assert notes == []
    dims = [
        [d.dim_param for d in v.type.tensor_type.shape.dim]
        for v in (*proto.graph.input, *proto.graph.output)
    ]
    assert dims == [
        ["batch_size", "sequence_length"],
        ["batch_size", "total"],
        ["batch_size", "total + sequence_length"],
    ]
    assert mapping["s43"] == "batch_size"
    assert rename_symbols("u0 + s1", {"s1": "n"}) == "u0 + n"  # unbacked symbols stay
    onnx.checker.check_model(proto)


@pytest.mark.parametrize(
    ("name", "cache"),
    [
        ("past_key_values", True),
        ("past_key_value", True),  # older transformers' argument
        ("past_key_values_key_cache_0", True),  # a flattened leaf
        ("past_value_3", True),
        ("cache_params", True),  # state-space models
        ("cache_position", False),  # a token index
        ("input_ids", False),
        ("attention_mask", False),
    ],
)
def test_one_definition_of_a_cache_input(name: str, cache: bool) -> None:
    from observer_ci.core.cache_inputs import is_cache_input

    assert is_cache_input(name) is cache
