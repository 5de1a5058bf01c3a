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

import ast
import functools
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from observer_ci.core.constants import (
    KNOWN_OP_CASE_NEXT_STEPS,
    KNOWN_OP_CASES,
    MASKED_POSITIONS,
    PADDING_FAST_PATH,
)
from observer_ci.core.errors import error_tail
from observer_ci.core.results import FirstDivergence
from observer_ci.pipeline.diff import comparable_array, flatten_outputs, max_diff
from observer_ci.pipeline.ort_session import make_session

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_THIS_FILE = os.path.abspath(__file__)
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in [^\n]*(?:\n(?P<code>[^\n]*))?')
_WRAPPER_SCOPE = "wrapped"  # export.as_module's attribute holding the model for a method
Frame = tuple[str, int, str]  # file, line, code


@dataclass
class _Node:
    """One ONNX node with what the exporter recorded about where it came from."""

    index: int
    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    modules: tuple[str, ...]  # module paths, outermost first ("" is the root)
    stack: str
    frame: Frame | None  # the deepest frame outside torch


@dataclass
class _Graph:
    nodes: list[_Node]
    constants: set[str]  # initializers and Constant outputs: never a module's input
    outputs: set[str]


@dataclass
class _Call:
    """One module call seen by the hooks, inputs and outputs cloned when they were live."""

    path: str
    module_class: str
    module: torch.nn.Module
    run: Any  # what re-runs it: the module, or the observed method for the root
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    inputs: list[torch.Tensor] = field(default_factory=list)
    outputs: list[torch.Tensor] = field(default_factory=list)
    nested: bool = False  # it, or a module inside it, ran on nested tensors (fast path)


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
    absolute error scaled by their magnitude, see :func:`_exceeds`).

    ``valid`` (batch x sequence, true where a padding/attention mask keeps a position):
    module outputs are judged there first; a module parting from torch only at dropped
    positions is named when none parts at kept ones (known case ``masked_positions``).
    Raises when the graph or the model cannot be run (the caller keeps it as a note)."""
    del rel_max
    proto = onnx.load(onnx_path, load_external_data=False)
    nodes = _parse_nodes(proto.graph, _WRAPPER_SCOPE if method_name != "forward" else None)
    constants = {i.name for i in proto.graph.initializer}
    constants |= {o for n in nodes if n.op_type == "Constant" for o in n.outputs}
    graph = _Graph(nodes, constants, {o.name for o in proto.graph.output})
    calls = _record_calls(model, method_name, args, kwargs)
    values = _run_exposed(proto, Path(onnx_path).parent, feeds)
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
    _locate_inside(result, call, scope, values, abs_max, None if masked_only else kept)
    case = PADDING_FAST_PATH if call.nested else MASKED_POSITIONS if masked_only else None
    if case is not None and result.known_case is None:
        result.known_case, result.next_step = case, KNOWN_OP_CASE_NEXT_STEPS[case]
    return result


def locate_probe_divergence(
    model: torch.nn.Module,
    onnx_path: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    feeds: dict[str, np.ndarray],
    abs_max: float,
    rel_max: float,
    *,
    method_name: str = "forward",
) -> FirstDivergence | None:
    """The same at the probe's unseen size: ``args``/``kwargs``/``feeds`` as the probe built
    them (``probe.run_probe``'s ``on_mismatch`` hands them over)."""
    return locate_first_divergence(
        model,
        onnx_path,
        args,
        kwargs,
        feeds,
        abs_max,
        rel_max,
        method_name=method_name,
        where="probe",
    )


@dataclass
class ProbeLocator:
    """``probe.run_probe``'s ``on_mismatch``: locates the first divergence at the probe's
    unseen size with the inputs the probe built. Never raises (the probe's verdict stands
    without it): a failure is kept in ``error``."""

    model: torch.nn.Module
    onnx_path: str
    abs_max: float
    rel_max: float
    method_name: str = "forward"
    found: FirstDivergence | None = None
    error: str | None = None

    def __call__(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], feeds: dict[str, np.ndarray]
    ) -> None:
        try:
            self.found = locate_probe_divergence(
                self.model,
                self.onnx_path,
                args,
                kwargs,
                feeds,
                self.abs_max,
                self.rel_max,
                method_name=self.method_name,
            )
        except Exception as e:
            self.error = f"the first divergence at the unseen size was not located: {error_tail(e)}"


