"""The environment fingerprint: versions and machine facts stored in results.json."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from observer_ci.core.constants import DEFAULT_OPSET


def environment_fingerprint() -> dict[str, Any]:
    """Versions and machine facts that make latencies comparable (or not)."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": _cpu_name(),
        "cpu_count": os.cpu_count(),
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


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
