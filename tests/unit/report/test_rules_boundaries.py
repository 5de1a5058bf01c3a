"""The regression rules at their exact limits, over several outputs, and with a healthy base.

Every limit is compared with ``>``: a value exactly at the limit passes, the next float above
trips. Values are binary fractions so the ratios the rules compute are exact.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer_ci.core.results import ProbeResult
from observer_ci.report.rules import (
    DEFAULT_FAIL_ON,
    GROWTH_FLOOR,
    RULES,
    STILL_FAILING,
    Regression,
    Thresholds,
    compare,
    parse_fail_on,
    parse_thresholds,
    threshold_keys,
)
from tests.support.builders import export, model, observation, run

ABOVE = math.inf  # direction for math.nextafter


def regressions(head, base=None, thresholds=None, fail_on=DEFAULT_FAIL_ON) -> list[Regression]:
    base_run = run(base, label="base") if base is not None else None
    return compare(run(head), base_run, thresholds or Thresholds(), set(fail_on))


def of_rule(regs: list[Regression], rule: str) -> list[Regression]:
    return [r for r in regs if r.rule == rule]


def errors(*abs_rel: tuple[float, float]):
    """A model whose calls have these (abs, rel) errors, in this order."""
    return model(observations=[observation(i, a, r) for i, (a, r) in enumerate(abs_rel)])


def latency(seconds: float):
    return model(observations=[observation(0, ort=seconds), observation(1, ort=seconds)])


def nodes(count: int):
    return model(export=export(node_count=count))


# -- absolute gates ----------------------------------------------------------------------


@pytest.mark.parametrize(("metric", "limit"), [("abs", 1e-3), ("rel", 1e-1)])
def test_discrepancy_limit_is_exclusive(metric, limit):
    def head(value):
        return errors((value, 0.0)) if metric == "abs" else errors((0.0, value))

    assert of_rule(regressions(head(limit)), "discrepancy") == []
    above = math.nextafter(limit, ABOVE)
    (reg,) = of_rule(regressions(head(above)), "discrepancy")
    assert reg.fails_build and reg.head_value == above and reg.base_value is None
    assert f"max {metric} error" in reg.message and f"{metric}_max" in reg.message


def test_the_worst_call_is_found_wherever_it_is():
    worst_first = errors((5e-3, 1e-6), (1e-7, 1e-6), (2e-7, 1e-6))
    (reg,) = of_rule(regressions(worst_first), "discrepancy")
    assert reg.head_value == 5e-3
    nan_in_the_middle = errors((1e-7, 1e-6), (math.nan, 1e-6), (2e-3, 1e-6))
    (reg,) = of_rule(regressions(nan_in_the_middle), "discrepancy")
    assert math.isnan(reg.head_value)


# -- the discrepancy gate with a base ----------------------------------------------------------


def test_discrepancy_with_a_healthy_base_both_fine():
    assert regressions(errors((1e-7, 1e-6)), errors((2e-7, 1e-6))) == []


def test_discrepancy_newly_bad_against_a_healthy_base_fails_the_build():
    (reg,) = of_rule(
        regressions(errors((1e-7, 1e-6), (4e-3, 1e-6)), errors((1e-6, 1e-6))), "discrepancy"
    )
    assert reg.fails_build
    assert (reg.base_value, reg.head_value) == (1e-6, 4e-3)
    assert not reg.message.startswith(STILL_FAILING)


def test_discrepancy_still_failing_reports_but_does_not_fail():
    (reg,) = of_rule(regressions(errors((4e-3, 1e-6)), errors((2e-3, 1e-6))), "discrepancy")
    assert not reg.fails_build
    assert reg.message.startswith(STILL_FAILING) and "base 0.002" in reg.message
    assert (reg.base_value, reg.head_value) == (2e-3, 4e-3)


def test_base_exactly_at_the_limit_was_not_failing():
    (reg,) = of_rule(regressions(errors((4e-3, 1e-6)), errors((1e-3, 1e-6))), "discrepancy")
    assert reg.fails_build


def test_discrepancy_not_in_fail_on_only_warns():
    (reg,) = of_rule(regressions(errors((4e-3, 1e-6)), fail_on={"abs_growth"}), "discrepancy")
    assert not reg.fails_build


# -- growth, latency and node count ------------------------------------------------------------


@pytest.mark.parametrize("rule", ["abs_growth", "rel_growth"])
def test_growth_factor_is_exclusive(rule):
    th = Thresholds(abs_growth=4.0, rel_growth=4.0)
    old, at = 2.0**-14, 2.0**-12  # x4 exactly, below abs_max and rel_max

    def pair(value):
        return (value, 1e-6) if rule == "abs_growth" else (1e-7, value)

    base = errors(pair(old))
    assert of_rule(regressions(errors(pair(at)), base, th), rule) == []
    above = math.nextafter(at, ABOVE)
    (reg,) = of_rule(regressions(errors(pair(1e-7), pair(above)), base, th), rule)
    assert reg.fails_build and (reg.base_value, reg.head_value) == (old, above)
    assert "×4" in reg.message


def test_growth_floor_is_inclusive():
    head = errors((1e-5, 1e-6))
    assert of_rule(regressions(head, errors((GROWTH_FLOOR, 1e-6))), "abs_growth") == []
    just_above = math.nextafter(GROWTH_FLOOR, ABOVE)
    (reg,) = of_rule(regressions(head, errors((just_above, 1e-6))), "abs_growth")
    assert reg.base_value == just_above


def test_latency_ratio_is_exclusive():
    th = Thresholds(latency_ratio_max=1.5)
    assert regressions(latency(0.375), latency(0.25), th) == []
    (reg,) = regressions(latency(math.nextafter(0.375, ABOVE)), latency(0.25), th)
    assert reg.rule == "latency_ratio" and not reg.fails_build
    assert reg.base_value == 0.25 and "×1.5" in reg.message


def test_latency_below_the_floor_on_both_sides_is_noise():
    th = Thresholds(min_latency_s=2.0**-10)
    assert regressions(latency(math.nextafter(2.0**-10, 0)), latency(2.0**-12), th) == []
    (reg,) = regressions(latency(2.0**-10), latency(2.0**-12), th)  # head at the floor counts
    assert reg.rule == "latency_ratio"
    (reg,) = regressions(latency(2.0**-12), latency(2.0**-10), Thresholds(latency_ratio_max=0.1))
    assert reg.rule == "latency_ratio"  # base at the floor counts too


def test_node_growth_is_exclusive_and_a_zero_base_is_skipped():
    th = Thresholds(node_growth_max=1.5)
    assert regressions(nodes(150), nodes(100), th) == []
    (reg,) = regressions(nodes(151), nodes(100), th)
    assert (reg.rule, reg.base_value, reg.head_value) == ("node_count_growth", 100, 151)
    assert regressions(nodes(151), nodes(0), th) == []


def test_probe_failure_against_a_healthy_base_fails_and_names_the_state():
    exceeded = ProbeResult(ran=True, ok=True, success=False, abs=1.0)
    (reg,) = regressions(model(probe=exceeded), model())
    assert (reg.rule, reg.base_value, reg.head_value) == (
        "probe_failed",
        "success",
        "exceeded tolerance",
    )
    assert reg.fails_build
    not_run = model(probe=ProbeResult(ran=False, reason="no dynamic dimension"))
    (reg,) = regressions(model(probe=exceeded), not_run)
    assert reg.base_value == "not run" and reg.fails_build


# -- parsing ---------------------------------------------------------------------------------

separators = st.sampled_from([",", ", ", "\n", " ; ", " "])


@given(st.sets(st.sampled_from(RULES)), separators, st.booleans())
def test_fail_on_lists_round_trip(rules, sep, upper):
    text = sep.join(r.upper() if upper else r for r in sorted(rules))
    assert parse_fail_on(text or "none") == rules


@given(st.sets(st.sampled_from(RULES)), separators)
def test_fail_on_removals_from_all(removed, sep):
    text = sep.join(["all", *(f"-{r}" for r in sorted(removed))])
    assert parse_fail_on(text) == set(RULES) - removed


@given(st.sets(st.sampled_from(RULES)))
def test_fail_on_default_plus_rules(added):
    assert parse_fail_on(",".join(["default", *sorted(added)])) == set(DEFAULT_FAIL_ON) | added


nonneg = st.floats(min_value=0, allow_nan=False, allow_infinity=True)


@given(st.dictionaries(st.sampled_from(threshold_keys()), nonneg), separators.filter(str.strip))
def test_thresholds_round_trip(values, sep):
    text = sep.join(f"{key} = {value!r}" for key, value in values.items())
    parsed = parse_thresholds(text)
    assert parsed == dataclasses.replace(Thresholds(), **values)


@given(st.sampled_from(threshold_keys()), st.floats(max_value=-1e-300))
def test_thresholds_reject_negative(key, value):
    with pytest.raises(ValueError, match=key):
        parse_thresholds(f"{key}={value!r}")


def test_thresholds_skip_comments_and_blank_items():
    parsed = parse_thresholds("# tuned for CI\nabs_max=0.5,,\n  \nrel_max=0")
    assert (parsed.abs_max, parsed.rel_max) == (0.5, 0.0)


# -- what a reader of the report relies on: messages and values ----------------------------------

BOOM = "Traceback (most recent call last):\nRuntimeError: boom"


def failed(status: str, error: str | None = BOOM, **fields):
    return model(status=status, error=error, observations=[], **fields)


def test_failure_messages_name_the_change_against_base():
    (reg,) = regressions(failed("export_failed"), model())
    assert reg.message == "export_failed, was ok in base: RuntimeError: boom"
    (reg,) = regressions(failed("export_failed"), failed("export_failed"))
    assert reg.message == f"{STILL_FAILING} (export_failed): RuntimeError: boom"
    assert (reg.base_value, reg.head_value, reg.fails_build) == (
        "export_failed",
        "export_failed",
        False,
    )
    (reg,) = regressions(failed("ort_failed"), failed("script_failed"))
    assert (
        reg.message == f"{STILL_FAILING}: ort_failed, was script_failed in base: RuntimeError: boom"
    )


def test_failure_without_any_error_text_is_named_by_its_status():
    (reg,) = regressions(failed("export_failed", error=None))
    assert reg.message == "export_failed"
    (reg,) = regressions(failed("export_failed", error=None), failed("export_failed", error=None))
    assert reg.message == f"{STILL_FAILING} (export_failed)"


def test_failure_detail_comes_from_export_then_observations():
    from_export = failed(
        "export_failed", error=None, export=export(ok=False, error="ValueError: e")
    )
    assert regressions(from_export)[0].message == "ValueError: e"
    from_call = model(
        status="ort_failed",
        export=None,
        observations=[observation(0), observation(1, ok=False, error="InvalidArgument: x")],
    )
    (reg,) = of_rule(regressions(from_call), "ort_failed")
    assert reg.message == "InvalidArgument: x"


def test_a_new_model_failing_is_marked_new_only_when_there_is_a_base_run():
    head = run(failed("script_failed"))
    (reg,) = compare(head, run(model("other"), label="base"), Thresholds(), DEFAULT_FAIL_ON)[:1]
    assert reg.message == "script_failed (new model): RuntimeError: boom" and reg.fails_build
    (reg,) = compare(head, None, Thresholds(), DEFAULT_FAIL_ON)
    assert reg.message == "RuntimeError: boom"


def test_a_base_status_this_version_does_not_know_is_not_still_failing():
    (reg,) = regressions(failed("export_failed"), model(status="some_future_status"))
    assert reg.fails_build and reg.base_value == "some_future_status"


def test_growth_message_shows_the_ratio_and_both_values():
    th = Thresholds(abs_growth=4.0)
    (reg,) = of_rule(regressions(errors((8e-6, 1e-6)), errors((1e-6, 1e-6)), th), "abs_growth")
    assert reg.message == "max abs error grew ×8 (> ×4): 1e-06 → 8e-06"


def test_node_count_message_and_small_bases():
    (reg,) = regressions(nodes(151), nodes(100), Thresholds(node_growth_max=1.5))
    assert reg.message == "ONNX node count ×1.51 (> ×1.5): 100 → 151"
    (reg,) = regressions(nodes(2), nodes(1))
    assert (reg.base_value, reg.head_value) == (1, 2)


def test_rules_skip_quietly_what_a_base_run_does_not_have():
    no_export = model(export=None)
    no_count = model(export=export(node_count=None))
    no_calls = model(observations=[], probe=None)
    no_latency = model(observations=[observation(0, ort=None)])
    for base in (no_export, no_count, no_calls, no_latency):
        assert regressions(errors((2e-4, 1e-6)), base) == []


def test_probe_messages_and_states():
    crashed = ProbeResult(ran=True, ok=False, error="Traceback\nRuntimeError: guard")
    exceeded = ProbeResult(ran=True, ok=True, success=False, abs=1.0)
    (reg,) = regressions(model(probe=crashed))
    assert (reg.message, reg.head_value) == (
        "unseen-shape probe failed: RuntimeError: guard",
        "failed",
    )
    (reg,) = regressions(model(probe=exceeded), model(probe=crashed))
    assert reg.message == f"{STILL_FAILING}: unseen-shape probe exceeded tolerance"
    assert (reg.base_value, reg.head_value, reg.fails_build) == (
        "failed",
        "exceeded tolerance",
        False,
    )
    (reg,) = regressions(model(probe=crashed), model(probe=exceeded))
    assert reg.base_value == "exceeded tolerance"


def test_missing_model_message():
    regs = compare(run(model("a")), run(model("a"), model("b")), Thresholds(), DEFAULT_FAIL_ON)
    assert [(r.model, r.message) for r in regs] == [
        ("b", "model present in base is missing from head")
    ]


# -- dynamic dims lost ---------------------------------------------------------------------------


def shaped(observed_dims, shapes, export_dims=None, **fields):
    from observer_ci.core.results import InputInfo

    inputs = [
        InputInfo(name, "float32", shapes[name], dims) for name, dims in observed_dims.items()
    ]
    return model(inputs=inputs, export=export(input_dims=export_dims or {}, **fields))


def test_dim_lost_only_in_the_observed_inputs_is_labelled_dynamic():
    base = shaped({"x": [0]}, {"x": [[2, 8], [4, 8]]}, {"x": ["batch", 8]})
    head = shaped({"x": []}, {"x": [[3, 8], [3, 8]]}, {"x": ["batch", 8]})
    (reg,) = regressions(head, base)
    assert (reg.base_value, reg.head_value) == ("dynamic", 3)
    assert (
        reg.message
        == "input 'x' dim 0 was dynamic in base (dynamic) but is static in head (3; observed)"
    )


def test_every_lost_dim_is_reported_past_kept_ones_and_absent_inputs():
    base = shaped(
        {"gone": [0], "x": [0, 1]},
        {"gone": [[2], [3]], "x": [[2, 5], [4, 6]]},
        {"gone": ["g", 8], "x": ["batch", "seq"]},
    )
    head = shaped({"x": [0]}, {"x": [[2, 5], [4, 5], None]}, {"x": ["batch", 5]})
    (reg,) = regressions(head, base)
    assert (reg.base_value, reg.head_value) == ("seq", 5)
    assert reg.message.endswith("(5; observed, export)")


def test_a_dim_the_head_does_not_have_is_not_lost():
    base = shaped({"x": [0, 2]}, {"x": [[2, 8, 3], [4, 8, 5]]}, {"x": ["batch", 8, "seq"]})
    head = shaped({"x": [0]}, {"x": [[2, 8], [4, 8]]}, {"x": ["batch", 8]})
    assert regressions(head, base) == []


def test_varying_sizes_not_marked_dynamic_are_reported_as_static():
    base = shaped({"x": [0]}, {"x": [[2, 8], [4, 8]]}, {"x": ["batch", 8]})
    head = shaped({"x": []}, {"x": [[2, 8], [4, 8]]}, {"x": ["batch", 8]})
    (reg,) = regressions(head, base)
    assert reg.head_value == "static"


def test_a_failed_head_export_loses_no_exported_dim():
    base = shaped({"x": [0]}, {"x": [[2, 8], [4, 8]]}, {"x": ["batch", 8]})
    head = shaped({"x": [0]}, {"x": [[2, 8], [4, 8]]}, {"x": [4, 8]}, ok=False, error="e")
    assert of_rule(regressions(head, base), "dynamic_dim_lost") == []
    unexported_base = shaped({"x": [0]}, {"x": [[2, 8], [4, 8]]}, {"x": ["batch", 8]})
    unexported_base.export = None
    assert (
        regressions(shaped({"x": [0]}, {"x": [[2, 8], [4, 8]]}, {"x": [4, 8]}), unexported_base)
        == []
    )


# -- parsing messages ----------------------------------------------------------------------------


def test_parsing_errors_list_every_valid_choice():
    with pytest.raises(ValueError) as info:
        parse_fail_on("latency")
    assert str(info.value).endswith("valid: " + ", ".join(("all", "none", "default", *RULES)))
    for text in ("abs_maxx=1", "abs_max"):
        with pytest.raises(ValueError) as info:
            parse_thresholds(text)
        assert str(info.value).endswith("valid keys: " + ", ".join(threshold_keys()))
    with pytest.raises(ValueError, match="'abs_max': '1=2' is not a number"):
        parse_thresholds("abs_max=1=2")


def test_compare_files_reads_the_base_too(tmp_path):
    from observer_ci.report.rules import compare_files

    head = run(failed("export_failed")).write(tmp_path / "head.json")
    base = run(failed("export_failed"), label="base").write(tmp_path / "base.json")
    (reg,) = compare_files(base, head)
    assert reg.message.startswith(STILL_FAILING) and not reg.fails_build
