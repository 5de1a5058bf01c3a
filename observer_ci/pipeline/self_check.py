"""Torch against itself: does the eager model reproduce the outputs recorded when it was
observed? If not, the ONNX graph is not to blame, and the likely reason is named.

The model runs on a snapshot of its state: every submodule's Python attributes
(``copy.deepcopy``, one memo for all, so a shared ``config`` is copied once), its buffers
(cloned) and the plain globals of the user's modules defining its classes. The snapshot is
restored after each run, so the model leaves the check as it entered it. Parameters are not
snapshot (a forward that changes its own weights is not seen).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from observer_ci.core.errors import error_tail
from observer_ci.observing import structure
from observer_ci.pipeline.diff import flatten_outputs, max_diff

TRAINING_SENSITIVE = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._BatchNorm)
_MODULE_INTERNALS = frozenset(torch.nn.Module().__dict__)  # _parameters, hooks, training...
_LIBRARY_PREFIXES = ("torch", "transformers", "builtins", "onnx", "numpy")
_SEED = 20261203
_MAX_LISTED = 3


def training_modules(model: object) -> list[str]:
    """``path (Class)`` of the submodules in training mode that behave differently in it."""
    if not isinstance(model, torch.nn.Module):
        return []
    return [
        f"`{path}` ({type(m).__name__})" if path else f"the model ({type(m).__name__})"
        for path, m in model.named_modules()
        if isinstance(m, TRAINING_SENSITIVE) and m.training
    ]


@dataclass
class SelfCheck:
    """Outcome of re-running torch on a recorded call."""

    reproducible: bool | None  # None: the re-run failed, nothing is known
    abs: float | None = None  # max abs between the recorded outputs and the re-run
    reason: str | None = None  # why not (None when reproducible, or when nothing was found)
    next_step: str | None = None
    notes: list[str] = field(default_factory=list)


def check_torch_against_itself(
    model: Any,
    method: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    expected: list[Any],
    *,
    atol: float,
    rtol: float,
) -> SelfCheck:
    """Re-runs ``method`` on the recorded inputs (one run when torch reproduces
    ``expected``; three to tell module state from random ops when it does not)."""
    state = Snapshot(model)

    def run(seed: int) -> list[Any]:
        with torch.no_grad(), torch.random.fork_rng(devices=_cuda_devices()):
            torch.manual_seed(seed)
            out = method(*structure.clone_tree(args), **structure.clone_tree(kwargs))
            return flatten_outputs(out)

    try:
        first = run(_SEED)
        changed = state.changes()
        state.restore()
        diff = max_diff(expected, first)
        if diff.within(atol, rtol):
            return SelfCheck(True, diff.abs, notes=state.notes)
        again = run(_SEED)
        state.restore()
        other_seed = run(_SEED + 1)
        state.restore()
    except Exception as e:  # the check is a hint: its failure is a note, never a verdict
        state.restore()
        return SelfCheck(None, notes=[f"torch re-run failed: {error_tail(e, 300)}"])
    steady = max_diff(first, again).within(0.0, 0.0)
    random = steady and not max_diff(first, other_seed).within(0.0, 0.0)
    check = SelfCheck(False, diff.abs, notes=state.notes)
    check.reason, check.next_step = _reason(model, changed, random, steady)
    return check


def _cuda_devices() -> list[int]:
    """The CUDA devices whose random state the check must restore (none before CUDA is
    used: asking would initialise it)."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return []
    return list(range(torch.cuda.device_count()))


