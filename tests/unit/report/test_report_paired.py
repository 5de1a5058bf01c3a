"""The paired (interleaved) base/head ORT timing in the report and the latency rule:
the summary's "ORT ×base" cell, the details line, the chart's base bars, the rule's
limits, and untrusted text around it. Built from results objects (tests/support/builders.py),
written to results.json and read back, as the action renders them."""

from __future__ import annotations

import math
import re

import pytest

from observer_ci.core.results import PairedLatency, RunResults
from observer_ci.report.chart import latency_chart
from observer_ci.report.escape import ZWJ
from observer_ci.report.markdown import render_report
from observer_ci.report.rules import Thresholds, compare
from tests.support.builders import model, observation, run

ABOVE = math.inf
EVIL = "a|b<script>@octocat`::error::x"


def timed(name: str = "m", ort: float = 1e-3, paired: PairedLatency | None = None, **fields):
    """A model whose two calls took ``ort`` seconds in ORT (torch: 2 ms)."""
    calls = [observation(0, ort=ort), observation(1, ort=ort)]
    return model(name, observations=calls, paired_latency=paired, **fields)


def pair(
    ratio: float | None = 1.05,
    low: float | None = 0.98,
    high: float | None = 1.12,
    base_s: float = 1e-3,
    reason: str | None = None,
) -> PairedLatency:
    if ratio is None:
        return PairedLatency(reason=reason)
    return PairedLatency(
        ratio=ratio,
        base_s=base_s,
        head_s=base_s * ratio,
        ratio_low=low,
        ratio_high=high,
        rounds=10,
        calls=2,
    )


def reread(results: RunResults, tmp_path, name: str) -> RunResults:
    results.write(tmp_path / name)
    return RunResults.read(tmp_path / name)


