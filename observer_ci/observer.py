"""InputObserver: watch a model's calls, infer export arguments and dynamic shapes.

Public API compatible with onnx-diagnostic's ``InputObserver`` (0.9.x):
``InputObserver(missing=None)``, ``with obs(model, store_n_calls=3, method_name="forward")``,
``num_obs()``, ``infer_dynamic_shapes(set_batch_dimension_for=None)``,
``infer_arguments(index_or_args_or_kwargs=None, flat=False)`` and
``check_discrepancies(onnx_model, ...)``. Differences are fixes: see ``shared/spec``.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from observer_ci import structure
from observer_ci.results import InputInfo

DYNAMIC = torch.export.Dim.DYNAMIC


class ObserverError(ValueError):
    """The observed calls cannot be turned into one export signature."""


@dataclass
class Observation:
    """One stored call: cloned inputs (raw and by name), cloned outputs, latency."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    named: dict[str, Any]  # tensor-bearing inputs by name, absent ones not listed
    constants: dict[str, Any]  # scalars that differ from a non-None default
    ignored: dict[str, str]  # name -> why it is not an input (None, scalar, non-tensor)
    positional_only: bool
    outputs: Any = None
    latency_s: float | None = None


@dataclass
class _Slot:
    """One top-level input of the export signature."""

    name: str
    spec: pytree.TreeSpec
    leaf_names: list[str]

    @property
    def n_leaves(self) -> int:
        return len(self.leaf_names)


@dataclass
class _Layout:
    """All observations aligned on one signature."""

    positional: bool
    slots: list[_Slot]
    constants: dict[str, Any]
    flat: list[list[torch.Tensor | None]]  # per observation, None for absent leaves
    dynamic: list[list[int]] = field(default_factory=list)  # per leaf, without batch flags

    @property
    def leaf_names(self) -> list[str]:
        return [n for s in self.slots for n in s.leaf_names]

    def slot_of_leaf(self) -> list[_Slot]:
        return [s for s in self.slots for _ in range(s.n_leaves)]


