"""The environment fingerprint: versions and machine facts stored in results.json."""

from __future__ import annotations

import platform
from typing import Any

from observer_ci.core.constants import DEFAULT_OPSET
from observer_ci.core.runner import this_runner


def environment_fingerprint() -> dict[str, Any]:
    """Versions and machine facts that make latencies comparable (or not)."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        **this_runner(),
    }
    for mod in ("torch", "onnx", "onnxruntime", "onnxscript", "transformers", "numpy"):
        env[mod] = _version_of(mod)
    try:
        import torch

        env["torch_threads"] = torch.get_num_threads()
    except Exception:  # pragma: no cover - torch is a hard dependency
        env["torch_threads"] = None
    env["opset"] = DEFAULT_OPSET
    return env


def _version_of(module: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return None
