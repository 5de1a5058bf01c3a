"""The workspace: the repository's install command, the observation scripts in child
processes (``observer-ci run``; ``results.json`` and the run journal are the contract), and
the base commit in a ``git worktree`` for ``baseline: base``.

Repository code runs only in children (:func:`run_isolated`): each in its own session
(a hang is killed with everything it started; what it left running, daemons included, is
swept when it ends: :mod:`observer_ci.action.reaper`), with an environment cleaned of every
secret and step file (:func:`untrusted_environment`), the runner's step files put back as
they were when it ends (:mod:`observer_ci.action.step_files`), its output forwarded to the
job log inside a stop-commands guard. git runs only through :mod:`observer_ci.action.git_safe`.
A script that hangs, calls ``os._exit`` or is
killed (OOM) loses only its own rows: the journal keeps the finished scripts' rows and
a new child runs the scripts not started yet.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from observer_ci.action import git_safe, reaper, step_files
from observer_ci.action.child_run import child_command, child_run_options
from observer_ci.action.isolation import without_secrets
from observer_ci.action.settings import Settings
from observer_ci.core import workflow_commands as workflow
from observer_ci.core.journal import JournalState, read_journal
from observer_ci.core.logs import GROUPS_VARIABLE, logger
from observer_ci.core.results import STATUS_SCRIPT_FAILED, ModelResult, RunResults
from observer_ci.core.run_options import RunOptions

# The observer child imports torch before the first script starts and writes its files
# after the last one: those phases get this much on top of ``timeout_minutes``.
STARTUP_ALLOWANCE_S = 120.0
OUTPUT_TAIL_CHARS = 3000
_POLL_S = 0.1


@dataclass
class ChildOutcome:
    """How a child process ended."""

    returncode: int | None  # None: killed at the timeout
    timed_out: bool
    output_tail: str  # the last characters it printed (stdout and stderr)
    seconds: float

    def describe(self, what: str, timeout_minutes: float) -> str:
        """Why ``what`` has no rows, for a result row."""
        if self.timed_out:
            why = (
                f"{what} did not finish within timeout_minutes={timeout_minutes:g} "
                "(stopped, with the processes it started)"
            )
        elif self.returncode is not None and self.returncode < 0:
            name = _signal_name(-self.returncode)
            hint = " (the out-of-memory killer sends SIGKILL)" if name == "SIGKILL" else ""
            why = f"the observer process was killed by {name} while running {what}{hint}"
        else:
            why = f"the observer process exited with {self.returncode} while running {what}"
        tail = self.output_tail.strip()
        return f"{why}\nlast output:\n{tail[-1500:]}" if tail else why


def run_isolated(
    cmd: Sequence[str] | str,
    *,
    cwd: str,
    env: Mapping[str, str],
    timeout_s: float,
    shell: bool = False,
    progressed: Callable[[], float | None] | None = None,
    startup_s: float = 0.0,
) -> ChildOutcome:
    """Runs repository code: clean environment, own process group, output forwarded to
    the job log inside the stop-commands guard; killed (with its group) when its time is
    up: ``timeout_s + startup_s`` at first, then whatever ``progressed()`` returns when it
    returns a number (a new period, from now). When it ends, its group is killed, every process
    it left is swept (:func:`observer_ci.action.reaper.sweep`) and the step files are put back
    (:func:`observer_ci.action.step_files.guarded`), in that order."""
    begin = time.monotonic()
    tail = bytearray()
    with workflow.commands_stopped(), step_files.guarded(env):
        # leaving: the child's group killed, what it left swept, then the step files put back
        with reaper.tracked(
            cmd,
            shell=shell,
            cwd=cwd,
            env=untrusted_environment(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        ) as proc:
            reader = threading.Thread(target=_forward, args=(proc, tail), daemon=True)
            reader.start()
            timed_out = _wait(proc, begin + timeout_s + startup_s, progressed)
        reader.join(timeout=5)
        with contextlib.suppress(OSError):
            proc.stdout.close()  # type: ignore[union-attr]
    return ChildOutcome(
        returncode=None if timed_out else proc.returncode,
        timed_out=timed_out,
        output_tail=bytes(tail).decode("utf-8", errors="replace"),
        seconds=time.monotonic() - begin,
    )


def _wait(
    proc: subprocess.Popen, deadline: float, progressed: Callable[[], float | None] | None
) -> bool:
    """Waits for ``proc``; kills its group and returns True when its time is up."""
    while True:
        try:
            proc.wait(timeout=_POLL_S)
            return False
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        period = progressed() if progressed is not None else None
        if period is not None:
            deadline = now + period
        if now > deadline:
            reaper.kill_group(proc)
            proc.wait()
            return True


def _forward(proc: subprocess.Popen, tail: bytearray) -> None:
    fd = proc.stdout.fileno()  # type: ignore[union-attr]
    output = workflow.ChildOutput()  # its group markers fold the log
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            output.close()
            return
        output.feed(chunk)
        tail.extend(chunk)
        del tail[: max(0, len(tail) - OUTPUT_TAIL_CHARS * 4)]


def untrusted_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What the repository's code gets: no secret, no step file (:mod:`step_files`)."""
    return step_files.without_file_commands(without_secrets(env))


