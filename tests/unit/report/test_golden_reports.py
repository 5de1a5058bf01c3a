"""The golden reports (tests/golden/*.md) are what the report renders today, byte for byte.

A deliberate change of the report regenerates them (``python -m tests.golden.reports
--write``) and the diff shows a reviewer what every kind of comment now looks like."""

from __future__ import annotations

import pytest

from tests.golden.reports import GOLDENS, path, render
from tests.support.markdown import parse

REGENERATE = "python -m tests.golden.reports --write"


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_the_report_is_its_golden_byte_for_byte(name):
    expected = path(name).read_text(encoding="utf-8")
    assert render(name) == expected, f"the {name} report changed: {REGENERATE}, read the diff"


def test_the_goldens_show_what_each_is_for():
    failing, baseline, merged = (render(n) for n in ("failing", "with_baseline", "merged_legs"))
    # our code spans are code: the cause's `if`, the next step's `torch.where(...)`
    codes = parse(failing)
    assert "**Cause:** the model branches on the values inside a tensor" in failing
    assert "Python `if` on them" in failing and "\\`" not in failing.split("### Details")[0]
    assert codes.tags.count("code") >= 6
    # a diagnosed discrepancy: its own rule, its cause and the diagnosis in the details
    assert "| stateful_block | torch_not_reproducible |" in failing
    assert "**Diagnosis** (18.8 ms):" in failing
    assert "- torch against itself: a re-run differs from its recorded outputs" in failing
    assert "ORT ×base" in baseline and "†" in baseline and "base 410 µs" in baseline
    assert "mlp_classifier (linux-py311) 21 µs" in merged  # a leg's label in the chart
