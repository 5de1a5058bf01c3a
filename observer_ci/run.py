"""The pipeline: run observation scripts, then export, replay and probe each model."""

from __future__ import annotations

import contextlib
import datetime
import gc
import hashlib
import os
import re
import runpy
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from observer_ci import registry
from observer_ci.causes import add_sample_difference, explain_exception, explain_script_error
from observer_ci.constants import DEFAULT_OPSET, FEEDS_MAX_BYTES
from observer_ci.dim_names import name_dims
from observer_ci.environment import environment_fingerprint
from observer_ci.errors import ANSI_ESCAPE, error_tail, traceback_tail
from observer_ci.export import export_observed
from observer_ci.export_cache import DEFAULT_CACHE_MAX_MB, MB, cached_export, export_key
from observer_ci.graph_warnings import graph_warnings
from observer_ci.journal import JournalWriter
from observer_ci.logs import log_group, quiet_third_party
from observer_ci.logs import progress as progress_line
from observer_ci.probe import run_probe
from observer_ci.pytrees import register_if_imported
from observer_ci.replay import make_session, replay_observation
from observer_ci.results import (
    STATUS_DISCREPANCY,
    STATUS_EXPORT_FAILED,
    STATUS_OBSERVE_FAILED,
    STATUS_OK,
    STATUS_ORT_FAILED,
    STATUS_PROBE_FAILED,
    STATUS_SCRIPT_FAILED,
    ExportResult,
    ModelResult,
    ObservationResult,
    RunResults,
)
from observer_ci.rules import Thresholds

Progress = Callable[[str], None]


@dataclass
class RunConfig:
    """Tolerances and timing of the checks. The tolerances are the ``abs_max`` and
    ``rel_max`` thresholds: one set decides SUCCESS and the ``discrepancy`` rule."""

    atol: float = Thresholds.abs_max
    rtol: float = Thresholds.rel_max
    hist: tuple[float, ...] = (0.1, 0.01)
    warmup: int = 2
    repeat: int = 10
    probe: bool = True
    cache_dir: str | None = None  # export cache shared by runs (None: no cache)
    cache_max_bytes: int | None = DEFAULT_CACHE_MAX_MB * MB  # its size cap (None: no cap)
    threads: int | None = None  # onnxruntime intra-op threads (None: its default)
    save_feeds: bool = False  # save the onnxruntime inputs for paired base/head timing
    feeds_max_bytes: int = FEEDS_MAX_BYTES  # all saved inputs of the run together

    def recorded(self) -> dict[str, object]:
        """What ``results.json`` records under ``settings``."""
        return {
            "abs_max": self.atol,
            "rel_max": self.rtol,
            "hist": list(self.hist),
            "warmup": self.warmup,
            "repeat": self.repeat,
            "probe": self.probe,
        }


def run_scripts(
    scripts: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    config: RunConfig | None = None,
    label: str = "head",
    progress: Progress = progress_line,
    verbose: bool = False,
    journal: str | os.PathLike[str] | None = None,
) -> RunResults:
    """Runs every script and checks every model it observed. Never raises for bad input.
    Third-party warnings stay quiet unless ``verbose``.

    With ``journal``, each script's rows are appended there as soon as it is done
    (:mod:`observer_ci.journal`), so a process killed mid-way loses only the running one.
    """
    config = config or RunConfig()
    out = Path(out_dir)
    results = RunResults(
        environment=environment_fingerprint(),
        label=label,
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        settings=config.recorded(),
    )
    writer = JournalWriter(journal) if journal else None
    if writer:
        writer.begin(results, [str(s) for s in scripts])
    with quiet_third_party(verbose):
        for script in scripts:
            if writer:
                writer.start(str(script))
            models = run_script(str(script), out, config=config, progress=progress)
            results.models.extend(models)
            if writer:
                writer.done(str(script), models)
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
        with log_group(f"observer-ci: script {script}"):
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
                cause=explain_script_error(e),
            )
            progress(f"{script} raised {type(e).__name__}: {e}")
    script_seconds = time.perf_counter() - begin
    entries = registry.take_registered()
    models = []
    with _heap_frozen():
        for entry in entries:
            with log_group(f"observer-ci: model {entry.name}"):
                models.append(process_model(entry, out_dir, config=config, progress=progress))
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
    # The exported signature takes every argument some call passed a tensor for (the
    # calls that did not are fed empty tensors): only the rest is really not exported.
    exported = {name for obs in entry.observer.observations for name in obs.named}
    ignored: dict[str, str] = {}
    for obs in entry.observer.observations:
        for name, why in obs.ignored.items():
            if name not in exported:
                ignored.setdefault(name, why)
    if ignored:
        shown = ", ".join(f"{n} ({why})" for n, why in list(ignored.items())[:8])
        notes.append(f"arguments not exported as inputs (the export uses their defaults): {shown}")
    return notes


