"""The GitHub Action: run, compare, write results, summary and outputs, then post.

Order matters: ``results.json`` and ``report.md`` are on disk, and the job summary
written, before anything is posted, so a failed post never hides results.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

from observer_ci.constants import GITHUB_COMMENT_MAX_CHARS, STEP_SUMMARY_MAX_BYTES
from observer_ci.github import pr_number_from_event, repo_from_env, upsert_sticky_comment
from observer_ci.github_client import GitHubClient, GitHubError
from observer_ci.report import render_report, write_report_files
from observer_ci.results import STATUS_SCRIPT_FAILED, ModelResult, RunResults
from observer_ci.rules import Regression, compare, parse_fail_on, parse_thresholds
from observer_ci.settings import Settings, SettingsError

FALLBACK_GITHUB_COMMENT_MAX_CHARS = 60000
MAX_ANNOTATIONS = 10  # per level; GitHub shows at most 10 of each per step anyway


def log(message: str) -> None:
    print(f"[observer-ci] {message}", file=sys.stderr, flush=True)


def main(env: Mapping[str, str] | None = None, *, dry_run: bool = False) -> int:
    """Runs the action; returns the process exit code (1 when a fail_on rule tripped)."""
    env = dict(os.environ if env is None else env)
    try:
        settings = Settings.from_env(env, dry_run=dry_run)
        thresholds = parse_thresholds(settings.thresholds)
        fail_on = parse_fail_on(settings.fail_on)
    except (SettingsError, ValueError) as e:
        print(f"::error title=observer-ci::{workflow_escape(str(e))}", flush=True)
        return 2
    out = Path(settings.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    install_error = run_install(settings)
    base = load_baseline(settings, out, notes, env) if not install_error else None
    head = run_scripts_subprocess(
        settings.scripts, out / "head", label="head", settings=settings, env=env
    )
    if install_error:
        head.models.insert(0, install_error)
    head.environment.setdefault("notes", []).extend(notes)
    regressions = compare(head, base, thresholds, fail_on)
    failed = any(r.fails_build for r in regressions)

    full = write_report_files(out, head, regressions, base, run_url=settings.run_url)
    log(f"wrote {out / 'results.json'} and {out / 'report.md'}")
    write_summary(settings, full)
    annotate(regressions)

    outputs = {
        "status": "failure" if failed else "success",
        "results_path": str(out / "results.json"),
        "report_path": str(out / "report.md"),
        "regressions": str(sum(r.fails_build for r in regressions)),
        "warnings": str(sum(not r.fails_build for r in regressions)),
    }
    outputs.update(post_comment(settings, head, regressions, base))
    write_outputs(settings, outputs)
    return 1 if failed else 0


def run_install(settings: Settings) -> ModelResult | None:
    """Runs the repository's install command; a failure becomes a result row."""
    if not settings.install:
        return None
    log(f"install: {settings.install}")
    try:
        proc = subprocess.run(
            settings.install,
            shell=True,
            capture_output=True,
            text=True,
            cwd=settings.workspace,
            env=without_tokens(os.environ),
            timeout=settings.timeout_minutes * 60,
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
    log(f"running {label}: {' '.join(scripts)}")
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            env=child_env,
            stdout=subprocess.PIPE,
            text=True,
            timeout=settings.timeout_minutes * 60,
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
    sha = base_commit(settings)
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


def base_commit(settings: Settings) -> str | None:
    try:
        event = json.loads(Path(settings.event_path).read_text(encoding="utf-8"))
        sha = event["pull_request"]["base"]["sha"]
        return str(sha) if sha else None
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if settings.base_ref:
        return f"origin/{settings.base_ref}"
    return None


def git(cwd: str, *args: str, check: bool = True) -> str:
    """Runs git; ``safe.directory`` because the action's container user differs from the
    checkout's owner (git refuses such repositories otherwise)."""
    cmd = ["git", "-c", "safe.directory=*", *args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def write_summary(settings: Settings, report: str) -> None:
    if not settings.step_summary:
        return
    text = report
    if len(text.encode("utf-8")) > STEP_SUMMARY_MAX_BYTES:
        text = render_cut(report, STEP_SUMMARY_MAX_BYTES)
    with open(settings.step_summary, "a", encoding="utf-8") as f:
        f.write(text + "\n")


def render_cut(report: str, limit_bytes: int) -> str:
    note = "\n\n…report cut to fit the job summary; the full report is in report.md.\n"
    budget = limit_bytes - len(note.encode("utf-8"))
    return report.encode("utf-8")[:budget].decode("utf-8", errors="ignore") + note


def annotate(regressions: list[Regression]) -> None:
    """Workflow annotations: errors for rules that fail the build, warnings for the rest."""
    shown = {"error": 0, "warning": 0}
    for r in regressions:
        level = "error" if r.fails_build else "warning"
        shown[level] += 1
        if shown[level] > MAX_ANNOTATIONS:
            continue
        title = workflow_escape(f"observer-ci: {r.model}: {r.rule}", prop=True)
        print(f"::{level} title={title}::{workflow_escape(r.message)}", flush=True)
    for level, count in shown.items():
        if count > MAX_ANNOTATIONS:
            print(
                f"::{level} title=observer-ci::{count - MAX_ANNOTATIONS} more {level}s: "
                "see the report",
                flush=True,
            )


def workflow_escape(text: str, *, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def write_outputs(settings: Settings, outputs: Mapping[str, str]) -> None:
    if not settings.output_path:
        return
    with open(settings.output_path, "a", encoding="utf-8") as f:
        for key, value in outputs.items():
            delimiter = f"ghadelim_{uuid.uuid4().hex}"
            f.write(f"{key}<<{delimiter}\n{value}\n{delimiter}\n")


def post_comment(
    settings: Settings,
    head: RunResults,
    regressions: list[Regression],
    base: RunResults | None,
) -> dict[str, str]:
    """Posts or updates the sticky comment; any failure is a warning, never a lost result."""
    if not settings.comment:
        return {"comment": "disabled"}
    if settings.dry_run:
        log("dry run: not posting")
        return {"comment": "dry-run"}
    try:
        pr = pr_number_from_event(settings.event_path) if settings.event_path else None
    except (OSError, ValueError) as e:
        print(f"::warning title=observer-ci::unreadable event file: {workflow_escape(str(e))}")
        return {"comment": "failed"}
    if pr is None:
        log("not a pull request event: no comment")
        return {"comment": "not-a-pull-request"}
    if not settings.token:
        print("::warning title=observer-ci::no token: the report is in the job summary only")
        return {"comment": "no-token"}
    try:
        posted = _upsert_fitting(settings, head, regressions, base, pr)
    except GitHubError as e:
        kind = "forbidden" if e.status == 403 else "failed"
        hint = " (a pull request from a fork gets a read-only token)" if e.status == 403 else ""
        print(
            f"::warning title=observer-ci::could not post the PR comment{hint}: "
            f"{workflow_escape(str(e))}; the report is in the job summary and report.md",
            flush=True,
        )
        return {"comment": kind}
    except Exception as e:  # a failed post must never hide the results already written
        print(
            f"::warning title=observer-ci::could not post: {type(e).__name__}: "
            f"{workflow_escape(str(e))}",
            flush=True,
        )
        return {"comment": "failed"}
    log(f"comment {posted.action}: {posted.html_url}")
    return {"comment": posted.action, "comment_url": posted.html_url}


def _upsert_fitting(
    settings: Settings,
    head: RunResults,
    regressions: list[Regression],
    base: RunResults | None,
    pr: int,
):
    """Posts the report; on 422 (too long by GitHub's count) once more, clearly shorter."""
    owner, repo = repo_from_env(settings.repository)
    client = GitHubClient(settings.github_api_url, settings.token)
    body = render_report(
        head, regressions, base, max_chars=GITHUB_COMMENT_MAX_CHARS, run_url=settings.run_url
    )
    try:
        return upsert_sticky_comment(client, owner, repo, pr, body)
    except GitHubError as e:
        if e.status != 422:
            raise
        log(f"comment rejected ({e.message}); retrying with a shorter report")
    limit = min(FALLBACK_GITHUB_COMMENT_MAX_CHARS, len(body) * 3 // 4)
    body = render_report(head, regressions, base, max_chars=limit, run_url=settings.run_url)
    return upsert_sticky_comment(client, owner, repo, pr, body)
