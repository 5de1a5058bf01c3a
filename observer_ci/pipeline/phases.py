"""Timing of one model's phases into ``phase_seconds``."""

from __future__ import annotations

import time

from observer_ci.core.results import (
    ModelResult,
)


class Phases:
    """Context managers timing the phases of one model into ``phase_seconds``."""

    def __init__(self, result: ModelResult):
        self.result = result

    def __call__(self, name: str) -> Phase:
        return Phase(self.result, name)


class Phase:
    def __init__(self, result: ModelResult, name: str):
        self.result, self.name = result, name

    def __enter__(self) -> None:
        self.begin = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        seconds = time.perf_counter() - self.begin
        phases = self.result.phase_seconds
        phases[self.name] = phases.get(self.name, 0.0) + seconds
