"""No untrusted text makes a live thing in the comment: every GFM construct that links,
references, mentions, pictures, footnotes or renders math is read from the rendered tokens
(tests/support/gfm.py: GitHub's cmark-gfm, math tokens, GitHub's text filters), for every
escaping function and every place a report puts untrusted text; our own links stay live."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from observer_ci.report.escape import (
    ZWJ,
    code_block,
    escape_cell,
    escape_html,
    escape_message,
    escape_text,
)
from observer_ci.report.markdown import render_report
from observer_ci.report.rules import DEFAULT_FAIL_ON, Thresholds, compare
from tests.golden.reports import BASE_SHA, HEAD_SHA, RUN_URL, render
from tests.support.builders import model, run
from tests.support.gfm import live
from tests.support.markdown import parse

# One of each: what GitHub would make live from plain text (each detected unescaped below).
CONSTRUCTS = [
    "#1234",
    "(#5)",
    "GH-1234",
    "gh-9",
    "octo/models#5",
    "deadbeef",
    "0123456789abcdef0123456789abcdef01234567",
    "octo/models@abcdef12",
    "http://evil.example/x",
    "https://evil.example",
    "ftp://evil.example",
    "www.evil.example",
    "a@evil.example",
    "mailto:a@evil.example",
    "$x$",
    "$$\\color{green}{ALL GREEN}$$",
    "$`x`$",
    "[^1] and\n\n[^1]: a note\n\n",  # a footnote needs its definition too
    ":white_check_mark:",
    ":+1:",
    "@octocat",
    "@org/team",
    "<https://evil.example>",
    "[x](https://evil.example)",
    "![x](https://evil.example/p.png)",
    "<img src=x>",
]
_FRAGMENTS = st.sampled_from(CONSTRUCTS + [" ", "`", "\\", "|", ":", "#", "$", "@", "\n", "x"])
untrusted = st.one_of(
    st.lists(_FRAGMENTS, max_size=8).map("".join),
    st.text(
        alphabet=st.sampled_from(list("#$@:/.w`\\[]^!()<>|-_ 0123456789abcdefGHx\n")), max_size=40
    ),
)
CONTEXTS = {
    "paragraph": lambda t: "Before.\n\n" + escape_text(t) + "\n\nAfter.\n",
    "table cell": lambda t: f"| a | b |\n|---|---|\n| {escape_cell(t)} | z |\n",
    "message with code spans": lambda t: f"| m |\n|---|\n| {escape_message(t)} |\n",
    # a summary label is one line (the report joins its words), as a blank line would end
    # the HTML block; a <pre> block ends only at </pre>, so a traceback keeps its lines
    "summary": lambda t: (
        f"<details><summary>{escape_html(' '.join(t.split()))}</summary>\n\nx\n\n</details>\n"
    ),
    "code block": lambda t: code_block(t, t) + "\n\nAfter.\n",
}


@pytest.mark.parametrize("construct", CONSTRUCTS)
def test_each_construct_is_live_unescaped_and_dead_escaped_everywhere(construct):
    assert live(f"see {construct} here\n"), construct  # the detector sees it
    for context, place in CONTEXTS.items():
        assert live(place(f"see {construct} here")) == [], (context, construct)


@settings(deadline=None, max_examples=200)
@given(untrusted)
def test_no_untrusted_text_makes_a_live_thing_in_any_context(text):
    for context, place in CONTEXTS.items():
        assert live(place(text)) == [], context


@settings(deadline=None, max_examples=100)
@given(untrusted)
def test_the_reader_still_reads_the_text(text):
    def words(s: str) -> str:
        return " ".join(s.replace(ZWJ, "").split())

    cell = parse(f"| a |\n|---|\n| {escape_cell(text, newline=' ')} |\n").cell_text[1]
    assert words(cell) == words(text.replace("\r", ""))


def test_a_sha_is_broken_every_six_hex_digits_and_nothing_else_changes():
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert escape_cell(sha).split(ZWJ) == [sha[i : i + 6] for i in range(0, 40, 6)]
    assert escape_cell("abcdef 123456 0x7f4f3a8ce830 coffee") == (
        "abcdef 123456 0x7f4f3a8ce830 coffee"  # 6 digits, or a hex number's tail: no commit
    )


def test_a_report_full_of_references_links_only_our_run_and_commits():
    text = render("failing")  # its model names, errors and causes hold constructs
    commit = f"https://github.com/octo/models/commit/{HEAD_SHA}"
    assert live(text) == [("link", commit), ("link", RUN_URL)]
    baseline = render("with_baseline")
    assert ("link", f"https://github.com/octo/models/commit/{BASE_SHA}") in live(baseline)
    hostile = " ".join(CONSTRUCTS)
    head = run(model(hostile, notes=[hostile], error=hostile, script=hostile))
    report = render_report(
        head, compare(head, None, Thresholds(), set(DEFAULT_FAIL_ON)), run_url=RUN_URL
    )
    assert live(report) == [("link", RUN_URL)]
