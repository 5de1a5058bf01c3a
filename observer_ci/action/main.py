"""The GitHub Action: settings -> workspace -> rules -> report -> workflow -> comment.

Order matters: ``results.json`` and ``report.md`` are on disk, and the job summary
written, before anything is posted, so a failed post never hides results.

Exit codes (:mod:`observer_ci.core.constants`): 0 fine, 1 a ``fail_on`` rule tripped, 2 a bad
input (also in the job summary), 3 observer-ci itself failed: it then still writes what
it has (results, report, summary, outputs with ``status=error``) and says so.
"""

from __future__ import annotations

import signal
import sys
import traceback
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from observer_ci.action import reaper
from observer_ci.action.artifact import Payload, write_payload
from observer_ci.action.check_run import SUMMARY_MAX_CHARS, CheckRun
from observer_ci.action.comment import RenderReport, post_report
from observer_ci.action.history import load_history, record_history, workspace_settings
from observer_ci.action.isolation import secure_environment
from observer_ci.action.seal import Seal
from observer_ci.action.settings import MODE_PUBLISH, Settings, SettingsError
from observer_ci.action.verdict import accept_in_run, with_section
from observer_ci.action.workspace import (
    phase_findings,
    run_base_and_head,
    run_install,
    run_scripts_subprocess,
)
from observer_ci.core import workflow_commands as workflow
from observer_ci.core.constants import (
    BUNDLES_ARTIFACT,
    EXIT_INTERNAL_ERROR,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
    GATE_BAD_INPUT,
    GATE_ERROR,
    GATE_FAILURE,
    GATE_SUCCESS,
)
from observer_ci.core.logs import configure, logger
from observer_ci.core.results import ModelResult, RunResults
from observer_ci.github.client import GitHubClient
from observer_ci.report.escape import code_block
from observer_ci.report.history import trend_section
from observer_ci.report.markdown import render_report, report_files, write_report_files
from observer_ci.report.rules import Regression, compare

__all__ = ["EXIT_INTERNAL_ERROR", "EXIT_OK", "EXIT_REGRESSION", "EXIT_USAGE", "main"]

# Outputs renamed (old name -> new name): still written, until the next release.
DEPRECATED_OUTPUTS = {"comment": "comment_status"}


@dataclass
class _Progress:
    """What the run has produced so far: written out even when a later step crashes."""

    head: RunResults | None = None
    base: RunResults | None = None
    regressions: list[Regression] = field(default_factory=list)
    results_written: bool = False
    summary_written: bool = False
    outputs: dict[str, str] = field(default_factory=dict)


def main(
    env: Mapping[str, str] | None = None, *, dry_run: bool = False, handle_sigterm: bool = False
) -> int:
    """Runs the action; returns the process exit code (see the module docstring).

    With ``env=None`` (the real action) the process first drops every secret from its
    environment (:func:`observer_ci.action.isolation.secure_environment`; this re-executes it)
    and, as with ``handle_sigterm``, unwinds on SIGTERM (:func:`exit_on_sigterm`) and becomes
    the subreaper of what it starts (:func:`observer_ci.action.reaper.arm`).
    """
    if env is None:
        env = secure_environment()
        handle_sigterm = True
    if handle_sigterm:
        exit_on_sigterm()
        reaper.arm()  # the action's own process: every orphan below it is ours to sweep
    env = dict(env)
    configure()
    try:
        settings = Settings.from_env(env, dry_run=dry_run)
        settings.check_scripts()
    except SettingsError as e:
        return _bad_input(env, str(e))
    except Exception as e:  # a bug while reading the settings: nowhere known to write to
        output, summary = env.get("GITHUB_OUTPUT", ""), env.get("GITHUB_STEP_SUMMARY", "")
        known = Settings(scripts=[], output_path=output, step_summary=summary)
        return _internal_error(known, _Progress(), e)
    progress = _Progress()
    try:
        for message in settings.deprecations:
            workflow.command("warning", message)
        if settings.mode == MODE_PUBLISH:
            from observer_ci.action.publish import publish

            return publish(settings, github_client(settings))
        if settings.rejudges:  # an accept command: re-judge, run nothing
            from observer_ci.action.verdict import rejudge

            return rejudge(settings, github_client(settings))
        return run(settings, env, progress)
    except SettingsError as e:  # the scripts are still missing once install ran
        return _bad_input(env, str(e))
    except Exception as e:  # a bug of ours: say so, keep what exists, exit 3 (not 1)
        return _internal_error(settings, progress, e)


