"""The pipeline: run observation scripts, then export, replay and probe each model."""

from __future__ import annotations

import datetime
import os
import re
import runpy
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from observer_ci import registry
from observer_ci.environment import environment_fingerprint
from observer_ci.errors import ANSI_ESCAPE, error_tail, traceback_tail
from observer_ci.export import export_observed
from observer_ci.logs import progress as progress_line
from observer_ci.probe import run_probe
from observer_ci.replay import make_session, replay_observation
from observer_ci.results import (
    STATUS_DISCREPANCY,
    STATUS_EXPORT_FAILED,
    STATUS_OBSERVE_FAILED,
    STATUS_OK,
    STATUS_ORT_FAILED,
    STATUS_SCRIPT_FAILED,
    ModelResult,
    ObservationResult,
    RunResults,
)

Progress = Callable[[str], None]


@dataclass
class RunConfig:
    """Tolerances and timing of the checks."""

    atol: float = 1e-4
    rtol: float = 0.1
    hist: tuple[float, ...] = (0.1, 0.01)
    warmup: int = 2
    repeat: int = 10
    probe: bool = True


def run_scripts(
    scripts: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    config: RunConfig | None = None,
    label: str = "head",
    progress: Progress = progress_line,
) -> RunResults:
    """Runs every script and checks every model it observed. Never raises for bad input."""
    config = config or RunConfig()
    out = Path(out_dir)
    results = RunResults(
        environment=environment_fingerprint(),
        label=label,
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    for script in scripts:
        results.models.extend(run_script(str(script), out, config=config, progress=progress))
    return results


def run_script(
    script: str, out_dir: Path, *, config: RunConfig, progress: Progress = progress_line
) -> list[ModelResult]:
    """Executes one observation script, then processes what it registered."""
    progress(f"running {script}")
    registry.take_registered()
    failure: ModelResult | None = None
    begin = time.perf_counter()
    try:
        _execute(script)
    except BaseException as e:  # SystemExit and KeyboardInterrupt-like exits of scripts too
        if isinstance(e, KeyboardInterrupt):
            raise
        if not (isinstance(e, SystemExit) and e.code in (0, None)):
            failure = ModelResult(
                name=Path(script).stem,
                script=script,
                status=STATUS_SCRIPT_FAILED,
                error=script_traceback(e, script),
            )
            progress(f"{script} raised {type(e).__name__}: {e}")
    script_seconds = time.perf_counter() - begin
    entries = registry.take_registered()
    models = [process_model(entry, out_dir, config=config, progress=progress) for entry in entries]
    for m in models:
        m.phase_seconds["script"] = script_seconds
    if failure is not None:
        models.append(failure)
    elif not models:
        models.append(
            ModelResult(
                name=Path(script).stem,
                script=script,
                status=STATUS_SCRIPT_FAILED,
                error="the script observed no model: wrap calls in "
                "`with observer_ci.observe(model, name=...):`",
            )
        )
    return models


def script_traceback(exc: BaseException, script: str, max_frames: int = 12) -> str:
    """The traceback from the script's own frames on (the runner's frames are noise)."""
    frames = traceback.extract_tb(exc.__traceback__)
    target = Path(script).resolve()
    start = next(
        (i for i, f in enumerate(frames) if Path(f.filename).resolve() == target), None
    )
    if start is None:
        return traceback_tail(exc)
    lines = traceback.format_list(frames[start:][-max_frames:])
    lines += traceback.format_exception_only(type(exc), exc)
    return ANSI_ESCAPE.sub("", "Traceback (most recent call last):\n" + "".join(lines)).strip()


_TRAINING_SENSITIVE = (
    torch.nn.modules.dropout._DropoutNd,
    torch.nn.modules.batchnorm._BatchNorm,
)


def _has_training_behaviour(model: object) -> bool:
    """True when a submodule in training mode behaves differently than in eval mode."""
    if not isinstance(model, torch.nn.Module):
        return False
    return any(isinstance(m, _TRAINING_SENSITIVE) and m.training for m in model.modules())


def model_notes(entry: registry.ObservedModel) -> list[str]:
    """Hints a reader needs to interpret the numbers."""
    notes = []
    if _has_training_behaviour(entry.model):
        notes.append(
            "the model was in training mode: dropout and batch norm differ between runs; "
            "call model.eval() in the observation script"
        )
    ignored: dict[str, str] = {}
    for obs in entry.observer.observations:
        for name, why in obs.ignored.items():
            ignored.setdefault(name, why)
    if ignored:
        shown = ", ".join(f"{n} ({why})" for n, why in list(ignored.items())[:8])
        notes.append(f"arguments not exported as inputs (the export uses their defaults): {shown}")
    return notes


def _execute(script: str) -> None:
    path = Path(script)
    if not path.is_file():
        raise FileNotFoundError(f"observation script not found: {script}")
    saved_argv, saved_path = list(sys.argv), list(sys.path)
    sys.argv = [str(path)]
    sys.path.insert(0, str(path.resolve().parent))
    try:
        with registry.current_script(script):
            runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def safe_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "model"


def process_model(
    entry: registry.ObservedModel,
    out_dir: Path,
    *,
    config: RunConfig,
    progress: Progress = progress_line,
) -> ModelResult:
    """Infer, export, replay in onnxruntime, probe unseen shapes: one ModelResult."""
    obs = entry.observer
    result = ModelResult(
        name=entry.name,
        script=entry.script,
        status=STATUS_OK,
        method_name=entry.method_name,
        n_observations=obs.num_obs(),
        notes=model_notes(entry),
    )
    phase = _Phases(result)
    with phase("infer"):
        try:
            result.inputs = obs.input_summaries(entry.set_batch_dimension_for)
            result.dynamic_shapes = repr(obs.infer_dynamic_shapes(entry.set_batch_dimension_for))
        except Exception as e:
            result.status, result.error = STATUS_OBSERVE_FAILED, error_tail(e)
            progress(f"{entry.name}: cannot infer export inputs: {result.error}")
            return result
    progress(f"{entry.name}: exporting ({obs.num_obs()} calls observed)")
    onnx_path = out_dir / "onnx" / f"{safe_filename(entry.name)}.onnx"
    with phase("export"):
        result.export = export_observed(
            entry.model,
            obs,
            onnx_path,
            method_name=entry.method_name,
            set_batch_dimension_for=entry.set_batch_dimension_for,
        )
    if not result.export.ok:
        result.status, result.error = STATUS_EXPORT_FAILED, result.export.error
        progress(f"{entry.name}: export failed: {(result.export.error or '')[-300:]}")
        return result
    progress(f"{entry.name}: exported in {result.export.seconds:.1f}s, replaying")
    try:
        session = make_session(onnx_path)
    except Exception as e:
        result.status, result.error = STATUS_ORT_FAILED, error_tail(e)
        return result
    method = getattr(entry.model, entry.method_name)
    with phase("replay"):
        result.observations = [
            replay_observation(
                obs,
                i,
                session,
                method=method,
                atol=config.atol,
                rtol=config.rtol,
                hist=config.hist,
                warmup=config.warmup,
                repeat=config.repeat,
            ).result
            for i in range(obs.num_obs())
        ]
    if config.probe:
        with phase("probe"):
            try:
                result.probe = run_probe(
                    obs,
                    method,
                    session,
                    set_batch_dimension_for=entry.set_batch_dimension_for,
                    atol=config.atol,
                    rtol=config.rtol,
                )
            except Exception as e:
                from observer_ci.results import ProbeResult

                result.probe = ProbeResult(ran=True, ok=False, error=error_tail(e))
    result.status = _status(result.observations)
    if result.status != STATUS_OK:
        result.error = next((o.error for o in result.observations if o.error), None)
    progress(f"{entry.name}: {result.status}")
    return result


def _status(observations: list[ObservationResult]) -> str:
    if any(o.ort_latency_s is None for o in observations):
        return STATUS_ORT_FAILED
    if not all(o.success for o in observations):
        return STATUS_DISCREPANCY
    return STATUS_OK


class _Phases:
    """Context managers timing the phases of one model into ``phase_seconds``."""

    def __init__(self, result: ModelResult):
        self.result = result

    def __call__(self, name: str) -> _Phase:
        return _Phase(self.result, name)


class _Phase:
    def __init__(self, result: ModelResult, name: str):
        self.result, self.name = result, name

    def __enter__(self) -> None:
        self.begin = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.result.phase_seconds[self.name] = time.perf_counter() - self.begin