def phase_findings() -> list[str]:
    """For the report: what the repository's code did that was undone (step files written,
    processes left running), since the last call."""
    notes = [
        f"the pull request's code wrote to this step's {name} file; what it wrote was undone"
        for name in step_files.take_undone()
    ]
    swept = reaper.take_swept()
    if swept:
        notes.append(
            f"the pull request's code left {swept} process(es) running after its phase "
            "(a daemon?): killed before the results were read"
        )
    return notes


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def run_install(settings: Settings, env: Mapping[str, str] | None = None) -> ModelResult | None:
    """Runs the repository's install command; a failure becomes a result row."""
    if not settings.install:
        return None
    logger.info("install: %s", settings.install)
    outcome = run_isolated(
        settings.install,
        shell=True,
        cwd=settings.workspace,
        env=os.environ if env is None else env,
        timeout_s=settings.timeout_seconds,
    )
    if outcome.timed_out:
        error = f"install command timed out after {settings.timeout_minutes:g} minutes"
    elif outcome.returncode == 0:
        return None
    else:
        error = f"install command exited with {outcome.returncode}:\n{outcome.output_tail}"
    return ModelResult(
        name="install", script=settings.install, status=STATUS_SCRIPT_FAILED, error=error
    )


def run_scripts_subprocess(
    scripts: list[str],
    out: Path,
    *,
    label: str,
    settings: Settings,
    cwd: str | None = None,
    pythonpath: str | None = None,
    env: Mapping[str, str] | None = None,
    options: RunOptions | None = None,
    extra_env: Mapping[str, str] | None = None,
    notes: list[str] | None = None,
) -> RunResults:
    """Runs ``observer-ci run`` in child processes so a crashing script cannot take us
    down, nor the other scripts' rows: after a crash the scripts not started yet run in
    a new child. Each script may take ``timeout_minutes``. Writes the combined
    ``out/results.json``; problems reading what a child wrote go to ``notes``."""
    cwd = cwd or settings.workspace
    out.mkdir(parents=True, exist_ok=True)
    notes = notes if notes is not None else []
    child_env = dict(os.environ if env is None else env)
    child_env["PYTHONUNBUFFERED"] = "1"
    if child_env.get("GITHUB_ACTIONS") == "true":
        child_env[GROUPS_VARIABLE] = "markers"  # its log groups, folded by _forward
    child_env.update(extra_env or {})
    # the child must run this very observer_ci (the journal is a contract between the two)
    paths = (pythonpath, child_env.get("PYTHONPATH", ""), _own_source_root())
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    pending = list(scripts)  # globs are expanded by the child, in its working directory
    models: list[ModelResult] = []
    header: RunResults | None = None
    while pending:
        logger.info("running %s: %s", label, " ".join(pending))
        outcome, state, final = _observer_child(
            pending, out, label, settings, cwd, child_env, options
        )
        header = header or final or state.header
        if final is not None:
            models.extend(final.models)
            break
        models.extend(state.models)
        notes.extend(f"{label}: {problem}" for problem in state.problems)
        if state.scripts is None or not (state.done or state.running):
            # died before its first script started: nothing to recover, nothing to retry
            what = " ".join(pending)
            models.append(_failure(label, what, outcome.describe(what, settings.timeout_minutes)))
            break
        if state.running is not None:
            why = outcome.describe(state.running, settings.timeout_minutes)
            models.append(_failure(Path(state.running).stem, state.running, why))
        elif outcome.returncode == 0:
            notes.append(
                f"{label}: the observer's results.json was missing or unreadable; "
                "the rows were recovered from its journal"
            )
        pending = state.not_started
    results = RunResults(
        models=models,
        environment=dict(header.environment) if header else {},
        label=label,
        created_at=header.created_at if header else "",
    )
    results.write(out / "results.json")
    return results


