"""One regression per root cause, and a latency rule that does not cry wolf."""

from __future__ import annotations

from observer_ci.core.results import (
    ExportResult,
    ModelResult,
    ObservationResult,
    ProbeResult,
    RunResults,
)
from observer_ci.report.rules import DEFAULT_FAIL_ON, Thresholds, compare

MS = 1e-3


def call(i: int, abs_: float = 1e-7, rel: float = 1e-6, runs: list[float] | None = None):
    runs = runs or []
    median = sorted(runs)[len(runs) // 2] if runs else MS
    return ObservationResult(
        index=i,
        ok=True,
        success=abs_ <= 1e-3 and rel <= 1e-2,
        abs=abs_,
        rel=rel,
        ort_latency_s=median,
        torch_latency_s=3 * MS,
        ort_latencies_s=runs,
    )


def model(status: str = "ok", calls=None, probe_ok: bool = True, **kw) -> ModelResult:
    return ModelResult(
        name="m",
        script="m.py",
        status=status,
        export=kw.pop("export", ExportResult(ok=True, node_count=10, input_dims={"x": ["s0"]})),
        observations=calls if calls is not None else [call(0), call(1)],
        probe=ProbeResult(ran=True, ok=True, success=probe_ok, error=None if probe_ok else "x"),
        **kw,
    )


def run(m: ModelResult) -> RunResults:
    return RunResults(models=[m])


def failing(regressions):
    return [r for r in regressions if r.fails_build]


def test_a_broken_graph_is_one_failing_regression_not_abs_rel_and_probe():
    broken = model("discrepancy", [call(0, 0.5, 3.0), call(1, 0.7, 9.0)], probe_ok=False)
    for base in (None, run(model())):
        regressions = compare(run(broken), base, Thresholds(), DEFAULT_FAIL_ON)
        assert len(regressions) == 1, regressions
        (only,) = failing(regressions)
        assert only.rule == "discrepancy"
        assert only.message.startswith("max abs error 0.7 > abs_max 0.001 (also: max rel error 9")
        assert "unseen-shape probe exceeded tolerance" in only.message
        if base is not None:
            assert "grew" in only.message  # abs/rel growth named, not counted


def test_the_symptom_that_fails_the_build_is_the_one_kept():
    broken = model("discrepancy", [call(0, 0.5, 3.0)], probe_ok=False)
    rules = set(DEFAULT_FAIL_ON) - {"discrepancy"}
    (only,) = compare(run(broken), None, Thresholds(), rules)
    assert only.rule == "probe_failed" and only.fails_build
    assert "max abs error 0.5" in only.message


def test_an_export_failure_is_one_regression():
    failed = model("export_failed", [], export=ExportResult(ok=False, error="boom"), error="boom")
    regressions = compare(run(failed), run(model()), Thresholds(), DEFAULT_FAIL_ON)
    assert [(r.rule, r.fails_build) for r in regressions] == [("export_failed", True)]


def test_independent_causes_stay_separate():
    head = model(calls=[call(0, runs=[4 * MS] * 5)])
    head.export = ExportResult(ok=True, node_count=30, input_dims={"x": [2]})
    base = model(calls=[call(0, runs=[MS] * 5)])
    rules = [r.rule for r in compare(run(head), run(base), Thresholds(), DEFAULT_FAIL_ON)]
    assert rules == ["dynamic_dim_lost", "latency_ratio", "node_count_growth"]


def latency(head_runs: list[float], base_runs: list[float]):
    head, base = model(calls=[call(0, runs=head_runs)]), model(calls=[call(0, runs=base_runs)])
    found = compare(run(head), run(base), Thresholds(), DEFAULT_FAIL_ON)
    return [r for r in found if r.rule == "latency_ratio"]


def test_latency_within_the_noise_is_not_flagged():
    base = [v * MS for v in (0.9, 1.0, 1.0, 1.0, 1.1)]
    noisy_head = [v * MS for v in (0.95, 1.0, 1.6, 1.7, 2.4)]  # median ×1.6 but fast runs overlap
    assert latency(noisy_head, base) == []


def test_latency_beyond_threshold_and_noise_is_flagged():
    base = [v * MS for v in (0.9, 1.0, 1.0, 1.0, 1.1)]
    slower = [v * MS for v in (1.55, 1.6, 1.6, 1.6, 1.7)]
    (reg,) = latency(slower, base)
    assert "×1.6" in reg.message and "beyond the noise" in reg.message
    assert not reg.fails_build  # latency warns by default


def test_latency_boundaries():
    base = [MS] * 5
    assert latency([1.5 * MS] * 5, base) == []  # exactly the threshold: not over it
    assert len(latency([1.51 * MS] * 5, base)) == 1  # no spread at all: any change is real
    # head's 10% fastest runs exactly at base's 10% slowest: still noise (whole seconds keep
    # the quantiles exact: base p90 = 1 + 0.6 * (2 - 1) = 1.6, head p10 = 1.6)
    assert latency([1.6, 1.6, 2.0, 2.0, 2.0], [1.0, 1.0, 1.0, 1.0, 2.0]) == []
    assert len(latency([1.7, 1.7, 2.0, 2.0, 2.0], [1.0, 1.0, 1.0, 1.0, 2.0])) == 1


def test_latency_without_recorded_runs_uses_medians_only():
    head, base = model(calls=[call(0)]), model(calls=[call(0)])
    head.observations[0].ort_latency_s = 2 * MS
    (reg,) = [
        r
        for r in compare(run(head), run(base), Thresholds(), DEFAULT_FAIL_ON)
        if r.rule == "latency_ratio"
    ]
    assert "noise" not in reg.message
