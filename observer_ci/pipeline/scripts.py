"""Run observation scripts, each in turn, and process the models they observed."""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
import runpy
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path

from observer_ci.core.errors import ANSI_ESCAPE, traceback_tail
from observer_ci.core.journal import JournalWriter
from observer_ci.core.logs import log_failure, log_group, quiet_pipeline, quiet_third_party
from observer_ci.core.logs import progress as progress_line
from observer_ci.core.results import (
    STATUS_OBSERVE_FAILED,
    STATUS_SCRIPT_FAILED,
    STATUS_SKIPPED,
    ModelResult,
    RunResults,
)
from observer_ci.observing import registry
from observer_ci.pipeline.causes import (
    explain_script_error,
)
from observer_ci.pipeline.config import Progress, RunConfig
from observer_ci.pipeline.environment import environment_fingerprint
from observer_ci.pipeline.export_cache import forget_weight_digests
from observer_ci.pipeline.memory import process_peak
from observer_ci.pipeline.model_steps import process_model
from observer_ci.pipeline.script_state import ScriptState


def run_scripts(
    scripts: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    config: RunConfig | None = None,
    label: str = "",
    progress: Progress = progress_line,
    verbose: bool = False,
    journal: str | os.PathLike[str] | None = None,
    reverse_order: bool = False,
) -> RunResults:
    """Runs every script and checks every model it observed. Never raises for bad input.
    Third-party warnings stay quiet unless ``verbose``.

    With ``journal``, each script's rows are appended there as soon as it is done
    (:mod:`observer_ci.core.journal`), so a process killed mid-way loses only the running one.
    ``reverse_order`` processes the scripts last to first, the results keeping the given
    order: base and head side by side then start on different models, and a model neither
    changed is exported by the first to reach it and restored from the shared cache by the
    other instead of one waiting on the other's export.
    """
    config = config or RunConfig()
    out = Path(out_dir)
    results = RunResults(
        environment=environment_fingerprint(),
        label=label,
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        settings=config.recorded(),
    )
    order = [str(s) for s in scripts]
    if reverse_order:
        order.reverse()
    writer = JournalWriter(journal) if journal else None
    if writer:
        writer.begin(results, order)
    by_script: dict[int, list[ModelResult]] = {}
    with quiet_third_party(verbose):
        start = ScriptState.capture()  # every script starts from this, whatever one did before
        for position, script in sorted(
            enumerate(str(s) for s in scripts), key=lambda item: order.index(item[1])
        ):
            if writer:
                writer.start(script)
            models = run_script(
                script, out, config=config, progress=progress, state=start, verbose=verbose
            )
            by_script[position] = models
            if writer:
                writer.done(script, models)
    results.models = [m for position in sorted(by_script) for m in by_script[position]]
    for note in unmatched_skips(config, results.models):
        progress(note)
        results.environment.setdefault("notes", []).append(note)
    results.peak_rss_bytes = process_peak()
    return results


def unmatched_skips(config: RunConfig, models: Sequence[ModelResult]) -> list[str]:
    """A warning per ``skip`` of the policy file that matched no model of the run."""
    import fnmatch

    names = [m.name for m in models]
    return [
        f"policy file: skip {pattern!r} ({reason}) matched no model of this run; "
        "check the pattern against the model names"
        for pattern, reason in config.skipped
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names)
    ]


def run_script(
    script: str,
    out_dir: Path,
    *,
    config: RunConfig,
    progress: Progress = progress_line,
    state: ScriptState | None = None,
    verbose: bool = False,
) -> list[ModelResult]:
    """Executes one observation script, then processes what it registered; the script starts
    in ``state`` (default: the current one) and its models are processed in it (libraries
    quiet meanwhile unless ``verbose``)."""
    state = state or ScriptState.capture()
    progress(f"running {script}")
    forget_weight_digests()  # user code runs next: weights may change unseen
    registry.take_registered()
    failure: ModelResult | None = None
    begin = time.perf_counter()
    try:
        with log_group(f"observer-ci: script {script}"):
            _execute(script, state)
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
            headline = failure.cause.summary if failure.cause else type(e).__name__
            log_failure(
                f"{script} failed: {headline}", failure.error, f"{script}: traceback", progress
            )
    script_seconds = time.perf_counter() - begin
    entries = registry.take_registered()
    models = []
    with _heap_frozen():
        for entry in entries:
            # no group: one line per phase, a failure's raw text in a group of its own
            with quiet_pipeline(verbose):
                models.append(_process_safely(entry, out_dir, config=config, progress=progress))
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
    """``process_model`` whose unexpected errors become a result row (never a crash); a
    model the policy file skips is neither exported nor run: its row says why."""
    reason = config.skip_reason(entry.name)
    if reason is not None:
        progress(f"{entry.name}: skipped by the policy file ({reason})")
        return ModelResult(
            name=entry.name,
            script=entry.script,
            status=STATUS_SKIPPED,
            method_name=entry.method_name,
            n_observations=entry.observer.num_obs(),
            skip_reason=reason,
        )
    try:
        return process_model(entry, out_dir, config=config.for_model(entry.name), progress=progress)
    except Exception as e:
        log_failure(
            f"{entry.name}: observer-ci could not process this model ({type(e).__name__})",
            traceback_tail(e, 12),
            f"{entry.name}: traceback",
            progress,
        )
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
    start = next((i for i, f in enumerate(frames) if Path(f.filename).resolve() == target), None)
    if start is None:
        return traceback_tail(exc)
    lines = traceback.format_list(frames[start:][-max_frames:])
    lines += traceback.format_exception_only(type(exc), exc)
    return ANSI_ESCAPE.sub("", "Traceback (most recent call last):\n" + "".join(lines)).strip()


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


def _execute(script: str, state: ScriptState) -> None:
    with state.restored():
        _run_path(script)


def _run_path(script: str) -> None:
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
