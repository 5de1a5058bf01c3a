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

from observer_ci.results import ProbeResult
from observer_ci.rules import (
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


@pytest.mark.parametrize(("metric", "limit"), [("abs", 1e-3), ("rel", 1e-2)])
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


def test_abs_and_rel_trip_separately():
    regs = of_rule(regressions(errors((2e-3, 1e-6), (1e-7, 5e-2))), "discrepancy")
    assert sorted(r.head_value for r in regs) == [2e-3, 5e-2]
    assert {r.message.split(" error")[0] for r in regs} == {"max abs", "max rel"}


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


def test_still_failing_is_judged_per_metric():
    # base already failed abs; head fails abs and, newly, rel: only rel fails the build
    regs = of_rule(regressions(errors((4e-3, 5e-2)), errors((2e-3, 1e-6))), "discrepancy")
    by_metric = {r.message.split(STILL_FAILING + ": ")[-1].split(" error")[0]: r for r in regs}
    assert not by_metric["max abs"].fails_build
    assert by_metric["max rel"].fails_build


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


def test_growth_to_nan_trips_and_nan_base_is_skipped():
    (reg,) = of_rule(regressions(errors((math.nan, 1e-6)), errors((1e-5, 1e-6))), "abs_growth")
    assert "×nan" in reg.message
    assert of_rule(regressions(errors((1e-5, 1e-6)), errors((math.nan, 1e-6))), "abs_growth") == []


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
