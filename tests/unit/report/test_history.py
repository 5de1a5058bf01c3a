"""History of the default branch: runs read from a directory, a latency band per model,
identical reruns quiet, a 2x slower model flagged, a trend chart, bad files skipped."""

from __future__ import annotations

import dataclasses
import random

import pytest

from observer_ci.report.history import MIN_RUNS, _label, read_history, trend_section
from observer_ci.report.markdown import render_report
from observer_ci.report.rules import DEFAULT_FAIL_ON, RULES, Thresholds, compare
from tests.support.builders import model, observation, run


def timed(name: str, seconds: float):
    calls = [observation(i, ort=seconds, ort_latencies_s=[seconds] * 3) for i in range(2)]
    return model(name, observations=calls)


def write_history(root, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    for k in range(n):
        jitter = rng.uniform(0.93, 1.07)  # the noise of a shared runner
        past = run(timed("mlp", 1e-3 * jitter), timed("cnn", 4e-3 * jitter), label="main")
        past.created_at = f"2026-11-{k + 1:02d}T10:00:00+00:00"
        past.commit = f"{k:040x}"
        past.write(root / f"run-{k}" / "nested" / "results.json")  # any depth


def alerts(head, history) -> list[str]:
    regs = compare(head, history.latest, Thresholds(), set(RULES), bands=history.bands)
    return [r.model for r in regs if r.rule == "latency_ratio"]


def test_identical_reruns_raise_no_alert_and_a_2x_slower_model_is_flagged(tmp_path):
    write_history(tmp_path, 20)
    history = read_history(f"history:{tmp_path}", last=20)
    assert len(history.runs) == 20 and set(history.bands) == {"mlp", "cnn"}
    band = history.bands["mlp"]
    assert band.low < band.median < band.high and band.runs == 20
    rng = random.Random(1)
    false_alarms = 0
    for _ in range(20):
        jitter = rng.uniform(0.93, 1.07)
        false_alarms += len(alerts(run(timed("mlp", 1e-3 * jitter), timed("cnn", 4e-3)), history))
    assert false_alarms == 0
    slowed = run(timed("mlp", 2e-3), timed("cnn", 4e-3))
    assert alerts(slowed, history) == ["mlp"]
    (reg,) = [
        r
        for r in compare(
            slowed, history.latest, Thresholds(), set(DEFAULT_FAIL_ON), bands=history.bands
        )
        if r.rule == "latency_ratio"
    ]
    assert "last 20 main runs" in reg.message and "percentile band" in reg.message


def test_the_newest_runs_are_kept_and_unreadable_files_skipped(tmp_path):
    write_history(tmp_path, 6)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "results.json").write_text("{not json")
    history = read_history(tmp_path, last=4)
    assert [r.commit[-1] for r in history.runs] == ["2", "3", "4", "5"]  # oldest first
    assert history.latest.commit == f"{5:040x}"


def test_too_few_runs_draw_no_band_and_a_missing_directory_is_an_error(tmp_path):
    write_history(tmp_path, MIN_RUNS - 1)
    assert read_history(tmp_path).bands == {}
    with pytest.raises(ValueError, match="history directory not found"):
        read_history(tmp_path / "nope")


def test_the_trend_is_a_mermaid_chart_with_the_pull_request_last(tmp_path):
    write_history(tmp_path, 5)
    history = read_history(tmp_path)
    head = run(timed("mlp", 1e-3), timed("<b>@evil</b>", 1e-3))
    section = trend_section(history, head)
    assert section.startswith("### Trend") and section.count("xychart-beta") == 1
    assert "x-axis [1, 2, 3, 4, 5, PR]" in section and "line [" in section
    report = render_report(head, [], history.latest, trend=section)
    assert "### Trend" in report
    title = _label('x"]\n    line [9999] <b>@someone</b>')  # a title cannot break out
    assert not set(title) & set('"[]<>@\n')
    assert trend_section(read_history(tmp_path / "run-0"), run()) == ""


def test_history_plus_base_latency_from_the_pair_else_the_band_the_rest_from_base(tmp_path):
    """``baseline: history+base`` (action run mode): the base re-run is the ``base`` of every
    rule, the history gives the band. Latency: the paired timing when there is one (same
    machine, interleaved), the band only without it; node count against the base re-run."""
    from observer_ci.core.results import PairedLatency
    from tests.support.builders import export

    write_history(tmp_path, 20)  # node count 100 on main's history
    history = read_history(tmp_path, last=20)
    base_run = run(
        model("mlp", export=export(node_count=300), observations=timed("mlp", 1e-3).observations)
    )
    head_model = model(
        "mlp", export=export(node_count=300), observations=timed("mlp", 2e-3).observations
    )
    head_model.paired_latency = PairedLatency(1.0, 2e-3, 2e-3, 0.95, 1.05, rounds=7, calls=3)
    rules = set(RULES)

    def found(head):
        regs = compare(run(head), base_run, Thresholds(), rules, bands=history.bands)
        return {r.rule: r for r in regs}

    paired = found(head_model)
    assert "node_count_growth" not in paired  # 300 against the base re-run, not main's 100
    against_main = compare(run(head_model), history.latest, Thresholds(), rules)
    assert "node_count_growth" in {r.rule for r in against_main}  # what history alone says
    assert "latency_ratio" not in paired  # the pair says x1: the band (x2) is not consulted
    unpaired = dataclasses.replace(head_model, paired_latency=None)
    banded = found(unpaired)["latency_ratio"]
    assert "last 20 main runs" in banded.message and "percentile band" in banded.message


SMALL = {"machine": "x86_64", "processor": "AMD EPYC 7763 64-Core Processor", "cpu_count": 2}
LARGE = {"machine": "x86_64", "processor": "Intel(R) Xeon(R) Platinum 8370C", "cpu_count": 16}


def test_the_band_is_drawn_from_this_runners_class_only_and_says_so(tmp_path):
    """A default branch whose runs moved to a 4x faster runner: its runs neither widen nor
    shift the band of the small runner's pull request, and the note counts them."""
    for k in range(12):
        small = k % 3 != 0  # 8 runs on the small runner, 4 on the large one
        seconds = 1e-3 * (1 + 0.02 * (k % 4)) if small else 0.25e-3
        past = run(timed("mlp", seconds), label="main", env=SMALL if small else LARGE)
        past.created_at = f"2026-11-{k + 1:02d}T10:00:00+00:00"
        past.write(tmp_path / f"run-{k}" / "results.json")
    mixed = read_history(f"history:{tmp_path}", last=20)
    alike = read_history(f"history:{tmp_path}", last=20, runner=SMALL)
    assert mixed.bands["mlp"].runs == 12 and mixed.notes == []  # no runner given: all runs
    assert mixed.bands["mlp"].low < 0.5e-3  # the large runner's runs pull the band down
    band = alike.bands["mlp"]
    assert band.runs == 8 and 1e-3 <= band.low <= band.median <= band.high < 1.07e-3
    assert len(alike.runs) == 12  # the newest run is still the base of the other rules
    (note,) = alike.notes
    assert "4 of 12 runs came from other runners" in note and "AMD EPYC 7763" in note
    on_large = read_history(f"history:{tmp_path}", last=20, runner=LARGE)
    assert on_large.bands["mlp"].runs == 4 and on_large.bands["mlp"].high < 0.3e-3
    legacy = read_history(f"history:{tmp_path}", last=20, runner={"machine": "x86_64"})
    assert legacy.bands["mlp"].runs == 12  # a runner without every fact filters nothing
