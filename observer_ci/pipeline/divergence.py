"""The first divergence: the earliest module whose output parts from torch's (issue 19).

The dynamo exporter records on every ONNX node the module scopes it was traced in
(``pkg.torch.onnx.name_scopes``, ``pkg.torch.onnx.class_hierarchy``) and the Python stack
that produced it (``pkg.torch.onnx.stack_trace``). Here one onnxruntime run on a copy of
the graph exposing every intermediate value is compared with torch's module outputs
(forward hooks): walking modules in the order their outputs are produced, the first
whose output exceeds the tolerance while its inputs agree is the culprit. Inside it, one
eager re-run of that module records the tensors each source line produced
(``TorchFunctionMode``) to find the first ONNX node that parts from torch, or a line
that ran only while exporting; known op semantics (ties, rounding...) are named.

Only for a graph already over its tolerance: a healthy model never gets here.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from observer_ci.core.constants import KNOWN_OP_CASE_NEXT_STEPS, MASKED_POSITIONS, PADDING_FAST_PATH
from observer_ci.core.results import FirstDivergence
from observer_ci.pipeline.diff import comparable_array
from observer_ci.pipeline.divergence_graph import (
    FRAME_PATTERN,
    ModuleCall,
    Node,
    array_kind,
    copy_tree,
    exceeds,
    has_nested,
    kept_positions,
    max_error,
    parse_nodes,
    tensor_kind,
    tensor_leaves,
)
from observer_ci.pipeline.divergence_lines import locate_inside
from observer_ci.pipeline.ort_session import make_session

_WRAPPER_SCOPE = "wrapped"  # export.as_module's attribute holding the model for a method


@dataclass
class _Graph:
    nodes: list[Node]
    constants: set[str]  # initializers and Constant outputs: never a module's input
    outputs: set[str]


def locate_first_divergence(
    model: torch.nn.Module,
    onnx_path: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    feeds: dict[str, np.ndarray],
    abs_max: float,
    rel_max: float,
    *,
    method_name: str = "forward",
    call_index: int | None = None,
    where: str = "replay",
    valid: np.ndarray | None = None,
) -> FirstDivergence | None:
    """The earliest module whose output exceeds the tolerance while its inputs agree, with
    the ONNX node and source line where the values first part; ``None`` when every module
    agrees (``rel_max`` is kept for the signature: intermediate values are judged by an
    absolute error scaled by their magnitude, see :func:`exceeds`).

    ``valid`` (batch x sequence, true where a padding/attention mask keeps a position):
    module outputs are judged there first; a module parting from torch only at dropped
    positions is named when none parts at kept ones (known case ``masked_positions``).
    Raises when the graph or the model cannot be run (the caller keeps it as a note)."""
    del rel_max
    proto = onnx.load(onnx_path, load_external_data=False)
    nodes = parse_nodes(proto.graph, _WRAPPER_SCOPE if method_name != "forward" else None)
    constants = _weights_only(proto.graph)  # initializers, Constant nodes, what they make
    graph = _Graph(nodes, constants, {o.name for o in proto.graph.output})
    calls = _record_calls(model, method_name, args, kwargs)
    values = _run_exposed(proto, Path(onnx_path).parent, feeds, constants)
    values.update(feeds)
    kept = None if valid is None else np.asarray(valid).astype(bool)
    found = None if kept is None else _first_diverging_call(graph, calls, values, abs_max, kept)
    masked_only = found is None and kept is not None
    found = found or _first_diverging_call(graph, calls, values, abs_max, None)
    if found is None:
        return None
    call, scope, error = found
    result = FirstDivergence(
        module=call.path,
        module_class=call.module_class,
        abs=error,
        call_index=call_index,
        where=where,
    )
    locate_inside(result, call, scope, values, abs_max, None if masked_only else kept)
    case = PADDING_FAST_PATH if call.nested else MASKED_POSITIONS if masked_only else None
    if case is not None and result.known_case is None:
        result.known_case, result.next_step = case, KNOWN_OP_CASE_NEXT_STEPS[case]
    return result


def _record_calls(
    model: torch.nn.Module, method_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[ModuleCall]:
    """Every submodule call (forward hooks) in completion order, the root last."""
    pending: dict[int, list[ModuleCall]] = {}
    calls: list[ModuleCall] = []
    nested: set[str] = set()

    def before(module: torch.nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> None:
        a, kw = copy_tree((a, kw)) if kw else (copy_tree(a), {})
        call = ModuleCall(names[id(module)], type(module).__name__, module, module, a, kw)
        call.inputs = tensor_leaves((a, kw))
        pending.setdefault(id(module), []).append(call)

    def after(module: torch.nn.Module, a: Any, output: Any) -> None:
        call = pending[id(module)].pop()
        call.outputs = [t.detach().clone() for t in tensor_leaves(output)]
        if has_nested((a, output)):
            nested.add(call.path)
        calls.append(call)

    names = {id(m): path for path, m in model.named_modules() if path}
    handles = []
    for path, module in model.named_modules():
        if path:
            handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
            handles.append(module.register_forward_hook(after))
    method = getattr(model, method_name)
    root = ModuleCall("", type(model).__name__, model, method, *copy_tree((args, kwargs)))
    root.inputs = tensor_leaves((root.args, root.kwargs))
    try:
        with torch.no_grad():
            a, kw = copy_tree((args, kwargs))
            output = method(*a, **kw)
    finally:
        for handle in handles:
            handle.remove()
    root.outputs = [t.detach().clone() for t in tensor_leaves(output)]
    for call in (*calls, root):
        call.nested = any(p == call.path or p.startswith(call.path) for p in nested)
    return [*calls, root]


def _run_exposed(
    proto: onnx.ModelProto,
    source_dir: Path,
    feeds: dict[str, np.ndarray],
    weights_only: set[str],
) -> dict[str, np.ndarray]:
    """Every node output of the main graph that depends on an input, by name, from one
    onnxruntime run of the graph with them all as outputs (``proto`` is changed so).
    Values computed from weights alone (``weights_only``: a transposed weight) are no
    activation a module returns: exposing them would return a copy of the weights (+2.5 GB
    on a 600M model). Weights stored beside the graph stay there, never copied or loaded."""
    graph = proto.graph
    known = {v.name: v for v in list(graph.value_info) + list(graph.input)}
    present = {o.name for o in graph.output}
    for node in graph.node:
        for name in node.output:
            if name and name not in present and name not in weights_only:
                present.add(name)
                graph.output.append(known.get(name) or onnx.ValueInfoProto(name=name))
    with _beside(proto, source_dir) as source:
        session = make_session(source, prepack=False)  # checked, never timed: weights mapped
        names = [o.name for o in session.get_outputs()]
        wanted = {i.name for i in session.get_inputs()}
        arrays = session.run(None, {k: v for k, v in feeds.items() if k in wanted})
    return {n: a for n, a in zip(names, arrays) if isinstance(a, np.ndarray)}


def _weights_only(graph: onnx.GraphProto) -> set[str]:
    """Names of the initializers and of the node outputs computed from them alone."""
    found = {t.name for t in graph.initializer}
    for node in graph.node:  # nodes are in topological order
        if all(not name or name in found for name in node.input):
            found.update(name for name in node.output if name)
    return found


@contextlib.contextmanager
def _beside(proto: onnx.ModelProto, source_dir: Path) -> Iterator[Any]:
    """``proto`` itself, or, when its weights are stored beside the graph, the path of a
    temporary copy of the graph saved in that folder: onnxruntime refuses external data
    outside the model's own folder, a symlink's target included."""
    if not _has_external_data(proto):
        yield proto
        return
    handle, name = tempfile.mkstemp(
        prefix=".observer-ci-divergence-", suffix=".onnx", dir=source_dir
    )
    os.close(handle)
    try:
        onnx.save(proto, name)
        yield name
    finally:
        Path(name).unlink(missing_ok=True)


def _has_external_data(proto: onnx.ModelProto) -> bool:
    return any(
        entry.key == "location"
        for tensor in _all_tensors(proto.graph)
        for entry in tensor.external_data
    )


def _all_tensors(graph: onnx.GraphProto) -> Iterable[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t


def _instances(nodes: list[Node], calls: list[ModuleCall]) -> dict[int, list[Node]]:
    """The ONNX nodes of each call (by its index in ``calls``). A module called more than
    once shares one scope; its calls are told apart by their stack traces when those
    differ, otherwise it is left out (its parent is still compared)."""
    by_path: dict[str, list[Node]] = {}
    for node in nodes:
        for path in node.modules:
            by_path.setdefault(path, []).append(node)
    calls_of: dict[str, list[int]] = {}
    for k, call in enumerate(calls):
        calls_of.setdefault(call.path, []).append(k)
    out: dict[int, list[Node]] = {}
    for path, indices in calls_of.items():
        scope = nodes if path == "" else by_path.get(path, [])
        if not scope:
            continue
        if len(indices) == 1:
            out[indices[0]] = scope
            continue
        groups: dict[str, list[Node]] = {}
        for node in scope:
            groups.setdefault(_outer_stack(node, path), []).append(node)
        if len(groups) == len(indices):
            out.update(zip(indices, groups.values()))
    return out


def _outer_stack(node: Node, path: str) -> str:
    """What tells two calls of one module apart: the frames of the forwards above it (one
    frame per enclosing module, the root's first), which end at the line calling it."""
    depth = node.modules.index(path)
    return repr(FRAME_PATTERN.findall(node.stack)[:depth])


def _consumers(nodes: list[Node]) -> dict[str, set[int]]:
    consumers: dict[str, set[int]] = {}
    for node in nodes:
        for name in node.inputs:
            consumers.setdefault(name, set()).add(node.index)
    return consumers


def _boundary(
    scope: list[Node],
    consumers: dict[str, set[int]],
    constants: set[str],
    graph_outputs: set[str],
) -> tuple[list[str], list[str]]:
    """The values a scope consumes from outside it, and those it hands out."""
    members = {n.index for n in scope}
    produced = {o for n in scope for o in n.outputs}
    inputs = [i for n in scope for i in n.inputs if i and i not in produced and i not in constants]
    outputs = [
        o
        for n in scope
        for o in n.outputs
        if o in graph_outputs or consumers.get(o, set()) - members
    ]
    return list(dict.fromkeys(inputs)), outputs


def _pair(
    tensors: list[torch.Tensor], names: list[str], values: dict[str, np.ndarray], last: bool
) -> list[tuple[torch.Tensor, np.ndarray]]:
    """Torch tensors paired with ONNX values of the same shape and dtype, in order: the
    last candidates of each kind for outputs, the first for inputs."""
    pairs: list[tuple[torch.Tensor, np.ndarray]] = []
    by_kind: dict[tuple[Any, ...], list[np.ndarray]] = {}
    for name in names:
        if name in values:
            by_kind.setdefault(array_kind(values[name]), []).append(values[name])
    wanted: dict[tuple[Any, ...], list[torch.Tensor]] = {}
    for t in tensors:
        if t.dtype != torch.bfloat16:
            wanted.setdefault(tensor_kind(t), []).append(t)
    for kind, group in wanted.items():
        candidates = by_kind.get(kind, [])
        if len(candidates) >= len(group):
            chosen = candidates[-len(group) :] if last else candidates[: len(group)]
            pairs.extend(zip(group, chosen))
    return pairs


def _worst(
    pairs: list[tuple[torch.Tensor, np.ndarray]], abs_max: float, kept: np.ndarray | None
) -> tuple[float, bool]:
    worst, over = 0.0, False
    for expected, got in pairs:
        e, g = kept_positions(comparable_array(expected), got, kept)
        error = max_error(e, g)
        worst = max(worst, error)
        over = over or exceeds(e, error, abs_max)
    return worst, over


def _first_diverging_call(
    graph: _Graph,
    calls: list[ModuleCall],
    values: dict[str, np.ndarray],
    abs_max: float,
    kept: np.ndarray | None,
) -> tuple[ModuleCall, list[Node], float] | None:
    """The first call (completion order) over the tolerance whose inputs agree."""
    instances = _instances(graph.nodes, calls)
    consumers = _consumers(graph.nodes)
    for k, call in enumerate(calls):
        scope = instances.get(k)
        if not scope:
            continue
        inputs, outputs = _boundary(scope, consumers, graph.constants, graph.outputs)
        out_pairs = _pair(call.outputs, outputs, values, last=True)
        if not out_pairs:
            continue
        error, over = _worst(out_pairs, abs_max, kept)
        if not over:
            continue
        _, inputs_over = _worst(_pair(call.inputs, inputs, values, last=False), abs_max, kept)
        if not inputs_over:
            return call, scope, error
    return None
