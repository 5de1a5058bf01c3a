"""The GitHub Action: settings -> workspace -> rules -> report -> workflow -> comment.

Order matters: ``results.json`` and ``report.md`` are on disk, and the job summary
written, before anything is posted, so a failed post never hides results.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from observer_ci import workflow
from observer_ci.github import post_report
from observer_ci.logs import configure, logger
from observer_ci.report import render_report, write_report_files
from observer_ci.rules import compare
from observer_ci.settings import Settings, SettingsError
from observer_ci.workspace import load_baseline, run_install, run_scripts_subprocess

EXIT_USAGE = 2


def main(env: Mapping[str, str] | None = None, *, dry_run: bool = False) -> int:
    """Runs the action; returns the process exit code (1 when a fail_on rule tripped)."""
    configure()
    env = dict(os.environ if env is None else env)
    try:
        settings = Settings.from_env(env, dry_run=dry_run)
    except SettingsError as e:
        workflow.command("error", str(e))
        return EXIT_USAGE
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
    failed = any(r.fails_build for r in regressions)

    full = write_report_files(out, head, regressions, base, run_url=settings.run_url)
    logger.info("wrote %s and %s", out / "results.json", out / "report.md")
    workflow.write_summary(settings.step_summary, full)
    workflow.annotate(regressions)

    outputs = {
        "status": "failure" if failed else "success",
        "results_path": str(out / "results.json"),
        "report_path": str(out / "report.md"),
        "regressions": str(sum(r.fails_build for r in regressions)),
        "warnings": str(sum(not r.fails_build for r in regressions)),
    }

    def render(max_chars: int) -> str:
        return render_report(head, regressions, base, max_chars=max_chars, run_url=settings.run_url)

    outputs.update(post_report(settings, render))
    workflow.write_outputs(settings.output_path, outputs)
    return 1 if failed else 0
