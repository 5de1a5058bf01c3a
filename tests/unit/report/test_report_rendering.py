"""Render report.md as GitHub would (CommonMark + tables, raw HTML allowed) and inspect it."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from observer_ci.core.results import (
    ExportResult,
    InputInfo,
    ModelResult,
    ObservationResult,
    ProbeResult,
    RunResults,
)
from observer_ci.report.chart import MAX_CHART_MODELS, latency_chart
from observer_ci.report.markdown import render_report
from observer_ci.report.rules import DEFAULT_FAIL_ON, Thresholds, compare
from tests.support.markdown import MENTION_RE, parse, render_html

HOSTILE = "x|y<script>alert(1)</script> @octocat **bold** [link](http://evil.example)"
MERMAID_HOSTILE = 'a"] ; %%{init: {"theme":"x"}}%%\n```\nclick A call evil()'


def obs(index: int, ort: float = 1e-3, torch: float = 4e-3, **kw) -> ObservationResult:
    return ObservationResult(
        index=index,
        ok=True,
        success=True,
        abs=1e-7,
        rel=1e-6,
        ort_latency_s=ort,
        torch_latency_s=torch,
        ort_latencies_s=[ort * 0.9, ort, ort * 1.2],
        torch_latencies_s=[torch, torch],
        **kw,
    )


def hostile_results() -> RunResults:
    model = ModelResult(
        name=HOSTILE,
        script="observe/" + HOSTILE + ".py",
        status="ort_failed",
        error="RuntimeError: " + HOSTILE + "\n| broken | table |\n<img src=x onerror=alert(1)>",
        inputs=[InputInfo(HOSTILE, "torch.float32", [[2, 3], None], [0])],
        export=ExportResult(
            ok=True, node_count=3, input_names=[HOSTILE], input_dims={HOSTILE: [HOSTILE, 3]}
        ),
        observations=[
            ObservationResult(index=0, ok=False, error=HOSTILE, inputs=HOSTILE, outputs=HOSTILE),
            obs(1),
        ],
        probe=ProbeResult(ran=True, ok=False, error=HOSTILE, shapes={HOSTILE: [5, 3]}),
        notes=[HOSTILE],
        dynamic_shapes=HOSTILE,
    )
    healthy = ModelResult(
        name="mlp_classifier",
        script="examples/mlp_classifier.py",
        status="ok",
        export=ExportResult(ok=True, node_count=4, input_names=["x"], input_dims={"x": ["s77"]}),
        observations=[obs(0, ort=2e-3)],
    )
    return RunResults(
        models=[healthy, model], environment={"torch": HOSTILE, "notes": [HOSTILE]}, label="head"
    )


def render(base: RunResults | None = None) -> tuple[str, str]:
    head = hostile_results()
    regressions = compare(head, base, Thresholds(), set(DEFAULT_FAIL_ON))
    markdown = render_report(head, regressions, base)
    return markdown, render_html(markdown)


def test_untrusted_text_injects_no_html_elements():
    markdown, html = render()
    parsed = parse(markdown)
    assert "script" not in parsed.tags and "img" not in parsed.tags
    assert 'href="http://evil.example"' not in html  # no link from [link](...)
    assert "<strong>bold</strong>" not in html
    assert "<script>alert(1)</script>" in parsed.all_text  # shown as text, literally
    assert "x|y" in parsed.all_text  # the pipe stayed inside its cell


def test_tables_keep_their_shape():
    parsed = parse(render()[0])
    assert len(parsed.tables) >= 4  # summary, regressions, inputs, calls
    # every row has as many cells as its header: no '|' or newline broke out of a cell
    for rows in parsed.tables:
        assert len(rows) >= 2 and len(set(rows)) == 1, rows


def test_mentions_are_neutralised():
    parsed = parse(render()[0])
    assert not MENTION_RE.search(parsed.all_text)
    assert "@\u200docto" in parsed.all_text


def test_summary_table_comes_before_the_first_details_and_legend_is_collapsed():
    markdown, html = render()
    assert html.index("<table>") < html.index("<details>")
    assert "<th>worst abs</th>" in html.split("</table>")[0]
    legend = re.search(r"<details><summary>How to read this report[^<]*</summary>", html)
    assert legend is not None and "abs ≤ 0.001" in html[legend.end() :]
    assert "&#95;" not in markdown
    assert "mlp_classifier" in markdown  # raw Markdown stays readable


def test_every_model_detail_is_collapsed():
    markdown, _ = render()
    details = markdown[markdown.index("### Details") :]
    blocks = re.findall(r"^<details><summary>(?:✅|⚠️|❌) ", details, re.MULTILINE)
    assert len(blocks) == 2
    failing = details.index("❌ x|y&lt;script>")
    assert failing < details.index("✅ mlp_classifier")  # failing models first
    before = markdown[: markdown.index("### Details")]
    assert "**Export:**" not in before and "| call |" not in before


# -- the Mermaid chart ---------------------------------------------------------------------

# a label: the sanitised name, then its value (digits and a unit)
_LABEL = r'"[A-Za-z0-9 ._()-]+ (?:base |head )?\d+(?:\.\d+)? (?:s|ms|µs|ns)"'
_NUMBER = r"\d+(?:\.\d+)?"  # Mermaid reads no exponent
_LINES = [
    re.compile(r"^xychart-beta horizontal$"),
    re.compile(r'^    title "[^"\n]+"$'),
    re.compile(rf"^    x-axis \[{_LABEL}(?:, {_LABEL})*\]$"),
    re.compile(rf'^    y-axis "(?:s|ms|µs)" 0 --> {_NUMBER}$'),
    re.compile(rf"^    bar \[{_NUMBER}(?:, {_NUMBER})*\]$"),
    re.compile(rf"^    bar \[{_NUMBER}(?:, {_NUMBER})*\]$"),
]


def assert_valid_xychart(block: str) -> tuple[list[str], list[list[float]]]:
    """Checks the xychart-beta grammar line by line; returns labels and series."""
    lines = block.split("\n")
    assert lines[0] == "```mermaid" and lines[-1] == "```"
    body = lines[1:-1]
    assert 5 <= len(body) <= 6
    for line, pattern in zip(body, _LINES):
        assert pattern.match(line), line
    labels = re.findall(r'"([^"]+)"', body[2])
    series = [[float(v) for v in re.findall(_NUMBER, line.split("[")[1])] for line in body[4:]]
    top = float(body[3].rsplit(" ", 1)[1])
    for values in series:
        assert len(values) == len(labels)
        assert all(0 <= v <= top for v in values)
    return labels, series


def test_chart_is_valid_mermaid_with_hostile_names():
    head = hostile_results()
    head.models[1].name = MERMAID_HOSTILE
    chart = latency_chart(head)
    labels, series = assert_valid_xychart(chart)
    assert labels == ["mlp_classifier 2 ms", "a_) _ _(init_ (_theme_x_))_cli.. 1 ms"]
    assert series == [[2.0, 1.0]]  # ORT median latency in ms, nothing divided by torch
    assert chart.count("```") == 2 and "%%" not in chart and "click" not in chart.split("[")[1]


def test_chart_compares_base_and_head_and_appears_in_the_report():
    base = hostile_results()
    base.models[0].observations = [obs(0, ort=1e-3)]
    markdown, _ = render(base)
    block = re.search(r"```mermaid\n.*?\n```", markdown, re.DOTALL)
    assert block is not None
    labels, series = assert_valid_xychart(block.group(0))
    # base and head bars per model, in the summary table's order
    assert [label.rsplit(" ", 3)[1] for label in labels] == ["base", "head"] * 2
    assert series == [[1.0, 2.0, 1.0, 1.0]]
    table_order = [row.split(" | ")[1] for row in markdown.splitlines() if row.startswith("| ")]
    assert table_order[1] == "mlp_classifier" and labels[0] == "mlp_classifier base 1 ms"
    assert markdown.index("```mermaid") < markdown.index("### Details")


def test_chart_is_omitted_when_it_says_nothing_or_does_not_fit():
    one = RunResults(models=[hostile_results().models[0]])
    assert latency_chart(one) == ""  # one model, no base: the table says it all
    crowd = hostile_results().models[0]
    many = RunResults(
        models=[ModelResult(**{**crowd.__dict__, "name": f"m{i}"}) for i in range(13)]
    )
    assert MAX_CHART_MODELS == 12 and latency_chart(many) == ""
    many.models = many.models[:12]
    assert_valid_xychart(latency_chart(many))


# -- any untrusted string, anywhere --------------------------------------------------------


def results_naming_everything(text: str) -> RunResults:
    """Every untrusted field of a failing and a passing model holds ``text``."""
    failing = ModelResult(
        name="x" + text,
        script="s" + text,
        status="ort_failed",
        error="E" + text,
        notes=["n" + text],
        inputs=[InputInfo("i" + text, "d" + text, [[2, 3]], [0])],
        dynamic_shapes="D" + text,
        export=ExportResult(ok=True, input_names=["i" + text], input_dims={"i" + text: ["b"]}),
        observations=[
            obs(0, inputs="I" + text, outputs="O" + text),
            ObservationResult(index=1, ok=False, error="C" + text),
        ],
        probe=ProbeResult(ran=True, ok=False, error="P" + text, shapes={"i" + text: [5]}),
    )
    passing = ModelResult(
        name="y" + text, script="t" + text, status="ok", observations=[obs(0, ort=2e-3)]
    )
    return RunResults(
        models=[failing, passing], environment={"torch": "v" + text, "notes": ["w" + text]}
    )


def structure(results: RunResults) -> tuple[list[str], list[list[int]], str]:
    regressions = compare(results, None, Thresholds(), set(DEFAULT_FAIL_ON))
    parsed = parse(render_report(results, regressions))
    return parsed.tags, parsed.tables, parsed.all_text


BENIGN = structure(results_naming_everything("benign"))


@settings(deadline=None, max_examples=30)
@given(
    st.text(max_size=60)
    | st.text(alphabet=st.sampled_from(list("|<>&*_`[]!~\\#-@/:\n ")), max_size=60)
)
def test_no_untrusted_string_changes_the_report_structure(text):
    tags, tables, all_text = structure(results_naming_everything(text))
    benign_tags, benign_tables, _ = BENIGN
    # A backtick in untrusted text may pair with one of our messages' code spans: a code
    # span is inert (shown verbatim, links nothing), every other element stays in place.
    inert = {"code"}
    assert [t for t in tags if t not in inert] == [t for t in benign_tags if t not in inert]
    assert tables == benign_tables  # no column or row added
    assert not MENTION_RE.search(all_text)


def two_graph_model(stand_in: str = "past_key_values_key_0") -> ModelResult:
    from observer_ci.core.results import GraphResult

    shared = ExportResult(ok=True, node_count=40, seconds=2.0, input_names=["input_ids"])
    first = ExportResult(ok=True, node_count=30, seconds=1.5, input_names=["input_ids"])
    rows = [obs(0, family="decoder_model"), obs(1, family="decoder_with_past_model")]
    rows.append(obs(2, family="decoder_with_past_model", stand_ins=[stand_in]))
    return ModelResult(
        name="whisper",
        script="examples/families/whisper_generate.py",
        status="ok",
        export=shared,
        observations=rows,
        probe=ProbeResult(ran=True, ok=True, success=True),
        graphs=[
            GraphResult(
                "decoder_with_past_model",
                [1, 2],
                "",
                shared,
                ProbeResult(ran=True, ok=True, success=True),
                abs=2e-7,
                success=True,
            ),
            GraphResult(
                "decoder_model",
                [0],
                f"these calls did not pass {stand_in}; {stand_in} has no empty form",
                first,
                ProbeResult(ran=True, ok=False, error="boom"),
                abs=0.5,
                success=False,
            ),
        ],
    )


def test_call_families_get_a_graph_table_and_a_graph_column():
    markdown = render_report(RunResults(models=[two_graph_model()]), [], None)
    parsed = parse(markdown)
    assert "**Graphs (one per call family):**" in markdown
    assert (
        "| decoder_with_past_model | 1, 2 | 2 s · 40 nodes | 2e-07 | ✅ | the main graph |"
    ) in markdown
    assert (
        "| decoder_model | 0 | 1.5 s · 30 nodes | 0.5 ❌ | ❌ failed | these calls did not pass "
        "past_key_values_key_0; past_key_values_key_0 has no empty form |"
    ) in markdown
    # calls table: a graph column and the stand-ins fed as empty
    calls = [ln for ln in markdown.splitlines() if ln.startswith("| call |")]
    assert calls and calls[0].endswith("| graph | fed as empty |")
    assert "| decoder_with_past_model | past_key_values_key_0 |" in markdown
    assert "· 2 graphs" in markdown.split("### Details")[0]  # in the summary table
    for rows in parsed.tables:
        assert len(set(rows)) == 1, rows


def test_hostile_stand_in_names_stay_in_their_cells():
    markdown = render_report(RunResults(models=[two_graph_model(HOSTILE)]), [], None)
    parsed = parse(markdown)
    assert "script" not in parsed.tags and not MENTION_RE.search(parsed.all_text)
    for rows in parsed.tables:
        assert len(set(rows)) == 1, rows


def test_one_graph_keeps_the_plain_calls_table():
    model = two_graph_model()
    model.graphs = model.graphs[:1]
    for row in model.observations:
        row.stand_ins = []
    markdown = render_report(RunResults(models=[model]), [], None)
    assert (
        "Graphs (one per call family)" not in markdown
        and "graphs" not in markdown.split("### Details")[0]
    )
    header = next(ln for ln in markdown.splitlines() if ln.startswith("| call |"))
    assert header.endswith("| SUCCESS |")
