"""Escaping of untrusted text: safe as GitHub renders it, and still readable as raw Markdown."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from observer_ci.report.escape import (
    TRUNCATED_NOTE,
    ZWJ,
    code_block,
    escape_cell,
    escape_html,
    escape_text,
    neutralise_mentions,
    truncate,
)
from observer_ci.report.tables import markdown_table
from tests.support.markdown import MENTION_RE, parse

EVIL = "x|y<script>@octocat"
# Characters that matter to Markdown, HTML, tables, mentions and commands, plus any text.
_SPECIAL = "|<>&*_`[]()!~\\#-+=.:;@/ \n\t\r1aZé\u200d\x00\u202e"
untrusted = st.one_of(
    st.text(),
    st.text(alphabet=st.sampled_from(list(_SPECIAL)), max_size=40),
    st.lists(
        st.sampled_from(
            [
                "**b**",
                "_e_",
                "__init__",
                "`c`",
                "[l](http://e.x)",
                "<b>",
                "&lt;",
                "&#60;",
                "@me",
                "~~s~~",
                "\\",
                "\\|",
                "|",
                "\n",
                "\n\n",
                "    ",
                "# ",
                "- ",
                "1. ",
                "> ",
                "::",
                "/",
            ]
        ),
        max_size=8,
    ).map("".join),
)
_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")
_ALLOWED_IN_TABLE = {"table", "thead", "tbody", "tr", "th", "td", "br"}


def _words(text: str) -> str:
    """Text as a reader sees it: no control or zero-width joiner, whitespace collapsed."""
    text = _CONTROL_RE.sub("", text.replace("\r", "\n")).replace(ZWJ, "")
    return " ".join(text.split())


def _table(cell: str) -> str:
    return f"| a | b |\n|---|---|\n| {cell} | z |\n"


@settings(deadline=None, max_examples=150)
@given(untrusted)
def test_a_cell_adds_no_element_column_or_mention_and_reads_as_written(text):
    parsed = parse(_table(escape_cell(text)))
    assert set(parsed.tags) <= _ALLOWED_IN_TABLE, parsed.tags
    assert parsed.tables == [[2, 2]]  # header and one row, two cells each
    assert not MENTION_RE.search(parsed.all_text)
    one_line = parse(_table(escape_cell(text, newline=" ")))
    assert _words(one_line.cell_text[2]) == _words(text)  # the reader sees the original


@settings(deadline=None, max_examples=150)
@given(untrusted)
def test_a_paragraph_adds_no_element_or_mention_and_reads_as_written(text):
    parsed = parse("Before.\n\n" + escape_text(text) + "\n\nAfter.\n")
    assert set(parsed.tags) <= {"p", "br"}, parsed.tags
    assert not MENTION_RE.search(parsed.all_text)
    assert _words(parsed.all_text) == _words("Before. " + text + " After.")


@settings(deadline=None, max_examples=100)
@given(untrusted, untrusted)
def test_a_code_block_stays_one_closed_block(text, summary):
    parsed = parse(code_block(text, summary, max_chars=10_000) + "\n\nAfter.\n")
    assert parsed.tags == ["details", "summary", "pre", "p"], parsed.tags
    assert not MENTION_RE.search(parsed.all_text)
    assert _words(parsed.all_text) == _words(f"{summary} {text} After.")


@settings(deadline=None, max_examples=60)
@given(st.lists(st.lists(untrusted, min_size=3, max_size=3), min_size=1, max_size=4))
def test_a_table_keeps_its_column_count(rows):
    parsed = parse(markdown_table(["x", "y", "z"], rows))
    assert parsed.tables == [[3] * (len(rows) + 1)]
    assert set(parsed.tags) <= _ALLOWED_IN_TABLE


def test_only_what_can_do_harm_is_escaped():
    assert escape_cell("past_key_values_key_cache_0 > 0.1, a-b: c.d (e) 12") == (
        "past_key_values_key_cache_0 > 0.1, a-b: c.d (e) 12"
    )
    assert escape_cell("__init__ *x* `y` [z](w) ~~s~~") == (
        "\\_\\_init\\_\\_ \\*x\\* \\`y\\` \\[z](w) \\~\\~s\\~\\~"
    )
    assert escape_cell("a|b <b> R&D &lt; C:\\dir \\*") == (
        "a\\|b &lt;b> R&D &amp;lt; C:\\dir \\\\\\*"
    )


def test_mentions_and_command_lines_are_neutralised():
    assert neutralise_mentions("@a and @org/team") == f"@{ZWJ}a and @{ZWJ}org/team"
    # (the ZWJ inside "::error::" is the emoji-shortcode one: ":error:" could be one)
    assert escape_text("/deploy now\n::error::x") == f"{ZWJ}/deploy now\n{ZWJ}::{ZWJ}error::x"
    assert escape_html("ok\n  /approve") == f"ok\n{ZWJ}  /approve"


def test_line_starts_that_open_blocks_are_escaped_and_references_broken():
    out = escape_text("# title\n- item\n1. first\n    code\nsee #123")
    assert out.split("\n") == ["\\# title", "\\- item", "1\\. first", "code", f"see #{ZWJ}123"]


def test_escape_text_keeps_newlines_and_drops_control_characters():
    assert escape_text("a\r\nb\x00c\u202ed") == "a\nbcd"


def test_escape_cell_is_one_line():
    out = escape_cell("line one\n\n  line two\r\nthree|four")
    assert out == "line one<br>line two<br>three\\|four"
    assert escape_cell("a\nb", newline=" ") == "a b"


def test_escape_cell_truncates_raw_text_before_escaping():
    assert escape_cell("<" * 50, max_chars=10) == "&lt;" * 9 + "…"
    assert escape_cell(None) == ""


def test_truncate():
    assert truncate("abcdef", 4) == "abc…"
    assert truncate("abcdef", 4, keep="tail") == "…def"
    assert truncate("abc", 3) == "abc"
    assert truncate("abcd", 1) == "…"
    assert truncate("abc", 0) == ""


def test_code_block_escapes_and_cannot_be_closed_early():
    text = "Traceback\n</pre></details><img src=x onerror=alert(1)>\n@octocat broke it"
    out = code_block(text, "Error <b>@you</b>")
    assert out.startswith(f"<details><summary>Error &lt;b>@{ZWJ}you&lt;/b></summary>")
    assert out.endswith("</pre>\n\n</details>")
    assert out.count("</pre>") == 1 and out.count("<img") == 0
    assert TRUNCATED_NOTE not in out


def test_code_block_caps_length_and_keeps_the_chosen_end():
    text = "\n".join(f"frame {i}" for i in range(2000)) + "\nValueError: the real cause"
    out = code_block(text, max_chars=500)
    assert f"{TRUNCATED_NOTE} ({len(text) - 500:,} characters omitted)" in out
    assert "ValueError: the real cause" in out and "frame 0\n" not in out
    head = code_block(text, max_chars=500, keep="head")
    assert "frame 0\n" in head and "the real cause" not in head


@pytest.mark.parametrize("char", ["|", "*", "`", "[", "~", "<"])
def test_each_structural_character_is_escaped_where_it_would_act(char):
    out = escape_cell(f"a{char}b")
    assert out != f"a{char}b"
    assert _words(parse(_table(out)).cell_text[2]) == f"a{char}b"


# -- exact shapes and boundaries (each assertion kills a one-character change) ----------------


def _block(body: str, summary: str = "Error", attr: str = "") -> str:
    return f"<details{attr}><summary>{summary}</summary>\n\n<pre>\n{body}\n</pre>\n\n</details>"


def test_code_block_exact_shape_defaults_and_open() -> None:
    assert code_block("boom") == _block("boom")  # summary "Error", collapsed
    assert code_block("boom", open_=True) == _block("boom", attr=" open")
    # only surrounding blank lines go: indentation and tabs inside are kept
    assert code_block("\n\n  indented\n\tTab \n\n") == _block("  indented\n\tTab ")
    assert code_block("R&D") == _block("R&amp;D")
    assert code_block("XMAS\nX") == _block("XMAS\nX")


def test_code_block_at_exactly_max_chars_is_not_cut() -> None:
    assert code_block("abcde", max_chars=5) == _block("abcde")


@pytest.mark.parametrize(
    ("keep", "body"),
    [
        ("tail", f"{TRUNCATED_NOTE} (4 characters omitted)\nefghij"),
        ("head", f"abcdef\n{TRUNCATED_NOTE} (4 characters omitted)"),
    ],
)
def test_code_block_cut_keeps_its_end_and_puts_the_note_on_the_cut_side(
    keep: str, body: str
) -> None:
    assert code_block("abcdefghij", max_chars=6, keep=keep) == _block(body)


def test_code_block_summary_is_one_line_of_at_most_200_characters() -> None:
    assert code_block("x", "a\n  b\tc") == _block("x", "a b c")
    assert code_block("x", "s" * 200) == _block("x", "s" * 200)
    assert code_block("x", "s" * 201) == _block("x", "s" * 199 + "…")


def test_escape_cell_turns_tabs_into_spaces() -> None:
    assert escape_cell("a\tb\t\tc") == "a b  c"


def test_escape_html_escapes_both_characters_exactly() -> None:
    assert escape_html("a<b & c&amp;") == "a&lt;b &amp; c&amp;amp;"


def test_escape_text_strips_only_spaces_and_tabs_that_would_indent() -> None:
    # an em space does not open a code block or a heading: kept, and '#' stays as written
    assert escape_text("\u2003# x") == "\u2003# x"
    assert escape_text(" \t# x") == "\\# x"


def test_truncate_boundaries() -> None:
    assert truncate("abcdefgh", 4, keep="tail") == "…fgh"
    assert truncate("abc", 2) == "a…"
    assert truncate("abc", 2, keep="tail") == "…c"
    assert truncate("abc", 1, keep="tail") == "…"


def test_a_message_keeps_its_code_spans_and_refuses_what_a_span_cannot_hold():
    from observer_ci.report.escape import escape_message

    assert escape_message("use `torch.where(c, a, b)` here") == "use `torch.where(c, a, b)` here"
    assert escape_message("`@me` and @you") == f"`@{ZWJ}me` and @{ZWJ}you"
    # a tag, an entity, a pipe or a lone or doubled backtick: escaped text, not a span
    assert escape_message("`<img src=x>`") == "\\`&lt;img src=x>\\`"
    assert escape_message("`a|b`") == "\\`a\\|b\\`"
    assert escape_message("a ` b") == "a \\` b"
    assert escape_message("``x``") == "\\`\\`x\\`\\`"
    code = parse(escape_message("run `make test` then `x`") + "\n")
    assert code.tags.count("code") == 2
