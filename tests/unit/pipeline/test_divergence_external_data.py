"""The first-divergence run exposes every value of a graph whose weights are stored beside it
(external data, as every large model has): onnxruntime refuses external data outside the
model's own folder, so the changed graph is saved in that folder, then removed. Values
computed from weights alone are not exposed (they would return a copy of the weights)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from observer_ci.pipeline.divergence import _run_exposed, _weights_only


def _graph_with_external_weights(folder) -> str:
    weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3).T.copy(), "w")
    nodes = [
        helper.make_node("Transpose", ["w"], ["w_t"], perm=[1, 0]),  # computed from weights alone
        helper.make_node("MatMul", ["x", "w_t"], ["hidden"]),
        helper.make_node("Relu", ["hidden"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    path = folder / "model.onnx"
    onnx.save(model, path, save_as_external_data=True, location="model.onnx.data", size_threshold=0)
    return str(path)


def test_intermediate_values_of_a_graph_with_external_data_are_exposed(tmp_path):
    path = _graph_with_external_weights(tmp_path)
    proto = onnx.load(path, load_external_data=False)
    assert proto.graph.initializer[0].data_location == TensorProto.EXTERNAL
    x = np.array([[1, -1, 0, 2], [0, 1, -3, 1]], dtype=np.float32)
    values = _run_exposed(proto, tmp_path, {"x": x}, _weights_only(proto.graph))
    expected = x @ np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_allclose(values["hidden"], expected)  # an intermediate, not an output
    np.testing.assert_allclose(values["y"], np.maximum(expected, 0))
    assert "w_t" not in values  # a copy of the weights is no activation: never returned
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]
