"""Workflow commands and files: annotations, the job summary, step outputs.

Every text written as a workflow command goes through :func:`workflow_escape`, so a
newline in untrusted text cannot start a command of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from observer_ci.constants import STEP_SUMMARY_MAX_BYTES
from observer_ci.rules import Regression

MAX_ANNOTATIONS = 10  # per level; GitHub shows at most 10 of each per step anyway


def command(level: str, message: str, *, title: str = "observer-ci") -> None:
    """Prints one ``::error``/``::warning``/``::notice`` workflow command."""
    print(
        f"::{level} title={workflow_escape(title, prop=True)}::{workflow_escape(message)}",
        flush=True,
    )


def write_summary(path: str, report: str) -> None:
    """Appends the report to the job summary file (cut to GitHub's 1 MiB limit)."""
    if not path:
        return
    text = report
    if len(text.encode("utf-8")) > STEP_SUMMARY_MAX_BYTES:
        text = render_cut(report, STEP_SUMMARY_MAX_BYTES)
    with open(path, "a", encoding="utf-8") as f:
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
        command(level, r.message, title=f"observer-ci: {r.model}: {r.rule}")
    for level, count in shown.items():
        if count > MAX_ANNOTATIONS:
            command(level, f"{count - MAX_ANNOTATIONS} more {level}s: see the report")


def workflow_escape(text: str, *, prop: bool = False) -> str:
    """Escapes a workflow command's message (``prop=False``) or property value."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def write_outputs(path: str, outputs: Mapping[str, str]) -> None:
    """Appends step outputs to ``GITHUB_OUTPUT`` with random heredoc delimiters."""
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        for key, value in outputs.items():
            delimiter = f"ghadelim_{uuid.uuid4().hex}"
            f.write(f"{key}<<{delimiter}\n{value}\n{delimiter}\n")
