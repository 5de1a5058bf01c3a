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
from collections.abc import Mapping
from pathlib import Path

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
        "--no-gate",
    ]
    child_env = without_tokens(os.environ if env is None else env)
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


def without_tokens(env: Mapping[str, str]) -> dict[str, str]:
    """The environment for repository code (install, scripts): it never needs the token,
    and whatever it prints ends up in the report."""
    return {k: v for k, v in env.items() if k not in ("INPUT_TOKEN", "GITHUB_TOKEN")}


def load_baseline(
    settings: Settings, out: Path, notes: list[str], env: Mapping[str, str] | None = None
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
