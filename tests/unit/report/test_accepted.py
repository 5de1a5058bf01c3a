"""The accept section's one renderer: report.md (write_report_files) and the comment share it;
without acceptances nothing is rendered."""

from __future__ import annotations

from observer_ci.report.accepted import ACCEPTED_TITLE, accepted_section
from observer_ci.report.markdown import render_report, write_report_files
from tests.support.builders import model, run

LINES = ["node\\_count\\_growth on net: accepted by @maint (label, 2026-12-04T00:00:00Z)"]


def test_the_section_lists_each_acceptance_and_is_empty_without_any():
    assert accepted_section([]) == ""
    text = accepted_section([*LINES, "refused: @reader has read permission"])
    assert text.startswith(f"{ACCEPTED_TITLE}\n\n- {LINES[0]}\n- refused:")


def test_report_md_carries_the_section_after_the_regressions_and_only_when_given(tmp_path):
    head = run(model("net"))
    section = accepted_section(LINES)
    report = write_report_files(tmp_path, head, [], accepted=section)
    assert report == (tmp_path / "report.md").read_text(encoding="utf-8")
    assert section in report and report.count(ACCEPTED_TITLE) == 1
    assert report.index(section) < report.index("net", report.index(section) + len(section))
    assert ACCEPTED_TITLE not in render_report(head, [], max_chars=None)
