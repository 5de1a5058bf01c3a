"""Fitting the report into a size limit: never over any limit, detail dropped in order."""

from __future__ import annotations

from functools import cache

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
from observer_ci.report.markdown import (
    LEVELS,
    MARKER,
    TRUNCATION_NOTE,
    _hard_cut,
    fit_report,
    report_levels,
)
from observer_ci.report.rules import DEFAULT_FAIL_ON, Thresholds, compare


def _model(i: int, status: str, error_lines: int) -> ModelResult:
    error = "\n".join(f"  File 'x{i}.py', line {k}" for k in range(error_lines)) + "\nE: boom"
    exported = status in ("ok", "discrepancy", "ort_failed")
    return ModelResult(
        name=f"model_{i}_{'n' * (i % 7)}",
        script=f"examples/m{i}.py",
        status=status,
        error=None if status == "ok" else error,
        inputs=[InputInfo(f"in_{k}", "float32", [[2, k + 1], [3, k + 1]], [0]) for k in range(3)],
        dynamic_shapes="{'x': {0: Dim('batch')}}" * (1 + i % 5),
        export=ExportResult(
            ok=exported,
            error=None if exported else error,
            seconds=1.5,
            node_count=10 + i,
            input_names=["input_0"],
            input_dims={"input_0": ["batch", 1]},
        ),
        observations=[
            ObservationResult(
                index=k,
                ok=True,
                success=status == "ok",
                abs=1e-7 * (k + 1),
                rel=1e-6,
                hist={">0.1": 0},
                ort_latency_s=1e-3,
                torch_latency_s=3e-3,
                ort_latencies_s=[1e-3, 1.1e-3],
                inputs=f"dict(input_0:T1s2x{k})",
                outputs="T1s2x4",
            )
            for k in range(3 if exported else 0)
        ],
        probe=ProbeResult(ran=True, ok=True, success=True, shapes={"input_0": [5, 1]}),
    )


@cache
def _case(n_models: int, error_lines: int) -> tuple[RunResults, list]:
    statuses = ("ok", "export_failed", "discrepancy", "script_failed")
    models = [_model(i, statuses[i % 4], error_lines) for i in range(n_models)]
    head = RunResults(models=models, environment={"torch": "2.13"})
    return head, compare(head, None, Thresholds(), DEFAULT_FAIL_ON)


cases = st.tuples(st.integers(1, 12), st.sampled_from([0, 30, 400]))


@cache
def _levels(n_models: int, error_lines: int) -> list[str]:
    return report_levels(*_case(n_models, error_lines))


@settings(deadline=None, max_examples=120)
@given(cases, st.integers(1, 60_000))
def test_fitting_never_exceeds_the_limit_and_keeps_the_most_detail_that_fits(case, limit):
    head, regs = _case(*case)
    levels = _levels(*case)
    text, level = fit_report(head, regs, max_chars=limit)
    assert len(text) <= limit
    if limit > len(MARKER):
        assert text.startswith(MARKER)
    fitting = [k for k, candidate in enumerate(levels) if len(candidate) <= limit]
    if fitting:  # the most detailed level that fits, exactly as rendered
        assert level == LEVELS[fitting[0]] and text == levels[fitting[0]]
    else:  # nothing fits: the minimal level, hard-cut, says so when there is room
        assert level is None
        if limit >= len(MARKER) + len(TRUNCATION_NOTE) + 2:
            assert text.rstrip().endswith(TRUNCATION_NOTE)


@settings(deadline=None, max_examples=30)
@given(cases)
def test_each_level_drops_detail_the_one_before_kept(case):
    levels = _levels(*case)
    body = [text.replace(f"\n{TRUNCATION_NOTE}\n", "") for text in levels]
    assert all(len(a) >= len(b) for a, b in zip(body, body[1:])), [len(b) for b in body]
    has = [
        lambda t: "- call 0:" in t,  # (1) per-call inputs/outputs
        lambda t: "\n  File 'x0.py', line 20\n" in t,  # (2) long error tails
        lambda t: "| call |" in t,  # (3) per-call tables
        lambda t: "| input |" in t,  # (4) inputs tables
        lambda t: "<details>" in t,  # (5) every detail and the legend
    ]
    for dropped_at, present in enumerate(has, start=1):
        assert not any(present(t) for t in body[dropped_at:]), dropped_at
    assert all("| model |" in t and t.startswith(MARKER) for t in body)


def test_every_limit_near_the_hard_cut_is_respected():
    head, regs = _case(2, 0)
    minimal = _levels(2, 0)[-1]
    for limit in range(1, len(minimal) + 5):
        assert len(fit_report(head, regs, max_chars=limit)[0]) <= limit


# -- exact boundaries ----------------------------------------------------------------------


def test_a_level_exactly_as_long_as_the_limit_is_chosen():
    head, regs = _case(3, 30)
    levels = _levels(3, 30)
    for text in levels:
        first_fitting = next(k for k, t in enumerate(levels) if len(t) <= len(text))
        assert fit_report(head, regs, max_chars=len(text)) == (
            levels[first_fitting],
            LEVELS[first_fitting],
        )
    shortest = min(len(t) for t in levels)
    assert fit_report(head, regs, max_chars=shortest - 1)[1] is None


def test_levels_render_with_the_base_and_the_options():
    head, regs = _case(2, 0)
    plain = report_levels(head, regs)
    titled = report_levels(head, regs, title="nightly-gpu")
    with_base = report_levels(head, regs, head)
    assert all("nightly-gpu" in t for t in titled) and not any("nightly-gpu" in t for t in plain)
    assert all(a != b for a, b in zip(plain, with_base))


_NOTE = f"\n\n{TRUNCATION_NOTE}\n"
_MINIMAL = f"{MARKER}\n{TRUNCATION_NOTE}\n"


def test_hard_cut_keeps_whole_lines_and_strips_the_cut_end():
    text = f"{MARKER}\nline one   \nline two\nline three is long"
    room = len(f"{MARKER}\nline one   \nline tw") + len(_NOTE)
    assert _hard_cut(text, room) == f"{MARKER}\nline one{_NOTE}"


def test_hard_cut_cuts_one_long_line_mid_line():
    text = f"{MARKER}\n" + "y" * 500
    room = len(MARKER) + 1 + 300 + len(_NOTE)
    assert _hard_cut(text, room) == f"{MARKER}\n{'y' * 300}{_NOTE}"


def test_hard_cut_with_nothing_left_after_the_marker_is_the_minimal_text():
    text = f"{MARKER}\n   \n" + "z" * 500
    room = len(MARKER) + 5 + len(_NOTE)  # the cut ends in the blank line
    assert len(_MINIMAL) < room
    assert _hard_cut(text, room) == _MINIMAL


def test_hard_cut_at_and_below_the_minimal_length():
    text = f"{MARKER}\n" + "w" * 500
    assert _hard_cut(text, len(_MINIMAL)) == _MINIMAL
    assert _hard_cut(text, len(_MINIMAL) - 1) == _MINIMAL[:-1]
    assert _hard_cut(text, 5) == MARKER[:5]