def _reason(
    model: Any, changed: list[str], random: bool, steady: bool
) -> tuple[str | None, str | None]:
    """The likely reasons, most telling first, and the next step of the first."""
    reasons: list[tuple[str, str]] = []
    training = training_modules(model)
    if training:
        plural = len(training) > 1
        if random:
            what = "draw random numbers" if plural else "draws random numbers"
        else:
            what = "behave differently in it" if plural else "behaves differently in it"
        reasons.append(
            (
                f"the model is in training mode, where {_listed(training)} {what}",
                "call model.eval() in the observation script before observing",
            )
        )
    if changed:
        reasons.append(
            (
                f"the call changed state kept on the model: {_listed(changed)}",
                "keep forward free of state that changes its outputs (a call counter, a cache "
                "of the last input): reset it before each call or pass it as an input; the "
                "ONNX graph records one call's behaviour",
            )
        )
    if random and not training:
        reasons.append(
            (
                "the model draws random numbers (its outputs change with the random seed)",
                "make the random op deterministic in eval mode (or seed it from an input); "
                "the ONNX graph cannot reproduce torch's random stream",
            )
        )
    if not steady and not changed:
        reasons.append(
            (
                "two runs from the same state and seed differ (nondeterministic kernels, or "
                "state outside the module and its globals)",
                "make the model deterministic for the check "
                "(`torch.use_deterministic_algorithms(True)`), or observe what it reads",
            )
        )
    if not reasons:
        return None, None
    return "; ".join(r for r, _ in reasons), reasons[0][1]


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    more = len(items) - _MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


class Snapshot:
    """The state a call may change: submodules' Python attributes and buffers, and plain
    globals of the user's modules defining their classes; restorable, comparable."""

    def __init__(self, model: Any):
        self.model = model
        self.notes: list[str] = []
        memo: dict[int, Any] = {}
        self.attributes = {
            (path, name): self._copy(value, memo, f"{path}.{name}")
            for path, name, value in _attributes(model)
        }
        self.identities = {  # a cache reassigned by each call may hold equal values
            (path, name): id(value)
            for path, name, value in _attributes(model)
            if not isinstance(value, _SCALARS)
        }
        self.buffers = {path: b.detach().clone() for path, b in _buffers(model)}
        self.globals = {
            (module, name): self._copy(value, memo, f"{module}.{name}")
            for module, name, value in _globals(model)
        }

    def _copy(self, value: Any, memo: dict[int, Any], where: str) -> Any:
        if _holds_module(value):
            return value  # modules held outside _modules: compared by identity, not copied
        try:
            return copy.deepcopy(value, memo)
        except Exception:
            self.notes.append(f"{where.strip('.')} could not be snapshot (copy.deepcopy failed)")
            return value

    def changes(self) -> list[str]:
        """What differs now from the snapshot: ``\\`counter.calls\\` (int 3 → 4)``."""
        found = []
        now = {(p, n): v for p, n, v in _attributes(self.model)}
        for key, before in self.attributes.items():
            after = now.get(key, _GONE)
            if not same(before, after):
                found.append(f"`{_dotted(*key)}` ({_change(before, after)})")
            elif key in self.identities and id(after) != self.identities[key]:
                found.append(f"`{_dotted(*key)}` (reassigned by the call)")
        found += [f"`{_dotted(*key)}` (new attribute)" for key in now if key not in self.attributes]
        for path, buffer in _buffers(self.model):
            if path in self.buffers and not same(self.buffers[path], buffer):
                found.append(f"buffer `{path}`")
        for (module, name), before in self.globals.items():
            after = vars(sys.modules[module]).get(name, _GONE)
            if not same(before, after):
                found.append(f"global `{module}.{name}` ({_change(before, after)})")
        return found

    def restore(self) -> None:
        """Puts back what a run changed (copies of the snapshot, so a later run cannot
        change it); what did not change keeps its identity."""
        memo: dict[int, Any] = {}
        model = self.model
        modules = dict(model.named_modules()) if isinstance(model, torch.nn.Module) else {}
        for (path, name), value in self.attributes.items():
            attributes = vars(modules[path]) if path in modules else None
            if attributes is not None and not same(value, attributes.get(name, _GONE)):
                attributes[name] = _quiet_copy(value, memo)
        for path, module in modules.items():  # attributes a run added
            for name in [n for n in vars(module) if n not in _MODULE_INTERNALS]:
                if (path, name) not in self.attributes:
                    delattr(module, name)
        current = dict(_buffers(self.model))
        with torch.no_grad():
            for path, saved in self.buffers.items():
                buffer = current.get(path)
                if buffer is not None and buffer.shape == saved.shape:
                    buffer.copy_(saved)
        for (module_name, name), value in self.globals.items():
            namespace = vars(sys.modules[module_name])
            if not same(value, namespace.get(name, _GONE)):
                namespace[name] = _quiet_copy(value, memo)