def _observer_child(
    scripts: list[str],
    out: Path,
    label: str,
    settings: Settings,
    cwd: str,
    env: Mapping[str, str],
    options: RunOptions | None = None,
) -> tuple[ChildOutcome, JournalState, RunResults | None]:
    """One ``observer-ci run`` child; its complete results if it finished cleanly."""
    results_path = out.resolve() / "results.json"
    journal = out.resolve() / "journal.jsonl"
    results_path.unlink(missing_ok=True)
    journal.unlink(missing_ok=True)
    options = options or child_run_options(settings)
    cmd = child_command(options, scripts, out.resolve(), label, journal)
    seen = {"size": -1}
    timeout_s = settings.timeout_seconds

    def progressed() -> float | None:
        """On a new journal line: a script's own time while it runs, else the allowance."""
        try:
            size = journal.stat().st_size
        except OSError:
            return None
        if size == seen["size"]:
            return None
        seen["size"] = size
        running = read_journal(journal).running is not None
        return timeout_s if running else timeout_s + STARTUP_ALLOWANCE_S

    outcome = run_isolated(
        cmd,
        cwd=cwd,
        env=env,
        timeout_s=timeout_s,
        progressed=progressed,
        startup_s=STARTUP_ALLOWANCE_S,
    )
    state = read_journal(journal)
    final = None
    if outcome.returncode == 0 and results_path.exists():
        try:
            final = RunResults.read(results_path)
        except ValueError as e:
            state.problems.append(f"results.json unreadable: {e}")
    return outcome, state, final


def _own_source_root() -> str:
    """The directory holding this ``observer_ci`` package when it is not installed in a
    site directory (a checkout, an editable install), else ""."""
    root = Path(__file__).resolve().parent.parent
    sites = [*site.getsitepackages(), site.getusersitepackages()]
    return "" if any(root == Path(d).resolve() for d in sites) else str(root)


def _failure(name: str, script: str, error: str) -> ModelResult:
    return ModelResult(name=name, script=script, status=STATUS_SCRIPT_FAILED, error=error)


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def child_options(settings: Settings, threads: int | None = None) -> dict[str, Any]:
    """``options``/``extra_env`` of :func:`run_scripts_subprocess`: the children's run options
    (:func:`observer_ci.action.child_run.child_run_options`), and a thread budget (torch,
    OpenMP, onnxruntime) when runs share the machine."""
    env: dict[str, str] = {}
    if threads:
        env.update({name: str(threads) for name in THREAD_VARIABLES})
    return {"options": child_run_options(settings, threads), "extra_env": env}


