"""Cache layers that are not plain key/value layers, flattened by their tensor attributes.

transformers 5.x keeps every per-layer state of a ``DynamicCache`` in a layer object:
``DynamicLayer`` (``keys``, ``values``), ``DynamicIndexedLayer`` (+ ``indexer_keys``),
``LinearAttentionLayer`` (``conv_states``, ``recurrent_states``: Mamba, Mamba2, LFM2,
Qwen3-Next's linear attention...), ``LinearAttentionAndFullAttentionLayer`` (both:
Zamba), model-specific subclasses (``MiniMaxM3VLSparseCacheLayer``: + ``idx_keys``).
A cache holding any layer but ``DynamicLayer`` / ``DynamicSlidingWindowLayer`` is
flattened here, as one family: every public tensor attribute of every layer is a leaf,
grouped by attribute name::

    {"key_cache": [...], "value_cache": [...], "conv_states": [...], "recurrent_states": [...]}

(``keys`` / ``values`` keep the names of the key/value layout, so a hybrid cache's
attention layers are named like any decoder's). The ``k``-th entry of a list is the
``k``-th layer holding that attribute: in Mamba the layer index, in a hybrid model the
index among the layers of that kind. The layers' other attributes (flags such as
``has_previous_state``, sizes, dtype, device, scalar tensors such as a window) are the
context: a layer is rebuilt as an instance of its own class with them, then given its
tensors. A layer attribute that is none of these is not rebuilt; the tensors it holds
then reach no graph input, which :func:`hidden_tensors` reports (a failing verdict).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

STATE_MARK = "state_layers"
# Attribute -> child key, for the attributes the key/value layout already names.
_RENAMED = {"keys": "key_cache", "values": "value_cache"}
_PLAIN = (type(None), bool, int, float, str)

__all__ = [
    "STATE_MARK",
    "flatten_layers",
    "from_dumpable",
    "hidden_tensors",
    "is_state_context",
    "is_state_dump",
    "to_dumpable",
    "unflatten_layers",
]


def _child_key(attr: str) -> str:
    return _RENAMED.get(attr, attr)


def _plain(value: Any) -> tuple[str, Any] | None:
    """``(kind, json value)`` for an attribute kept in the context, None for the others."""
    import torch

    if isinstance(value, _PLAIN):
        return ("value", value)
    if isinstance(value, torch.dtype):
        return ("dtype", str(value).replace("torch.", ""))
    if isinstance(value, torch.device):
        return ("device", str(value))
    if isinstance(value, (tuple, list)) and all(isinstance(v, _PLAIN) for v in value):
        return ("tuple" if isinstance(value, tuple) else "list", list(value))
    return None


def _rebuild_plain(kind: str, value: Any) -> Any:
    import torch

    if kind == "dtype":
        return getattr(torch, value)
    if kind == "device":
        return torch.device(value)
    if kind == "tuple":
        return tuple(value)
    if kind == "list":
        return list(value)
    if kind == "scalar_tensor":
        dtype, number = value
        return torch.tensor(number, dtype=getattr(torch, dtype))
    return value


def _layer_attributes(layer: Any) -> tuple[list[tuple[str, Any]], list[tuple[str, str, Any]]]:
    """``(state tensors, plain attributes)`` of one layer, in attribute order."""
    import torch

    tensors: list[tuple[str, Any]] = []
    plain: list[tuple[str, str, Any]] = []
    for name, value in vars(layer).items():
        if isinstance(value, torch.Tensor):
            if not name.startswith("_"):
                tensors.append((name, value))
            elif value.dim() == 0:  # a constant such as ``_sliding_window_tensor``
                dtype = str(value.dtype).replace("torch.", "")
                plain.append((name, "scalar_tensor", (dtype, value.item())))
            continue
        kept = _plain(value)
        if kept is not None:
            plain.append((name, kept[0], kept[1]))
    return tensors, plain


def flatten_layers(layers: Sequence[Any], kv_keys: Sequence[str]) -> tuple[list[Any], Any]:
    """Children (one list of tensors per attribute) and context of a cache's layers."""
    keys: list[str] = list(kv_keys)
    children: dict[str, list[Any]] = {k: [] for k in keys}
    specs = []
    for layer in layers:
        tensors, plain = _layer_attributes(layer)
        attrs = []
        for name, tensor in tensors:
            key = _child_key(name)
            if key not in children:
                keys.append(key)
                children[key] = []
            children[key].append(tensor)
            attrs.append(name)
        cls = type(layer)
        specs.append((cls.__module__, cls.__qualname__, tuple(attrs), tuple(plain)))
    return [children[k] for k in keys], (tuple(keys), tuple(specs), STATE_MARK)


