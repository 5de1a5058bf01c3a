"""The onnxruntime session every check uses (torch-free: the paired timing loads only this)."""

from __future__ import annotations

from typing import Any


def make_session(onnx_model: Any, threads: int | None = None):
    """A CPU onnxruntime session from a path or an ``onnx.ModelProto`` (a session is kept)."""
    import onnxruntime as ort

    if isinstance(onnx_model, ort.InferenceSession):
        return onnx_model

    options = ort.SessionOptions()
    # 4 (fatal): a failing kernel raises and its message becomes data; at 3 it is also
    # printed, in red, for every call replayed with a stand-in that does not fit
    options.log_severity_level = 4
    if threads:
        options.intra_op_num_threads = threads
    serialize = getattr(onnx_model, "SerializeToString", None)
    source = serialize() if callable(serialize) else str(onnx_model)
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
