"""The GitHub Action: settings -> workspace -> rules -> report -> workflow -> comment.

Order matters: ``results.json`` and ``report.md`` are on disk, and the job summary
written, before anything is posted, so a failed post never hides results.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from observer_ci import workflow
from observer_ci.artifact import Payload, write_payload
from observer_ci.github import RenderReport, post_report
from observer_ci.logs import configure, logger
from observer_ci.report import render_report, write_report_files
from observer_ci.results import RunResults
from observer_ci.rules import Regression, compare
from observer_ci.settings import MODE_PUBLISH, Settings, SettingsError
from observer_ci.workspace import load_baseline, run_install, run_scripts_subprocess

EXIT_USAGE = 2
# Outputs renamed (old name -> new name): still written, until the next release.
DEPRECATED_OUTPUTS = {"comment": "comment_status"}


def main(env: Mapping[str, str] | None = None, *, dry_run: bool = False) -> int:
    """Runs the action; returns the process exit code (1 when a fail_on rule tripped)."""
    configure()
    env = dict(os.environ if env is None else env)
    try:
        settings = Settings.from_env(env, dry_run=dry_run)
    except SettingsError as e:
        workflow.command("error", str(e))
        return EXIT_USAGE
    for message in settings.deprecations:
        workflow.command("warning", message)
    if settings.mode == MODE_PUBLISH:
        from observer_ci.publish import publish

        return publish(settings)
    return run(settings, env)


def run(settings: Settings, env: Mapping[str, str]) -> int:
    """Run mode: install, head (and base) runs, rules, report, payload, comment."""
    out = Path(settings.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    if settings.event.warning:
        notes.append(settings.event.warning)
    install_error = run_install(settings)
    base = load_baseline(settings, out, notes, env) if not install_error else None
    head = run_scripts_subprocess(
        settings.scripts, out / "head", label="head", settings=settings, env=env
    )
    if install_error:
        head.models.insert(0, install_error)
    head.environment.setdefault("notes", []).extend(notes)
    regressions = compare(head, base, settings.thresholds, settings.fail_on)
    outputs, render = write_and_summarise(settings, head, base, regressions, settings.label)
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
        outputs["payload_path"] = str(write_payload(settings.payload_path, payload, head, base))
    except OSError as e:  # the report is written already; only a later publish job misses it
        workflow.command("warning", f"could not write the payload to {settings.payload_path}: {e}")
    outputs.update(post_report(settings, render))
    write_outputs(settings, outputs)
    return 1 if any(r.fails_build for r in regressions) else 0


def write_and_summarise(
    settings: Settings,
    head: RunResults,
    base: RunResults | None,
    regressions: list[Regression],
    label: str,
) -> tuple[dict[str, str], RenderReport]:
    """Writes results.json and report.md, the job summary and the annotations (all before
    anything is posted); returns the gate outputs and the comment renderer."""
    out = Path(settings.out_dir)
    title = f"observer-ci ({label})" if label else "observer-ci"
    full = write_report_files(out, head, regressions, base, run_url=settings.run_url, title=title)
    logger.info("wrote %s and %s", out / "results.json", out / "report.md")
    workflow.write_summary(settings.step_summary, full)
    workflow.annotate(regressions)
    outputs = {
        "status": "failure" if any(r.fails_build for r in regressions) else "success",
        "results_path": str(out / "results.json"),
        "report_path": str(out / "report.md"),
        "regressions": str(sum(r.fails_build for r in regressions)),
        "warnings": str(sum(not r.fails_build for r in regressions)),
    }

    def render(max_chars: int) -> str:
        return render_report(
            head, regressions, base, max_chars=max_chars, title=title, run_url=settings.run_url
        )

    return outputs, render


def write_outputs(settings: Settings, outputs: dict[str, str]) -> None:
    """Writes the step outputs, the deprecated names too (same values)."""
    for old, new in DEPRECATED_OUTPUTS.items():
        if new in outputs:
            outputs[old] = outputs[new]
    workflow.write_outputs(settings.output_path, outputs)