def run_base_and_head(
    settings: Settings, out: Path, notes: list[str], env: Mapping[str, str] | None = None
) -> tuple[RunResults | None, RunResults]:
    """The base results (see :func:`load_baseline`) and the head results.

    With ``baseline: base``, base and head run side by side when the machine has two cores
    or more (each with half of them), else one after the other; then
    :mod:`observer_ci.pipeline.paired` re-times both graphs of every model interleaved in one
    process (``paired_latency``), so the latency rule compares like with like.
    """
    if settings.baseline != "base":
        base = load_baseline(settings, out, notes, env, **child_options(settings))
        head = run_scripts_subprocess(
            settings.scripts,
            out / "head",
            label="head",
            settings=settings,
            env=env,
            **child_options(settings),
        )
        return base, head
    cores = os.cpu_count() or 1
    threads = cores // 2 if cores >= 2 else None
    base_options = child_options(settings, threads)
    head_options = child_options(settings, threads)
    head_options["options"] = dataclasses.replace(head_options["options"], save_feeds=True)

    def run_head() -> RunResults:
        return run_scripts_subprocess(
            settings.scripts,
            out / "head",
            label="head",
            settings=settings,
            env=env,
            **head_options,
        )

    if threads:
        # base goes first to last, head last to first: they start on different models, and a
        # model neither changed is exported by one and restored from the cache by the other
        head_options["options"] = dataclasses.replace(head_options["options"], reverse_order=True)
        with ThreadPoolExecutor(max_workers=2) as pool:
            base_future = pool.submit(load_baseline, settings, out, notes, env, **base_options)
            head = run_head()
            base = base_future.result()
    else:
        base = load_baseline(settings, out, notes, env, **base_options)
        head = run_head()
    if base is not None:
        head = pair_latencies(settings, out, env) or head
    return base, head


def pair_latencies(
    settings: Settings, out: Path, env: Mapping[str, str] | None = None
) -> RunResults | None:
    """Runs ``observer-ci pair`` on the two results; the updated head results, or ``None``."""
    base_json, head_json = (
        out.resolve() / "base" / "results.json",
        out.resolve() / "head" / "results.json",
    )
    if not (base_json.is_file() and head_json.is_file()):
        return None
    cmd = [
        sys.executable,
        "-m",
        "observer_ci",
        "pair",
        str(base_json),
        str(head_json),
        "--rounds",
        str(settings.repeat),
    ]
    # the child imports from the workspace (python -m puts it first on sys.path): untrusted
    outcome = run_isolated(
        cmd,
        cwd=settings.workspace,
        env=os.environ if env is None else env,
        timeout_s=settings.timeout_seconds,
    )
    if outcome.returncode != 0:
        logger.warning(
            "paired latency timing failed: %s",
            outcome.describe("observer-ci pair", settings.timeout_minutes),
        )
        return None
    try:
        return RunResults.read(head_json)
    except (OSError, ValueError) as e:
        logger.warning("paired latency timing failed: %s", e)
        return None


def without_tokens(env: Mapping[str, str]) -> dict[str, str]:
    """The environment for repository code (kept name; see :func:`without_secrets`)."""
    return without_secrets(env)


def load_baseline(
    settings: Settings,
    out: Path,
    notes: list[str],
    env: Mapping[str, str] | None = None,
    **child: Any,
) -> RunResults | None:
    """The base results: a file, or the scripts run on the base commit in a git worktree."""
    if not settings.baseline:
        return None
    if settings.baseline != "base":
        try:
            return RunResults.read(settings.baseline)
        except (OSError, ValueError) as e:
            notes.append(
                f"baseline {settings.baseline!r} could not be read, so nothing was compared: "
                f"{e}; fix or regenerate that results.json"
            )
            return None
    sha = settings.base_commit
    if not sha:
        notes.append("baseline 'base' needs a pull_request event (no base commit found)")
        return None
    worktree = Path(tempfile.mkdtemp(prefix="observer-ci-base-"))
    git = functools.partial(git_safe.git, settings.workspace, timeout_s=settings.timeout_seconds)
    try:
        with contextlib.suppress(git_safe.GitError):  # the commit may be there already
            git("fetch", "--no-tags", "--depth=1", "origin", sha, check=False)
        git("worktree", "add", "--detach", str(worktree), sha)
    except git_safe.GitError as e:
        notes.append(f"base commit {sha[:12]} could not be checked out: {e}")
        shutil.rmtree(worktree, ignore_errors=True)
        return None
    try:
        return run_scripts_subprocess(
            settings.scripts,
            out / "base",
            label="base",
            settings=settings,
            cwd=str(worktree),
            pythonpath=str(worktree),
            env=env,
            **child,
            notes=notes,
        )
    finally:
        with contextlib.suppress(git_safe.GitError):
            git("worktree", "remove", "--force", str(worktree), check=False)
        shutil.rmtree(worktree, ignore_errors=True)
