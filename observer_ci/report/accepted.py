"""The accept section: who accepted which regression, and when (one renderer for report.md,
the job summary, the comment and the check run; :mod:`observer_ci.action.accept` makes the
lines, already escaped)."""

from __future__ import annotations

from collections.abc import Sequence

ACCEPTED_TITLE = "### Accepted regressions"


def accepted_section(lines: Sequence[str]) -> str:
    """The Markdown list of ``lines`` under :data:`ACCEPTED_TITLE`; "" without any."""
    if not lines:
        return ""
    return f"{ACCEPTED_TITLE}\n\n" + "\n".join(f"- {line}" for line in lines) + "\n"