def is_state_context(context: Any) -> bool:
    return isinstance(context, tuple) and len(context) == 3 and context[2] == STATE_MARK


def _layer_class(module: str, qualname: str) -> type:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _tokens_seen(specs: Sequence[Any], by_key: dict[str, list[Any]]) -> Any:
    """Tokens seen so far: the length of a full-attention layer's keys, if any."""
    index = 0
    for _, _, attrs, plain in specs:
        if "keys" in attrs:
            if not any(name == "sliding_window" and value for name, _, value in plain):
                return by_key["key_cache"][index].shape[-2]
            index += 1
    return None


def unflatten_layers(values: Iterable[Any], context: Any) -> list[Any]:
    """The layers :func:`flatten_layers` flattened, rebuilt around ``values``."""
    keys, specs, _ = context
    by_key = dict(zip(keys, [list(v) for v in values], strict=True))
    position = {k: 0 for k in keys}
    seen = _tokens_seen(specs, by_key)
    layers = []
    for module, qualname, attrs, plain in specs:
        cls = _layer_class(module, qualname)
        layer = cls.__new__(cls)
        for name, kind, value in plain:
            setattr(layer, name, _rebuild_plain(kind, value))
        first = None
        for name in attrs:
            key = _child_key(name)
            tensor = by_key[key][position[key]]
            position[key] += 1
            setattr(layer, name, tensor)
            first = tensor if first is None else first
        if first is not None:
            layer.dtype, layer.device = first.dtype, first.device
        if "keys" in attrs and isinstance(getattr(layer, "cumulative_length", None), int):
            layer.cumulative_length = layer.keys.shape[-2] if seen is None else seen
        layers.append(layer)
    return layers


def to_dumpable(context: Any) -> str:
    keys, specs, mark = context
    layers = [[m, q, list(a), [list(p) for p in plain]] for m, q, a, plain in specs]
    return json.dumps({mark: [list(keys), layers]})


def is_state_dump(dumped: str) -> bool:
    return dumped.startswith("{") and STATE_MARK in dumped[:40]


def from_dumpable(dumped: str) -> Any:
    keys, specs = json.loads(dumped)[STATE_MARK]
    rebuilt = tuple(
        (m, q, tuple(a), tuple((n, k, _from_json(k, v)) for n, k, v in plain))
        for m, q, a, plain in specs
    )
    return tuple(keys), rebuilt, STATE_MARK


def _from_json(kind: str, value: Any) -> Any:
    return tuple(value) if kind == "scalar_tensor" else value


# -------------------------------------------------------------------------- the check
_MAX_DEPTH = 6
_MAX_OBJECTS = 5000


def hidden_tensors(value: Any, covered: Iterable[Any], prefix: str = "") -> list[str]:
    """Where ``value`` keeps tensors that are not among ``covered`` (its flattened leaves).

    Walks containers and object attributes (a few levels deep, not into modules). A 0-d
    tensor under a private attribute (``_sliding_window_tensor``) is a constant, not
    state, and is left out. Returns paths such as
    ``cache_params.layers[0].conv_states (LinearAttentionLayer)``.
    """
    import torch

    ids = {id(t) for t in covered}
    found: list[str] = []
    visited: set[int] = set()

    def walk(obj: Any, path: str, attr: str, owner: str, depth: int) -> None:
        if len(visited) > _MAX_OBJECTS or depth > _MAX_DEPTH or id(obj) in visited:
            return
        if isinstance(obj, torch.Tensor):
            if id(obj) not in ids and not (obj.dim() == 0 and attr.startswith("_")):
                found.append(f"{path} ({owner})" if owner else path)
            return
        visited.add(id(obj))
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{path}[{k!r}]", str(k), owner, depth + 1)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for k, v in enumerate(obj):
                walk(v, f"{path}[{k}]", attr, owner, depth + 1)
        elif _has_state(obj):
            label = type(obj).__name__
            for k, v in vars(obj).items():
                walk(v, f"{path}.{k}" if path else k, k, label, depth + 1)

    walk(value, prefix, "", "", 0)
    return found


def _has_state(obj: Any) -> bool:
    """An object whose attributes may keep tensors: not a module, class or function."""
    import torch

    if isinstance(obj, (*_PLAIN, bytes, type, torch.nn.Module)) or callable(obj):
        return False
    return hasattr(obj, "__dict__")