def _bad_input(env: Mapping[str, str], message: str) -> int:
    """A usage mistake: an error line, a note in the job summary, ``status=bad-input``, exit 2."""
    summary = env.get("GITHUB_STEP_SUMMARY", "")
    workflow.command("error", message)
    _best_effort(lambda: _summary_note(summary, "❌ observer-ci: bad input", message))
    outputs = {"status": GATE_BAD_INPUT}
    _best_effort(lambda: workflow.write_outputs(env.get("GITHUB_OUTPUT", ""), outputs))
    return EXIT_USAGE


def run(settings: Settings, env: Mapping[str, str], progress: _Progress | None = None) -> int:
    """Run mode: install, head (and base) runs, rules, report, payload, comment."""
    progress = progress if progress is not None else _Progress()
    out = Path(settings.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    if settings.event.warning:
        notes.append(f"{settings.event.warning}: no pull request known, no comment posted")
    install_error = run_install(settings, env)
    if install_error is None:
        settings.check_scripts(installed=True)  # install may have created them
    # the history is fetched and read beside the head run (it needs nothing of it): its
    # downloads and the pandas import cost no wall time; its notes keep their place
    history_notes: list[str] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="observer-ci-history") as pool:
        pending = pool.submit(load_history, settings, github_client, out, history_notes)
        settings, asked = workspace_settings(settings), settings
        check = CheckRun(settings)
        check.start(github_client(settings))
        run_notes: list[str] = []
        base, head = _run_untrusted(settings, out, run_notes, env, install_error)
        history = pending.result()
    notes.extend(history_notes + run_notes)
    progress.base = base
    progress.head = head
    head.commit = head.commit or settings.head_sha
    if base is not None and settings.baseline == "base":
        base.commit = base.commit or settings.base_commit or ""
    head.environment.setdefault("notes", []).extend(notes)
    base = base if base is not None or history is None else history.latest
    bands = history.bands if history is not None else None
    regressions = compare(head, base, settings.thresholds, settings.fail_on, settings.policy, bands)
    accepted = accept_in_run(settings, github_client(settings), regressions)
    regressions = accepted.regressions if accepted is not None else regressions
    progress.regressions = regressions
    trend = trend_section(history, head) if history is not None else ""
    outputs, render = write_and_summarise(
        settings,
        head,
        base,
        regressions,
        settings.label,
        progress=progress,
        trend=trend,
        accepted=accepted.visible() if accepted is not None else "",
    )
    render = with_section(render, accepted)  # the comment's: the section and its ledger
    recorded = record_history(asked, head)
    if recorded is not None:
        outputs["history_path"] = str(recorded)
    bundles = out / "head" / "bundles"
    if bundles.is_dir():  # the workflow uploads it as bundles_artifact
        outputs["bundles_path"] = str(bundles)
        # one artifact name per matrix leg (a run's artifact names are unique)
        leg = f"-{settings.label}" if settings.label else ""
        outputs["bundles_artifact"] = BUNDLES_ARTIFACT + leg
    seal = Seal.of(out / name for name in ("results.json", "base-results.json", "report.md"))
    for note in notes:
        workflow.command("warning", note)
    progress.outputs.update(outputs)
    outputs.update(_write_payload(settings, head, base))
    seal.add([Path(settings.payload_path)])
    seal.verify()  # unchanged before posting (nothing of the pull request's is alive now)
    outputs.update(post_report(settings, github_client(settings), render))
    summary = render(SUMMARY_MAX_CHARS)
    outputs.update(check.finish(github_client(settings), regressions, summary, head))
    progress.outputs.update(outputs)
    write_outputs(settings, outputs)
    seal.verify()
    return EXIT_REGRESSION if any(r.fails_build for r in regressions) else EXIT_OK


def _run_untrusted(
    settings: Settings,
    out: Path,
    notes: list[str],
    env: Mapping[str, str],
    install_error: ModelResult | None,
) -> tuple[RunResults | None, RunResults]:
    """The head (and base) runs after the install command (its failure, if any, is the first
    row): every phase of pull-request code, its processes swept and its writes to the step
    files undone (``phase_findings``)."""
    if install_error:
        base = None
        head = run_scripts_subprocess(
            settings.scripts, out / "head", label="head", settings=settings, env=env, notes=notes
        )
        head.models.insert(0, install_error)
    else:
        base, head = run_base_and_head(settings, out, notes, env)
    notes.extend(phase_findings())
    head.label = settings.label  # the children's "head" is no label of the user's
    return base, head


def _write_payload(settings: Settings, head: RunResults, base: RunResults | None) -> dict:
    """The payload for a later publish job: ``payload_path``, or a warning."""
    payload = Payload(
        pr_number=settings.pr_number,
        head_sha=settings.head_sha,
        run_id=settings.run_id,
        comment_key=settings.comment_key,
        label=settings.label,
        thresholds=settings.thresholds,
        fail_on=settings.fail_on,
    )
    try:
        return {"payload_path": str(write_payload(settings.payload_path, payload, head, base))}
    except OSError as e:  # the report is written already; only a later publish job misses it
        workflow.command("warning", f"could not write the payload to {settings.payload_path}: {e}")
        return {}


