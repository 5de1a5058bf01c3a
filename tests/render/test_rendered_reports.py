"""The golden reports as a reviewer sees them: GitHub's GFM parser, GitHub's comment width and
table style, Mermaid drawing the chart, laid out by a real headless Chromium
(tests/support/browser.py). Checks what a person would notice: a table wider than the
comment, a summary cell on two lines, a literal backslash or backtick, a chart not drawn or
with labels on top of each other. Screenshots go to build/render/ (a CI artifact).

Run by ``make test-render`` (which installs Chromium and Mermaid); skipped, with the reason,
elsewhere."""

from __future__ import annotations

import os

import pytest

from tests.golden.reports import GOLDENS, render
from tests.support import browser

OUT = browser.ROOT / "build" / "render"

if os.environ.get("OBSERVER_CI_RENDER") != "1":
    pytest.skip(
        "the rendered-report test runs with `make test-render` (it installs chromium and "
        "mermaid; set OBSERVER_CI_RENDER=1 to run it directly)",
        allow_module_level=True,
    )
if browser.missing():
    pytest.skip(str(browser.missing()), allow_module_level=True)


@pytest.fixture(scope="module")
def laid_out() -> dict[str, dict]:
    return {name: browser.inspect(render(name), OUT, name) for name in GOLDENS}


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_no_table_is_wider_than_the_comment(laid_out, name):
    page = laid_out[name]
    for table in page["tables"]:
        assert table["scroll"] <= table["client"] + 1, (table["header"], "scrolls sideways")
        wide = [c["text"] for c in table["cells"] if c["right"] > page["width"] + 1]
        assert not wide, (table["header"], wide)


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_every_summary_cell_reads_on_one_line(laid_out, name):
    summary = laid_out[name]["tables"][0]
    assert summary["header"][1] == "model"
    wrapped = [(c["text"], c["lines"]) for c in summary["cells"] if c["lines"] > 1]
    assert not wrapped, wrapped


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_no_literal_backslash_or_backtick_outside_code(laid_out, name):
    assert laid_out[name]["stray"] == []


def test_our_code_spans_render_as_code(laid_out):
    code = laid_out["failing"]["code"]
    assert "if" in code and "torch.where(cond, a, b)" in code
    assert "torch.cond(pred, true_fn, false_fn, (x,))" in code


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_the_chart_is_drawn_with_values_and_labels_apart(laid_out, name):
    page = laid_out[name]
    assert page["errors"] == [] and len(page["charts"]) == 1
    chart = page["charts"][0]
    assert chart["drawn"] and chart["bars"] >= 2
    assert chart["clashes"] == []  # no two texts of the chart overlap
    assert chart["right"] <= page["width"] + 1
    labelled = [t for t in chart["texts"] if t.endswith((" s", " ms", " µs"))]
    assert len(labelled) >= 2  # every bar's label carries its value
    assert not any("percent" in t or "torch" in t for t in chart["texts"])


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_a_screenshot_is_kept(laid_out, name):
    shot = laid_out[name]["screenshot"]
    assert shot is not None and os.path.getsize(shot) > 10_000, shot
