"""Pytree registrations for transformers cache classes.

``torch.export`` / ``torch.onnx.export(..., dynamo=True)`` can only trace inputs and
outputs made of tensors and containers known to ``torch.utils._pytree``. transformers
5.x passes a :class:`transformers.cache_utils.DynamicCache` as ``past_key_values`` and
returns it inside the ``CausalLMOutputWithPast``. ``ModelOutput`` subclasses register
themselves with pytree when they are defined, but ``DynamicCache`` is **not** registered
by default (transformers only registers it when
``transformers.integrations.executorch.register_dynamic_cache_export_support()`` is
called).

:func:`register_transformers_pytrees` registers ``DynamicCache`` (and
``EncoderDecoderCache``) with the same flattened layout transformers uses, so that exported
graphs get the same input names whichever of the two registered it first::

    DynamicCache  ->  {"key_cache": [k_0, ..., k_{n-1}], "value_cache": [v_0, ..., v_{n-1}]}

Every ``k_i`` / ``v_i`` has shape ``(batch, num_key_value_heads, seq_len, head_dim)``.
Its flattened key paths are ``past_key_values.key_cache[i]`` and the ONNX exporter names
the graph inputs ``past_key_values_key_cache_{i}`` / ``past_key_values_value_cache_{i}``.

``torch.export`` maps ``dynamic_shapes`` onto the *children* of a registered class, so
the dynamic shapes of a ``DynamicCache`` argument are a list of two lists (keys, values),
see :func:`cache_dynamic_shapes`.

A cache holding any other layer type (Mamba's ``LinearAttentionLayer`` with convolution
and recurrent states, hybrid and indexed layers, model-specific subclasses) is flattened
by its layers' tensor attributes instead, one list per attribute
(:mod:`observer_ci.observing.state_layers`); its ``keys`` / ``values`` keep the names above.

Only layers whose tensors are initialised are flattened: transformers builds the cache of
the first (prefill) step with lazily initialised layers (``keys is None``), which flattens
to two empty lists. Use :func:`make_dynamic_cache` with tensors of sequence length 0 to get
a prefill cache with the same structure as a decode cache.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from observer_ci.observing import state_layers

__all__ = [
    "cache_dynamic_shapes",
    "describe_cache",
    "is_registered",
    "make_dynamic_cache",
    "register_if_imported",
    "register_model_output_keys",
    "register_transformers_pytrees",
]

_CACHE_KEYS = ("key_cache", "value_cache")
# The names of the layer classes the flattening knows how to rebuild.
_LAYER_CLASSES = ("DynamicLayer", "DynamicSlidingWindowLayer")


def _transformers_imported() -> bool:
    """Only a script that already imported transformers needs its classes registered:
    never import transformers (seconds) for a model that does not use it."""
    return "transformers" in sys.modules


def is_registered(cls: type) -> bool:
    """Tells whether ``cls`` is already a pytree node (registered by anyone)."""
    import torch.utils._pytree as pytree

    return cls in pytree.SUPPORTED_NODES


# --------------------------------------------------------------------------------------
# DynamicCache
# --------------------------------------------------------------------------------------


def _layer_spec(layer: Any) -> tuple[str, int | None]:
    name = type(layer).__name__
    if name not in _LAYER_CLASSES:  # pragma: no cover - callers route other layers away
        raise TypeError(f"{name} is not a key/value layer ({', '.join(_LAYER_CLASSES)})")
    return name, getattr(layer, "sliding_window", None)


def _initialized_layers(cache: Any) -> list[Any]:
    layers = []
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None:
            # Lazily created layers come last; an uninitialised layer ends the cache.
            break
        layers.append(layer)
    return layers


def _key_value_only(cache: Any) -> bool:
    """True when every layer is a plain or sliding key/value layer (the layout above)."""
    return all(type(layer).__name__ in _LAYER_CLASSES for layer in cache.layers)


def _flatten_dynamic_cache(cache: Any) -> tuple[list[Any], Any]:
    if not _key_value_only(cache):
        return state_layers.flatten_layers(cache.layers, _CACHE_KEYS)
    layers = _initialized_layers(cache)
    specs = tuple(_layer_spec(layer) for layer in layers)
    children = [[layer.keys for layer in layers], [layer.values for layer in layers]]
    return children, (_CACHE_KEYS, specs)


def _flatten_with_keys_dynamic_cache(cache: Any) -> tuple[list[tuple[Any, Any]], Any]:
    import torch.utils._pytree as pytree

    children, context = _flatten_dynamic_cache(cache)
    keys = context[0]
    keyed = [(pytree.MappingKey(k), c) for k, c in zip(keys, children, strict=True)]
    return keyed, context


def _unflatten_dynamic_cache(values: Iterable[Any], context: Any) -> Any:
    from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

    if state_layers.is_state_context(context):
        cache = DynamicCache()
        cache.layers.extend(state_layers.unflatten_layers(list(values), context))
        return cache
    _, specs = context
    keys, vals = list(values)
    # No config: the cache keeps ``layer_class_to_replicate=DynamicLayer`` so that a model
    # can still append layers lazily when the flattened cache was empty.
    cache = DynamicCache()
    seen = _tokens_seen(specs, keys)
    for (name, window), k, v in zip(specs, keys, vals, strict=True):
        if name == "DynamicSlidingWindowLayer":
            layer = DynamicSlidingWindowLayer(sliding_window=window)
        else:
            layer = DynamicLayer()
        # Assign the tensors directly. ``update`` / ``lazy_initialization`` create a
        # ``torch.tensor([])`` which, when unflattening inside torch.export, becomes a lifted
        # constant the ONNX exporter rejects during decomposition (SpecViolationError
        # "Constant tensor lifted_tensor_N is not in the constants dictionary").
        layer.dtype, layer.device = k.dtype, k.device
        layer.keys, layer.values = k, v
        layer.is_initialized = True
        if hasattr(layer, "cumulative_length"):
            layer.cumulative_length = k.shape[-2] if seen is None else seen
        cache.layers.append(layer)
    return cache


def _tokens_seen(specs: Any, keys: list[Any]) -> Any:
    """Tokens seen so far, from a full-attention layer of a hybrid cache, else None.

    A sliding-window layer keeps only its last ``window - 1`` positions, so its tensors do
    not tell how many tokens it has seen (``cumulative_length``: the offset of its mask). In
    a hybrid cache (Gemma 2/3, Cohere 2, gpt-oss: sliding and full layers) a full layer
    holds every past position. Without one, a capped layer counts what it holds: every
    layer then shifts alike and the masks stay right.
    """
    return next((k.shape[-2] for (name, _), k in zip(specs, keys) if name == "DynamicLayer"), None)


def sliding_window_full(value: Any) -> bool:
    """True for a hybrid cache (sliding and full layers) whose sliding layers have reached
    their window: their mask then starts at an offset, before it did not, and a traced graph
    follows one of the two (``DynamicSlidingWindowLayer.get_mask_sizes``)."""
    for cache in (value, getattr(value, "self_attention_cache", None)):
        layers = getattr(cache, "layers", None) or []
        names = [type(layer).__name__ for layer in layers]
        if "DynamicLayer" not in names:
            continue  # all sliding: every layer shifts alike, one graph serves both
        for layer, name in zip(layers, names):
            window = getattr(layer, "sliding_window", None) or 0
            sliding = name == "DynamicSlidingWindowLayer" and window > 0
            if sliding and getattr(layer, "cumulative_length", 0) >= window:
                return True
    return False


def _dynamic_cache_to_dumpable(context: Any) -> str:
    if state_layers.is_state_context(context):
        return state_layers.to_dumpable(context)
    keys, specs = context
    return json.dumps([list(keys), [list(s) for s in specs]])


def _dynamic_cache_from_dumpable(dumped: str) -> Any:
    if state_layers.is_state_dump(dumped):
        return state_layers.from_dumpable(dumped)
    keys, specs = json.loads(dumped)
    return tuple(keys), tuple((s[0], s[1]) for s in specs)


def _registered_by_transformers(cls: type) -> bool:
    import torch.utils._pytree as pytree

    node = pytree.SUPPORTED_NODES.get(cls)
    module = getattr(getattr(node, "unflatten_fn", None), "__module__", "") or ""
    return module.startswith("transformers.")


def _register_dynamic_cache(replace_transformers: bool = False) -> bool:
    import torch.utils._pytree as pytree
    from transformers.cache_utils import DynamicCache

    if is_registered(DynamicCache):
        if not (replace_transformers and _registered_by_transformers(DynamicCache)):
            return False
        pytree._deregister_pytree_node(DynamicCache)
        _deregister_fx_flatten_spec(DynamicCache)
    pytree.register_pytree_node(
        DynamicCache,
        _flatten_dynamic_cache,
        _unflatten_dynamic_cache,
        serialized_type_name=f"{DynamicCache.__module__}.{DynamicCache.__name__}",
        to_dumpable_context=_dynamic_cache_to_dumpable,
        from_dumpable_context=_dynamic_cache_from_dumpable,
        flatten_with_keys_fn=_flatten_with_keys_dynamic_cache,
    )
    _register_fx_flatten_spec(DynamicCache, _flatten_dynamic_cache)
    return True


# --------------------------------------------------------------------------------------
# EncoderDecoderCache
# --------------------------------------------------------------------------------------

_ED_KEYS = ("self_attention_cache", "cross_attention_cache")


def _flatten_encoder_decoder_cache(cache: Any) -> tuple[list[Any], Any]:
    return [cache.self_attention_cache, cache.cross_attention_cache], _ED_KEYS


def _flatten_with_keys_encoder_decoder_cache(cache: Any) -> tuple[list[tuple[Any, Any]], Any]:
    import torch.utils._pytree as pytree

    children, context = _flatten_encoder_decoder_cache(cache)
    return [(pytree.MappingKey(k), c) for k, c in zip(context, children, strict=True)], context


def _unflatten_encoder_decoder_cache(values: Iterable[Any], context: Any) -> Any:
    from transformers.cache_utils import EncoderDecoderCache

    return EncoderDecoderCache(*list(values))


def _register_encoder_decoder_cache() -> bool:
    import torch.utils._pytree as pytree

    try:
        from transformers.cache_utils import EncoderDecoderCache
    except ImportError:  # pragma: no cover - very old/new transformers
        return False
    if is_registered(EncoderDecoderCache):
        return False
    pytree.register_pytree_node(
        EncoderDecoderCache,
        _flatten_encoder_decoder_cache,
        _unflatten_encoder_decoder_cache,
        serialized_type_name=f"{EncoderDecoderCache.__module__}.{EncoderDecoderCache.__name__}",
        flatten_with_keys_fn=_flatten_with_keys_encoder_decoder_cache,
    )
    _register_fx_flatten_spec(EncoderDecoderCache, _flatten_encoder_decoder_cache)
    return True


def _register_fx_flatten_spec(cls: type, flatten_fn: Any) -> None:
    """Older torch (< 2.7) also needs a flatten spec for ``torch.fx`` codegen."""
    try:
        import torch.fx._pytree as fx_pytree
    except ImportError:  # pragma: no cover
        return
    register = getattr(fx_pytree, "register_pytree_flatten_spec", None)
    if register is None or cls in getattr(fx_pytree, "SUPPORTED_NODES", {}):
        return
    register(cls, lambda obj, spec: flatten_fn(obj)[0])


# --------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------


def _deregister_fx_flatten_spec(cls: type) -> None:
    try:
        import torch.fx._pytree as fx_pytree
    except ImportError:  # pragma: no cover
        return
    deregister = getattr(fx_pytree, "_deregister_pytree_flatten_spec", None)
    if deregister is not None and cls in getattr(fx_pytree, "SUPPORTED_NODES", {}):
        deregister(cls)


def register_transformers_pytrees(replace_transformers: bool = False) -> list[str]:
    """Registers transformers cache classes with ``torch.utils._pytree``.

    Idempotent: a class already registered (by a previous call, by transformers'
    ``register_dynamic_cache_export_support`` or by any other library) is left untouched.
    Returns the names of the classes registered by this call, ``[]`` if transformers was
    not imported by the caller or everything was already registered. ``ModelOutput``
    classes transformers registered without key paths get them (see
    :func:`register_model_output_keys`).

    With ``replace_transformers=True``, a ``DynamicCache`` registration made by transformers
    itself (``transformers.integrations.executorch``) is replaced by this module's: both
    flatten to the same leaves and names, but transformers' unflatten calls
    ``DynamicCache.update`` which creates a constant ``torch.tensor([])`` inside the traced
    graph and makes ``torch.onnx.export(..., dynamo=True)`` fail (torch 2.13) with
    ``SpecViolationError: Constant tensor lifted_tensor_N is not in the constants
    dictionary``.
    """
    if not _transformers_imported():
        return []
    registered = []
    if _register_dynamic_cache(replace_transformers):
        registered.append("DynamicCache")
    if _register_encoder_decoder_cache():
        registered.append("EncoderDecoderCache")
    register_model_output_keys()
    return registered


def register_if_imported() -> list[str]:
    """:func:`register_transformers_pytrees`, only when the script already imported
    transformers: a plain model never pays for importing it (0.5-0.9 s)."""
    if "transformers" not in sys.modules:
        return []
    return register_transformers_pytrees()


# --------------------------------------------------------------------------------------
# ModelOutput (BaseModelOutput, Seq2SeqLMOutput, ...) with key paths
# --------------------------------------------------------------------------------------


def _flatten_with_keys_model_output(output: Any) -> tuple[list[tuple[Any, Any]], Any]:
    import torch.utils._pytree as pytree

    keys = list(output.keys())
    return [(pytree.MappingKey(k), output[k]) for k in keys], keys


def register_model_output_keys() -> list[str]:
    """Gives key paths to the ``ModelOutput`` classes transformers registered without.

    transformers registers every ``ModelOutput`` subclass with torch's pytree when the
    class is defined, without a ``flatten_with_keys_fn``: flattening *with paths* (what
    names the exported inputs, e.g. ``encoder_outputs_last_hidden_state``) then raises
    ``Did not find a flatten_with_keys_fn for type BaseModelOutput``. The classes keep
    transformers' flatten/unflatten (same leaves, same order, same serialised name); only
    the key function is added, for the Python pytree (the one ``torch.export`` uses).
    Returns the names of the classes changed; a no-op unless transformers is imported.
    """
    if not _transformers_imported():
        return []
    import torch.utils._pytree as pytree

    model_output = getattr(sys.modules.get("transformers.utils.generic"), "ModelOutput", None)
    if model_output is None:
        return []
    changed = []
    for cls, node in list(pytree.SUPPORTED_NODES.items()):
        if node.flatten_with_keys_fn is not None or not isinstance(cls, type):
            continue
        if not issubclass(cls, model_output):
            continue
        serialized = pytree.SUPPORTED_SERIALIZED_TYPES.get(cls)
        pytree._deregister_pytree_node(cls)
        pytree._private_register_pytree_node(
            cls,
            node.flatten_fn,
            node.unflatten_fn,
            serialized_type_name=getattr(serialized, "serialized_type_name", None),
            to_dumpable_context=getattr(serialized, "to_dumpable_context", None),
            from_dumpable_context=getattr(serialized, "from_dumpable_context", None),
            flatten_with_keys_fn=_flatten_with_keys_model_output,
        )
        changed.append(cls.__name__)
    return changed


def make_dynamic_cache(key_values: Sequence[tuple[Any, Any]]) -> Any:
    """Builds a ``DynamicCache`` of :class:`DynamicLayer` from ``[(keys, values), ...]``.

    Tensors with a sequence length of 0 are accepted: the resulting cache reports
    ``get_seq_length() == 0`` and flattens like a non-empty cache, which makes it the
    way to feed the first (prefill) step to a model exported with a decode-step cache.
    """
    keys = [k for k, _ in key_values]
    values = [v for _, v in key_values]
    specs = tuple(("DynamicLayer", None) for _ in key_values)
    return _unflatten_dynamic_cache([keys, values], (_CACHE_KEYS, specs))


def cache_dynamic_shapes(cache: Any, batch: Any = None, seq: Any = None) -> list[list[Any]]:
    """Returns the ``dynamic_shapes`` entry matching a flattened ``DynamicCache``.

    ``batch`` and ``seq`` default to ``torch.export.Dim.DYNAMIC``; pass ``None``-free
    values such as ``Dim("batch")`` to share a dimension with other inputs. The result is
    ``[[{0: batch, 2: seq}] * n_layers, [{0: batch, 2: seq}] * n_layers]``.
    """
    import torch

    batch = torch.export.Dim.DYNAMIC if batch is None else batch
    seq = torch.export.Dim.DYNAMIC if seq is None else seq
    n = len(_initialized_layers(cache))
    return [[{0: batch, 2: seq} for _ in range(n)] for _ in _CACHE_KEYS]


def describe_cache(cache: Any) -> dict[str, Any]:
    """Summarises a transformers cache: class, number of layers, per-layer state/shapes."""
    layers = []
    for layer in getattr(cache, "layers", []):
        keys = getattr(layer, "keys", None)
        values = getattr(layer, "values", None)
        layers.append(
            {
                "type": type(layer).__name__,
                "initialized": bool(getattr(layer, "is_initialized", keys is not None)),
                "keys": None if keys is None else tuple(keys.shape),
                "values": None if values is None else tuple(values.shape),
                "dtype": None if keys is None else str(keys.dtype),
            }
        )
    desc: dict[str, Any] = {"type": type(cache).__name__, "n_layers": len(layers), "layers": layers}
    if hasattr(cache, "get_seq_length"):
        try:
            desc["seq_length"] = int(cache.get_seq_length())
        except Exception:  # describing must never fail
            desc["seq_length"] = None
    for attr in _ED_KEYS:
        sub = getattr(cache, attr, None)
        if sub is not None:
            desc[attr] = describe_cache(sub)
    return desc