class InputObserver:
    """Steals a model method to collect inputs and outputs of a few calls.

    >>> obs = InputObserver()
    >>> with obs(model):
    ...     model(x1)
    ...     model(x2)
    >>> torch.onnx.export(model, obs.infer_arguments(),
    ...                   dynamic_shapes=obs.infer_dynamic_shapes(), dynamo=True)
    """

    def __init__(self, missing: dict[str, Any] | None = None):
        self.missing: dict[str, Any] = dict(missing or {})
        self.observations: list[Observation] = []
        self.signature: inspect.Signature | None = None
        self._reference: dict[str, Any] = {}
        self._layout_cache: tuple[int, _Layout] | None = None
        self._active = False
        # leaf name -> dims dynamic in a parent observer (see ``subset``)
        self._inherited_dynamic: dict[str, list[int]] = {}

    # ------------------------------------------------------------------ observing
    @contextlib.contextmanager
    def __call__(
        self, model: Any, store_n_calls: int = 3, method_name: str = "forward"
    ) -> Iterator[InputObserver]:
        """Replaces ``model.<method_name>`` by a spy while the block runs, then restores it."""
        if not hasattr(model, method_name):
            raise ValueError(f"{type(model).__name__} has no method {method_name!r} to observe")
        if self._active:
            raise RuntimeError("this InputObserver is already observing a model")
        original = getattr(model, method_name)
        if not callable(original):
            raise ValueError(f"{type(model).__name__}.{method_name} is not callable")
        signature = inspect.signature(original)
        if self.signature is None:
            self.signature = signature
        elif list(signature.parameters) != list(self.signature.parameters):
            raise ValueError(
                "this InputObserver already holds calls of a method with parameters "
                f"{list(self.signature.parameters)}; {method_name} has {list(signature.parameters)}"
            )
        had_instance_attr = method_name in vars(model)
        previous = vars(model).get(method_name)
        limit = len(self.observations) + max(0, int(store_n_calls))

        def spy(*args: Any, **kwargs: Any) -> Any:
            if len(self.observations) >= limit:
                return original(*args, **kwargs)
            pending = self._record(args, kwargs)
            begin = time.perf_counter()
            outputs = original(*args, **kwargs)
            pending.latency_s = time.perf_counter() - begin
            pending.outputs = structure.clone_tree(outputs)
            self.observations.append(pending)
            self._layout_cache = None
            return outputs

        spy.__signature__ = signature  # type: ignore[attr-defined]
        spy.__wrapped__ = original  # type: ignore[attr-defined]
        spy.__name__ = getattr(original, "__name__", method_name)
        spy.__doc__ = getattr(original, "__doc__", None)
        self._register_pytrees()
        object.__setattr__(model, method_name, spy)
        self._active = True
        try:
            yield self
        finally:
            self._active = False
            if had_instance_attr:
                object.__setattr__(model, method_name, previous)
            else:
                object.__delattr__(model, method_name)

    def num_obs(self) -> int:
        """Number of stored calls."""
        return len(self.observations)

    @staticmethod
    def _register_pytrees() -> None:
        try:
            from observer_ci.pytrees import register_transformers_pytrees
        except ImportError:  # pragma: no cover - module ships with the package
            return
        register_transformers_pytrees()

    def _names_for(self, n_args: int) -> list[str]:
        assert self.signature is not None
        names: list[str] = []
        var_name = None
        for p in self.signature.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                names.append(p.name)
            elif p.kind == p.VAR_POSITIONAL:
                var_name = p.name
                break
        while len(names) < n_args:
            if var_name is None:
                raise TypeError(f"too many positional arguments ({n_args})")
            names.append(f"{var_name}_{len(names)}")
        return names[:n_args]

    def _record(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Observation:
        """Clones one call's inputs and classifies them (tensor input, constant, ignored)."""
        assert self.signature is not None
        args_c = structure.clone_tree(tuple(args))
        kwargs_c = structure.clone_tree(dict(kwargs))
        params = self.signature.parameters
        named: dict[str, Any] = {}
        constants: dict[str, Any] = {}
        ignored: dict[str, str] = {}
        items = list(zip(self._names_for(len(args_c)), args_c)) + list(kwargs_c.items())
        for name, value in items:
            if value is None:
                ignored[name] = "None"
                continue
            if isinstance(value, structure.SCALAR_TYPES):
                param = params.get(name)
                default = param.default if param is not None else inspect.Parameter.empty
                has_default = default is not inspect.Parameter.empty and default is not None
                if has_default and isinstance(default, structure.SCALAR_TYPES):
                    if value != default:
                        constants[name] = value
                    continue
                ignored[name] = f"scalar {type(value).__name__}"
                continue
            leaves, _ = pytree.tree_flatten(value)
            if not any(isinstance(t, torch.Tensor) for t in leaves):
                ignored[name] = "no tensor" if leaves or _is_container(value) else type(
                    value
                ).__name__
                continue
            ref = self._reference.setdefault(name, value)
            named[name] = structure.canonical_order(value, ref)
        positional_only = not kwargs_c or all(
            v is None or isinstance(v, structure.SCALAR_TYPES) for v in kwargs_c.values()
        )
        return Observation(
            args=args_c,
            kwargs=kwargs_c,
            named=named,
            constants=constants,
            ignored=ignored,
            positional_only=positional_only and not constants,
        )

    # ------------------------------------------------------------------ layout
    def _check_captured(self) -> None:
        if not self.observations:
            raise RuntimeError(
                "InputObserver has no stored call: run the model inside "
                "`with observer(model): ...` before calling infer_arguments, "
                "infer_dynamic_shapes or check_discrepancies"
            )

    def _layout(self) -> _Layout:
        self._check_captured()
        if self._layout_cache and self._layout_cache[0] == len(self.observations):
            return self._layout_cache[1]
        layout = self._build_layout()
        self._layout_cache = (len(self.observations), layout)
        return layout

    def _build_layout(self) -> _Layout:
        constants = self._common_constants()
        positional = not self.missing and all(o.positional_only for o in self.observations)
        names = self._ordered_input_names(positional)
        if positional and names != self._names_for(len(names)):
            # A positional parameter in the middle never carried a tensor: a tuple would
            # shift the others onto the wrong parameters, so name every input instead.
            positional = False
            names = self._ordered_input_names(positional)
        slots: list[_Slot] = []
        per_obs_leaves: list[list[torch.Tensor | None]] = [[] for _ in self.observations]
        for name in names:
            values = [self._value_for(o, name) for o in self.observations]
            flats = [None if v is None else pytree.tree_flatten(v) for v in values]
            present = [(i, f) for i, f in enumerate(flats) if f is not None and f[0]]
            if not present:
                continue
            ref_i, (ref_leaves, ref_spec) = max(present, key=lambda p: len(p[1][0]))
            ref_names = structure.leaf_names(name, values[ref_i])
            for i, (leaves, _spec) in present:
                paths = structure.leaf_names(name, values[i])
                if paths != ref_names:
                    raise ObserverError(
                        f"input {name!r} changes structure across calls: call {ref_i} has "
                        f"{len(ref_names)} tensors {ref_names[:6]}, call {i} has {len(paths)} "
                        f"{paths[:6]}; observe calls with the same nesting"
                    )
                bad = [type(t).__name__ for t in leaves if not isinstance(t, torch.Tensor)]
                if bad:
                    raise ObserverError(
                        f"input {name!r} mixes tensors with non-tensor leaves ({bad[:3]}) in "
                        f"call {i}; pass those values as top-level scalar arguments"
                    )
            slots.append(_Slot(name=name, spec=ref_spec, leaf_names=ref_names))
            for i, f in enumerate(flats):
                if f is not None and f[0]:
                    per_obs_leaves[i].extend(f[0])
                else:
                    per_obs_leaves[i].extend([None] * len(ref_leaves))
        layout = _Layout(
            positional=positional, slots=slots, constants=constants, flat=per_obs_leaves
        )
        layout.dynamic = self._dynamic_dims(layout)
        return layout

    def _value_for(self, obs: Observation, name: str) -> Any:
        if name in obs.named:
            return obs.named[name]
        if name in self.missing:
            ref = self._reference.get(name, self.missing[name])
            return structure.canonical_order(self.missing[name], ref)
        return None

    def _ordered_input_names(self, positional: bool) -> list[str]:
        seen: list[str] = []
        for obs in self.observations:
            for name in obs.named:
                if name not in seen:
                    seen.append(name)
        for name in self.missing:
            if name not in seen:
                seen.append(name)
        assert self.signature is not None
        if positional:
            n = max(len(o.args) for o in self.observations)
            order = self._names_for(n)
            return [name for name in order if name in seen]
        order = list(self.signature.parameters)
        rank = {n: i for i, n in enumerate(order)}
        return sorted(seen, key=lambda n: (rank.get(n, len(order)), seen.index(n)))

    def _common_constants(self) -> dict[str, Any]:
        keys: list[str] = []
        for obs in self.observations:
            keys.extend(k for k in obs.constants if k not in keys)
        constants: dict[str, Any] = {}
        for key in keys:
            values = [o.constants.get(key, _DEFAULT) for o in self.observations]
            distinct = {repr(v) for v in values}
            if len(distinct) > 1:
                shown = ", ".join(f"call {i}: {v!r}" for i, v in enumerate(values))
                raise ObserverError(
                    f"constant argument {key!r} differs across calls ({shown}); "
                    "one export holds one value: observe one configuration at a time"
                )
            constants[key] = values[0]
        return constants

    def _dynamic_dims(self, layout: _Layout) -> list[list[int]]:
        dims: list[list[int]] = []
        names = layout.leaf_names
        for j, leaf_name in enumerate(names):
            seen = [(i, flat[j]) for i, flat in enumerate(layout.flat) if flat[j] is not None]
            ranks = {t.dim() for _, t in seen}
            if len(ranks) > 1:
                shown = ", ".join(f"call {i}: {tuple(t.shape)}" for i, t in seen)
                raise ObserverError(f"input {leaf_name!r} changes rank across calls ({shown})")
            dtypes = {t.dtype for _, t in seen}
            if len(dtypes) > 1:
                shown = ", ".join(f"call {i}: {t.dtype}" for i, t in seen)
                raise ObserverError(
                    f"input {leaf_name!r} changes dtype across calls ({shown}); an ONNX input "
                    "has one element type: cast before calling the model"
                )
            rank = ranks.pop()
            varied = {d for d in range(rank) if len({t.shape[d] for _, t in seen}) > 1}
            # a dim dynamic across the parent's calls stays dynamic here unless every size
            # seen here is 0 or 1 (torch.export would specialise the sample on it)
            varied |= {
                d
                for d in self._inherited_dynamic.get(leaf_name, [])
                if d < rank and min(t.shape[d] for _, t in seen) >= 2
            }
            dims.append(sorted(varied))
        return dims

    def subset(self, indices: list[int]) -> InputObserver:
        """A new observer holding only the stored calls at ``indices`` (one call family).

        Dims dynamic across all calls stay dynamic in the subset where its sizes allow.
        """
        parent_dims = dict(zip(self.leaf_names(), self._layout().dynamic))
        sub = InputObserver(missing=self.missing)
        sub.signature = self.signature
        sub._reference = self._reference
        sub.observations = [self.observations[i] for i in indices]
        sub._inherited_dynamic = parent_dims
        return sub

    def _batch_flags(self, layout: _Layout, set_batch_dimension_for: Any) -> set[str]:
        if set_batch_dimension_for is None or set_batch_dimension_for is False:
            return set()
        slot_names = [s.name for s in layout.slots]
        if set_batch_dimension_for is True:
            return set(slot_names)
        if isinstance(set_batch_dimension_for, (str, int)):
            set_batch_dimension_for = [set_batch_dimension_for]
        assert self.signature is not None
        positional = self._names_for(
            sum(
                p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                for p in self.signature.parameters.values()
            )
        )
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

    def dynamic_dims(self, set_batch_dimension_for: Any = None) -> list[list[int]]:
        """Per flattened input (export order), its dynamic dimensions."""
        layout = self._layout()
        flagged = self._batch_flags(layout, set_batch_dimension_for)
        result = []
        for slot, dims, j in zip(
            layout.slot_of_leaf(), layout.dynamic, range(len(layout.dynamic))
        ):
            dims = list(dims)
            if slot.name in flagged and 0 not in dims and self._leaf_rank(layout, j) > 0:
                dims = [0, *dims]
            result.append(dims)
        return result

    @staticmethod
    def _leaf_rank(layout: _Layout, j: int) -> int:
        return next(flat[j].dim() for flat in layout.flat if flat[j] is not None)

    # ------------------------------------------------------------------ inference
    def infer_dynamic_shapes(
        self, set_batch_dimension_for: set[int | str] | bool | None = None
    ) -> tuple[Any, ...] | dict[str, Any]:
        """Dynamic shapes mirroring :meth:`infer_arguments`: a dim is dynamic if it varied.

        ``set_batch_dimension_for`` (True, or names/positions) also marks dim 0 dynamic;
        unknown names raise.
        """
        layout = self._layout()
        dims = self.dynamic_dims(set_batch_dimension_for)
        per_leaf = [dict.fromkeys(d, DYNAMIC) for d in dims]
        it = iter(per_leaf)
        by_slot = {}
        for slot in layout.slots:
            leaves = [next(it) for _ in range(slot.n_leaves)]
            by_slot[slot.name] = structure.mirror(slot.spec, leaves)
        if layout.positional:
            return tuple(by_slot.values())
        return {**by_slot, **dict.fromkeys(layout.constants)}

    def infer_arguments(
        self,
        index_or_args_or_kwargs: int | tuple[Any, ...] | dict[str, Any] | None = None,
        flat: bool = False,
    ) -> list[torch.Tensor] | tuple[Any, ...] | dict[str, Any]:
        """One call's inputs, absent ones filled so the export sees every input.

        None picks the stored call with every input present (and no dynamic dim of size
        0 or 1, which ``torch.export`` would specialise). An int picks a stored call;
        a tuple or dict is aligned like a new call.
        """
        layout = self._layout()
        leaves = self._aligned_leaves(index_or_args_or_kwargs, layout)
        filled = self._fill_absent(leaves, layout)
        if flat:
            return filled
        return self._structure(filled, layout)

    def _aligned_leaves(self, selector: Any, layout: _Layout) -> list[torch.Tensor | None]:
        if selector is None:
            return list(layout.flat[self.best_index()])
        if isinstance(selector, bool):
            raise TypeError("index_or_args_or_kwargs must be an int, a tuple or a dict")
        if isinstance(selector, int):
            if not -len(self.observations) <= selector < len(self.observations):
                raise IndexError(
                    f"no stored call at index {selector}: {len(self.observations)} stored"
                )
            return list(layout.flat[selector])
        if isinstance(selector, tuple):
            obs = self._record(selector, {})
        elif isinstance(selector, dict):
            obs = self._record((), selector)
        else:
            raise TypeError(
                f"index_or_args_or_kwargs must be an int, a tuple or a dict, not "
                f"{type(selector).__name__}"
            )
        leaves: list[torch.Tensor | None] = []
        for slot in layout.slots:
            value = self._value_for(obs, slot.name)
            if value is None:
                leaves.extend([None] * slot.n_leaves)
                continue
            names = structure.leaf_names(slot.name, value)
            if names != slot.leaf_names:
                raise ObserverError(
                    f"input {slot.name!r} does not match the observed structure "
                    f"{slot.leaf_names[:6]}: got {names[:6]}"
                )
            leaves.extend(pytree.tree_flatten(value)[0])
        unknown = set(obs.named) - {s.name for s in layout.slots}
        if unknown:
            raise ObserverError(f"inputs {sorted(unknown)} were never observed")
        return leaves

    def best_index(self) -> int:
        """The stored call used for export: complete, avoiding dynamic sizes 0 and 1."""
        return self.export_candidates()[0]

    def export_candidates(self) -> list[int]:
        """Stored calls ordered by fitness as export sample (complete first, no 0/1 sizes)."""
        layout = self._layout()

        def score(i: int) -> tuple[int, int, int]:
            flat = layout.flat[i]
            n_absent = sum(t is None for t in flat)
            small = sum(
                1
                for t, dims in zip(flat, layout.dynamic)
                if t is not None
                for d in dims
                if t.shape[d] in (0, 1)
            )
            return (n_absent, small, i)

        return sorted(range(len(layout.flat)), key=score)

    def _fill_absent(
        self, leaves: list[torch.Tensor | None], layout: _Layout
    ) -> list[torch.Tensor]:
        filled: list[torch.Tensor] = []
        for j, t in enumerate(leaves):
            if t is not None:
                filled.append(t)
                continue
            seen = [flat[j] for flat in layout.flat if flat[j] is not None]
            model = seen[-1]
            dims = layout.dynamic[j]
            shape = list(model.shape)
            if dims:
                shape[max(dims)] = 0
                filled.append(torch.empty(shape, dtype=model.dtype, device=model.device))
            else:
                filled.append(torch.zeros(shape, dtype=model.dtype, device=model.device))
        return filled

    def _structure(self, leaves: list[Any], layout: _Layout) -> tuple[Any, ...] | dict[str, Any]:
        it = iter(leaves)
        by_slot = {}
        for slot in layout.slots:
            part = [next(it) for _ in range(slot.n_leaves)]
            by_slot[slot.name] = pytree.tree_unflatten(part, slot.spec)
        if layout.positional:
            return tuple(by_slot.values())
        return {**by_slot, **layout.constants}

    def call_arguments(self, flat: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(args, kwargs)`` to call the model with flattened inputs (cloned)."""
        layout = self._layout()
        structured = self._structure(structure.clone_tree(list(flat)), layout)
        if isinstance(structured, tuple):
            return structured, {}
        return (), structured

    # ------------------------------------------------------------------ reporting
    def aligned_inputs(self, index: int) -> list[torch.Tensor | None]:
        """Flattened inputs of one stored call in export order, None where absent."""
        return list(self._layout().flat[index])

    def leaf_names(self) -> list[str]:
        """Names of the flattened inputs, in export order."""
        return self._layout().leaf_names

    def input_summaries(self, set_batch_dimension_for: Any = None) -> list[InputInfo]:
        """Per flattened input: dtype, shape in each call, dynamic dims."""
        layout = self._layout()
        dynamic = self.dynamic_dims(set_batch_dimension_for)
        summaries = []
        for j, name in enumerate(layout.leaf_names):
            shapes = [None if f[j] is None else list(f[j].shape) for f in layout.flat]
            dtype = next((str(f[j].dtype) for f in layout.flat if f[j] is not None), None)
            summaries.append(InputInfo(name, dtype, shapes, dynamic[j]))
        return summaries

    def check_discrepancies(
        self,
        onnx_model: Any,
        atol: float = 1e-4,
        rtol: float = 0.1,
        hist: tuple[float, ...] | list[float] = (0.1, 0.01),
        progress_bar: bool = False,
        include_io: bool = True,
        *,
        warmup: int = 0,
        repeat: int = 1,
    ) -> list[dict[str, Any]]:
        """Replays every stored call in onnxruntime; one row per call, errors included."""
        from observer_ci.replay import check_observer

        self._check_captured()
        return check_observer(
            self,
            onnx_model,
            atol=atol,
            rtol=rtol,
            hist=tuple(hist),
            progress_bar=progress_bar,
            include_io=include_io,
            warmup=warmup,
            repeat=repeat,
        )


class _Default:
    def __repr__(self) -> str:
        return "<default>"


_DEFAULT = _Default()


def _is_container(value: Any) -> bool:
    return isinstance(value, (list, tuple, dict))
