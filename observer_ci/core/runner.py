"""The runner class: the machine facts that make two runs' latencies comparable.

One home for them: the environment fingerprint records them in results.json, and the
history band (``report/history.py``) is drawn only from runs of the current runner's class
(a default branch whose runs moved between runner types would otherwise widen the band
with the other machine's speed, or shift it). Torch-free.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RUNNER_FIELDS = ("machine", "processor", "cpu_count")


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def this_runner() -> dict[str, Any]:
    """The current machine's :data:`RUNNER_FIELDS`."""
    return {"machine": platform.machine(), "processor": cpu_name(), "cpu_count": os.cpu_count()}


def runner_class(environment: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The runner class of a run's ``environment``; None when a field is missing (a run
    recorded before these facts were)."""
    values = tuple(environment.get(key) for key in RUNNER_FIELDS)
    return None if any(v in (None, "") for v in values) else values


def describe_runner(environment: Mapping[str, Any]) -> str:
    """``x86_64, AMD EPYC 7763, 2 cores``."""
    machine, processor, cores = (environment.get(key) for key in RUNNER_FIELDS)
    return f"{machine}, {processor}, {cores} cores"
