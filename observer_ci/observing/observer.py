"""InputObserver: watch a model's calls, infer export arguments and dynamic shapes.

Public API compatible with onnx-diagnostic's ``InputObserver`` (0.9.x) and torch 2.13's
``torch.onnx.InputObserver``: ``InputObserver(missing=None)`` (or ``value_if_missing=``),
``with obs(model, store_n_calls=3, method_name="forward")``, ``num_obs()``,
``infer_dynamic_shapes(set_batch_dimension_for=None)``,
``infer_arguments(index_or_args_or_kwargs=None, flat=False, as_args_kwargs=False)``,
``check_discrepancies(onnx_model_or_program, ...)``, ``remove_inputs(names)`` and a
read-only ``.info``. Differences are fixes: see ``shared/spec`` and the README.
This class is the façade: recording a call lives in :mod:`observer_ci.observing.recording`, the
alignment of calls in :mod:`observer_ci.observing.alignment`, reference views in
:mod:`observer_ci.observing.compat`.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils import _pytree as pytree

from observer_ci.core.results import InputInfo
from observer_ci.observing import alignment, recording, structure
from observer_ci.observing.alignment import Layout, MethodSignature, ObserverError
from observer_ci.observing.recording import Observation

DYNAMIC = torch.export.Dim.DYNAMIC

__all__ = ["DYNAMIC", "InputObserver", "Observation", "ObserverError"]


class InputObserver:
    """Steals a model method to collect inputs and outputs of a few calls.

    >>> obs = InputObserver()
    >>> with obs(model):
    ...     model(x1)
    ...     model(x2)
    >>> args, kwargs = obs.infer_arguments(as_args_kwargs=True)
    >>> torch.onnx.export(model, args, kwargs=kwargs,
    ...                   dynamic_shapes=obs.infer_dynamic_shapes(), dynamo=True)

    ``missing`` (or ``value_if_missing``, torch's name) maps parameter names or positions
    to values standing in for inputs that vanish in some calls (``pixel_values`` after the
    prefill); they shape the export only, the model never runs on them.
    """

    def __init__(
        self,
        missing: dict[str | int, Any] | None = None,
        *,
        value_if_missing: dict[str | int, Any] | None = None,
    ):
        if missing and value_if_missing:
            raise ObserverError("give missing= or value_if_missing= (the same thing), not both")
        self.missing: dict[str | int, Any] = dict(missing or value_if_missing or {})
        self.observations: list[Observation] = []
        self.signature: inspect.Signature | None = None
        self._reference: dict[str, Any] = {}
        self._removed: set[str] = set()
        self._layout_cache: tuple[tuple[int, int], Layout] | None = None
        self._refusal: str | None = None
        self._active = False
        # leaf name -> dims dynamic in a parent observer (see ``subset``)
        self._inherited_dynamic: dict[str, list[int]] = {}

    @property
    def value_if_missing(self) -> dict[str | int, Any]:
        """torch's name for :attr:`missing`."""
        return self.missing

    @classmethod
    def refused(cls, reason: str) -> InputObserver:
        """An observer holding no call whose every inference raises ``reason``."""
        obs = cls()
        obs._refusal = reason
        return obs

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
        self._adopt_signature(signature, method_name)
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
            self._store(pending)
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

    def _adopt_signature(self, signature: inspect.Signature, method_name: str) -> None:
        if self.signature is None:
            self.signature = signature
        elif list(signature.parameters) != list(self.signature.parameters):
            raise ValueError(
                "this InputObserver already holds calls of a method with parameters "
                f"{list(self.signature.parameters)}; {method_name} has {list(signature.parameters)}"
            )

    def _store(self, observation: Observation) -> None:
        self.observations.append(observation)
        self._layout_cache = None

    def num_obs(self) -> int:
        """Number of stored calls."""
        return len(self.observations)

    @property
    def refusal(self) -> str | None:
        """Why the calls taken over from another observer cannot be used, or None."""
        return self._refusal

    @staticmethod
    def _register_pytrees() -> None:
        try:
            from observer_ci.observing.pytrees import register_if_imported
        except ImportError:  # pragma: no cover - module ships with the package
            return
        register_if_imported()

    @property
    def _method(self) -> MethodSignature:
        assert self.signature is not None
        return MethodSignature.of(self.signature)

    def _names_for(self, n_args: int) -> list[str]:
        return recording.positional_names(self._method, n_args)

    def _record(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Observation:
        assert self.signature is not None
        return recording.record_call(self.signature, self._reference, args, kwargs)

    # ------------------------------------------------------------------ layout
    def _check_captured(self) -> None:
        if self._refusal is not None:
            raise ObserverError(self._refusal)
        if not self.observations:
            raise ObserverError(
                "No inputs were captured: the InputObserver has no stored call; run the model "
                "inside `with observer(model): ...` before calling infer_arguments, "
                "infer_dynamic_shapes or check_discrepancies"
            )

    def _missing_by_name(self) -> dict[str, Any]:
        method = self._method
        by_name: dict[str, Any] = {}
        for key, value in self.missing.items():
            try:
                name = method.name_of(key)
            except ObserverError as e:
                raise ObserverError(f"missing= (value_if_missing=): {e}") from None
            if name not in method.names and method.var_keyword is None:
                raise ObserverError(
                    f"missing= (value_if_missing=) names {name!r}, which is not a parameter of "
                    f"the observed method {list(method.names)}"
                )
            if name in (method.var_positional, method.var_keyword):
                raise ObserverError(f"missing=: {name!r} is a variadic parameter")
            if name in by_name:
                raise ObserverError(f"missing= gives {name!r} twice (by name and by position)")
            by_name[name] = value
        return {k: v for k, v in by_name.items() if k not in self._removed}

    def _layout(self) -> Layout:
        self._check_captured()
        key = (len(self.observations), len(self._removed))
        if self._layout_cache and self._layout_cache[0] == key:
            return self._layout_cache[1]
        calls = [
            alignment.CallInputs(
                values={k: v for k, v in o.named.items() if k not in self._removed},
                empty=o.empty - self._removed,
                positional=o.positional_only,
            )
            for o in self.observations
        ]
        layout = alignment.build_layout(
            calls,
            self._method,
            recording.common_constants(self.observations),
            self._missing_by_name(),
            canonical=lambda name, v: structure.canonical_order(v, self._reference.get(name, v)),
            removed=self._removed,
            inherited_dynamic=self._inherited_dynamic,
        )
        self._layout_cache = (key, layout)
        return layout

    def subset(
        self, indices: list[int], *, inherit_dynamic: bool = True, without_missing: bool = False
    ) -> InputObserver:
        """A new observer holding only the stored calls at ``indices`` (one call family).

        ``without_missing``: the ``missing=`` values are left out, so the inputs these
        calls did not pass are not inputs of the family's graph.

        Dims dynamic across all calls stay dynamic in the subset where its sizes allow
        (unless ``inherit_dynamic`` is False: a family whose sizes the model fixes), and so
        do dims of inputs only some calls passed that follow a dynamic dim
        (:func:`~observer_ci.observing.alignment.tied_sparse_dims`).
        """
        parent_dims = dict(zip(self.leaf_names(), alignment.tied_sparse_dims(self._layout())))
        sub = InputObserver(missing=None if without_missing else self.missing)
        sub.signature = self.signature
        sub._reference = self._reference
        sub._removed = set(self._removed)
        sub.observations = [self.observations[i] for i in indices]
        sub._inherited_dynamic = parent_dims if inherit_dynamic else {}
        return sub

    def dynamic_dims(self, set_batch_dimension_for: Any = None) -> list[list[int]]:
        """Per flattened input (export order), its dynamic dimensions."""
        layout = self._layout()
        return alignment.dynamic_dims(
            layout, alignment.batch_flags(layout, set_batch_dimension_for)
        )

    # ------------------------------------------------------------------ inference
    def infer_dynamic_shapes(
        self,
        set_batch_dimension_for: set[int | str] | bool | None = None,
        *,
        named: bool = False,
    ) -> tuple[Any, ...] | dict[str, Any]:
        """Dynamic shapes mirroring :meth:`infer_arguments`: a dim is dynamic if it varied.

        ``set_batch_dimension_for`` (True, or names/positions) also marks dim 0 dynamic;
        unknown names raise. ``*args`` shapes are a tuple under its name, ``**kwargs``
        shapes a dict under its name, as ``torch.export`` binds them. ``named=True`` gives
        each dynamic dim a name instead of ``Dim.DYNAMIC`` (``batch_size``,
        ``sequence_length``, ...: see ``dim_names``).
        """
        layout = self._layout()
        if named:
            from observer_ci.core.dim_names import name_dims

            per_leaf: list[dict[int, Any]] = name_dims(self, set_batch_dimension_for)
        else:
            dims = self.dynamic_dims(set_batch_dimension_for)
            per_leaf = [dict.fromkeys(d, DYNAMIC) for d in dims]
        by_slot = {
            slot.name: structure.mirror(slot.spec, leaves)
            for slot, leaves in zip(
                layout.slots, alignment.split_by_slot(layout, per_leaf).values()
            )
        }
        return alignment.shape_structure(layout, by_slot)

    def infer_arguments(
        self,
        index_or_args_or_kwargs: int | tuple[Any, ...] | dict[str, Any] | None = None,
        flat: bool = False,
        as_args_kwargs: bool = False,
    ) -> Any:
        """One call's inputs, absent ones filled so the export sees every input.

        None picks :meth:`candidate_indices`' first call (the likeliest to export). An int
        picks a stored call; a tuple or dict is aligned like a new call. ``flat`` gives the
        tensors in export order; ``as_args_kwargs`` always gives ``(args, kwargs)``, else a
        tuple or a dict (an error when the method needs both: ``*args`` with keywords).
        """
        layout = self._layout()
        filled = alignment.fill_absent(
            self._aligned_leaves(index_or_args_or_kwargs, layout), layout
        )
        if flat:
            return filled
        args, kwargs = self._arrange(filled, layout)
        if as_args_kwargs:
            return args, kwargs
        if not kwargs:
            return args
        if not args:
            return kwargs
        raise ObserverError(
            "these inputs cannot be one tuple or one dict: the method takes *args or "
            "positional-only parameters besides keywords; call "
            "infer_arguments(as_args_kwargs=True) and pass args and kwargs"
        )

    def _arrange(self, leaves: list[Any], layout: Layout) -> tuple[tuple[Any, ...], dict[str, Any]]:
        by_slot = {
            slot.name: pytree.tree_unflatten(part, slot.spec)
            for slot, part in zip(layout.slots, alignment.split_by_slot(layout, leaves).values())
        }
        return alignment.arrange(layout, by_slot, layout.constants)

    def _aligned_leaves(self, selector: Any, layout: Layout) -> list[torch.Tensor | None]:
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
        missing = self._missing_by_name()
        leaves: list[torch.Tensor | None] = []
        for slot in layout.slots:
            value = obs.named.get(slot.name)
            if value is None and slot.name in missing:
                value = structure.canonical_order(
                    missing[slot.name], self._reference.get(slot.name, missing[slot.name])
                )
            if value is None:
                leaves.extend([None] * slot.n_leaves)
                continue
            if structure.tree_shape(value) != structure.spec_shape(slot.spec):
                raise ObserverError(
                    f"input {slot.name!r} does not match the observed structure "
                    f"{slot.leaf_names[:6]}: got {structure.leaf_names(slot.name, value)[:6]}"
                )
            leaves.extend(pytree.tree_flatten(value)[0])
        unknown = set(obs.named) - {s.name for s in layout.slots}
        if unknown:
            raise ObserverError(f"inputs {sorted(unknown)} were never observed")
        return leaves

    def candidate_indices(self) -> list[int]:
        """Stored calls ordered by how likely they are to export as the sample.

        Calls that passed every input first, then those without dynamic sizes 0 or 1 (the
        prefill of ``generate()`` before its decode steps), then the largest.
        """
        return alignment.candidate_indices(self._layout())

    def export_candidates(self) -> list[int]:
        """Alias of :meth:`candidate_indices`."""
        return self.candidate_indices()

    def best_index(self) -> int:
        """The stored call :meth:`infer_arguments` uses by default."""
        return self.candidate_indices()[0]

    def call_arguments(self, flat: list[torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(args, kwargs)`` to call the model with flattened inputs (cloned)."""
        layout = self._layout()
        return self._arrange(structure.clone_tree(list(flat)), layout)

    def remove_inputs(
        self, input_names: list[str | int] | tuple[str | int, ...] | set[Any]
    ) -> None:
        """Drops inputs (names or positions) from every stored call and from ``missing``."""
        if self.signature is None:
            raise ObserverError("No inputs were captured: nothing to remove")
        method = self._method
        for item in input_names:
            name = method.name_of(item)
            if name in (method.var_positional, method.var_keyword):
                raise ObserverError(f"cannot remove the variadic parameter {name!r}")
            self._removed.add(name)
        self._layout_cache = None

    # ------------------------------------------------------------------ reporting
    def aligned_inputs(self, index: int) -> list[torch.Tensor | None]:
        """Flattened inputs of one stored call in export order, None where absent."""
        return list(self._layout().flat[index])

    def fed_missing(self, index: int) -> list[str]:
        """Flattened inputs one stored call did not pass, taken from ``missing=``."""
        layout = self._layout()
        sources = layout.leaf_sources(index)
        return [n for n, src in zip(layout.leaf_names, sources) if src == alignment.MISSING]

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

    @property
    def info(self) -> Any:
        """Read-only view of the stored calls shaped like the reference's ``.info``."""
        from observer_ci.observing.compat import ObservedCalls

        return ObservedCalls(self)

    def check_discrepancies(
        self,
        onnx_model: Any,
        atol: float = 1e-4,
        rtol: float = 0.1,
        hist: tuple[float, ...] | list[float] | bool = (0.1, 0.01),
        progress_bar: bool = False,
        include_io: bool = True,
        skip_none: bool = True,
        *,
        initializer: Any = None,
        warmup: int = 0,
        repeat: int = 1,
    ) -> list[dict[str, Any]]:
        """Replays every stored call in onnxruntime; one row per call, errors included.

        ``onnx_model``: a path, a ``ModelProto`` or the ``ONNXProgram`` that
        ``torch.onnx.export`` returns. ``initializer`` (torch's) builds the session from the
        serialized model. ``skip_none=False`` fails a call whose outputs hold a None.
        """
        from observer_ci.observing.compat import onnx_source
        from observer_ci.pipeline.replay import check_observer

        if isinstance(hist, bool):
            # torch's positional order: (program, atol, rtol, progress_bar, initializer, skip_none)
            if callable(progress_bar):
                initializer = progress_bar
            if isinstance(include_io, bool) and include_io is False:
                skip_none = False
            progress_bar, hist, include_io = hist, (0.1, 0.01), True
        self._check_captured()
        rows = check_observer(
            self,
            onnx_source(onnx_model, initializer),
            atol=atol,
            rtol=rtol,
            hist=tuple(hist),
            progress_bar=progress_bar,
            include_io=include_io,
            warmup=warmup,
            repeat=repeat,
        )
        if not skip_none:
            for row in rows:
                index = row.get("index", -1)
                if 0 <= index < len(self.observations) and structure.contains_none(
                    self.observations[index].outputs
                ):
                    row["SUCCESS"] = False
                    row["error"] = "an output is None in torch (skip_none=False)"
        return rows
