"""Cause text from real onnxruntime errors and real tracebacks (no export here)."""

import numpy as np
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper

from observer_ci.pipeline.causes import explain_ort_failure, explain_script_error, is_user_file


def test_static_dim_rejected_by_onnxruntime_names_input_dim_and_sizes():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    with pytest.raises(Exception) as info:
        session.run(None, {"x": np.zeros((3, 3), np.float32)})
    cause = explain_ort_failure(str(info.value), call=1)
    assert cause.kind == "ort_failure"
    assert cause.summary == (
        "onnxruntime rejected input x dim 0 on call 1: size 3, but the ONNX file only accepts "
        "2 (the dim is static in the graph)"
    )
    assert "observe calls where x dim 0 varies" in cause.next_step


def test_library_frames_are_not_the_users_line():
    assert is_user_file(__file__)
    assert not is_user_file(torch.__file__)
    assert not is_user_file(np.__file__)
    assert not is_user_file("<frozen runpy>")

    def user_code():
        torch.zeros(2) @ torch.zeros(3)  # raises inside torch

    try:
        user_code()
    except RuntimeError as e:
        cause = explain_script_error(e)
    assert cause.kind == "script_error"
    assert cause.user_frame.endswith("torch.zeros(2) @ torch.zeros(3)  # raises inside torch")


def test_node_failure_names_where_the_call_differs_from_the_export_sample():
    from observer_ci.core.results import InputInfo
    from observer_ci.pipeline.causes import add_sample_difference

    text = (
        "[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Expand "
        "node. Name:'node_expand_3' Status Message: invalid expand shape"
    )
    cause = explain_ort_failure(text, call=1)
    assert cause.summary == (
        "onnxruntime failed on call 1 in the Expand node 'node_expand_3': invalid expand shape"
    )
    ids = InputInfo("input_ids", "torch.int64", [[2, 5], [2, 1]], [1], ["sequence_length"])
    add_sample_difference(cause, [ids], call=1, sample=0)
    assert cause.summary.endswith(
        "this call differs from the export sample (call 0) in input_ids dim 1 "
        "(sequence_length) 1 vs 5"
    )
    assert "branches on them while tracing" in cause.next_step
