"""``torch.onnx.export(dynamo=True)`` with the ONNX registry built once per process.

The public function builds ``ONNXRegistry.from_torchlib()`` on every call (0.35-2 s, more
on a loaded machine): once per model and once per retried export sample. The exporter's
own entry point takes the registry as an argument and never modifies it, so one instance
per opset serves every export. Where that entry point is missing (another torch), the
public function is used.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch

from observer_ci.pipeline.onnx_translations import dead_checks_removed, translation_table

_RENAME_GIVEN_UP = ".*different number of inputs than the flatten dynamic_shapes"


@functools.lru_cache(maxsize=4)
def onnx_registry(opset: int) -> Any:
    """The torchlib registry for ``opset`` (the exporter's lowest supported one at least),
    with the translations of :mod:`observer_ci.pipeline.onnx_translations`."""
    from torch.onnx._internal.exporter import _constants, _registration

    registry = _registration.ONNXRegistry.from_torchlib(
        opset_version=max(opset, _constants.TORCHLIB_OPSET)
    )
    for target, function in translation_table().items():
        registry.register_op(target, function)
    return registry


def onnx_export(
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    dynamic_shapes: Any,
    opset: int,
) -> Any:
    """An ``ONNXProgram``, as ``torch.onnx.export(..., dynamo=True)`` returns it."""
    try:
        from torch.onnx._internal.exporter import _core, _dynamic_shapes

        registry = onnx_registry(opset)
    except (ImportError, AttributeError):
        return torch.onnx.export(
            module,
            args,
            kwargs=kwargs,
            dynamic_shapes=dynamic_shapes,
            dynamo=True,
            opset_version=opset,
            custom_translation_table=translation_table(),
            external_data=False,
            verbose=False,
        )
    export_shapes, need_axis_mapping = _dynamic_shapes.convert_str_to_export_dim(dynamic_shapes)
    with dead_checks_removed():
        program = _core.export(
            module,
            args,
            kwargs,
            registry=registry,
            dynamic_shapes=export_shapes,
            verbose=False,
            opset_version=opset,
        )
    if need_axis_mapping and dynamic_shapes is not None:
        with warnings.catch_warnings():
            # torch gives up renaming when a constant argument (``logits_to_keep``) has an
            # entry in dynamic_shapes but no ONNX input; export.py names the axes anyway
            warnings.filterwarnings("ignore", message=_RENAME_GIVEN_UP)
            program._rename_dynamic_axes(dynamic_shapes)
    return program
