"""Name the dynamic dimensions an observer found, the way Hugging Face ONNX exports do.

Dims whose sizes are equal in every observed call (where both inputs are present) are
one dimension and get one name. Names come from roles: ``batch_size`` (dim 0),
``sequence_length`` (dim 1 of token inputs), ``past_sequence_length`` (the length axis of
a cache), ``encoder_sequence_length`` / ``decoder_sequence_length`` (encoder-decoder
models), ``conv_state`` / ``ssm_state`` (the non-batch axes of a state-space cache's
convolution and recurrent states, when they vary), ``A + B`` for a dim whose size is
always the sum of two others (a mask spanning cache and new tokens); ``<input>_dim<i>``
where no role fits.

Only the observer's public accessors are used (``num_obs``, ``leaf_names``,
``aligned_inputs``, ``dynamic_dims``); nothing here imports torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from observer_ci.core.cache_inputs import is_cache_input

BATCH = "batch_size"
SEQUENCE = "sequence_length"
PAST = "past_sequence_length"
ENCODER = "encoder_sequence_length"
DECODER = "decoder_sequence_length"
CONV_STATE = "conv_state"  # a state-space / linear-attention cache's convolution window
SSM_STATE = "ssm_state"  # its recurrent (SSM) state
# A role wins over another when it comes first here.
_ROLE_ORDER = (BATCH, PAST, ENCODER, DECODER, SEQUENCE, CONV_STATE, SSM_STATE)

_TOKEN_INPUTS = {
    "input_ids",
    "attention_mask",
    "position_ids",
    "token_type_ids",
    "inputs_embeds",
    "labels",
    "cache_position",
}
_ENCODER_INPUTS = {"encoder_outputs", "encoder_hidden_states", "encoder_attention_mask"}
# Leaves of cache layers that are not key/value (observing/state_layers.py), by role.
_STATE_MARKERS = (("conv_states", CONV_STATE), ("recurrent_states", SSM_STATE))
# Torch's anonymous symbols (``s23``); unbacked ones (``u0``) are left alone.
SYMBOL_RE = re.compile(r"\bs\d+\b")

Key = tuple[int, int]  # (leaf index, dim)


@dataclass
class DimClass:
    """One named dimension: the (leaf, dim) axes it covers and its size in each call."""

    name: str
    keys: list[Key]
    sizes: list[int | None]  # per observed call, None when no member was present


def name_dims(observer: Any, set_batch_dimension_for: Any = None) -> list[dict[int, str]]:
    """Per flattened input (export order): ``{dim: name}`` for its dynamic dims."""
    names = observer.leaf_names()
    dynamic = observer.dynamic_dims(set_batch_dimension_for)
    result: list[dict[int, str]] = [{} for _ in names]
    for cls in dim_classes(observer, set_batch_dimension_for):
        for j, d in cls.keys:
            result[j][d] = cls.name
    for j, dims in enumerate(dynamic):  # every dynamic dim is named
        for d in dims:
            result[j].setdefault(d, generic_name(names[j], d))
    return result


def generic_name(leaf: str, dim: int) -> str:
    return f"{leaf}_dim{dim}"


def dim_classes(observer: Any, set_batch_dimension_for: Any = None) -> list[DimClass]:
    """The dynamic dims grouped by equal sizes across calls, each group named."""
    names = observer.leaf_names()
    dynamic = observer.dynamic_dims(set_batch_dimension_for)
    calls = [observer.aligned_inputs(i) for i in range(observer.num_obs())]

    def size(key: Key, call: list[Any]) -> int | None:
        t = call[key[0]]
        return None if t is None else int(t.shape[key[1]])

    groups: list[list[Key]] = []
    for key in ((j, d) for j, dims in enumerate(dynamic) for d in dims):
        for group in groups:
            if all(
                _same_sizes([size(key, c) for c in calls], [size(k, c) for c in calls])
                for k in group
            ):
                group.append(key)
                break
        else:
            groups.append([key])
    classes = []
    for group in groups:
        sizes = [next((size(k, c) for k in group if size(k, c) is not None), None) for c in calls]
        classes.append(DimClass("", group, sizes))
    _assign_names(classes, names)
    return classes


def _same_sizes(a: list[int | None], b: list[int | None]) -> bool:
    both = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    return bool(both) and all(x == y for x, y in both)


def _assign_names(classes: list[DimClass], names: list[str]) -> None:
    seq2seq = any(n.startswith("decoder_") for n in names)
    roles = [_role(cls, names, seq2seq) for cls in classes]
    order = sorted(
        range(len(classes)),
        key=lambda i: (_ROLE_ORDER.index(roles[i]) if roles[i] else len(_ROLE_ORDER), i),
    )
    taken: set[str] = set()
    for i in order:
        role = roles[i]
        j, d = classes[i].keys[0]
        name = role if role and role not in taken else generic_name(names[j], d)
        classes[i].name = name
        taken.add(name)
    for cls in classes:  # sums last: their parts must be named first
        parts = _sum_of(cls, classes)
        if parts is not None and cls.name not in (BATCH, PAST):
            cls.name = f"{parts[0].name} + {parts[1].name}"


def _role(cls: DimClass, names: list[str], seq2seq: bool) -> str | None:
    found = {_axis_role(names[j], d, seq2seq) for j, d in cls.keys} - {None}
    return min(found, key=_ROLE_ORDER.index) if found else None


def _axis_role(leaf: str, dim: int, seq2seq: bool) -> str | None:
    if dim == 0:
        return BATCH
    state = next((role for marker, role in _STATE_MARKERS if marker in leaf), None)
    if state is not None:
        return state
    if is_cache_input(leaf):
        if "cross_attention" in leaf:
            return ENCODER
        return PAST if dim == 2 else None
    if dim != 1:
        return None
    if leaf.startswith("decoder_") and leaf[len("decoder_") :] in _TOKEN_INPUTS:
        return DECODER
    if leaf in _ENCODER_INPUTS or leaf.startswith("encoder_outputs"):
        return ENCODER
    if leaf in _TOKEN_INPUTS:
        return ENCODER if seq2seq else SEQUENCE
    return None


def _sum_of(cls: DimClass, classes: list[DimClass]) -> tuple[DimClass, DimClass] | None:
    """Two other classes whose sizes add up to ``cls``'s in at least two complete calls."""
    others = [c for c in classes if c is not cls and c.name != BATCH]
    for a in others:
        for b in others:
            if a is b or _ROLE_ORDER_KEY(a) > _ROLE_ORDER_KEY(b):
                continue
            rows = [
                (x, y, z)
                for x, y, z in zip(cls.sizes, a.sizes, b.sizes)
                if x is not None and y is not None and z is not None
            ]
            if len(rows) >= 2 and all(x == y + z for x, y, z in rows):
                return a, b
    return None