# -- the graph: nodes, scopes, frames ---------------------------------------------------


def _parse_nodes(graph: onnx.GraphProto, prefix: str | None) -> list[_Node]:
    nodes = []
    for k, node in enumerate(graph.node):
        meta = {p.key: p.value for p in node.metadata_props}
        stack = meta.get("pkg.torch.onnx.stack_trace", "")
        nodes.append(
            _Node(
                index=k,
                name=node.name,
                op_type=node.op_type,
                inputs=list(node.input),
                outputs=[o for o in node.output if o],
                modules=_module_paths(meta.get("pkg.torch.onnx.name_scopes"), prefix),
                stack=stack,
                frame=user_frame(stack) or _deepest_frame(stack),
            )
        )
    return nodes


def _module_paths(scopes: str | None, prefix: str | None) -> tuple[str, ...]:
    """``['', 'blocks.0', 'blocks.0.lin', 'linear']`` -> the module paths (the last entry
    names the op); a method's wrapper prefix (``wrapped.``) is dropped."""
    try:
        names = json.loads(scopes.replace("'", '"')) if scopes else []
    except ValueError:
        try:
            names = ast.literal_eval(scopes or "[]")
        except (ValueError, SyntaxError):
            return ()
    paths = [str(n) for n in names[:-1]]
    if prefix is not None:
        paths = [p[len(prefix) + 1 :] if p.startswith(prefix + ".") else p for p in paths]
        paths = [p for p in paths if p != prefix]
    return tuple(dict.fromkeys(paths))


def user_frame(stack: str) -> Frame | None:
    """The deepest frame of an exporter stack trace that is not torch's own code."""
    frames = [
        (m["file"], int(m["line"]), (m["code"] or "").strip()) for m in _FRAME.finditer(stack)
    ]
    for frame in reversed(frames):
        if not _is_internal(frame[0]):
            return frame
    return None


def _deepest_frame(stack: str) -> Frame | None:
    """A torch module's own line, when no frame of the trace is the user's."""
    found = list(_FRAME.finditer(stack))
    if not found:
        return None
    m = found[-1]
    return m["file"], int(m["line"]), (m["code"] or "").strip()


@functools.lru_cache(maxsize=1024)
def _is_internal(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_TORCH_DIR) or path == _THIS_FILE


def format_frame(frame: Frame) -> str:
    """``file.py:12: code``, the file relative to the working directory when under it."""
    path = os.path.abspath(frame[0])
    relative = os.path.relpath(path)
    shown = relative if not relative.startswith("..") else os.path.basename(path)
    return f"{shown}:{frame[1]}: {frame[2]}" if frame[2] else f"{shown}:{frame[1]}"


# -- torch: module calls in the order their outputs are produced -------------------------


