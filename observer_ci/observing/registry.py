"""What observation scripts declare: ``observer_ci.observe(model, name=...)`` or
``observer_ci.register(model, observer, name=...)`` for an observer already used (ours,
``torch.onnx.InputObserver`` or onnx-diagnostic's)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from observer_ci.observing.compat import adopt_observer
from observer_ci.observing.observer import InputObserver


@dataclass
class ObservedModel:
    """A model, its observer and how to export it."""

    name: str
    model: Any
    observer: InputObserver
    method_name: str = "forward"
    set_batch_dimension_for: Any = None
    script: str = ""
    source: Any = None  # a reference observer whose calls are taken over after the script


_REGISTRY: list[ObservedModel] = []
_CURRENT_SCRIPT = ""


def register(
    model: Any,
    observer: Any,
    name: str | None = None,
    *,
    method_name: str = "forward",
    set_batch_dimension_for: Any = None,
) -> ObservedModel:
    """Declares an already used observer so the runner exports and checks it.

    A ``torch.onnx.InputObserver`` or onnx-diagnostic ``InputObserver`` is taken over when
    the script ends (its stored calls become ours); what cannot be taken over becomes the
    model's error row, never a crash.
    """
    base = name or type(model).__name__
    taken = {m.name for m in _REGISTRY}
    unique, k = base, 2
    while unique in taken:
        unique, k = f"{base}#{k}", k + 1
    entry = ObservedModel(
        name=unique,
        model=model,
        observer=observer if isinstance(observer, InputObserver) else InputObserver(),
        method_name=method_name,
        set_batch_dimension_for=set_batch_dimension_for,
        script=_CURRENT_SCRIPT,
        source=None if isinstance(observer, InputObserver) else observer,
    )
    _REGISTRY.append(entry)
    return entry


@contextlib.contextmanager
def observe(
    model: Any,
    name: str | None = None,
    *,
    store_n_calls: int = 3,
    method_name: str = "forward",
    set_batch_dimension_for: Any = None,
    missing: dict[str | int, Any] | None = None,
    value_if_missing: dict[str | int, Any] | None = None,
) -> Iterator[InputObserver]:
    """Observes ``model.<method_name>`` in the block and registers it for export."""
    observer = InputObserver(missing=missing, value_if_missing=value_if_missing)
    register(
        model,
        observer,
        name,
        method_name=method_name,
        set_batch_dimension_for=set_batch_dimension_for,
    )
    with observer(model, store_n_calls=store_n_calls, method_name=method_name):
        yield observer


def take_registered() -> list[ObservedModel]:
    """Returns and clears what scripts registered since the last call; reference observers
    are taken over here, once their calls are stored."""
    entries = list(_REGISTRY)
    _REGISTRY.clear()
    for entry in entries:
        if entry.source is not None:
            entry.observer = adopt_observer(entry.source, entry.model, entry.method_name)
            entry.source = None
    return entries


@contextlib.contextmanager
def current_script(path: str) -> Iterator[None]:
    """Tags registrations made while a script runs with its path."""
    global _CURRENT_SCRIPT
    previous, _CURRENT_SCRIPT = _CURRENT_SCRIPT, path
    try:
        yield
    finally:
        _CURRENT_SCRIPT = previous
