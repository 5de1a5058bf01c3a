"""The onnxruntime session every check uses (torch-free: the paired timing loads only this)."""

from __future__ import annotations

from typing import Any


def make_session(onnx_model: Any, threads: int | None = None, prepack: bool = True):
    """A CPU onnxruntime session from a path or an ``onnx.ModelProto`` (a session is kept).

    ``prepack=False``: no prepacked copies of the weights, for a session whose latency is
    not reported. A merged decoder (T5 600M, 1.45 GB of weights) prepacks them once per
    ``If`` branch: +2976 MB and 6.3 s to create, against +497 MB and 1.7 s without
    (the external data is then mapped, read as the runs touch it); its outputs are the same
    math, checked against the observed ones on every call."""
    import onnxruntime as ort

    if isinstance(onnx_model, ort.InferenceSession):
        return onnx_model

    options = ort.SessionOptions()
    # 4 (fatal): a failing kernel raises and its message becomes data; at 3 it is also
    # printed, in red, for every call replayed with a stand-in that does not fit
    options.log_severity_level = 4
    if threads:
        options.intra_op_num_threads = threads
    if not prepack:
        options.add_session_config_entry("session.disable_prepacking", "1")
    serialize = getattr(onnx_model, "SerializeToString", None)
    source = serialize() if callable(serialize) else str(onnx_model)
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