def _record_calls(
    model: torch.nn.Module, method_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[_Call]:
    """Every submodule call (forward hooks) in completion order, the root last."""
    pending: dict[int, list[_Call]] = {}
    calls: list[_Call] = []
    nested: set[str] = set()

    def before(module: torch.nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> None:
        a, kw = _clone((a, kw)) if kw else (_clone(a), {})
        call = _Call(names[id(module)], type(module).__name__, module, module, a, kw)
        call.inputs = _tensors((a, kw))
        pending.setdefault(id(module), []).append(call)

    def after(module: torch.nn.Module, a: Any, output: Any) -> None:
        call = pending[id(module)].pop()
        call.outputs = [t.detach().clone() for t in _tensors(output)]
        if _has_nested((a, output)):
            nested.add(call.path)
        calls.append(call)

    names = {id(m): path for path, m in model.named_modules() if path}
    handles = []
    for path, module in model.named_modules():
        if path:
            handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
            handles.append(module.register_forward_hook(after))
    method = getattr(model, method_name)
    root = _Call("", type(model).__name__, model, method, *_clone((args, kwargs)))
    root.inputs = _tensors((root.args, root.kwargs))
    try:
        with torch.no_grad():
            a, kw = _clone((args, kwargs))
            output = method(*a, **kw)
    finally:
        for handle in handles:
            handle.remove()
    root.outputs = [t.detach().clone() for t in _tensors(output)]
    for call in (*calls, root):
        call.nested = any(p == call.path or p.startswith(call.path) for p in nested)
    return [*calls, root]


def _clone(value: Any) -> Any:
    """Every tensor of a nested structure copied (detached) once: a tensor passed twice
    stays one tensor (``MultiheadAttention`` checks ``query is key``)."""
    copies: dict[int, torch.Tensor] = {}

    def copy(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in copies:
            copies[id(t)] = t.detach().clone()
        return copies[id(t)]

    if isinstance(value, tuple) and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(copy(v) for v in value)
    if isinstance(value, dict) and not value:
        return {}
    return pytree.tree_map(copy, value)


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensor leaves; a nested tensor (the fast path of ``nn.TransformerEncoder`` with
    a padding mask) as its padded form, zeros where the mask drops positions."""
    leaves = [t for t in flatten_outputs(value) if isinstance(t, torch.Tensor)]
    return [t.to_padded_tensor(0.0) if t.is_nested else t for t in leaves]


def _has_nested(value: Any) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_nested for t in flatten_outputs(value))


# -- onnxruntime: one run exposing every intermediate value ------------------------------


def _run_exposed(
    proto: onnx.ModelProto, source_dir: Path, feeds: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Every node output of the main graph, by name, from one onnxruntime run of the graph
    with them all as outputs (``proto`` is changed so). Weights stored beside the graph
    are linked into a temporary folder with the changed graph, never copied or loaded."""
    graph = proto.graph
    known = {v.name: v for v in list(graph.value_info) + list(graph.input)}
    present = {o.name for o in graph.output}
    for node in graph.node:
        for name in node.output:
            if name and name not in present:
                present.add(name)
                graph.output.append(known.get(name) or onnx.ValueInfoProto(name=name))
    with tempfile.TemporaryDirectory(prefix="observer-ci-divergence-") as tmp:
        source: Any = proto
        if _link_external_data(proto, source_dir, Path(tmp)):
            source = str(Path(tmp) / "exposed.onnx")
            onnx.save(proto, source)
        session = make_session(source)
        names = [o.name for o in session.get_outputs()]
        wanted = {i.name for i in session.get_inputs()}
        arrays = session.run(None, {k: v for k, v in feeds.items() if k in wanted})
    return {n: a for n, a in zip(names, arrays) if isinstance(a, np.ndarray)}


def _link_external_data(proto: onnx.ModelProto, source_dir: Path, target_dir: Path) -> bool:
    """Links the files of the weights stored beside the graph; False when there are none."""
    locations = {
        entry.value
        for tensor in _all_tensors(proto.graph)
        for entry in tensor.external_data
        if entry.key == "location"
    }
    for location in locations:
        target = target_dir / location
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to((source_dir / location).resolve())
    return bool(locations)


def _all_tensors(graph: onnx.GraphProto) -> Iterable[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t


# -- modules against their ONNX scopes ---------------------------------------------------


def _instances(nodes: list[_Node], calls: list[_Call]) -> dict[int, list[_Node]]:
    """The ONNX nodes of each call (by its index in ``calls``). A module called more than
    once shares one scope; its calls are told apart by their stack traces when those
    differ, otherwise it is left out (its parent is still compared)."""
    by_path: dict[str, list[_Node]] = {}
    for node in nodes:
        for path in node.modules:
            by_path.setdefault(path, []).append(node)
    calls_of: dict[str, list[int]] = {}
    for k, call in enumerate(calls):
        calls_of.setdefault(call.path, []).append(k)
    out: dict[int, list[_Node]] = {}
    for path, indices in calls_of.items():
        scope = nodes if path == "" else by_path.get(path, [])
        if not scope:
            continue
        if len(indices) == 1:
            out[indices[0]] = scope
            continue
        groups: dict[str, list[_Node]] = {}
        for node in scope:
            groups.setdefault(_outer_stack(node, path), []).append(node)
        if len(groups) == len(indices):
            out.update(zip(indices, groups.values()))
    return out


def _outer_stack(node: _Node, path: str) -> str:
    """What tells two calls of one module apart: the frames of the forwards above it (one
    frame per enclosing module, the root's first), which end at the line calling it."""
    depth = node.modules.index(path)
    return repr(_FRAME.findall(node.stack)[:depth])


def _consumers(nodes: list[_Node]) -> dict[str, set[int]]:
    consumers: dict[str, set[int]] = {}
    for node in nodes:
        for name in node.inputs:
            consumers.setdefault(name, set()).add(node.index)
    return consumers


def _boundary(
    scope: list[_Node],
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
            by_kind.setdefault(_kind(values[name]), []).append(values[name])
    wanted: dict[tuple[Any, ...], list[torch.Tensor]] = {}
    for t in tensors:
        if t.dtype != torch.bfloat16:
            wanted.setdefault(_torch_kind(t), []).append(t)
    for kind, group in wanted.items():
        candidates = by_kind.get(kind, [])
        if len(candidates) >= len(group):
            chosen = candidates[-len(group) :] if last else candidates[: len(group)]
            pairs.extend(zip(group, chosen))
    return pairs


def _kind(array: np.ndarray) -> tuple[Any, ...]:
    return (tuple(array.shape), array.dtype.str)


def _torch_kind(t: torch.Tensor) -> tuple[Any, ...]:
    if t.dtype == torch.bfloat16:
        return (tuple(t.shape), "bfloat16")
    return (tuple(t.shape), torch.empty(0, dtype=t.dtype).numpy().dtype.str)


def _error(expected: torch.Tensor | np.ndarray, got: np.ndarray) -> float:
    """The largest absolute difference; NaN and infinities as ``diff.max_diff`` counts
    them (an infinite error when they differ), the common finite case in one pass."""
    e = comparable_array(expected)
    if e.shape != got.shape:
        return float("inf")
    if e.size == 0:
        return 0.0
    if e.dtype.kind != "f" or got.dtype.kind != "f":
        e, got = e.astype(np.float64), got.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        error = float(np.max(np.abs(e - got)))
    if np.isfinite(error):
        return error
    diff = max_diff([e], [got], hist=())
    return diff.abs if diff.comparable else float("inf")


def _exceeds(expected: torch.Tensor | np.ndarray, error: float, abs_max: float) -> bool:
    """An intermediate value parts from torch when its error is over the absolute
    tolerance scaled by its magnitude (hidden states of magnitude 100 carry float noise
    a hundred times an output's)."""
    if error <= abs_max:
        return False
    array = comparable_array(expected)
    with np.errstate(invalid="ignore"):
        peak = float(np.max(np.abs(array))) if array.size else 0.0
    return error > abs_max * max(1.0, peak if np.isfinite(peak) else 1.0)


def _worst(
    pairs: list[tuple[torch.Tensor, np.ndarray]], abs_max: float, kept: np.ndarray | None
) -> tuple[float, bool]:
    worst, over = 0.0, False
    for expected, got in pairs:
        e, g = _kept(comparable_array(expected), got, kept)
        error = _error(e, g)
        worst = max(worst, error)
        over = over or _exceeds(e, error, abs_max)
    return worst, over


def _kept(e: np.ndarray, g: np.ndarray, kept: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The positions a batch x sequence mask keeps, for a value whose first axis is the
    batch and whose first later axis of the sequence's length is the sequence (hidden
    states ``B x S x H``, attention ``B x heads x S x ...``); other values whole."""
    if kept is None or e.shape != g.shape or e.ndim < 2 or e.shape[0] != kept.shape[0]:
        return e, g
    axis = next((k for k in range(1, e.ndim) if e.shape[k] == kept.shape[1]), None)
    if axis is None:
        return e, g
    layout = [1] * e.ndim
    layout[0], layout[axis] = kept.shape
    where = np.broadcast_to(kept.reshape(layout), e.shape)
    return e[where], g[where]


def _first_diverging_call(
    graph: _Graph,
    calls: list[_Call],
    values: dict[str, np.ndarray],
    abs_max: float,
    kept: np.ndarray | None,
) -> tuple[_Call, list[_Node], float] | None:
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


# -- inside the diverging module: the first ONNX node that parts from torch ---------------


class _LineRecorder(TorchFunctionMode):
    """The tensors produced under each source line in eager torch: a tensor counts for
    every frame of the re-run module's code on the stack (the exporter's stack traces
    keep the module forwards' frames but not always the helpers they call, so an ONNX
    node's deepest frame may be the forward's line calling a helper)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_line: dict[tuple[str, int], list[torch.Tensor]] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        produced = [t.detach().clone() for t in _tensors(out)]
        for key in _callers(sys._getframe(1)):
            self.by_line.setdefault(key, []).extend(produced)
        return out


def _callers(frame: Any) -> list[tuple[str, int]]:
    """The (file, line) of every frame outside torch up to :func:`_record_lines`."""
    keys = []
    while frame is not None and frame.f_code is not _record_lines.__code__:
        filename = frame.f_code.co_filename
        if not _is_internal(filename):
            keys.append((_absolute(filename), frame.f_lineno))
        frame = frame.f_back
    return list(dict.fromkeys(keys))


@functools.lru_cache(maxsize=1024)
def _absolute(filename: str) -> str:
    return os.path.abspath(filename)


def _code_ranges(call: _Call) -> dict[str, list[tuple[int, int]]]:
    """The lines of the forwards the re-run of ``call`` runs (its own and its submodules'):
    where a line with no eager tensor is one torch did not run, not one it cannot see."""
    functions = [call.run, *(type(m).forward for m in call.module.modules())]
    ranges: dict[str, list[tuple[int, int]]] = {}
    for function in functions:
        code = getattr(getattr(function, "__func__", function), "__code__", None)
        if code is None or _is_internal(code.co_filename):
            continue
        last = max((line for _, _, line in code.co_lines() if line), default=code.co_firstlineno)
        ranges.setdefault(_absolute(code.co_filename), []).append((code.co_firstlineno, last))
    return ranges


def _in_ranges(key: tuple[str, int], ranges: dict[str, list[tuple[int, int]]]) -> bool:
    return any(first <= key[1] <= last for first, last in ranges.get(key[0], []))


def _record_lines(call: _Call) -> dict[tuple[str, int], list[torch.Tensor]]:
    recorder = _LineRecorder()
    args, kwargs = _clone((call.args, call.kwargs))
    with torch.no_grad(), recorder:
        call.run(*args, **kwargs)
    return recorder.by_line


@dataclass
class _Status:
    state: str  # "agree", "differ", "unmatched" (no torch tensor like it), "unrun" (no call)
    error: float | None = None


def _statuses(
    scope: list[_Node],
    by_line: dict[tuple[str, int], list[torch.Tensor]],
    ranges: dict[str, list[tuple[int, int]]],
    values: dict[str, np.ndarray],
    abs_max: float,
    kept: np.ndarray | None,
) -> dict[int, _Status]:
    consumers: dict[str, list[_Node]] = {}
    for node in scope:
        for name in node.inputs:
            consumers.setdefault(name, []).append(node)
    out = {}
    for node in scope:
        if node.frame is None:
            continue
        key = _line_key(node.frame)
        produced = by_line.get(key)
        if produced is None:
            out[node.index] = _Status("unrun" if _in_ranges(key, ranges) else "unmatched")
            continue
        leaving = [o for o in node.outputs if _leaves_line(node, consumers.get(o, []))]
        out[node.index] = _node_status(node, leaving, produced, values, abs_max, kept)
        if out[node.index].state == "differ":
            break  # the first one is all the search needs (later nodes are not judged)
    return out


def _line_key(frame: Frame) -> tuple[str, int]:
    return _absolute(frame[0]), frame[1]


def _leaves_line(node: _Node, consumers: list[_Node]) -> bool:
    """A value used past its own source line (or by none in the scope): what torch also
    holds. Values inside one line (an op decomposed: rsqrt as Sqrt then Reciprocal) may
    have no torch counterpart and are never blamed."""
    assert node.frame is not None
    key = _line_key(node.frame)
    return not consumers or any(c.frame is None or _line_key(c.frame) != key for c in consumers)


def _node_status(
    node: _Node,
    leaving: list[str],
    produced: list[torch.Tensor],
    values: dict[str, np.ndarray],
    abs_max: float,
    kept: np.ndarray | None,
) -> _Status:
    """A node agrees when an output is close to a tensor its line produced in torch; it
    differs when an output used past its line is close to none of them."""
    worst: float | None = None
    differs = False
    for name in node.outputs:
        got = values.get(name)
        closest = None if got is None else _closest(got, produced, abs_max, kept)
        if closest is None:
            continue
        error, over = closest
        if over and name not in leaving:
            continue
        worst = error if worst is None else max(worst, error)
        differs = differs or over
    if worst is None:
        return _Status("unmatched")
    return _Status("differ" if differs else "agree", worst)


def _closest(
    got: np.ndarray, produced: list[torch.Tensor], abs_max: float, kept: np.ndarray | None
) -> tuple[float, bool] | None:
    """The smallest error of ``got`` against the tensors of its kind, and whether none of
    them is within the tolerance (stops at the first that is)."""
    kind = _kind(got)
    smallest: float | None = None
    for t in produced:
        if _torch_kind(t) != kind:
            continue
        e, g = _kept(comparable_array(t), got, kept)
        error = _error(e, g)
        smallest = error if smallest is None else min(smallest, error)
        if not _exceeds(e, error, abs_max):
            return error, False
    return None if smallest is None else (smallest, True)


# What a line the graph holds but eager torch did not run means, by where it was compared.
UNRUN_LINE_NOTES = {
    "replay": (
        "eager torch did not run this line for this call: the graph holds a branch torch "
        "did not take (torch.compiler.is_exporting(), torch.onnx.is_in_onnx_export(), or a "
        "condition on values fixed at export); make both branches compute the same"
    ),
    "probe": (
        "eager torch did not run this line at the unseen size: the graph holds the branch "
        "the observed sizes took (a condition on a size fixed at export); write the branch "
        "with torch.where / torch.cond, or observe sizes on both sides of it"
    ),
}


def _locate_inside(
    result: FirstDivergence,
    call: _Call,
    scope: list[_Node],
    values: dict[str, np.ndarray],
    abs_max: float,
    kept: np.ndarray | None,
) -> None:
    """Fills the node, source line and known case of a diverging module's call."""
    try:  # a fast path on nested tensors cannot run under a TorchFunctionMode: not re-run
        by_line = {} if call.nested else _record_lines(call)
    except Exception as e:  # a module that cannot be re-run alone: the module still stands
        by_line = {}
        result.note = f"its lines could not be compared: {error_tail(e, 300)}"
    statuses = _statuses(scope, by_line, _code_ranges(call), values, abs_max, kept)
    state = {k: s.state for k, s in statuses.items()}
    framed = [n for n in scope if n.frame is not None]
    first = next((n for n in framed if state.get(n.index) == "differ"), None)
    first = first or (framed[-1] if framed else None)
    if first is None:
        return
    producers = {o: n for n in scope for o in n.outputs}
    branch = _nearest(first, producers, lambda n: state.get(n.index) == "unrun")
    shown = [branch, first] if branch is not None and branch is not first else [first]
    result.onnx_ops = [n.op_type for n in shown]
    result.onnx_nodes = [n.name for n in shown]
    result.op_abs = statuses[first.index].error if first.index in statuses else None
    source = branch or first
    result.source = format_frame(source.frame) if source.frame else None
    if branch is not None:
        result.note = UNRUN_LINE_NOTES.get(result.where, UNRUN_LINE_NOTES["replay"])
    known = _nearest(
        first,
        producers,
        lambda n: state.get(n.index) != "agree" and _known_case(n, values) is not None,
    )
    if known is not None:
        result.known_case = _known_case(known, values)
        result.next_step = KNOWN_OP_CASE_NEXT_STEPS[result.known_case or ""]
        if known is not first:
            result.onnx_ops.insert(0, known.op_type)
            result.onnx_nodes.insert(0, known.name)


def _nearest(start: _Node, producers: dict[str, _Node], wanted: Any) -> _Node | None:
    """``start`` or the nearest of its ancestors inside the scope that is ``wanted``."""
    seen = {start.index}
    frontier = [start]
    while frontier:
        for node in frontier:
            if wanted(node):
                return node
        following = []
        for node in frontier:
            for name in node.inputs:
                parent = producers.get(name)
                if parent is not None and parent.index not in seen:
                    seen.add(parent.index)
                    following.append(parent)
        frontier = sorted(following, key=lambda n: -n.index)
    return None


def _known_case(node: _Node, values: dict[str, np.ndarray]) -> str | None:
    case = KNOWN_OP_CASES.get(node.op_type)
    if node.op_type in ("Cast", "Div"):
        source = values.get(node.inputs[0]) if node.inputs else None
        target = values.get(node.outputs[0]) if node.outputs else None
        if source is None or target is None or target.dtype.kind not in "iu":
            return None
        if node.op_type == "Cast" and source.dtype.kind != "f":
            return None
    return case
