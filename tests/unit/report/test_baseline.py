"""Regression rules, thresholds / fail-on parsing and matrix merging."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from observer_ci.core.legs import merge_results
from observer_ci.core.results import ExportResult, InputInfo, ProbeResult
from observer_ci.report.rules import (
    DEFAULT_FAIL_ON,
    RULES,
    Regression,
    Thresholds,
    compare,
    compare_files,
    parse_fail_on,
    parse_thresholds,
)
from tests.support.builders import model, observation, run


def check(head_model, base_model, thresholds=None, fail_on=DEFAULT_FAIL_ON) -> list[Regression]:
    base = run(base_model, label="base") if base_model is not None else None
    return compare(run(head_model), base, thresholds or Thresholds(), set(fail_on))


def rules_of(regs: list[Regression]) -> list[str]:
    return [r.rule for r in regs]


def only(regs: list[Regression], rule: str) -> Regression:
    found = [r for r in regs if r.rule == rule]
    assert len(found) == 1, regs
    return found[0]


# -- thresholds -----------------------------------------------------------------------


def test_parse_thresholds_commas_and_newlines():
    th = parse_thresholds("abs_max=1e-4, latency_ratio_max = 2\nnode_growth_max=1.5")
    assert th.abs_max == 1e-4
    assert th.latency_ratio_max == 2.0
    assert th.node_growth_max == 1.5
    assert th.rel_max == Thresholds().rel_max


def test_parse_thresholds_starts_from_base_without_mutating_it():
    base = Thresholds(abs_max=5.0)
    th = parse_thresholds("rel_max=0.5", base)
    assert (th.abs_max, th.rel_max) == (5.0, 0.5)
    assert base.rel_max == Thresholds().rel_max
    assert parse_thresholds(None, base) == base
    assert parse_thresholds("  ") == Thresholds()


def test_parse_thresholds_unknown_key_names_it_and_the_valid_keys():
    with pytest.raises(ValueError, match="abs_maxx") as info:
        parse_thresholds("abs_maxx=1")
    assert "abs_max" in str(info.value).split("valid keys:")[1]
    assert "min_latency_s" in str(info.value)


@pytest.mark.parametrize("text", ["abs_max=lots", "abs_max=-1", "abs_max=nan", "abs_max"])
def test_parse_thresholds_bad_values(text):
    with pytest.raises(ValueError, match="abs_max"):
        parse_thresholds(text)


# -- fail-on ------------------------------------------------------------------------------


def test_parse_fail_on_keywords():
    assert parse_fail_on("all") == set(RULES)
    assert parse_fail_on("none") == set()
    assert parse_fail_on("default") == set(DEFAULT_FAIL_ON)
    assert parse_fail_on(None) == set(DEFAULT_FAIL_ON)
    assert parse_fail_on("") == set(DEFAULT_FAIL_ON)


def test_parse_fail_on_lists_combine():
    assert parse_fail_on("latency_ratio, node_count_growth") == {
        "latency_ratio",
        "node_count_growth",
    }
    assert parse_fail_on("default,latency_ratio") == set(DEFAULT_FAIL_ON) | {"latency_ratio"}
    assert parse_fail_on("all,-model_missing") == set(RULES) - {"model_missing"}


def test_parse_fail_on_unknown_rule_lists_valid_ones():
    with pytest.raises(ValueError, match="latency") as info:
        parse_fail_on("default,latency")
    assert "latency_ratio" in str(info.value) and "all" in str(info.value)


def test_default_fail_on_warns_on_noisy_rules():
    assert "latency_ratio" not in DEFAULT_FAIL_ON
    assert "node_count_growth" not in DEFAULT_FAIL_ON
    assert set(RULES) >= DEFAULT_FAIL_ON


# -- rules -----------------------------------------------------------------------------------


def test_identical_runs_have_no_regressions():
    assert check(model(), model()) == []
    assert check(model(), None) == []


@pytest.mark.parametrize(
    ("status", "rule"),
    [
        ("script_failed", "script_failed"),
        ("export_failed", "export_failed"),
        ("observe_failed", "observe_failed"),
        ("ort_failed", "ort_failed"),
    ],
)
def test_failure_rules_fire_when_base_was_fine(status, rule):
    head = model(status=status, error="Traceback\nRuntimeError: boom", observations=[])
    reg = only(check(head, model()), rule)
    assert reg.fails_build
    assert "RuntimeError: boom" in reg.message
    assert (reg.base_value, reg.head_value) == ("ok", status)


@pytest.mark.parametrize(
    "status", ["script_failed", "observe_failed", "export_failed", "ort_failed"]
)
def test_failure_rules_fire_without_base(status):
    reg = only(check(model(status=status, observations=[]), None), status)
    assert reg.fails_build


@pytest.mark.parametrize("status", ["script_failed", "export_failed", "ort_failed"])
def test_failing_in_both_is_still_failing_and_does_not_fail_build(status):
    regs = check(model(status=status, observations=[]), model(status=status, observations=[]))
    reg = only(regs, status)
    assert not reg.fails_build
    assert reg.message.startswith("still failing")


def test_failure_that_improves_on_base_does_not_fail_build():
    regs = check(model(status="ort_failed", observations=[]), model(status="export_failed"))
    reg = only(regs, "ort_failed")
    assert not reg.fails_build


def test_failure_rule_not_in_fail_on_only_warns():
    reg = only(
        check(model(status="export_failed"), model(), fail_on={"discrepancy"}), "export_failed"
    )
    assert not reg.fails_build


@pytest.mark.parametrize(("abs_", "rel"), [(2e-3, 1e-6), (1e-7, 2e-1), (float("nan"), 1e-6)])
def test_discrepancy_fires_over_absolute_thresholds(abs_, rel):
    head = model(observations=[observation(0), observation(1, abs_=abs_, rel=rel)])
    reg = only(check(head, None), "discrepancy")
    assert reg.fails_build


def test_discrepancy_near_miss():
    head = model(observations=[observation(0, abs_=9e-4, rel=9e-2)])
    assert "discrepancy" not in rules_of(check(head, None))


def test_discrepancy_already_in_base_is_still_failing():
    head = model(observations=[observation(0, abs_=3e-3)])
    base = model(observations=[observation(0, abs_=2e-3)])
    reg = only(check(head, base), "discrepancy")
    assert not reg.fails_build and "still failing" in reg.message


def test_abs_growth_fires_below_abs_max():
    head = model(observations=[observation(0, abs_=2e-4)])
    base = model(observations=[observation(0, abs_=1e-5)])
    regs = check(head, base)
    reg = only(regs, "abs_growth")
    assert reg.fails_build
    assert (reg.base_value, reg.head_value) == (1e-5, 2e-4)
    assert "discrepancy" not in rules_of(regs)


def test_abs_growth_near_miss():
    head = model(observations=[observation(0, abs_=9e-5)])
    regs = check(head, model(observations=[observation(0, abs_=1e-5)]))
    assert "abs_growth" not in rules_of(regs)


def test_growth_ignored_when_base_is_below_noise_floor():
    head = model(observations=[observation(0, abs_=1e-5, rel=1e-5)])
    base = model(observations=[observation(0, abs_=1e-8, rel=1e-8)])
    assert check(head, base) == []


def test_rel_growth_fires_and_near_miss():
    base = model(observations=[observation(0, rel=1e-5)])
    reg = only(check(model(observations=[observation(0, rel=5e-4)]), base), "rel_growth")
    assert reg.fails_build
    assert "rel_growth" not in rules_of(check(model(observations=[observation(0, rel=9e-5)]), base))


def test_dynamic_dim_lost_from_observed_inputs():
    head = model(
        inputs=[InputInfo("x", "float32", [[2, 8], [2, 8]], [])],
        export=dataclasses.replace(model().export, input_dims={"x": [2, 8]}),
    )
    reg = only(check(head, model()), "dynamic_dim_lost")
    assert reg.fails_build
    assert (reg.base_value, reg.head_value) == ("batch", 2)
    assert "'x' dim 0" in reg.message


def test_dynamic_dim_lost_in_export_only():
    head = model(export=dataclasses.replace(model().export, input_dims={"x": [4, 8]}))
    reg = only(check(head, model()), "dynamic_dim_lost")
    assert reg.head_value == 4
    assert "export" in reg.message and "observed" not in reg.message


def test_dynamic_dim_kept_or_head_not_exported_does_not_fire():
    renamed = model(export=dataclasses.replace(model().export, input_dims={"x": ["s0", 8]}))
    assert check(renamed, model()) == []
    failed = model(status="export_failed", export=ExportResult(ok=False, error="boom"))
    assert "dynamic_dim_lost" not in rules_of(check(failed, model()))


def test_latency_ratio_warns_by_default():
    head = model(observations=[observation(0, ort=2e-3)])
    reg = only(check(head, model()), "latency_ratio")
    assert not reg.fails_build
    assert (reg.base_value, reg.head_value) == (1e-3, 2e-3)
    assert only(check(head, model(), fail_on={"latency_ratio"}), "latency_ratio").fails_build


def test_latency_ratio_near_miss_and_noise():
    assert check(model(observations=[observation(0, ort=1.4e-3)]), model()) == []
    fast_head = model(observations=[observation(0, ort=9e-5)])
    fast_base = model(observations=[observation(0, ort=1e-5)])
    assert check(fast_head, fast_base) == []
    assert check(model(), None) == []


def test_node_count_growth():
    grown = model(export=dataclasses.replace(model().export, node_count=111))
    reg = only(check(grown, model()), "node_count_growth")
    assert (reg.base_value, reg.head_value, reg.fails_build) == (100, 111, False)
    same_ratio = model(export=dataclasses.replace(model().export, node_count=110))
    assert check(same_ratio, model()) == []


def test_probe_failed_fires_when_base_probe_succeeded():
    bad_probe = ProbeResult(ran=True, ok=False, error="Traceback\nRuntimeError: guard")
    reg = only(check(model(probe=bad_probe), model()), "probe_failed")
    assert reg.fails_build
    assert "RuntimeError: guard" in reg.message
    reg = only(check(model(probe=bad_probe), None), "probe_failed")
    assert reg.fails_build


def test_probe_failed_near_misses():
    bad_probe = ProbeResult(ran=True, ok=True, success=False, abs=1.0)
    reg = only(check(model(probe=bad_probe), model(probe=bad_probe)), "probe_failed")
    assert not reg.fails_build and reg.message.startswith("still failing")
    not_run = ProbeResult(ran=False, reason="no dynamic dimension")
    assert check(model(probe=not_run), model()) == []


def test_model_missing():
    head = run(model("a"))
    base = run(model("a"), model("b"), label="base")
    regs = compare(head, base, Thresholds(), DEFAULT_FAIL_ON)
    reg = only(regs, "model_missing")
    assert (reg.model, reg.base_value, reg.head_value, reg.fails_build) == ("b", "ok", None, False)
    assert only(compare(head, base, Thresholds(), set(RULES)), "model_missing").fails_build
    assert compare(run(model("a"), model("b")), base, Thresholds(), DEFAULT_FAIL_ON) == []


def test_ordering_is_deterministic():
    models = [model(n, status="export_failed", observations=[]) for n in "cab"]
    head1, head2 = run(*models), run(*reversed(models))
    base = run(*(model(n) for n in "abc"))
    regs1 = compare(head1, base, Thresholds(), DEFAULT_FAIL_ON)
    regs2 = compare(head2, base, Thresholds(), DEFAULT_FAIL_ON)
    assert regs1 == regs2
    assert [r.model for r in regs1] == ["a", "b", "c"]


def test_compare_files(tmp_path):
    base_path = run(model(), label="base").write(tmp_path / "base.json")
    head_path = run(model(status="script_failed", observations=[])).write(tmp_path / "head.json")
    regs = compare_files(base_path, head_path)
    assert rules_of(regs) == ["script_failed"] and regs[0].fails_build
    assert compare_files(None, head_path, fail_on=set())[0].fails_build is False


# -- merging -------------------------------------------------------------------------------


def test_merge_results_disambiguates_duplicates_with_labels():
    cpu = run(model("shared"), model("only_cpu"), label="cpu", env={"torch": "2.9", "cpu": 1})
    gpu = run(model("shared"), label="gpu", env={"torch": "2.9", "cpu": 2})
    before = copy.deepcopy(cpu)
    merged = merge_results([cpu, gpu])
    assert [m.name for m in merged.models] == ["shared [cpu]", "only_cpu", "shared [gpu]"]
    assert merged.environment["torch"] == "2.9"
    assert "cpu" not in merged.environment
    parts = merged.environment["parts"]
    assert [p["label"] for p in parts] == ["cpu", "gpu"]
    assert parts[1]["environment"]["cpu"] == 2
    assert cpu == before  # inputs untouched


def test_merge_results_unlabelled_parts_and_same_label():
    merged = merge_results([run(model("m"), label=""), run(model("m"), label="")])
    assert [m.name for m in merged.models] == ["m [part1]", "m [part2]"]
    same = merge_results([run(model("m"), label="x"), run(model("m"), label="x")])
    names = [m.name for m in same.models]
    assert names == ["m [x]", "m [x] #2"]
    assert len(set(names)) == 2
    assert merge_results([]).models == []
