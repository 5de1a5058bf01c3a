"""Builders of results.json objects for tests: one healthy model, overridable field by field.

model(observations=[observation(0, abs_=2e-3)])   # a discrepancy
run(model("a"), model("b"), label="base")
"""

from __future__ import annotations

from typing import Any

from observer_ci.core.results import (
    ExportResult,
    InputInfo,
    ModelResult,
    ObservationResult,
    ProbeResult,
    RunResults,
)


def observation(
    index: int = 0,
    abs_: float | None = 1e-7,
    rel: float | None = 1e-6,
    ort: float | None = 1e-3,
    **fields: Any,
) -> ObservationResult:
    """A replayed call that matched torch; keyword arguments override fields."""
    values: dict[str, Any] = dict(
        ok=True, success=True, abs=abs_, rel=rel, torch_latency_s=2e-3, ort_latency_s=ort
    )
    values.update(fields)
    return ObservationResult(index=index, **values)


def export(**fields: Any) -> ExportResult:
    """A successful export of one input ``x`` with a dynamic batch dim."""
    values: dict[str, Any] = dict(
        ok=True,
        seconds=1.0,
        opset=18,
        node_count=100,
        input_names=["x"],
        input_dims={"x": ["batch", 8]},
    )
    values.update(fields)
    return ExportResult(**values)


def model(name: str = "m", status: str = "ok", **fields: Any) -> ModelResult:
    """A healthy model (two matching calls, a successful probe); keyword arguments override."""
    values: dict[str, Any] = dict(
        script="examples/m.py",
        n_observations=2,
        inputs=[InputInfo("x", "float32", [[2, 8], [4, 8]], [0])],
        export=export(),
        observations=[observation(0), observation(1)],
        probe=ProbeResult(ran=True, ok=True, success=True, shapes={"x": [5, 8]}),
    )
    values.update(fields)
    return ModelResult(name=name, status=status, **values)


def run(*models: ModelResult, label: str = "head", env: dict | None = None) -> RunResults:
    """A run holding ``models``."""
    return RunResults(models=list(models), environment=env or {}, label=label)
