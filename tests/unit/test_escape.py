"""Escaping of untrusted text for the Markdown PR comment."""

from __future__ import annotations

import pandas as pd
import pytest

from observer_ci.escape import (
    TRUNCATED_NOTE,
    ZWJ,
    code_block,
    escape_cell,
    escape_text,
    neutralise_mentions,
    truncate,
)

EVIL = "x|y<script>@octocat"


def test_escape_text_blocks_html_pipes_and_mentions():
    out = escape_text(EVIL)
    assert "<" not in out and ">" not in out
    assert "|" not in out
    assert "&lt;script&gt;" in out
    assert "@octocat" not in out
    assert f"@{ZWJ}octocat" in out


def test_ampersand_is_escaped_first_so_entities_stay_literal():
    assert escape_text("a&lt;b") == "a&amp;lt;b"
    assert escape_text("R&D") == "R&amp;D"


@pytest.mark.parametrize("char", ["`", "*", "_", "[", "]", "|", "~", "\\"])
def test_markdown_control_characters_become_entities(char):
    out = escape_text(f"a{char}b{char}c")
    assert char not in out
    assert out.startswith("a&#") and out.count("&#") == 2


def test_leading_block_markers_are_escaped_but_cross_refs_are_kept():
    out = escape_text("# title\n- item\n1. first\nsee #123")
    lines = out.split("\n")
    assert lines[0].startswith("&#35;")
    assert lines[1].startswith("&#45;")
    assert lines[2] == "1&#46; first"
    assert lines[3] == "see #123"


def test_escape_text_keeps_newlines_and_drops_control_characters():
    out = escape_text("a\r\nb\x00c\u202ed")
    assert out == "a\nbcd"


def test_escape_cell_is_one_line():
    out = escape_cell("line one\n\n  line two\r\nthree|four")
    assert "\n" not in out
    assert out == "line one<br>line two<br>three&#124;four"
    assert escape_cell("a\nb", newline=" ") == "a b"


def test_escape_cell_truncates_raw_text_before_escaping():
    out = escape_cell("<" * 50, max_chars=10)
    assert out == "&lt;" * 9 + "…"
    assert escape_cell(None) == ""


def test_escaped_cells_cannot_break_a_table():
    cells = [EVIL, "a\nb|c", "`code`|*x*", "[link](http://x)"]
    frame = pd.DataFrame([[escape_cell(c) for c in cells]], columns=["a", "b", "c", "d"])
    lines = frame.to_markdown(index=False, disable_numparse=True).splitlines()
    assert len(lines) == 3
    assert {line.count("|") for line in lines} == {5}


def test_neutralise_mentions_every_at_sign():
    assert neutralise_mentions("@a and @org/team") == f"@{ZWJ}a and @{ZWJ}org/team"


def test_truncate():
    assert truncate("abcdef", 4) == "abc…"
    assert truncate("abcdef", 4, keep="tail") == "…def"
    assert truncate("abc", 4) == "abc"
    assert truncate("abc", 0) == ""


def test_code_block_escapes_and_cannot_be_closed_early():
    text = "Traceback\n</pre></details><img src=x onerror=alert(1)>\n@octocat broke it"
    out = code_block(text, "Error <b>@you</b>")
    assert out.startswith("<details><summary>Error &lt;b&gt;@\u200dyou&lt;/b&gt;</summary>")
    assert out.endswith("</pre>\n\n</details>")
    assert out.count("</pre>") == 1 and out.count("<img") == 0
    assert "@octocat" not in out
    assert TRUNCATED_NOTE not in out


def test_code_block_caps_length_and_keeps_the_tail():
    text = "\n".join(f"frame {i}" for i in range(2000)) + "\nValueError: the real cause"
    out = code_block(text, max_chars=500)
    assert TRUNCATED_NOTE in out
    assert "ValueError: the real cause" in out
    assert "frame 0\n" not in out
    assert len(out) < 700
    head = code_block(text, max_chars=500, keep="head")
    assert "frame 0\n" in head and "the real cause" not in head


def test_escaping_is_deterministic():
    text = EVIL + "\n# x *y* _z_ `w`"
    assert escape_text(text) == escape_text(text)
    assert code_block(text * 100, max_chars=50) == code_block(text * 100, max_chars=50)
