"""ONNX translations for ATen ops that transformers emits and torch.onnx lacks.

One home: :func:`observer_ci.pipeline.onnx_exporter.onnx_registry` registers every entry of
:func:`translation_table` in the registry it builds once per opset (and the public
``torch.onnx.export`` fallback receives the same table as ``custom_translation_table``).

- ``aten._is_all_true`` / ``aten._is_any_true``: transformers' ``torch_compilable_check``
  calls ``torch._check_tensor_all(cond)`` while tracing (Gemma 3, PaliGemma, LLaVA, ...:
  "image features and image tokens do not match"). The exporter drops the assertion but
  not the reduction feeding it, which then has no translation. ``all`` / ``any`` of a bool
  tensor as a 0-d bool, like torch (``all`` of nothing is True, ``any`` of nothing False).

Graph clean-up (:func:`dead_checks_removed`, while ``onnx_export`` runs): torch.onnx erases
the assertion nodes of the exported program (``_assert_scalar``, ...) but keeps what fed
them. A runtime check on a size bounded by a product of dims (SmolVLM's padding images
dropped by a boolean index, with the batch and the image count dynamic) then compares a
size with an integer past int64 (``le(s52, 147573952589676412896)``): an OverflowError
while translating a node nobody reads. The inputs of each erased assertion are erased
too when nothing else reads them, transitively, and only side-effect free ones.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

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


def _erase_unread(graph: torch.fx.Graph, nodes: list[torch.fx.Node]) -> None:
    """Erases ``nodes`` nobody reads, then their inputs left unread, transitively."""
    pending, erased = list(nodes), set()
    while pending:
        node = pending.pop()
        if node in erased or node.users or node.op != "call_function" or node.is_impure():
            continue
        inputs = list(node.all_input_nodes)
        graph.erase_node(node)
        erased.add(node)
        pending.extend(inputs)


def _assertions_and_what_fed_them_removed(original: Callable) -> Callable:
    @functools.wraps(original)
    def remove_assertion_nodes(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
        fed: dict[torch.fx.Graph, list[torch.fx.Node]] = {}
        for module in graph_module.modules():
            graph = getattr(module, "graph", None)
            if isinstance(graph, torch.fx.Graph):
                fed[graph] = [i for n in graph.nodes for i in n.all_input_nodes]
        result = original(graph_module)
        for module in graph_module.modules():
            graph = getattr(module, "graph", None)
            if isinstance(graph, torch.fx.Graph) and graph in fed:
                _erase_unread(graph, fed[graph])
                module.recompile()  # type: ignore[operator]
        return result

    return remove_assertion_nodes


@contextlib.contextmanager
def dead_checks_removed() -> Iterator[None]:
    """While the block runs, torch.onnx's assertion removal also erases what fed the
    assertions (see the module docstring); a torch without that pass is left as is."""
    try:
        from torch.onnx._internal.exporter import _fx_passes
    except ImportError:
        yield
        return
    original = getattr(_fx_passes, "remove_assertion_nodes", None)
    if original is None:
        yield
        return
    _fx_passes.remove_assertion_nodes = _assertions_and_what_fed_them_removed(original)
    try:
        yield
    finally:
        _fx_passes.remove_assertion_nodes = original
