"""What code written for the reference observers reads and hands over.

- :class:`ObservedCalls`: a read-only ``.info`` shaped like the reference's
  (``inputs[i].args/.kwargs/.cst_kwargs``, ``flat_outputs``, ``outputs_specs``,
  ``latencies``, ``signature_names``).
- :func:`onnx_source`: ``check_discrepancies`` accepts a path, a ``ModelProto`` or the
  ``ONNXProgram`` that ``torch.onnx.export`` returns (and torch's ``initializer``).
- :func:`adopt_observer`: takes over the stored calls of an already used
  ``torch.onnx.InputObserver`` or onnx-diagnostic ``InputObserver``, or refuses clearly.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _pytree as pytree

from observer_ci.observing import structure
from observer_ci.observing.alignment import MethodSignature, ObserverError

if TYPE_CHECKING:
    from observer_ci.observing.observer import InputObserver, Observation


class ObservedCall:
    """One stored call as the reference's ``InputCandidate`` shows it (read-only)."""

    def __init__(self, observer: InputObserver, index: int):
        self._observer, self._index = observer, index
        obs: Observation = observer.observations[index]
        removed = observer._removed
        self.args: tuple[Any, ...] = obs.args
        self.kwargs: dict[str, Any] = {
            k: v
            for k, v in obs.kwargs.items()
            if v is not None and not isinstance(v, structure.SCALAR_TYPES) and k not in removed
        }
        self.cst_kwargs: dict[str, Any] = {
            k: v for k, v in obs.constants.items() if k not in removed
        }
        flat, self.spec = pytree.tree_flatten((self.args, self.kwargs))
        self.flat_list: list[torch.Tensor] = [t for t in flat if isinstance(t, torch.Tensor)]

    @property
    def aligned_flat_list(self) -> list[torch.Tensor | None]:
        """The call's tensors in export order, None where it did not pass an input."""
        return self._observer.aligned_inputs(self._index)

    def __len__(self) -> int:
        return len(self.flat_list)

    def str_obs(self) -> str:
        return (
            f"InputCandidate(args=#{len(self.args)}(...), kwargs=#{len(self.kwargs)}{{...}}, "
            f"cst_kwargs={self.cst_kwargs})"
        )

    def __repr__(self) -> str:
        return f"ObservedCall({self._index}: {structure.tensor_summary((self.args, self.kwargs))})"


class ObservedCalls:
    """``InputObserver.info``: the stored calls, read-only, in the reference's shape."""

    def __init__(self, observer: InputObserver):
        self._observer = observer
        self.inputs: tuple[ObservedCall, ...] = tuple(
            ObservedCall(observer, i) for i in range(observer.num_obs())
        )
        flat = [pytree.tree_flatten(o.outputs) for o in observer.observations]
        self.flat_outputs: tuple[list[Any], ...] = tuple(f[0] for f in flat)
        self.outputs_specs: tuple[pytree.TreeSpec, ...] = tuple(f[1] for f in flat)
        self.latencies: tuple[float | None, ...] = tuple(o.latency_s for o in observer.observations)
        method = MethodSignature.of(observer.signature) if observer.signature else None
        self.signature_names: list[str] = list(method.names) if method else []
        self.default_values: dict[str, Any] = {
            k: v
            for k, v in (method.defaults if method else {}).items()
            if isinstance(v, structure.SCALAR_TYPES)
        }
        self.value_if_missing: dict[str | int, Any] = dict(observer.missing)
        self.kwargs_name: str | None = method.var_keyword if method else None
        self.args_name_and_position: tuple[str, int] | None = (
            (method.var_positional, method.names.index(method.var_positional))
            if method and method.var_positional
            else None
        )

    def __len__(self) -> int:
        return len(self.inputs)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in vars(self):
            raise AttributeError(f"InputObserver.info is read-only ({name!r})")
        object.__setattr__(self, name, value)


def onnx_source(onnx_model: Any, initializer: Any = None) -> Any:
    """A path, a ``ModelProto`` or an onnxruntime session from what the caller passed."""
    source = onnx_model
    proto = getattr(onnx_model, "model_proto", None)  # torch.onnx.ONNXProgram
    if proto is not None:
        source = proto
    if initializer is None:
        return source
    serialized = source.SerializeToString() if hasattr(source, "SerializeToString") else str(source)
    return initializer(serialized)


def adopt_observer(foreign: Any, model: Any, method_name: str = "forward") -> InputObserver:
    """Our observer holding the calls a reference observer stored; never raises.

    What cannot be taken over (nothing stored, a call that raised and left inputs without
    outputs, not an observer at all) gives an observer that refuses with the reason, so
    the runner writes it on the model's row.
    """
    from observer_ci.observing.observer import InputObserver

    try:
        return _adopt(foreign, model, method_name)
    except Exception as e:  # every refusal becomes a row
        kind = type(foreign).__module__ + "." + type(foreign).__name__
        return InputObserver.refused(f"cannot take over the calls stored by {kind}: {e}")


def _adopt(foreign: Any, model: Any, method_name: str) -> InputObserver:
    from observer_ci.observing.observer import InputObserver

    if not hasattr(foreign, "infer_dynamic_shapes") or not hasattr(foreign, "info"):
        raise ObserverError(
            "register() takes an observer_ci.InputObserver, a torch.onnx.InputObserver or an "
            f"onnx_diagnostic InputObserver, not {type(foreign).__name__}"
        )
    info = foreign.info
    if info is None or not len(info.inputs):
        raise ObserverError(
            "it holds no call: register it after running the model inside "
            "`with observer(model): ...`"
        )
    n_in, n_out = len(info.inputs), len(info.flat_outputs)
    if n_in != n_out or len(info.latencies) != n_in:
        raise ObserverError(
            f"its inputs and outputs are unpaired ({n_in} stored inputs, {n_out} outputs): a "
            "call raised inside the observer. Observe again without the failing call, or use "
            "observer_ci.observe(), which stores nothing for a call that raises"
        )
    if not hasattr(model, method_name):
        raise ObserverError(f"{type(model).__name__} has no method {method_name!r}")
    filled = dict(
        getattr(foreign, "value_if_missing", None) or getattr(info, "value_if_missing", {}) or {}
    )
    ours = InputObserver(missing=filled)
    ours._adopt_signature(inspect.signature(getattr(model, method_name)), method_name)
    names = list(ours._method.names)
    for candidate, flat_out, spec, latency in zip(
        info.inputs, info.flat_outputs, info.outputs_specs, info.latencies
    ):
        args = list(candidate.args)
        kwargs = {**candidate.kwargs, **getattr(candidate, "cst_kwargs", {})}
        for key, value in filled.items():  # the reference stored its fill-ins as inputs
            if isinstance(key, int):
                if key < len(args) and structure.trees_equal(args[key], value):
                    args[key] = None
                elif key < len(names) and structure.trees_equal(kwargs.get(names[key]), value):
                    kwargs.pop(names[key])
            elif structure.trees_equal(kwargs.get(key), value):
                kwargs.pop(key)
        observation = ours._record(tuple(args), kwargs)
        observation.outputs = structure.clone_tree(pytree.tree_unflatten(list(flat_out), spec))
        observation.latency_s = latency
        ours._store(observation)
    return ours
