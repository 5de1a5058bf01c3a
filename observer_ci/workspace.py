"""The workspace: the repository's install command, the observation scripts in a child
process (``observer-ci run``; ``results.json`` is the contract), and the base commit in a
``git worktree`` for ``baseline: base``. Repository code never sees the token.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from observer_ci.logs import logger
from observer_ci.results import STATUS_SCRIPT_FAILED, ModelResult, RunResults
from observer_ci.settings import Settings


def run_install(settings: Settings) -> ModelResult | None:
    """Runs the repository's install command; a failure becomes a result row."""
    if not settings.install:
        return None
    logger.info("install: %s", settings.install)
    try:
        proc = subprocess.run(
            settings.install,
            shell=True,
            capture_output=True,
            text=True,
            cwd=settings.workspace,
            env=without_tokens(os.environ),
            timeout=settings.timeout_seconds,
        )
    except subprocess.TimeoutExpired:
        error = f"install command timed out after {settings.timeout_minutes:g} minutes"
    else:
        if proc.returncode == 0:
            return None
        tail = (proc.stdout + proc.stderr)[-3000:]
        error = f"install command exited with {proc.returncode}:\n{tail}"
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
    extra_args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
) -> RunResults:
    """Runs ``observer-ci run`` in a child process so a crashing script cannot take us down."""
    cwd = cwd or settings.workspace
    out.mkdir(parents=True, exist_ok=True)
    results_path = out.resolve() / "results.json"
    results_path.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "observer_ci",
        "run",
        *scripts,  # globs are expanded by the child, in its working directory
        "--out",
        str(out.resolve()),
        "--label",
        label,
        "--repeat",
        str(settings.repeat),
        # one tolerance set: the child's SUCCESS uses the thresholds the gate uses
        "--atol",
        repr(settings.thresholds.abs_max),
        "--rtol",
        repr(settings.thresholds.rel_max),
        "--no-gate",
        *(["--verbose"] if settings.verbose else []),
        *extra_args,
    ]
    child_env = without_tokens(os.environ if env is None else env)
    child_env.update(extra_env or {})
    if pythonpath:
        child_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (pythonpath, child_env.get("PYTHONPATH", "")) if p
        )
    logger.info("running %s: %s", label, " ".join(scripts))
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            env=child_env,
            stdout=subprocess.PIPE,
            text=True,
            timeout=settings.timeout_seconds,
        )
    except subprocess.TimeoutExpired:
        error = f"the scripts did not finish within timeout_minutes={settings.timeout_minutes:g}"
    else:
        if results_path.exists():
            try:
                return RunResults.read(results_path)
            except ValueError as e:
                error = f"results.json unreadable: {e}"
        else:
            error = f"the observer process exited with {proc.returncode} before writing results"
    return RunResults(
        label=label,
        models=[
            ModelResult(
                name=label, script=" ".join(scripts), status=STATUS_SCRIPT_FAILED, error=error
            )
        ],
    )


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def child_options(settings: Settings, threads: int | None = None) -> dict[str, Any]:
    """``extra_args``/``extra_env`` of :func:`run_scripts_subprocess`: the shared export cache,
    and a thread budget (torch, OpenMP, onnxruntime) when runs share the machine."""
    args: list[str] = []
    env: dict[str, str] = {}
    if settings.cache_dir:
        cache = Path(settings.cache_dir)
        cache = cache if cache.is_absolute() else Path(settings.workspace) / cache
        args += ["--cache-dir", str(cache.resolve())]  # base runs in another directory
    if threads:
        args += ["--threads", str(threads)]
        env.update({name: str(threads) for name in THREAD_VARIABLES})
    return {"extra_args": args, "extra_env": env}


def run_base_and_head(
    settings: Settings, out: Path, notes: list[str], env: Mapping[str, str] | None = None
) -> tuple[RunResults | None, RunResults]:
    """The base results (see :func:`load_baseline`) and the head results.

    With ``baseline: base``, base and head run side by side when the machine has two cores
    or more (each with half of them), else one after the other; then
    :mod:`observer_ci.paired` re-times both graphs of every model interleaved in one
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
    head_options["extra_args"].append("--save-feeds")

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
    try:
        subprocess.run(
            cmd,
            cwd=settings.workspace,
            env=without_tokens(os.environ if env is None else env),
            stdout=subprocess.PIPE,
            text=True,
            timeout=settings.timeout_seconds,
        )
        return RunResults.read(head_json)
    except (subprocess.TimeoutExpired, OSError, ValueError) as e:
        logger.warning("paired latency timing failed: %s", e)
        return None


def without_tokens(env: Mapping[str, str]) -> dict[str, str]:
    """The environment for repository code (install, scripts): it never needs the token,
    and whatever it prints ends up in the report."""
    return {k: v for k, v in env.items() if k not in ("INPUT_TOKEN", "GITHUB_TOKEN")}


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
            notes.append(f"baseline {settings.baseline!r} could not be read: {e}")
            return None
    sha = settings.base_commit
    if not sha:
        notes.append("baseline 'base' needs a pull_request event (no base commit found)")
        return None
    worktree = Path(tempfile.mkdtemp(prefix="observer-ci-base-"))
    try:
        git(settings.workspace, "fetch", "--no-tags", "--depth=1", "origin", sha, check=False)
        git(settings.workspace, "worktree", "add", "--detach", str(worktree), sha)
    except RuntimeError as e:
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
        )
    finally:
        git(settings.workspace, "worktree", "remove", "--force", str(worktree), check=False)
        shutil.rmtree(worktree, ignore_errors=True)


def git(cwd: str, *args: str, check: bool = True) -> str:
    """Runs git; ``safe.directory`` because the action's container user differs from the
    checkout's owner (git refuses such repositories otherwise)."""
    cmd = ["git", "-c", "safe.directory=*", *args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()[-500:]}")
    return proc.stdout