def github_client(settings: Settings) -> GitHubClient:
    """The job's one GitHub client, built when posting is next (its deadline starts now)."""
    return GitHubClient(settings.github_api_url, settings.token)


def write_and_summarise(
    settings: Settings,
    head: RunResults,
    base: RunResults | None,
    regressions: list[Regression],
    label: str,
    *,
    progress: _Progress | None = None,
    trend: str = "",
    accepted: str = "",
) -> tuple[dict[str, str], RenderReport]:
    """Writes results.json and report.md, the job summary and the annotations (all before
    anything is posted); returns the gate outputs and the comment renderer. ``accepted``
    (the accept section) goes into report.md and the summary; the comment's renderer leaves
    it to :func:`observer_ci.action.verdict.with_section`, which adds its ledger too."""
    out = Path(settings.out_dir)
    title = f"observer-ci ({label})" if label else "observer-ci"
    options: dict[str, Any] = {
        "run_url": settings.run_url,
        "title": title,
        "thresholds": settings.thresholds,
        "policy_lines": settings.policy.effective(
            [m.name for m in head.models], settings.thresholds
        ),
        "trend": trend,
    }
    full = write_report_files(out, head, regressions, base, accepted=accepted, **options)
    if progress is not None:
        progress.results_written = True
    logger.info("wrote %s", report_files(out, base))
    workflow.write_summary(settings.step_summary, full)
    if progress is not None:
        progress.summary_written = True
    workflow.annotate(regressions)
    outputs = {
        "status": GATE_FAILURE if any(r.fails_build for r in regressions) else GATE_SUCCESS,
        "results_path": str(out / "results.json"),
        "report_path": str(out / "report.md"),
        "regressions": str(sum(r.fails_build for r in regressions)),
        "warnings": str(sum(not r.fails_build for r in regressions)),
    }

    def render(max_chars: int) -> str:
        return render_report(head, regressions, base, max_chars=max_chars, **options)

    return outputs, render


def write_outputs(settings: Settings, outputs: dict[str, str]) -> None:
    """Writes the step outputs, the deprecated names too (same values)."""
    for old, new in DEPRECATED_OUTPUTS.items():
        if new in outputs:
            outputs[old] = outputs[new]
    workflow.write_outputs(settings.output_path, outputs)


def _internal_error(settings: Settings, progress: _Progress, error: Exception) -> int:
    """Reports a crash of observer-ci itself and writes whatever was produced."""
    what = f"{type(error).__name__}: {error}"
    with workflow.commands_stopped():  # the text may quote the repository's files
        traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()
    workflow.command(
        "error",
        f"observer-ci failed internally ({what}); what it produced so far is kept. "
        "Please report this with the log above.",
        title="observer-ci internal error",
    )
    out = Path(settings.out_dir)
    head = progress.head
    if head is not None and not progress.results_written:
        _best_effort(
            lambda: write_report_files(
                out, head, progress.regressions, progress.base, run_url=settings.run_url
            )
        )
    if not progress.summary_written:
        report = out / "report.md"
        _best_effort(
            lambda: _summary_note(
                settings.step_summary,
                "💥 observer-ci failed internally",
                what,
                report.read_text(encoding="utf-8") if report.is_file() else "",
            )
        )
    outputs = {**progress.outputs, "status": GATE_ERROR}
    if (out / "results.json").is_file():
        outputs.setdefault("results_path", str(out / "results.json"))
    _best_effort(lambda: write_outputs(settings, outputs))
    return EXIT_INTERNAL_ERROR


def exit_on_sigterm() -> None:
    """A cancelled job sends SIGTERM: unwind (``SystemExit``), so the running child's
    process group is killed too instead of being left running."""
    signal.signal(signal.SIGTERM, _exit_on_signal)


def _exit_on_signal(signum: int, frame: object) -> None:
    reaper.stop_everything()  # every child, base and head alike, and what they started
    raise SystemExit(128 + signum)


def _summary_note(path: str, headline: str, detail: str, report: str = "") -> None:
    """A short job summary for a run that could not produce its report."""
    if not path:
        return
    text = f"## {headline}\n\n{code_block(detail, 'Details', open_=True)}\n"
    workflow.write_summary(path, text + (f"\n{report}" if report else ""))


def _best_effort(step) -> None:
    try:
        step()
    except Exception as e:  # already failing: log it, keep going
        logger.error("while saving what exists: %s: %s", type(e).__name__, e)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(dry_run="--dry-run" in sys.argv[1:]))
