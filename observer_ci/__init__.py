"""observer-ci: observe PyTorch calls, export to ONNX, check onnxruntime, report on PRs."""

from observer_ci.observer import InputObserver, ObserverError
from observer_ci.registry import observe, register

__all__ = ["InputObserver", "ObserverError", "observe", "register"]
__version__ = "0.1.0"