def summary(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """The summary table's header cells and each row's cells by model name."""
    start = text.index("|  | model |")
    lines = text[start:].split("\n\n")[0].splitlines()
    split = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    return split[0], {row[1]: row for row in split[2:]}


def cell(text: str, name: str, column: str) -> str:
    header, rows = summary(text)
    return rows[name][header.index(column)]


def render(head: RunResults, base: RunResults | None, th: Thresholds | None = None) -> str:
    th = th or Thresholds()
    return render_report(head, compare(head, base, th, {"latency_ratio"}), base, thresholds=th)


# -- the summary table -----------------------------------------------------------------------


def test_the_summary_shows_the_paired_ratio_with_its_spread_and_says_so(tmp_path):
    head = reread(run(timed("p", 2e-3, pair()), timed("s", 2e-3)), tmp_path, "head.json")
    base = reread(run(timed("p"), timed("s"), label="base"), tmp_path, "base.json")
    text = render(head, base)
    header, rows = summary(text)
    assert header[5] == "ORT ×base"
    # paired: the interleaved ratio, not the x2 of the separate runs (its spread: details)
    assert rows["p"][5] == "2 ms ×1.1"
    assert "head/base ×1.05 (×0.98–1.12)" in text
    # no pair: the medians of the separate runs, and it says so (†)
    assert rows["s"][5] == "2 ms ×2†"
    assert "(both graphs timed alternately in one process" in text
    assert "`†`: from the medians of two separate runs" in text


@pytest.mark.parametrize(
    ("paired", "expected"),
    [
        (pair(1.0, 1.0, 1.0), "2 ms ×1"),
        (pair(1.5, 1.499, 1.5004), "2 ms ×1.5"),  # 2 significant digits in the summary
        (pair(0.123456, 0.1, 0.2), "2 ms ×0.12"),
        (pair(1.05, None, None), "2 ms ×1.1"),  # older results without the spread
        (pair(None, reason="the head run saved no inputs"), "2 ms ×2†"),
    ],
)
def test_the_ort_vs_base_cell_at_its_boundaries(paired, expected):
    text = render(run(timed("m", 2e-3, paired)), run(timed("m"), label="base"))
    assert cell(text, "m", "ORT ×base") == expected


def test_without_comparable_base_the_cell_is_a_dash_and_without_base_there_is_no_column():
    no_latency = model("m", observations=[observation(0, ort=None)])
    assert cell(render(run(timed("m")), run(no_latency, label="base")), "m", "ORT ×base") == "1 ms"
    assert (
        cell(render(run(timed("m")), run(timed("other"), label="base")), "m", "ORT ×base") == "1 ms"
    )
    header, _ = summary(render(run(timed("m")), None))
    assert "ORT ×base" not in header and "ORT ×torch" in header
    assert cell(render(run(timed("m")), None), "m", "ORT ×torch") == "1 ms ×0.5"
    # a paired timing kept in results re-rendered without base still shows (and says) it
    assert cell(render(run(timed("m", paired=pair())), None), "m", "ORT ×base") == "1 ms ×1.1"


def test_details_say_what_the_pair_measured_or_why_there_is_none():
    text = render(run(timed("m", 2e-3, pair(2.0, 1.5, 2.5))), run(timed("m"), label="base"))
    assert (
        "**Paired ORT timing (base and head interleaved):** head/base ×2 (×1.5–2.5) · "
        "base 1 ms → head 2 ms · 10 rounds × 2 calls"
    ) in text
    missing = pair(None, reason="the base graph takes other inputs than the head graph")
    text = render(run(timed("m", 2e-3, missing)), run(timed("m"), label="base"))
    assert (
        "**Paired ORT timing (base and head interleaved):** not available (the base graph "
        "takes other inputs than the head graph); ×base is from separate runs"
    ) in text


# -- the chart ---------------------------------------------------------------------------------


def series(chart: str) -> list[list[float]]:
    """Every ``bar`` series of the chart, in order (base first when there is one)."""
    found = re.findall(r"^    bar \[(.*)\]$", chart, re.M)
    return [[float(v) for v in values.split(", ")] for values in found]


def labels(chart: str) -> list[str]:
    return re.findall(r'"([^"]+)"', re.search(r"^    x-axis \[(.*)\]$", chart, re.M).group(1))


def test_the_chart_pairs_base_and_head_bars_from_the_pair_when_there_is_one():
    # p: the pair's own medians (base 1 ms, head 2 ms: like with like), not base's 0.1 ms run;
    # s: no pair, each run's median (base 0.5 ms, head 1 ms). Nothing divided by torch.
    head = run(timed("p", paired=pair(2.0, 1.8, 2.2)), timed("s"))
    base = run(timed("p", 1e-4), timed("s", 5e-4), label="base")
    chart = latency_chart(head, base)
    assert series(chart) == [[1, 2, 0.5, 1]]  # base and head of each model, in ms
    assert labels(chart) == ["p base 1 ms", "p head 2 ms", "s base 500 µs", "s head 1 ms"]
    assert re.search(r'^    y-axis "ms" 0 --> 2.3$', chart, re.M)
    text = render(head, base)
    assert "from the paired timing for 1 of 2 models, from their separate runs" in text
    only_paired = render(run(timed("p", paired=pair(2.0)), timed("q", paired=pair(0.5))), base)
    assert "base and head from the paired timing (both timed alternately" in only_paired
    assert "base and head from their separate runs" in render(run(timed("s")), base)


# -- the rule ---------------------------------------------------------------------------------


def latency_regs(head_model, base_model, th: Thresholds):
    regs = compare(run(head_model), run(base_model, label="base"), th, {"latency_ratio"})
    return [r for r in regs if r.rule == "latency_ratio"]


def test_the_rule_prefers_the_pair_over_the_separate_runs():
    th = Thresholds(latency_ratio_max=1.5, min_latency_s=0.0)
    # separate runs say x10, the pair says x1.05: no regression
    assert latency_regs(timed("m", 1e-2, pair(1.05, 0.9, 1.2)), timed("m"), th) == []
    # separate runs say x1, the pair says x2 and head was slower in 90% of the pairs
    (reg,) = latency_regs(timed("m", 1e-3, pair(2.0, 1.5, 2.5)), timed("m"), th)
    assert reg.message == (
        "ORT median latency ×2 (> ×1.5, paired: timed interleaved, 10 rounds × 2 calls): "
        "1 ms → 2 ms, beyond the noise (head slower in 90% of the pairs: 10th percentile ×1.5)"
    )
    assert (reg.base_value, reg.head_value) == (1e-3, 2e-3)


def test_the_paired_limits_are_exclusive():
    th = Thresholds(latency_ratio_max=1.5, min_latency_s=0.0)
    base = timed("m")
    assert latency_regs(timed("m", paired=pair(1.5, 1.25, 2.0)), base, th) == []
    assert latency_regs(timed("m", paired=pair(math.nextafter(1.5, ABOVE), 1.25, 2.0)), base, th)
    # noise: base as fast as head in 10% of the pairs
    assert latency_regs(timed("m", paired=pair(2.0, 1.0, 3.0)), base, th) == []
    assert latency_regs(timed("m", paired=pair(2.0, math.nextafter(1.0, ABOVE), 3.0)), base, th)
    # no spread recorded (older results): the ratio alone decides
    assert latency_regs(timed("m", paired=pair(2.0, None, None)), base, th)


def test_paired_times_below_the_floor_on_both_sides_are_noise():
    th = Thresholds(latency_ratio_max=1.5, min_latency_s=2.0**-10)
    below = math.nextafter(2.0**-10, 0)  # head (x2 of base, exactly) just under the floor
    assert (
        latency_regs(timed("m", paired=pair(2.0, 1.5, 2.5, base_s=below / 2)), timed("m"), th) == []
    )
    (reg,) = latency_regs(timed("m", paired=pair(2.0, 1.5, 2.5, base_s=2.0**-11)), timed("m"), th)
    assert reg.head_value == 2.0**-10  # head at the floor counts


# -- untrusted text ---------------------------------------------------------------------------


def test_an_adversarial_name_and_reason_stay_data():
    evil_pair = pair(None, reason="<img src=x onerror=alert(1)> @admin\n::error::boom | x")
    head = run(timed(EVIL, 2e-3, pair(2.0, 1.5, 2.5)), timed("other", 2e-3, evil_pair))
    base = run(timed(EVIL), timed("other"), label="base")
    text = render(head, base)
    assert "<script>" not in text and "<img" not in text
    assert not re.search(r"@(octocat|admin)", text) and f"@{ZWJ}admin" in text
    assert not re.search(r"^::", text, re.M)
    header, rows = summary(text)
    assert all(len(row) == len(header) for row in rows.values())  # no pipe broke a row
    evil_row = next(row for name, row in rows.items() if "script" in name)
    assert evil_row[header.index("ORT ×base")] == "2 ms ×2"
    chart = latency_chart(head, base)
    assert "<" not in chart and "`" not in chart.replace("```", "") and "@" not in chart