def _holds_module(value: Any) -> bool:
    """A module, or a container of modules (a plain list of blocks): never deep-copied."""
    if isinstance(value, torch.nn.Module):
        return True
    items = value.values() if isinstance(value, dict) else value
    if isinstance(value, (list, tuple, set, dict)):
        return any(isinstance(v, torch.nn.Module) for v in items)
    return False


def _quiet_copy(value: Any, memo: dict[int, Any]) -> Any:
    if _holds_module(value):
        return value
    try:
        return copy.deepcopy(value, memo)
    except Exception:
        return value


_GONE = object()


def _dotted(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _attributes(model: Any) -> Iterator[tuple[str, str, Any]]:
    if not isinstance(model, torch.nn.Module):
        return
    for path, module in model.named_modules():
        for name, value in vars(module).items():
            if name not in _MODULE_INTERNALS:
                yield path, name, value


def _buffers(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(model, torch.nn.Module):
        yield from model.named_buffers()


_SCALARS = (int, float, bool, str, bytes, type(None))
_MAX_GLOBAL_ITEMS = 1000


def _plain(value: Any) -> bool:
    """A global worth a snapshot: a number, a string, a tensor, or a small container of
    numbers and strings (a counter, a list of seen sizes), never a registry of objects."""
    if isinstance(value, (*_SCALARS, torch.Tensor)):
        return True
    if isinstance(value, (list, tuple, set, dict)) and len(value) <= _MAX_GLOBAL_ITEMS:
        items = list(value.items()) if isinstance(value, dict) else list(value)
        flat = [x for item in items for x in (item if isinstance(value, dict) else (item,))]
        return all(isinstance(x, _SCALARS) for x in flat)
    return False


def _globals(model: Any) -> Iterator[tuple[str, str, Any]]:
    """Plain values (numbers, strings, containers, tensors) of the user's modules."""
    if not isinstance(model, torch.nn.Module):
        return
    names = {type(m).__module__ for m in model.modules()}
    for module_name in sorted(names):
        module = sys.modules.get(module_name)
        if module is None or module_name.split(".")[0] in _LIBRARY_PREFIXES:
            continue
        for name, value in list(vars(module).items()):
            if not name.startswith("__") and _plain(value):
                yield module_name, name, value


def same(a: Any, b: Any, depth: int = 0) -> bool:
    """Equal values, tensors included (bitwise, NaN equal to NaN); objects without their
    own ``__eq__`` by their attributes (a deep copy is never identical)."""
    if a is b:
        return True
    if type(a) is not type(b) or depth > 4:
        return False
    if isinstance(a, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        return bool(torch.equal(a, b)) or bool(
            a.is_floating_point() and torch.allclose(a, b, rtol=0.0, atol=0.0, equal_nan=True)
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y, depth + 1) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], depth + 1) for k in a)
    if type(a).__eq__ is object.__eq__ and hasattr(a, "__dict__"):
        return same(vars(a), vars(b), depth + 1)
    try:
        return bool(a == b)
    except Exception:
        return repr(a) == repr(b)


def _change(before: Any, after: Any) -> str:
    """``int 3 → 4``, ``tensor 2×4 → tensor 3×4``, ``None → tensor 2×4``."""
    if type(before) is type(after) and isinstance(before, (bool, int, float)):
        return f"{type(before).__name__} {before!r} → {after!r}"
    return f"{_brief(before)} → {_brief(after)}"


def _brief(value: Any) -> str:
    if value is _GONE:
        return "deleted"
    if isinstance(value, torch.Tensor):
        return f"tensor {'×'.join(map(str, value.shape)) or 'scalar'}"
    if value is None:
        return "None"
    if isinstance(value, (bool, int, float)):
        return f"{type(value).__name__} {value!r}"
    if isinstance(value, str):
        return repr(value[:20] + ("…" if len(value) > 20 else ""))
    if isinstance(value, (list, tuple, dict, set)):
        return f"{type(value).__name__} of {len(value)}"
    return type(value).__name__
