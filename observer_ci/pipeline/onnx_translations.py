"""ONNX translations for ATen ops that transformers emits and torch.onnx lacks.

One home: :func:`observer_ci.pipeline.onnx_exporter.onnx_registry` registers every entry of
:func:`translation_table` in the registry it builds once per opset (and the public
``torch.onnx.export`` fallback receives the same table as ``custom_translation_table``).

- ``aten._is_all_true`` / ``aten._is_any_true``: transformers' ``torch_compilable_check``
  calls ``torch._check_tensor_all(cond)`` while tracing (Gemma 3, PaliGemma, LLaVA, ...:
  "image features and image tokens do not match"). The exporter drops the assertion but
  not the reduction feeding it, which then has no translation. ``all`` / ``any`` of a bool
  tensor as a 0-d bool, like torch (``all`` of nothing is True, ``any`` of nothing False).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from onnx import TensorProto


def _is_all_true(self):  # noqa: ANN001, ANN202 - traced by onnxscript
    from onnxscript import opset18 as op

    # counts, not ReduceMin/ReduceMax: onnxruntime's max of nothing is not False
    falses = op.ReduceSum(op.Cast(op.Not(self), to=TensorProto.INT64), keepdims=0)
    return op.Equal(falses, op.Constant(value_int=0))


def _is_any_true(self):  # noqa: ANN001, ANN202 - traced by onnxscript
    from onnxscript import opset18 as op

    trues = op.ReduceSum(op.Cast(self, to=TensorProto.INT64), keepdims=0)
    return op.Greater(trues, op.Constant(value_int=0))


@functools.lru_cache(maxsize=1)
def translation_table() -> dict[Callable, Callable]:
    """ATen overload -> ONNX translation, for the ops listed in the module docstring."""
    table: dict[Callable, Callable] = {}
    for name, function in (("_is_all_true", _is_all_true), ("_is_any_true", _is_any_true)):
        packet = getattr(torch.ops.aten, name, None)
        if packet is not None and hasattr(packet, "default"):
            table[packet.default] = function
    return table


def translated_op_names() -> list[str]:
    """``aten._is_all_true`` and friends: the names listed in the README."""
    return [f"aten.{op.__name__.split('.')[0]}" for op in translation_table()]