def _ROLE_ORDER_KEY(cls: DimClass) -> tuple[int, str]:  # noqa: N802 - used as a sort key
    name = cls.name
    return (_ROLE_ORDER.index(name) if name in _ROLE_ORDER else len(_ROLE_ORDER), name)


def rename_symbols(text: str, mapping: dict[str, str]) -> str:
    """``"s31 + s70"`` -> ``"past_sequence_length + sequence_length"`` with ``mapping``."""
    return SYMBOL_RE.sub(lambda m: mapping.get(m.group(0), m.group(0)), text)


def name_onnx_axes(
    proto: Any, leaf_names: list[str], per_leaf: list[dict[int, str]]
) -> tuple[dict[str, str], list[str]]:
    """Renames torch's symbols (``s23``) on every axis of an ONNX ``ModelProto`` in place.

    ONNX inputs are matched with the observed inputs by name, then by position among
    the rest (as the feeds are). Returns the symbol mapping and notes on axes that kept
    torch's symbol (the graph relates them differently than the calls did).
    """
    inputs = list(proto.graph.input)
    by_name = {n: k for k, n in enumerate(leaf_names)}
    rest = iter(k for k, n in enumerate(leaf_names) if n not in {i.name for i in inputs})
    mapping: dict[str, str] = {}
    notes: list[str] = []
    for value in inputs:
        j = by_name[value.name] if value.name in by_name else next(rest, None)
        if j is None:
            continue
        for d, dim in enumerate(value.type.tensor_type.shape.dim):
            wanted = per_leaf[j].get(d)
            if wanted is None:
                continue
            symbol = dim.dim_param  # a static dim is a warning (graph_warnings.py)
            if not symbol or not SYMBOL_RE.fullmatch(symbol):
                continue
            if mapping.setdefault(symbol, wanted) != wanted:
                notes.append(
                    f"{value.name} dim {d}: the exporter made {wanted!r} the same dimension as "
                    f"{mapping[symbol]!r}; named {mapping[symbol]!r}"
                )
    if not mapping:
        return mapping, notes
    graph = proto.graph
    values = [*graph.input, *graph.output, *graph.value_info]
    for value in values:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_param = rename_symbols(dim.dim_param, mapping)
    return mapping, notes
