"""decoder_model_merged from two small hand-built graphs (onnx + onnxruntime, no export):
shared weights stored once, each branch computing what its graph computes, refusals."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from observer_ci.pipeline.merged_decoder import (
    USE_CACHE_BRANCH,
    MergeError,
    merge_decoders,
    merged_feeds,
)

WEIGHT = np.arange(12, dtype=np.float32).reshape(3, 4)


def save(path, nodes, inputs, outputs, initializers) -> str:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.save(model, str(path))
    return str(path)


def x_input(seq):
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, 3])


def with_past(path) -> str:
    """y = x @ W + past.sum(axis=1, keepdims=True): W named one way."""
    past = helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", "past_len", 4])
    return save(
        path,
        [
            helper.make_node("MatMul", ["x", "w_a"], ["xw"]),
            helper.make_node("ReduceSum", ["past", "axes"], ["s"], keepdims=1),
            helper.make_node("Add", ["xw", "s"], ["y"]),
        ],
        [x_input(1), past],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, 4])],
        [
            numpy_helper.from_array(WEIGHT, "w_a"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axes"),
        ],
    )


def without_past(path, n_outputs=1) -> str:
    """y = x @ W (the same weight under another name)."""
    nodes = [helper.make_node("MatMul", ["x", "w_b"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])]
    if n_outputs == 2:
        nodes.append(helper.make_node("Identity", ["y"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    return save(path, nodes, [x_input("seq")], outputs, [numpy_helper.from_array(WEIGHT, "w_b")])


def test_branches_compute_their_graphs_and_the_weight_is_stored_once(tmp_path):
    facts = merge_decoders(
        with_past(tmp_path / "p.onnx"), without_past(tmp_path / "f.onnx"), tmp_path / "m.onnx"
    )
    assert facts.shared_initializers == 1 and facts.bytes_saved == WEIGHT.nbytes
    model = onnx.load(facts.path)
    assert [i.name for i in model.graph.initializer].count("w_a") == 1
    assert "w_b" not in {i.name for i in model.graph.initializer}
    session = ort.InferenceSession(facts.path, providers=["CPUExecutionProvider"])
    # x is declared 1 long with past and `seq` long without: the merged input takes both
    x_dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert x_dims == ["batch", "seq", 3]
    rng = np.random.default_rng(0)
    x1, past = (
        rng.standard_normal((2, 1, 3), np.float32),
        rng.standard_normal((2, 5, 4), np.float32),
    )
    feeds = merged_feeds(session.get_inputs(), {"x": x1, "past": past}, True)
    (y,) = session.run(None, feeds)
    np.testing.assert_allclose(y, x1 @ WEIGHT + past.sum(axis=1, keepdims=True), rtol=1e-5)
    x7 = rng.standard_normal((2, 7, 3), np.float32)
    feeds = merged_feeds(session.get_inputs(), {"x": x7}, False)
    assert feeds["past"].shape == (2, 0, 4)  # unread: 0-length, the call's batch
    assert feeds[USE_CACHE_BRANCH].tolist() == [False]
    (y,) = session.run(None, feeds)
    np.testing.assert_allclose(y, x7 @ WEIGHT, rtol=1e-5)


def test_graphs_with_different_outputs_are_not_merged(tmp_path):
    with pytest.raises(MergeError, match="return 1 and 2 outputs"):
        merge_decoders(
            with_past(tmp_path / "p.onnx"),
            without_past(tmp_path / "f.onnx", n_outputs=2),
            tmp_path / "m.onnx",
        )
    assert not (tmp_path / "m.onnx").exists()


def _has_entry(session, key: str) -> bool:
    try:
        return session.get_session_options().get_session_config_entry(key) == "1"
    except RuntimeError:  # onnxruntime: no such entry
        return False


def test_a_session_without_prepacked_weights_computes_the_same(tmp_path):
    """The merged decoder's session (checked, never timed) is made with prepacking off."""
    from observer_ci.pipeline.ort_session import make_session

    path = save(
        tmp_path / "mm.onnx",
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [x_input("seq")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        [numpy_helper.from_array(WEIGHT, "w")],
    )
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    default, unpacked = make_session(path), make_session(path, prepack=False)
    key = "session.disable_prepacking"
    assert _has_entry(unpacked, key) and not _has_entry(default, key)
    np.testing.assert_array_equal(unpacked.run(None, {"x": x})[0], x @ WEIGHT)
    np.testing.assert_allclose(default.run(None, {"x": x})[0], x @ WEIGHT, rtol=1e-6)
