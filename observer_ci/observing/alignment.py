"""Alignment of stored calls on one export signature.

Stored calls differ: optional inputs come and go, dict keys change order, a cache is empty
in the first call. :func:`build_layout` aligns them on one list of slots (one per
top-level input) and flattened leaves, which gives the dynamic dimensions, the export
sample (absent leaves filled), the order of export candidates and the ``(args, kwargs)`` /
``dynamic_shapes`` structures that ``torch.export`` accepts.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from observer_ci.core.exceptions import ObserverError
from observer_ci.observing import structure

# Where a slot's value in one call comes from.
OBSERVED = "observed"  # a tensor-bearing value the call passed
EMPTY = "empty"  # the call passed a container without tensors (an empty cache)
MISSING = "missing"  # absent from the call, taken from ``missing=``
ABSENT = "absent"  # not passed, or None

# How a slot is passed to the method.
POSITIONAL = "positional"  # a named positional parameter
VAR_POSITIONAL = "var_positional"  # one element of ``*args``
KEYWORD = "keyword"  # a named parameter passed by keyword (or keyword-only)
VAR_KEYWORD = "var_keyword"  # one entry of ``**kwargs``


@dataclass(frozen=True)
class MethodSignature:
    """The parameters of the observed method, by kind."""

    names: tuple[str, ...]  # every parameter, in order (the reference's signature_names)
    positional: tuple[str, ...]  # positional-only and positional-or-keyword
    positional_only: frozenset[str]
    var_positional: str | None
    var_keyword: str | None
    defaults: dict[str, Any]

    @classmethod
    def of(cls, signature: inspect.Signature) -> MethodSignature:
        params = list(signature.parameters.values())
        kinds = inspect.Parameter
        return cls(
            names=tuple(p.name for p in params),
            positional=tuple(
                p.name
                for p in params
                if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
            ),
            positional_only=frozenset(p.name for p in params if p.kind == kinds.POSITIONAL_ONLY),
            var_positional=next((p.name for p in params if p.kind == kinds.VAR_POSITIONAL), None),
            var_keyword=next((p.name for p in params if p.kind == kinds.VAR_KEYWORD), None),
            defaults={p.name: p.default for p in params if p.default is not kinds.empty},
        )

    def var_positional_name(self, k: int) -> str:
        """Name of the ``k``-th element of ``*args`` (the exporter's input name)."""
        return f"{self.var_positional}_{k}"

    def kind_of(self, name: str, var_positional_names: set[str]) -> str:
        if name in self.positional:
            return POSITIONAL
        if name in var_positional_names:
            return VAR_POSITIONAL
        if name in self.names:
            return KEYWORD
        return VAR_KEYWORD

    def name_of(self, key: str | int) -> str:
        """A ``missing`` / ``set_batch_dimension_for`` key (name or position) as a name."""
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            raise ObserverError(f"{key!r} is neither a parameter name nor a position")
        if isinstance(key, int):
            if not 0 <= key < len(self.names):
                raise ObserverError(
                    f"position {key} is out of range, the method has parameters {list(self.names)}"
                )
            return self.names[key]
        return key


@dataclass
class Slot:
    """One top-level input of the export signature."""

    name: str
    kind: str
    spec: pytree.TreeSpec
    leaf_names: list[str]

    @property
    def n_leaves(self) -> int:
        return len(self.leaf_names)


@dataclass
class Layout:
    """Every stored call aligned on one list of slots and flattened leaves."""

    signature: MethodSignature
    as_tuple: bool  # inputs passed as one tuple (every call was positional)
    slots: list[Slot]
    constants: dict[str, Any]
    flat: list[list[torch.Tensor | None]]  # per call, None for absent leaves
    sources: list[list[str]]  # per call, per slot: OBSERVED, EMPTY, MISSING or ABSENT
    dynamic: list[list[int]] = field(default_factory=list)  # per leaf, without batch flags

    @property
    def leaf_names(self) -> list[str]:
        return [n for s in self.slots for n in s.leaf_names]

    def slot_of_leaf(self) -> list[Slot]:
        return [s for s in self.slots for _ in range(s.n_leaves)]

    def leaf_sources(self, call: int) -> list[str]:
        return [src for s, src in zip(self.slots, self.sources[call]) for _ in range(s.n_leaves)]

    def leaf_rank(self, j: int) -> int:
        return next(flat[j].dim() for flat in self.flat if flat[j] is not None)


@dataclass
class CallInputs:
    """One call's top-level inputs by name, as the aligner sees them."""

    values: dict[str, Any]  # tensor-bearing inputs
    empty: set[str]  # inputs passed as containers without tensors
    positional: bool  # passed positionally only (no tensor keyword, no constant)


def build_layout(
    calls: Sequence[CallInputs],
    signature: MethodSignature,
    constants: dict[str, Any],
    missing: dict[str, Any],
    canonical: Callable[[str, Any], Any],
    removed: set[str] = frozenset(),  # type: ignore[assignment]
    inherited_dynamic: dict[str, list[int]] | None = None,
) -> Layout:
    """Aligns ``calls`` on the union of their inputs; raises :class:`ObserverError` when it
    cannot (structure, rank or dtype changes, no call with every input)."""
    var_names = {n for c in calls for n in c.values if _is_var_positional(n, signature)}
    names = _ordered_names(calls, signature, missing, var_names, removed)
    kinds = {n: signature.kind_of(n, var_names) for n in names}
    slots: list[Slot] = []
    flat: list[list[torch.Tensor | None]] = [[] for _ in calls]
    sources: list[list[str]] = [[] for _ in calls]
    for name in names:
        values, call_sources = [], []
        for c in calls:
            if name in c.values:
                values.append(c.values[name])
                call_sources.append(OBSERVED)
            elif name in missing:
                values.append(canonical(name, missing[name]))
                call_sources.append(MISSING)
            else:
                values.append(None)
                call_sources.append(EMPTY if name in c.empty else ABSENT)
        flats = [None if v is None else pytree.tree_flatten(v) for v in values]
        present = [i for i, f in enumerate(flats) if f is not None and f[0]]
        if not present:
            continue
        ref = max(present, key=lambda i: len(flats[i][0]))
        by_position = all(c.positional for c in calls)
        _check_same_structure(name, by_position, signature, values, present, ref, call_sources)
        ref_leaves, ref_spec = flats[ref]
        slots.append(Slot(name, kinds[name], ref_spec, structure.leaf_names(name, values[ref])))
        for i, f in enumerate(flats):
            if i in present:
                flat[i].extend(f[0])
            else:
                flat[i].extend([None] * len(ref_leaves))
                if call_sources[i] != EMPTY:
                    call_sources[i] = ABSENT
            sources[i].append(call_sources[i])
    _require_a_complete_call(slots, sources, calls)
    layout = Layout(
        signature=signature,
        as_tuple=_passed_as_tuple(calls, slots, signature),
        slots=slots,
        constants={k: v for k, v in constants.items() if k not in removed},
        flat=flat,
        sources=sources,
    )
    layout.dynamic = _dynamic_dims(layout, inherited_dynamic or {})
    return layout


def _is_var_positional(name: str, signature: MethodSignature) -> bool:
    prefix = f"{signature.var_positional}_"
    return (
        signature.var_positional is not None
        and name.startswith(prefix)
        and name[len(prefix) :].isdigit()
        and name not in signature.names
    )


def _ordered_names(
    calls: Sequence[CallInputs],
    signature: MethodSignature,
    missing: dict[str, Any],
    var_names: set[str],
    removed: set[str],
) -> list[str]:
    seen: list[str] = []
    for c in calls:
        seen.extend(n for n in c.values if n not in seen)
    seen.extend(n for n in missing if n not in seen)
    seen = [n for n in seen if n not in removed]

    def rank(name: str) -> tuple[int, int, int]:
        if name in var_names:  # *args elements sit where *args is, in their order
            return (signature.names.index(signature.var_positional), int(name.rsplit("_", 1)[1]), 0)
        if name in signature.names:
            return (signature.names.index(name), 0, 0)
        # **kwargs entries sit where **kwargs is, in the order first seen
        position = (
            signature.names.index(signature.var_keyword)
            if signature.var_keyword
            else len(signature.names)
        )
        return (position, 0, seen.index(name))

    return sorted(seen, key=rank)


def _argument_label(name: str, by_position: bool, signature: MethodSignature) -> str:
    if by_position and name in signature.positional:
        return f"Positional argument {signature.positional.index(name)}"
    return f"Named argument {name!r}"


def _check_same_structure(
    name: str,
    by_position: bool,
    signature: MethodSignature,
    values: list[Any],
    present: list[int],
    ref: int,
    sources: list[str],
) -> None:
    """Same container types and tensor counts in every call; leaf key names may differ
    (caches built by helpers name their children differently)."""
    ref_shape = structure.tree_shape(values[ref])
    n_ref = len(pytree.tree_flatten(values[ref])[0])
    for i in present:
        leaves = pytree.tree_flatten(values[i])[0]
        if structure.tree_shape(values[i]) != ref_shape:
            where = "the value given in missing=" if sources[i] == MISSING else f"call {i}"
            label = _argument_label(name, by_position, signature)
            raise ObserverError(
                f"{label} has {len(leaves)} tensors in {where} "
                f"but {n_ref} in call {ref}: input {name!r} changes structure across calls "
                f"({structure.tensor_summary(values[i])} vs "
                f"{structure.tensor_summary(values[ref])}); observe calls with the same nesting"
            )
        bad = [type(t).__name__ for t in leaves if not isinstance(t, torch.Tensor)]
        if bad:
            raise ObserverError(
                f"input {name!r} mixes tensors with non-tensor leaves ({bad[:3]}) in call {i}; "
                "pass those values as top-level scalar arguments"
            )


def _require_a_complete_call(
    slots: list[Slot], sources: list[list[str]], calls: Sequence[CallInputs]
) -> None:
    """Refuses to invent a sample: one call must pass every input (``missing`` counts, and
    so does an empty container: the prefill's empty cache is what that call passed)."""
    if not slots:
        raise ObserverError(
            "no stored call passed a tensor: nothing to export (scalars and None are not inputs)"
        )
    # an empty container (the prefill's cache) was passed: its tensors come later
    if any(all(s in (OBSERVED, MISSING, EMPTY) for s in row) for row in sources):
        return
    names = [s.name for s in slots]
    shown = "; ".join(
        f"call {i} has {[n for n, s in zip(names, row) if s in (OBSERVED, MISSING)]}"
        for i, row in enumerate(sources[:6])
    )
    raise ObserverError(
        f"At least one call to the observed model must pass every input: {names} were never "
        f"passed together ({shown}). Observe one call with all of them, or give the absent "
        "ones a value with missing= (value_if_missing=) so their shapes are known."
    )


def _passed_as_tuple(
    calls: Sequence[CallInputs], slots: list[Slot], signature: MethodSignature
) -> bool:
    """True when every input can be passed as one positional tuple, as the calls did.

    Not when a positional parameter in the middle never carried a tensor (the others would
    shift), nor when the last input is a dict: ``torch.onnx.export`` takes a trailing dict in
    ``args`` for keyword arguments.
    """
    if not all(c.positional for c in calls):
        return False
    if any(s.kind in (KEYWORD, VAR_KEYWORD) for s in slots):
        return False
    named = [s.name for s in slots if s.kind == POSITIONAL]
    if named != list(signature.positional[: len(named)]):
        return False
    has_var = any(s.kind == VAR_POSITIONAL for s in slots)
    if has_var and len(named) != len(signature.positional):
        return False
    last = slots[-1]
    return not (last.spec.type in (dict,) and last.name not in signature.positional_only)


def _dynamic_dims(layout: Layout, inherited: dict[str, list[int]]) -> list[list[int]]:
    """Dims whose size varied across the calls, plus dims ``inherited`` from a parent
    observer (a call family, see ``InputObserver.subset``) where every size seen here is
    at least 2 (``torch.export`` specialises a sample on 0 and 1)."""
    dims: list[list[int]] = []
    for j, leaf_name in enumerate(layout.leaf_names):
        seen = [
            (i, flat[j], layout.leaf_sources(i)[j])
            for i, flat in enumerate(layout.flat)
            if flat[j] is not None
        ]
        _check_one(
            leaf_name,
            seen,
            "rank",
            lambda t: t.dim(),
            "an ONNX input has one rank: observe calls that keep the number of dims",
        )
        _check_one(
            leaf_name,
            seen,
            "dtype",
            lambda t: t.dtype,
            "an ONNX input has one element type: cast before calling the model",
        )
        rank = seen[0][1].dim()
        varied = {d for d in range(rank) if len({t.shape[d] for _, t, _ in seen}) > 1}
        varied |= {
            d
            for d in inherited.get(leaf_name, [])
            if d < rank and min(t.shape[d] for _, t, _ in seen) >= 2
        }
        dims.append(sorted(varied))
    return dims


def tied_sparse_dims(layout: Layout) -> list[list[int]]:
    """The dynamic dims a call family inherits (see ``InputObserver.subset``).

    An input only some calls passed (``token_type_ids`` in the prefill of an image-text
    ``generate()``) never had a chance to vary: its dim ``d`` is dynamic where another
    input's dim ``d`` is and the other input had the same size (at least 2) in every call
    that passed this one (``missing=`` values are shape hints, not observations)."""
    dims = layout.dynamic
    sources = [layout.leaf_sources(i) for i in range(len(layout.flat))]
    tied = [list(d) for d in dims]
    for j in range(len(dims)):
        if all(src[j] == OBSERVED for src in sources):
            continue
        rank = layout.leaf_rank(j)
        for d in range(rank):
            if d in dims[j]:
                continue
            for k, partner in enumerate(dims):
                if k == j or d not in partner:
                    continue
                observed = [
                    (f[j], f[k], src[k] == OBSERVED)
                    for f, src in zip(layout.flat, sources)
                    if f[j] is not None and src[j] == OBSERVED
                ]
                if observed and all(
                    with_k and b is not None and a.shape[d] == b.shape[d] >= 2
                    for a, b, with_k in observed
                ):
                    tied[j] = sorted({*tied[j], d})
                    break
    return tied


def _check_one(
    leaf_name: str,
    seen: list[tuple[int, torch.Tensor, str]],
    what: str,
    key: Callable[[torch.Tensor], Any],
    next_step: str,
) -> None:
    if len({key(t) for _, t, _ in seen}) <= 1:
        return
    observed = {key(t) for _, t, src in seen if src != MISSING}
    culprits = [(i, t) for i, t, src in seen if src == MISSING and key(t) not in observed]
    if len(observed) == 1 and culprits:
        value = key(culprits[0][1])
        raise ObserverError(
            f"input {leaf_name!r}: the value given in missing= (value_if_missing=) has {what} "
            f"{value}, the observed calls pass {what} {observed.pop()}; give the fill-in value "
            f"the {what} of the observed input"
        )
    shown = ", ".join(
        f"call {i}: {key(t)}" + (" (missing= value)" if src == MISSING else "")
        for i, t, src in seen
    )
    if what == "rank":
        shown = ", ".join(f"call {i}: {tuple(t.shape)}" for i, t, _ in seen)
    raise ObserverError(f"input {leaf_name!r} changes {what} across calls ({shown}); {next_step}")


def batch_flags(layout: Layout, set_batch_dimension_for: Any) -> set[str]:
    """Slot names whose dim 0 is forced dynamic; unknown names or positions raise."""
    if set_batch_dimension_for is None or set_batch_dimension_for is False:
        return set()
    slot_names = [s.name for s in layout.slots]
    if set_batch_dimension_for is True:
        return set(slot_names)
    if isinstance(set_batch_dimension_for, (str, int)):
        set_batch_dimension_for = [set_batch_dimension_for]
    positional = list(layout.signature.positional)
    flagged: set[str] = set()
    for item in set_batch_dimension_for:
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise ObserverError(f"set_batch_dimension_for: {item!r} is not a name or position")
        name = item
        if isinstance(item, int):
            if not 0 <= item < len(positional):
                raise ObserverError(
                    f"set_batch_dimension_for: position {item} is out of range, the method "
                    f"has {len(positional)} positional parameters {positional}"
                )
            name = positional[item]
        if name not in slot_names:
            raise ObserverError(
                f"set_batch_dimension_for: {item!r} is not an observed tensor input; "
                f"valid names: {slot_names}"
            )
        flagged.add(name)
    return flagged


def dynamic_dims(layout: Layout, flagged: set[str]) -> list[list[int]]:
    """Per flattened input, its dynamic dimensions (dim 0 added for flagged slots)."""
    result = []
    for j, (slot, dims) in enumerate(zip(layout.slot_of_leaf(), layout.dynamic)):
        dims = list(dims)
        if slot.name in flagged and 0 not in dims and layout.leaf_rank(j) > 0:
            dims = [0, *dims]
        result.append(dims)
    return result


def fill_absent(leaves: list[torch.Tensor | None], layout: Layout) -> list[torch.Tensor]:
    """Absent leaves become empty tensors (size 0 on the last dynamic dim) or zeros."""
    filled: list[torch.Tensor] = []
    for j, t in enumerate(leaves):
        if t is not None:
            filled.append(t)
            continue
        model = [flat[j] for flat in layout.flat if flat[j] is not None][-1]
        dims = layout.dynamic[j]
        shape = list(model.shape)
        for d in dims:  # e.g. the batch: take this call's size of the same dimension
            size = _size_of_same_dim(layout, leaves, j, d)
            shape[d] = shape[d] if size is None else size
        if dims:
            shape[max(dims)] = 0
            filled.append(torch.empty(shape, dtype=model.dtype, device=model.device))
        else:
            filled.append(torch.zeros(shape, dtype=model.dtype, device=model.device))
    return filled


def _size_of_same_dim(
    layout: Layout, leaves: list[torch.Tensor | None], j: int, d: int
) -> int | None:
    """This call's size of a dynamic dim equal to leaf ``j``'s dim ``d`` in every call."""
    for k, t in enumerate(leaves):
        if t is None or k == j:
            continue
        for e in layout.dynamic[k]:
            pairs = [
                (f[j].shape[d], f[k].shape[e])
                for f in layout.flat
                if f[j] is not None and f[k] is not None
            ]
            if pairs and all(a == b for a, b in pairs):
                return int(t.shape[e])
    return None


def has_empty_form(dynamic_dims: list[int]) -> bool:
    """An absent input can be fed as "nothing" (0-length) when a dim other than the batch
    (dim 0) is dynamic; a batch of 0 or zeros of a seen shape are made-up values."""
    return any(d > 0 for d in dynamic_dims)


def candidate_indices(layout: Layout) -> list[int]:
    """Stored calls, the likeliest to export first.

    A call loses rank first for each absent input without an empty form (a stand-in of
    made-up zeros, see :func:`has_empty_form`: never a sample when another call will do),
    then for each other input it did not pass (a stand-in changes what the model does; a
    fill-in from ``missing=`` or an empty cache does not count), then for each dynamic
    dimension of size 0 or 1 (``torch.export`` specialises them, and model code often
    branches on them: the decode steps of ``generate()``); among equals the largest call
    wins, then the earliest.
    """

    def score(i: int) -> tuple[int, int, int, int, int]:
        n_absent = sum(src == ABSENT for src in layout.sources[i])
        sources = layout.leaf_sources(i)
        made_up = sum(
            1
            for t, dims, src in zip(layout.flat[i], layout.dynamic, sources)
            if t is None and src == ABSENT and not has_empty_form(dims)
        )
        small = sum(
            1
            for t, dims, src in zip(layout.flat[i], layout.dynamic, sources)
            if t is not None and src == OBSERVED
            for d in dims
            if t.shape[d] in (0, 1)
        )
        size = sum(
            int(t.shape[d])
            for t, dims, src in zip(layout.flat[i], layout.dynamic, sources)
            if t is not None and src == OBSERVED
            for d in dims
        )
        return (made_up, n_absent, small, -size, i)

    return sorted(range(len(layout.flat)), key=score)


# ---------------------------------------------------------------------------- structures
def split_by_slot(layout: Layout, leaves: Sequence[Any]) -> dict[str, list[Any]]:
    it = iter(leaves)
    return {s.name: [next(it) for _ in range(s.n_leaves)] for s in layout.slots}


def arrange(layout: Layout, by_slot: dict[str, Any], constants: dict[str, Any]):
    """``(args, kwargs)`` that call the method (and ``torch.export``) with these values.

    Positional tuple when the calls were; otherwise keywords, except positional-only
    parameters and ``*args`` (with the parameters before it), which must stay positional.
    ``**kwargs`` entries are plain keywords.
    """
    if layout.as_tuple:
        return tuple(by_slot[s.name] for s in layout.slots), dict(constants)
    sig = layout.signature
    has_var = any(s.kind == VAR_POSITIONAL for s in layout.slots)
    must_be_positional = set(sig.positional) if has_var else set(sig.positional_only)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    expected = 0
    for slot in layout.slots:
        if slot.kind == VAR_POSITIONAL or slot.name in must_be_positional:
            if slot.kind == POSITIONAL and sig.positional.index(slot.name) != expected:
                raise ObserverError(
                    f"{slot.name!r} must be passed positionally but parameter "
                    f"{sig.positional[expected]!r} before it never carried a tensor"
                )
            expected += 1
            args.append(by_slot[slot.name])
        else:
            kwargs[slot.name] = by_slot[slot.name]
    kwargs.update(constants)
    return tuple(args), kwargs


def shape_structure(layout: Layout, by_slot: dict[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
    """``dynamic_shapes`` as ``torch.export`` binds them to the signature: a tuple for
    positional calls, else by parameter name with ``*args`` as a tuple and ``**kwargs``
    entries nested under its name; constants map to None."""
    has_var = any(s.kind == VAR_POSITIONAL for s in layout.slots)
    if layout.as_tuple and not has_var:
        return tuple(by_slot[s.name] for s in layout.slots)
    sig = layout.signature
    result: dict[str, Any] = {}
    for slot in layout.slots:
        if slot.kind == VAR_POSITIONAL:
            result[sig.var_positional] = (*result.get(sig.var_positional, ()), by_slot[slot.name])
        elif slot.kind == VAR_KEYWORD:
            result.setdefault(sig.var_keyword, {})[slot.name] = by_slot[slot.name]
        else:
            result[slot.name] = by_slot[slot.name]
    for name in layout.constants:
        if name in sig.names:
            result[name] = None
        elif sig.var_keyword:
            result.setdefault(sig.var_keyword, {})[name] = None
    if sig.var_keyword in result and sig.var_keyword in sig.names:
        # keep **kwargs where the signature has it: after the named parameters
        result[sig.var_keyword] = result.pop(sig.var_keyword)
    return result
