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
from typing import Any

import torch

from observer_ci import registry
from observer_ci.environment import environment_fingerprint
from observer_ci.errors import ANSI_ESCAPE, error_tail, traceback_tail
from observer_ci.export import export_observed
from observer_ci.families import (
    ROLE_SINGLE,
    Family,
    name_families,
    plan_families,
    split_family,
    stand_ins,
)
from observer_ci.logs import progress as progress_line
from observer_ci.observer import InputObserver
from observer_ci.probe import run_probe
from observer_ci.pytrees import register_model_output_keys
from observer_ci.replay import make_session, replay_observation
from observer_ci.results import (
    STATUS_DISCREPANCY,
    STATUS_EXPORT_FAILED,
    STATUS_OBSERVE_FAILED,
    STATUS_OK,
    STATUS_ORT_FAILED,
    STATUS_SCRIPT_FAILED,
    GraphResult,
    ModelResult,
    ObservationResult,
    ProbeResult,
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
    models = [
        _process_safely(entry, out_dir, config=config, progress=progress) for entry in entries
    ]
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


def _process_safely(
    entry: registry.ObservedModel, out_dir: Path, *, config: RunConfig, progress: Progress
) -> ModelResult:
    """``process_model`` whose unexpected errors become a result row (never a crash)."""
    try:
        return process_model(entry, out_dir, config=config, progress=progress)
    except Exception as e:
        progress(f"{entry.name}: cannot be processed: {type(e).__name__}: {e}")
        return ModelResult(
            name=entry.name,
            script=entry.script,
            status=STATUS_OBSERVE_FAILED,
            method_name=entry.method_name,
            error=f"observer-ci could not process this model ({traceback_tail(e, 6)}); "
            "observe it with observer_ci.observe(model, name=...) or report the problem",
        )


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
    register_model_output_keys()  # ModelOutput classes first used during the script
    with phase("infer"):
        try:
            result.inputs = obs.input_summaries(entry.set_batch_dimension_for)
            result.dynamic_shapes = repr(obs.infer_dynamic_shapes(entry.set_batch_dimension_for))
        except Exception as e:
            result.status, result.error = STATUS_OBSERVE_FAILED, error_tail(e)
            progress(f"{entry.name}: cannot infer export inputs: {result.error}")
            return result
    try:
        families = plan_families(obs, entry.set_batch_dimension_for)
    except Exception as e:
        result.status, result.error = STATUS_OBSERVE_FAILED, error_tail(e)
        return result
    progress(
        f"{entry.name}: exporting {len(families)} graph(s) ({obs.num_obs()} calls observed)"
    )
    server = _FamilyServer(entry, out_dir, config, phase, single=len(families) == 1)
    rows: dict[int, ObservationResult] = {}
    served_families: list[Family] = []
    queue = list(families)
    while queue:
        family = queue.pop(0)
        if not family.name:
            family.name = f"{ROLE_SINGLE}_{len(served_families) + len(queue) + 1}"
        graph, served = server.serve(family)
        moved = _stand_in_failures(graph, served)
        if moved:
            family, *extra = split_family(family, obs, moved, entry.set_batch_dimension_for)
            graph.observation_indices = family.indices
            for i in moved:
                served.pop(i)
            server.single = False
            queue.extend(extra)
        result.graphs.append(graph)
        served_families.append(family)
        rows.update(served)
    if len(result.graphs) > 1:
        server.rename(result.graphs, name_families(served_families), rows)
    result.observations = [rows[i] for i in sorted(rows)]
    main = result.graphs[0]
    result.export, result.probe = main.export, main.probe
    if len(result.graphs) > 1:
        result.notes.append(
            f"{len(result.graphs)} graphs, one per call family: "
            + "; ".join(
                f"{g.name} serves calls {g.observation_indices}" + (f" ({g.reason})" if g.reason
                                                                     else "")
                for g in result.graphs
            )
        )
    failed = [g for g in result.graphs if g.export is None or not g.export.ok]
    if failed:
        g = failed[0]
        error = (g.export.error if g.export else None) or "export failed"
        result.status = STATUS_EXPORT_FAILED
        result.error = error if len(result.graphs) == 1 else f"graph {g.name}: {error}"
        progress(f"{entry.name}: export failed: {result.error[-300:]}")
        return result
    result.status = _status(result.observations)
    if result.status != STATUS_OK:
        result.error = next((o.error for o in result.observations if o.error), None)
    progress(f"{entry.name}: {result.status}")
    return result


def _stand_in_failures(graph: GraphResult, served: dict[int, ObservationResult]) -> list[int]:
    """Calls that failed on a shared graph only because of stand-ins (others passed)."""
    if graph.export is None or not graph.export.ok:
        return []
    sample = graph.export.sample_index
    failed = [i for i, r in served.items() if r.stand_ins and not r.success and i != sample]
    if failed and any(r.success for r in served.values()):
        return failed
    return []


class _FamilyServer:
    """Exports one graph per call family, replays its calls on it, probes it."""

    def __init__(
        self,
        entry: registry.ObservedModel,
        out_dir: Path,
        config: RunConfig,
        phase: _Phases,
        single: bool,
    ):
        self.entry, self.out_dir, self.config, self.phase = entry, out_dir, config, phase
        self.single = single
        self.method = getattr(entry.model, entry.method_name)

    def path(self, name: str) -> Path:
        stem = safe_filename(self.entry.name)
        if self.single:
            return self.out_dir / "onnx" / f"{stem}.onnx"
        return self.out_dir / "onnx" / stem / f"{safe_filename(name)}.onnx"

    def rename(
        self,
        graphs: list[GraphResult],
        families: list[Family],
        rows: dict[int, ObservationResult],
    ) -> None:
        """Final names once every family is known; files and rows follow."""
        self.single = False
        renamed: dict[str, str] = {}
        for graph, family in zip(graphs, families):
            renamed[graph.name] = family.name
            graph.name, graph.reason = family.name, family.reason or graph.reason
        temporary = []
        for graph in graphs:  # two steps: a new name may be another graph's old name
            if graph.export is not None and graph.export.onnx_path:
                source = Path(graph.export.onnx_path)
                moved = source.with_name(source.name + ".moving")
                source.replace(moved)
                temporary.append((graph, moved))
        for graph, moved in temporary:
            target = self.path(graph.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            moved.replace(target)
            graph.export.onnx_path = str(target)
        for row in rows.values():
            old = row.family or ""
            row.family = renamed.get(old, row.family)
            if row.note:
                row.note = row.note.replace(f"graph {old} ", f"graph {row.family} ")

    def serve(self, family: Family) -> tuple[GraphResult, dict[int, ObservationResult]]:
        entry, config = self.entry, self.config
        obs = entry.observer
        whole = family.indices == list(range(obs.num_obs()))
        sub = obs if whole else obs.subset(family.indices)
        flags = _flags_for(sub, entry.set_batch_dimension_for)
        graph = GraphResult(name=family.name, observation_indices=family.indices,
                            reason=family.reason)
        with self.phase("export"):
            graph.export = export_observed(
                entry.model,
                sub,
                self.path(family.name),
                method_name=entry.method_name,
                set_batch_dimension_for=flags,
                call_numbers=family.indices,
            )
        if not graph.export.ok:
            return graph, {}  # the graph entry holds the error and the calls it would serve
        try:
            session = make_session(graph.export.onnx_path)
        except Exception as e:
            error = error_tail(e)
            return graph, {
                i: ObservationResult(index=i, ok=False, family=family.name, error=error)
                for i in family.indices
            }
        dynamic = sub.dynamic_dims(flags)
        rows: dict[int, ObservationResult] = {}
        with self.phase("replay"):
            for local, index in enumerate(family.indices):
                row = replay_observation(
                    sub,
                    local,
                    session,
                    method=self.method,
                    atol=config.atol,
                    rtol=config.rtol,
                    hist=config.hist,
                    warmup=config.warmup,
                    repeat=config.repeat,
                ).result
                row.index, row.family = index, family.name
                row.stand_ins, _made_up = stand_ins(sub, local, dynamic)
                if row.stand_ins:
                    row.note = (
                        f"served by graph {family.name} with 0-length stand-ins for the absent "
                        f"inputs {row.stand_ins[:4]}"
                    )
                rows[index] = row
        if config.probe:
            with self.phase("probe"):
                try:
                    graph.probe = run_probe(
                        sub,
                        self.method,
                        session,
                        set_batch_dimension_for=flags,
                        atol=config.atol,
                        rtol=config.rtol,
                    )
                except Exception as e:
                    graph.probe = ProbeResult(ran=True, ok=False, error=error_tail(e))
        return graph, rows


def _flags_for(observer: InputObserver, flags: Any) -> Any:
    """``set_batch_dimension_for`` restricted to the inputs a family's calls pass."""
    if flags is None or isinstance(flags, bool) or isinstance(flags, (str, int)) and not flags:
        return flags
    items = [flags] if isinstance(flags, (str, int)) else list(flags)
    names = observer.leaf_names()
    kept = [
        f for f in items
        if not isinstance(f, str) or any(n == f or n.startswith(f + "_") for n in names)
    ]
    return kept or None


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
        seconds = time.perf_counter() - self.begin
        phases = self.result.phase_seconds
        phases[self.name] = phases.get(self.name, 0.0) + seconds
