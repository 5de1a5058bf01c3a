"""One observed call, stored: cloned inputs classified by name, outputs, latency."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from observer_ci.observing import structure
from observer_ci.observing.alignment import MethodSignature, ObserverError


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
    empty: set[str] = field(default_factory=set)  # containers passed without any tensor
    # name -> (its type, where it keeps tensors that flatten to no input: a dropped state)
    hidden: dict[str, tuple[str, list[str]]] = field(default_factory=dict)


def positional_names(method: MethodSignature, n_args: int) -> list[str]:
    """Names of ``n_args`` positional values: parameters, then ``*args`` elements."""
    names = list(method.positional[:n_args])
    if n_args > len(names):
        if method.var_positional is None:
            raise TypeError(f"too many positional arguments ({n_args})")
        names += [method.var_positional_name(k) for k in range(n_args - len(names))]
    return names


def record_call(
    signature: inspect.Signature,
    reference: dict[str, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Observation:
    """Clones one call's inputs and classifies them (tensor input, constant, ignored).

    ``reference`` holds the first value seen per name: nested dicts of later calls are
    put in its key order.
    """
    hidden = _hidden_state(MethodSignature.of(signature), args, kwargs)
    args_c = structure.clone_tree(tuple(args))
    kwargs_c = structure.clone_tree(dict(kwargs))
    params = signature.parameters
    named: dict[str, Any] = {}
    constants: dict[str, Any] = {}
    ignored: dict[str, str] = {}
    empty: set[str] = set()
    method = MethodSignature.of(signature)
    items = list(zip(positional_names(method, len(args_c)), args_c)) + list(kwargs_c.items())
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
        leaves, spec = pytree.tree_flatten(value)
        if not any(isinstance(t, torch.Tensor) for t in leaves):
            if not spec.is_leaf():
                empty.add(name)
            # a container without tensors, else an object pytree cannot open (its type)
            ignored[name] = "no tensor" if not spec.is_leaf() else type(value).__name__
            continue
        ref = reference.setdefault(name, value)
        named[name] = structure.canonical_order(value, ref)
    positional_only = not constants and all(
        v is None or isinstance(v, structure.SCALAR_TYPES) for v in kwargs_c.values()
    )
    return Observation(
        args=args_c,
        kwargs=kwargs_c,
        named=named,
        constants=constants,
        ignored=ignored,
        positional_only=positional_only,
        empty=empty,
        hidden=hidden,
    )


def _hidden_state(
    method: MethodSignature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, tuple[str, list[str]]]:
    """Per input, its type and the tensors it holds that its flattening leaves out (see
    :func:`observer_ci.observing.state_layers.hidden_tensors`); read before cloning,
    which keeps only the flattened tensors."""
    from observer_ci.observing.state_layers import hidden_tensors

    hidden: dict[str, tuple[str, list[str]]] = {}
    items = list(zip(positional_names(method, len(args)), args)) + list(kwargs.items())
    for name, value in items:
        if value is None or isinstance(value, (torch.Tensor, *structure.SCALAR_TYPES)):
            continue
        found = hidden_tensors(value, pytree.tree_leaves(value), name)
        if found:
            hidden[name] = (type(value).__name__, found)
    return hidden


class _Default:
    def __repr__(self) -> str:
        return "<default>"


_DEFAULT = _Default()


def common_constants(observations: list[Observation]) -> dict[str, Any]:
    """The constants every call agrees on; one that differs (or is absent) raises."""
    keys: list[str] = []
    for obs in observations:
        keys.extend(k for k in obs.constants if k not in keys)
    constants: dict[str, Any] = {}
    for key in keys:
        values = [o.constants.get(key, _DEFAULT) for o in observations]
        if len({repr(v) for v in values}) > 1:
            shown = ", ".join(f"call {i}: {v!r}" for i, v in enumerate(values))
            raise ObserverError(
                f"constant argument {key!r} differs across calls ({shown}); "
                "one export holds one value: observe one configuration at a time"
            )
        constants[key] = values[0]
    return constants