@contextlib.contextmanager
def _heap_frozen() -> Iterator[None]:
    """Leaves what is alive after the script (torch, transformers, the model, its calls) out
    of the garbage collector's passes while its models are exported and replayed: export
    allocates heavily, and each full pass would walk those objects again (measured: 10-20%
    of the CPU of a small model's run). Unfrozen afterwards, so the script's objects can go."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


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


# File names stay well under the 255 bytes most file systems allow (".onnx.data" and
# friends are appended to them).
MAX_FILENAME_CHARS = 120


def safe_filename(name: str) -> str:
    """A file name for ``name``: unsafe characters replaced; a long name is cut and
    given a hash of the full name, so two long names sharing a prefix stay apart."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "model"
    if len(safe) <= MAX_FILENAME_CHARS:
        return safe
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{safe[: MAX_FILENAME_CHARS - 17]}-{digest}"


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
            names = name_dims(obs, entry.set_batch_dimension_for)
            for info, named in zip(result.inputs, names):
                info.dim_names = [named[d] for d in info.dynamic_dims]
            result.dynamic_shapes = repr(
                obs.infer_dynamic_shapes(entry.set_batch_dimension_for, named=True)
            )
        except Exception as e:
            result.status, result.error = STATUS_OBSERVE_FAILED, error_tail(e)
            result.cause = explain_exception(e, observer=obs)
            progress(f"{entry.name}: cannot infer export inputs: {result.error}")
            return result
    progress(f"{entry.name}: exporting ({obs.num_obs()} calls observed)")
    onnx_path = out_dir / "onnx" / f"{safe_filename(entry.name)}.onnx"
    with phase("export"):
        result.export = export_model(
            entry, onnx_path, cache_dir=config.cache_dir, cache_max_bytes=config.cache_max_bytes
        )
    result.notes.extend(result.export.notes)
    if not result.export.ok:
        result.status, result.error = STATUS_EXPORT_FAILED, result.export.error
        result.cause = result.export.cause
        result.warnings = graph_warnings(result)
        progress(f"{entry.name}: export failed: {(result.export.error or '')[-300:]}")
        return result
    progress(f"{entry.name}: exported in {result.export.seconds:.1f}s, replaying")
    try:
        session = make_session(onnx_path, threads=config.threads)
    except Exception as e:
        result.status, result.error = STATUS_ORT_FAILED, error_tail(e)
        result.cause = explain_exception(e)
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
    progress(
        f"{entry.name}: replayed {obs.num_obs()} calls "
        f"({config.warmup} warm-up + {config.repeat} timed runs each) "
        f"in {result.phase_seconds['replay']:.1f}s"
    )
    if config.save_feeds and (note := _save_feeds(entry, session, onnx_path, config)):
        result.notes.append(note)
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
        result.cause = next((o.cause for o in result.observations if o.cause), None)
        sample = result.export.sample_index
        for o in result.observations:
            if o.cause is not None and sample is not None:
                add_sample_difference(o.cause, result.inputs, o.index, sample)
    elif result.probe is not None and result.probe.ran and not result.probe.success:
        result.status, result.error = STATUS_PROBE_FAILED, result.probe.error
        result.cause = result.probe.cause
    result.warnings = graph_warnings(result)
    total = sum(v for k, v in result.phase_seconds.items() if k != "script")
    progress(f"{entry.name}: {result.status} ({total:.1f}s)")
    return result


def export_model(
    entry: registry.ObservedModel,
    onnx_path: Path,
    *,
    cache_dir: str | None = None,
    cache_max_bytes: int | None = DEFAULT_CACHE_MAX_MB * MB,
) -> ExportResult:
    """The "export this model" step, through the export cache when ``cache_dir`` is set."""

    def export() -> ExportResult:
        register_if_imported()  # the script may have imported transformers after observing
        return export_observed(
            entry.model,
            entry.observer,
            onnx_path,
            method_name=entry.method_name,
            set_batch_dimension_for=entry.set_batch_dimension_for,
            named_dims=True,
        )

    return cached_export(
        export, lambda: export_cache_key(entry), onnx_path, cache_dir, cache_max_bytes
    )


def export_cache_key(entry: registry.ObservedModel) -> str:
    """The export cache key of one observed model (see :mod:`observer_ci.export_cache`)."""
    return export_key(
        entry.model,
        entry.observer,
        method_name=entry.method_name,
        set_batch_dimension_for=entry.set_batch_dimension_for,
        opset=DEFAULT_OPSET,
    )


def _save_feeds(
    entry: registry.ObservedModel, session: object, onnx_path: Path, config: RunConfig
) -> str | None:
    """The onnxruntime inputs of every observed call, for :mod:`observer_ci.paired`, within
    ``config.feeds_max_bytes``; a note when some or all were not saved."""
    from observer_ci.paired import save_feeds_within
    from observer_ci.replay import match_feeds

    obs = entry.observer
    onnx_inputs = [i.name for i in session.get_inputs()]  # type: ignore[attr-defined]
    try:
        feeds = [
            match_feeds(onnx_inputs, obs.leaf_names(), obs.infer_arguments(i, flat=True))
            for i in range(obs.num_obs())
        ]
        note = save_feeds_within(feeds, onnx_path, config.feeds_max_bytes)
    except Exception as e:  # paired timing then says why it has no inputs
        note = f"inputs not saved for paired timing: {error_tail(e)}"
    if note:
        progress_line(f"{entry.name}: {note}")
    return note


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
