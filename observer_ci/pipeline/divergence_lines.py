"""Inside the diverging module: the first ONNX node that parts from torch, its line.

One eager re-run of the module under a ``TorchFunctionMode`` records the tensors each of
its source lines produced; each ONNX node of the module's scope is compared with those
of its own line (the deepest user frame of its stack trace), in graph order, up to the
first that differs. A line the graph holds but torch did not run is the branch taken only
while exporting (or at the observed sizes); known op semantics (ties, rounding,
interpolation) are named from ``core.constants``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from observer_ci.core.constants import KNOWN_OP_CASE_NEXT_STEPS, KNOWN_OP_CASES
from observer_ci.core.errors import error_tail
from observer_ci.core.results import FirstDivergence
from observer_ci.pipeline.diff import comparable_array
from observer_ci.pipeline.divergence_graph import (
    ModuleCall,
    Node,
    absolute_path,
    array_kind,
    copy_tree,
    exceeds,
    format_frame,
    is_internal,
    kept_positions,
    line_key,
    max_error,
    tensor_kind,
    tensor_leaves,
)


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
        produced = [t.detach().clone() for t in tensor_leaves(out)]
        for key in _callers(sys._getframe(1)):
            self.by_line.setdefault(key, []).extend(produced)
        return out


def _callers(frame: Any) -> list[tuple[str, int]]:
    """The (file, line) of every frame outside torch up to :func:`_record_lines`."""
    keys = []
    while frame is not None and frame.f_code is not _record_lines.__code__:
        filename = frame.f_code.co_filename
        if not is_internal(filename):
            keys.append((absolute_path(filename), frame.f_lineno))
        frame = frame.f_back
    return list(dict.fromkeys(keys))


def _code_ranges(call: ModuleCall) -> dict[str, list[tuple[int, int]]]:
    """The lines of the forwards the re-run of ``call`` runs (its own and its submodules'):
    where a line with no eager tensor is one torch did not run, not one it cannot see."""
    functions = [call.run, *(type(m).forward for m in call.module.modules())]
    ranges: dict[str, list[tuple[int, int]]] = {}
    for function in functions:
        code = getattr(getattr(function, "__func__", function), "__code__", None)
        if code is None or is_internal(code.co_filename):
            continue
        last = max((line for _, _, line in code.co_lines() if line), default=code.co_firstlineno)
        ranges.setdefault(absolute_path(code.co_filename), []).append((code.co_firstlineno, last))
    return ranges


def _in_ranges(key: tuple[str, int], ranges: dict[str, list[tuple[int, int]]]) -> bool:
    return any(first <= key[1] <= last for first, last in ranges.get(key[0], []))


def _record_lines(call: ModuleCall) -> dict[tuple[str, int], list[torch.Tensor]]:
    recorder = _LineRecorder()
    args, kwargs = copy_tree((call.args, call.kwargs))
    with torch.no_grad(), recorder:
        call.run(*args, **kwargs)
    return recorder.by_line


@dataclass
class _Status:
    state: str  # "agree", "differ", "unmatched" (no torch tensor like it), "unrun" (no call)
    error: float | None = None


def _statuses(
    scope: list[Node],
    by_line: dict[tuple[str, int], list[torch.Tensor]],
    ranges: dict[str, list[tuple[int, int]]],
    values: dict[str, np.ndarray],
    abs_max: float,
    kept: np.ndarray | None,
) -> dict[int, _Status]:
    consumers: dict[str, list[Node]] = {}
    for node in scope:
        for name in node.inputs:
            consumers.setdefault(name, []).append(node)
    out = {}
    for node in scope:
        if node.frame is None:
            continue
        key = line_key(node.frame)
        produced = by_line.get(key)
        if produced is None:
            out[node.index] = _Status("unrun" if _in_ranges(key, ranges) else "unmatched")
            continue
        leaving = [o for o in node.outputs if _leaves_line(node, consumers.get(o, []))]
        out[node.index] = _node_status(node, leaving, produced, values, abs_max, kept)
        if out[node.index].state == "differ":
            break  # the first one is all the search needs (later nodes are not judged)
    return out


def _leaves_line(node: Node, consumers: list[Node]) -> bool:
    """A value used past its own source line (or by none in the scope): what torch also
    holds. Values inside one line (an op decomposed: rsqrt as Sqrt then Reciprocal) may
    have no torch counterpart and are never blamed."""
    assert node.frame is not None
    key = line_key(node.frame)
    return not consumers or any(c.frame is None or line_key(c.frame) != key for c in consumers)


def _node_status(
    node: Node,
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
    kind = array_kind(got)
    smallest: float | None = None
    for t in produced:
        if tensor_kind(t) != kind:
            continue
        e, g = kept_positions(comparable_array(t), got, kept)
        error = max_error(e, g)
        smallest = error if smallest is None else min(smallest, error)
        if not exceeds(e, error, abs_max):
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


def locate_inside(
    result: FirstDivergence,
    call: ModuleCall,
    scope: list[Node],
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
        lambda n: state.get(n.index) != "agree" and known_case(n, values) is not None,
    )
    if known is not None:
        result.known_case = known_case(known, values)
        result.next_step = KNOWN_OP_CASE_NEXT_STEPS[result.known_case or ""]
        if known is not first:
            result.onnx_ops.insert(0, known.op_type)
            result.onnx_nodes.insert(0, known.name)


def _nearest(start: Node, producers: dict[str, Node], wanted: Any) -> Node | None:
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


def known_case(node: Node, values: dict[str, np.ndarray]) -> str | None:
    case = KNOWN_OP_CASES.get(node.op_type)
    if node.op_type in ("Cast", "Div"):
        source = values.get(node.inputs[0]) if node.inputs else None
        target = values.get(node.outputs[0]) if node.outputs else None
        if source is None or target is None or target.dtype.kind not in "iu":
            return None
        if node.op_type == "Cast" and source.dtype.kind != "f":
            return None
    return case
