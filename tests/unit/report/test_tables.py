"""The Markdown tables are laid out by tabulate: cells printed exactly as escaped, one row per
line, the column count kept whatever the cells hold (the escaping guarantees themselves are
in test_escape.py, run through this same builder)."""

from __future__ import annotations

import pytest

from observer_ci.report.tables import Markup, markdown_table
from tests.support.markdown import parse


def test_numbers_and_padding_are_printed_as_given_not_reparsed():
    table = markdown_table(["", "a", "b"], [[Markup("✅"), "1.50", "1e-07"], ["", "0012", "nan"]])
    lines = table.splitlines()
    assert lines[0] == "|  | a | b |"
    assert lines[1] == "|---|---|---|"  # the same bytes with or without wcwidth installed
    assert lines[2:] == ["| ✅ | 1.50 | 1e-07 |", "|  | 0012 | nan |"]


def test_untrusted_cells_are_escaped_before_tabulate_and_markup_is_not():
    table = markdown_table(["x"], [["a|b <i>"], [Markup("**bold**")]])
    assert table.splitlines()[2:] == ["| a\\|b &lt;i> |", "| **bold** |"]
    parsed = parse(table)
    assert parsed.tables == [[1, 1, 1]]
    assert parsed.cell_text[1:] == ["a|b <i>", "bold"]


def test_an_empty_table_keeps_its_header_and_a_short_row_is_refused():
    assert parse(markdown_table(["a", "b"], [])).tables == [[2]]
    with pytest.raises(ValueError, match="row has 1 cells, header has 2"):
        markdown_table(["a", "b"], [["only one"]])
