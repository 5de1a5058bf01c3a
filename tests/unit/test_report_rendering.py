"""Render report.md as GitHub would (CommonMark + tables, raw HTML allowed) and inspect it."""

from html.parser import HTMLParser

from markdown_it import MarkdownIt

from observer_ci.report import render_report
from observer_ci.results import (
    ExportResult,
    InputInfo,
    ModelResult,
    ObservationResult,
    ProbeResult,
    RunResults,
)
from observer_ci.rules import DEFAULT_FAIL_ON, Thresholds, compare

HOSTILE = "x|y<script>alert(1)</script> @octocat **bold** [link](http://evil.example)"


class Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.tables: list[list[int]] = []  # per table, the cell count of each row
        self.text: list[str] = []
        self._cells = 0

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "table":
            self.tables.append([])
        if tag == "tr":
            self._cells = 0
        if tag in ("td", "th"):
            self._cells += 1

    def handle_endtag(self, tag):
        if tag == "tr":
            self.tables[-1].append(self._cells)

    def handle_data(self, data):
        self.text.append(data)


def hostile_results() -> RunResults:
    model = ModelResult(
        name=HOSTILE,
        script="observe/" + HOSTILE + ".py",
        status="ort_failed",
        error="RuntimeError: " + HOSTILE + "\n| broken | table |\n<img src=x onerror=alert(1)>",
        inputs=[InputInfo(HOSTILE, "torch.float32", [[2, 3], None], [0])],
        export=ExportResult(
            ok=True, node_count=3, input_names=[HOSTILE], input_dims={HOSTILE: ["s0", 3]}
        ),
        observations=[
            ObservationResult(index=0, ok=False, error=HOSTILE, inputs=HOSTILE, outputs=HOSTILE),
            ObservationResult(index=1, ok=True, success=True, abs=0.0, rel=0.0, ort_latency_s=1e-3),
        ],
        probe=ProbeResult(ran=True, ok=False, error=HOSTILE, shapes={HOSTILE: [5, 3]}),
        notes=[HOSTILE],
    )
    return RunResults(models=[model], environment={"torch": HOSTILE}, label="head")


def render() -> tuple[str, Collector]:
    head = hostile_results()
    regressions = compare(head, None, Thresholds(), set(DEFAULT_FAIL_ON))
    markdown = render_report(head, regressions)
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)
    parsed = Collector()
    parsed.feed(html)
    return html, parsed


def test_untrusted_text_injects_no_html_elements():
    html, parsed = render()
    assert "script" not in parsed.tags and "img" not in parsed.tags
    assert 'href="http://evil.example"' not in html  # no link from [link](...)
    assert "<strong>bold</strong>" not in html
    text = "".join(parsed.text)
    assert "<script>alert(1)</script>" in text  # shown as text, literally
    assert "x|y" in text  # the pipe stayed inside its cell (GFM drops cells past the header)


def test_tables_keep_their_shape():
    _, parsed = render()
    assert len(parsed.tables) >= 3  # regressions, inputs, observations
    # every row has as many cells as its header: no '|' or newline broke out of a cell
    for rows in parsed.tables:
        assert len(rows) >= 2 and len(set(rows)) == 1, rows


def test_mentions_are_neutralised():
    _, parsed = render()
    text = "".join(parsed.text)
    assert "@octocat" not in text
    assert "@\u200docto" in text
