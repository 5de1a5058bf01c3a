"""observer-ci: observe PyTorch calls, export to ONNX, check onnxruntime, report on PRs.

Attributes are imported lazily: ``import observer_ci`` alone loads neither torch nor
pandas, so the action's parent process, ``compare``, ``merge`` and report rendering stay
light. ``observer_ci.InputObserver`` (and ``observe``/``register``) load torch on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["InputObserver", "ObserverError", "observe", "register"]
__version__ = "0.1.0"

_LAZY = {
    "InputObserver": "observer_ci.observing.observer",
    "ObserverError": "observer_ci.core.exceptions",
    "observe": "observer_ci.observing.registry",
    "register": "observer_ci.observing.registry",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'observer_ci' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
