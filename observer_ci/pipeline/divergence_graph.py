"""What the first-divergence search compares: ONNX nodes with the scopes and stack traces
the dynamo exporter recorded on them (``pkg.torch.onnx.name_scopes``,
``pkg.torch.onnx.stack_trace``), module calls seen in torch, and the errors between
their values (``divergence.py`` walks the modules, ``divergence_lines.py`` the lines).
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import torch
from torch.utils import _pytree as pytree

from observer_ci.pipeline.diff import comparable_array, flatten_outputs, max_diff

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# this search's own modules (divergence*.py): their frames are never the user's
_OWN_PREFIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "divergence")
FRAME_PATTERN = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in [^\n]*(?:\n(?P<code>[^\n]*))?'
)
Frame = tuple[str, int, str]  # file, line, code


@dataclass
class Node:
    """One ONNX node with what the exporter recorded about where it came from."""

    index: int
    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    modules: tuple[str, ...]  # module paths, outermost first ("" is the root)
    stack: str
    frame: Frame | None  # the deepest frame outside torch (else torch's own deepest)


@dataclass
class ModuleCall:
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


def parse_nodes(graph: onnx.GraphProto, prefix: str | None) -> list[Node]:
    """The main graph's nodes in order (a method's wrapper scope ``prefix`` dropped)."""
    nodes = []
    for k, node in enumerate(graph.node):
        meta = {p.key: p.value for p in node.metadata_props}
        stack = meta.get("pkg.torch.onnx.stack_trace", "")
        nodes.append(
            Node(
                index=k,
                name=node.name,
                op_type=node.op_type,
                inputs=list(node.input),
                outputs=[o for o in node.output if o],
                modules=module_paths(meta.get("pkg.torch.onnx.name_scopes"), prefix),
                stack=stack,
                frame=user_frame(stack) or deepest_frame(stack),
            )
        )
    return nodes


def module_paths(scopes: str | None, prefix: str | None) -> tuple[str, ...]:
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
        (m["file"], int(m["line"]), (m["code"] or "").strip())
        for m in FRAME_PATTERN.finditer(stack)
    ]
    for frame in reversed(frames):
        if not is_internal(frame[0]):
            return frame
    return None


def deepest_frame(stack: str) -> Frame | None:
    """A torch module's own line, when no frame of the trace is the user's."""
    found = list(FRAME_PATTERN.finditer(stack))
    if not found:
        return None
    m = found[-1]
    return m["file"], int(m["line"]), (m["code"] or "").strip()


@functools.lru_cache(maxsize=1024)
def is_internal(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_TORCH_DIR) or path.startswith(_OWN_PREFIX)


@functools.lru_cache(maxsize=1024)
def absolute_path(filename: str) -> str:
    return os.path.abspath(filename)


def format_frame(frame: Frame) -> str:
    """``file.py:12: code``, the file relative to the working directory when under it."""
    path = os.path.abspath(frame[0])
    relative = os.path.relpath(path)
    shown = relative if not relative.startswith("..") else os.path.basename(path)
    return f"{shown}:{frame[1]}: {frame[2]}" if frame[2] else f"{shown}:{frame[1]}"


def line_key(frame: Frame) -> tuple[str, int]:
    return absolute_path(frame[0]), frame[1]


def copy_tree(value: Any) -> Any:
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


def tensor_leaves(value: Any) -> list[torch.Tensor]:
    """The tensor leaves; a nested tensor (the fast path of ``nn.TransformerEncoder`` with
    a padding mask) as its padded form, zeros where the mask drops positions."""
    leaves = [t for t in flatten_outputs(value) if isinstance(t, torch.Tensor)]
    return [t.to_padded_tensor(0.0) if t.is_nested else t for t in leaves]


def has_nested(value: Any) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_nested for t in flatten_outputs(value))


def array_kind(array: np.ndarray) -> tuple[Any, ...]:
    return (tuple(array.shape), array.dtype.str)


def tensor_kind(t: torch.Tensor) -> tuple[Any, ...]:
    if t.dtype == torch.bfloat16:
        return (tuple(t.shape), "bfloat16")
    return (tuple(t.shape), torch.empty(0, dtype=t.dtype).numpy().dtype.str)


def max_error(expected: torch.Tensor | np.ndarray, got: np.ndarray) -> float:
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


def exceeds(expected: torch.Tensor | np.ndarray, error: float, abs_max: float) -> bool:
    """An intermediate value parts from torch when its error is over the absolute
    tolerance scaled by its magnitude (hidden states of magnitude 100 carry float noise
    a hundred times an output's)."""
    if error <= abs_max:
        return False
    array = comparable_array(expected)
    with np.errstate(invalid="ignore"):
        peak = float(np.max(np.abs(array))) if array.size else 0.0
    return error > abs_max * max(1.0, peak if np.isfinite(peak) else 1.0)


def kept_positions(
    e: np.ndarray, g: np.ndarray, kept: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
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
