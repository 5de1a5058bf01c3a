"""Nested inputs: cloning, canonical dict order, flattening with names, mirroring.

Everything goes through torch's pytree so registered containers (e.g. a
transformers ``DynamicCache``) are handled like lists and dicts.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from observer_ci.core.constants import TENSOR_TYPE_CODES

SCALAR_TYPES = (bool, int, float, str)


def clone_tree(value: Any) -> Any:
    """Deep copy of every tensor in a nested structure (detached), other leaves kept."""
    return pytree.tree_map(
        lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, value
    )


def canonical_order(value: Any, reference: Any) -> Any:
    """Reorders nested dicts of ``value`` to follow the key order of ``reference``.

    Calls may pass the same dict with keys in another order; flattening must not
    depend on it.
    """
    if isinstance(value, dict) and isinstance(reference, dict):
        keys = [k for k in reference if k in value] + [k for k in value if k not in reference]
        out = {k: canonical_order(value[k], reference.get(k)) for k in keys}
        return type(value)(out) if type(value) is not dict else out
    if isinstance(value, (list, tuple)) and isinstance(reference, (list, tuple)):
        items = [
            canonical_order(v, reference[i] if i < len(reference) else None)
            for i, v in enumerate(value)
        ]
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*items)
        return type(value)(items)
    return value


def leaf_names(prefix: str, value: Any) -> list[str]:
    """Names of the leaves, ``prefix`` followed by the key path (``cache_0_1``)."""
    paths, _ = pytree.tree_flatten_with_path(value)
    return [prefix + "".join("_" + _key_str(k) for k in path) for path, _ in paths]


def tree_shape(value: Any) -> Any:
    """The container skeleton of a nested value: types, dict keys and child counts.

    Key names of registered classes are left out: helpers that build the same cache may
    name its children differently, and what matters for alignment is types and counts.
    """
    return spec_shape(pytree.tree_flatten(value)[1])


def spec_shape(spec: pytree.TreeSpec) -> Any:
    """:func:`tree_shape` of a flattened value's spec."""

    def skeleton(node: pytree.TreeSpec) -> Any:
        if node.is_leaf():
            return None
        keys = tuple(node.context) if node.type is dict else len(node.children())
        return (node.type, keys, tuple(skeleton(c) for c in node.children()))

    return skeleton(spec)


def contains_none(value: Any) -> bool:
    """True when a nested value holds a None (pytree drops them when flattening)."""
    if value is None:
        return True
    if isinstance(value, dict):
        return any(contains_none(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(contains_none(v) for v in value)
    return False


def trees_equal(a: Any, b: Any) -> bool:
    """Same skeleton and equal tensors (dtype, shape and values)."""
    try:
        if tree_shape(a) != tree_shape(b):
            return False
        la, lb = pytree.tree_flatten(a)[0], pytree.tree_flatten(b)[0]
    except Exception:
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def _key_str(key: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def mirror(spec: pytree.TreeSpec, leaves: list[Any]) -> Any:
    """Rebuilds ``spec``'s structure with ``leaves``, mapping registered classes to lists.

    ``torch.export`` wants dynamic shapes for a custom pytree node expressed as the
    node's flattened children, not as an instance of the class.
    """
    it = iter(leaves)

    def build(node: pytree.TreeSpec) -> Any:
        if node.is_leaf():
            return next(it)
        children = [build(c) for c in node.children()]
        if node.type is dict:
            return dict(zip(node.context, children))
        if node.type is tuple:
            return tuple(children)
        if node.type is list:
            return list(children)
        if isinstance(node.context, list) and node.context and node.type is not None:
            named = getattr(node.type, "_fields", None)
            if named:  # namedtuple
                return tuple(children)
        return list(children)

    return build(spec)


def tensor_summary(value: Any) -> str:
    """Short text of a nested value: ``dict(a:T1s2x3,b:[T7s4])``."""
    if isinstance(value, torch.Tensor):
        return f"T{_dtype_code(value.dtype)}s{'x'.join(map(str, value.shape)) or 'scalar'}"
    if value is None:
        return "None"
    if isinstance(value, dict):
        return "dict(" + ",".join(f"{k}:{tensor_summary(v)}" for k, v in value.items()) + ")"
    if isinstance(value, (list, tuple)):
        open_, close = ("(", ")") if isinstance(value, tuple) else ("[", "]")
        return open_ + ",".join(tensor_summary(v) for v in value) + close
    if isinstance(value, SCALAR_TYPES):
        return repr(value)
    leaves, spec = pytree.tree_flatten(value)
    if spec.is_leaf():
        return type(value).__name__
    return type(value).__name__ + "[" + ",".join(tensor_summary(v) for v in leaves) + "]"


def _dtype_code(dtype: torch.dtype) -> str:
    name = str(dtype).replace("torch.", "")
    code = TENSOR_TYPE_CODES.get(name)
    return name if code is None else str(code)
