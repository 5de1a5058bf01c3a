"""A diagnosed discrepancy under its own rule, and the diagnosis in results.json and the
report (escaped); crafted results, no torch."""

from __future__ import annotations

import json

from observer_ci.core.results import (
    Cause,
    Diagnosis,
    FirstDivergence,
    ProbeResult,
    RunResults,
    check_schema,
)
from observer_ci.report.markdown import render_report
from observer_ci.report.rules import DEFAULT_FAIL_ON, Thresholds, compare, parse_fail_on
from tests.support.builders import model, observation, run


def _over(abs_: float = 0.3, rel: float = 0.5, **fields):
    calls = [observation(0, abs_=abs_, rel=rel, success=False), observation(1)]
    return model("m", "discrepancy", observations=calls, **fields)


def _rules(head, base=None, fail_on=DEFAULT_FAIL_ON, thresholds=None):
    base_run = run(base, label="base") if base is not None else None
    found = compare(run(head), base_run, thresholds or Thresholds(), fail_on)
    return [(r.rule, r.fails_build) for r in found]


MASKED = Diagnosis(mask_input="attention_mask", valid_abs=2e-7, valid_rel=1e-5, masked_abs=0.3)


def test_an_error_at_masked_positions_only_warns_and_fail_on_selects_it():
    assert _rules(_over(diagnosis=MASKED)) == [("masked_positions_only", False)]
    selected = parse_fail_on("default,masked_positions_only")
    assert _rules(_over(diagnosis=MASKED), fail_on=selected) == [("masked_positions_only", True)]
    (reg,) = compare(run(_over(diagnosis=MASKED)), None, Thresholds(), DEFAULT_FAIL_ON)
    assert "only at positions the mask `attention_mask` drops" in reg.message


def test_kept_positions_over_the_report_limits_stay_a_discrepancy():
    kept = Diagnosis(mask_input="attention_mask", valid_abs=2e-3, valid_rel=1e-5, masked_abs=0.3)
    assert _rules(_over(diagnosis=kept)) == [("discrepancy", True)]
    strict = Thresholds(abs_max=1e-8)  # the report's limit, stricter than the child's
    assert _rules(_over(diagnosis=MASKED), thresholds=strict) == [("discrepancy", True)]
    assert _rules(_over(diagnosis=Diagnosis(torch_reproducible=True))) == [("discrepancy", True)]


def test_the_discrepancy_names_where_the_values_first_part():
    located = Diagnosis(True, first_divergence=FirstDivergence("encoder.layers.1.self_attn"))
    (reg,) = compare(run(_over(diagnosis=located)), None, Thresholds(), DEFAULT_FAIL_ON)
    assert reg.rule == "discrepancy" and reg.fails_build
    assert "0.001; the values first part in `encoder.layers.1.self_attn` (also: " in reg.message


def test_torch_not_reproducible_gates_under_its_own_rule():
    diagnosis = Diagnosis(torch_reproducible=False, torch_reason="the model is in training mode")
    assert _rules(_over(diagnosis=diagnosis)) == [("torch_not_reproducible", True)]
    off = parse_fail_on("default,-torch_not_reproducible")
    assert _rules(_over(diagnosis=diagnosis), fail_on=off) == [("torch_not_reproducible", False)]
    # an explained error does not also "grow" against base
    base = model("m", observations=[observation(0, abs_=1e-4, rel=1e-4)])
    found = compare(run(_over(diagnosis=diagnosis)), run(base), Thresholds(), DEFAULT_FAIL_ON)
    assert [r.rule for r in found] == ["torch_not_reproducible"]
    assert "grew" not in found[0].message and "training mode" in found[0].message
    still = compare(run(_over(diagnosis=diagnosis)), run(_over()), Thresholds(), DEFAULT_FAIL_ON)
    assert [(r.rule, r.fails_build) for r in still] == [("torch_not_reproducible", False)]
    assert still[0].message.startswith("still failing: ")


def test_a_probe_over_tolerance_only_at_masked_positions_warns():
    probe = ProbeResult(
        ran=True,
        ok=True,
        success=False,
        abs=0.04,
        cause=Cause("masked_positions_only", "at sizes never observed (...) padding"),
    )
    assert _rules(model(probe=probe)) == [("masked_positions_only", False)]
    plain = ProbeResult(ran=True, ok=True, success=False, abs=0.04)
    assert _rules(model(probe=plain)) == [("probe_failed", True)]


def test_the_diagnosis_round_trips_strictly_and_old_files_load(tmp_path):
    found = FirstDivergence(
        "encoder.layers.1.self_attn", "MultiheadAttention", ["Softmax"], abs=0.016
    )
    diagnosis = Diagnosis(
        torch_reproducible=True,
        first_divergence=found,
        seconds=0.2,
        cause=Cause("first_divergence", "they part in `encoder.layers.1.self_attn`"),
        **{k: getattr(MASKED, k) for k in ("mask_input", "valid_abs", "masked_abs")},
    )
    path = run(_over(diagnosis=diagnosis)).write(tmp_path / "results.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    check_schema(data)  # the strict reader of untrusted payloads accepts it
    back = RunResults.read(path).models[0].diagnosis
    assert back == diagnosis
    del data["models"][0]["diagnosis"]  # a file written before issue 19
    assert RunResults.from_dict(data, strict=True).models[0].diagnosis is None


def test_the_report_shows_the_diagnosis_with_untrusted_text_escaped():
    found = FirstDivergence(
        "blocks.0.<img src=x onerror=alert(1)>",
        "Evil`Class",
        ["TopK"],
        abs=3.0,
        source="net.py:12: scores.topk(2) @octocat",
        known_case="topk_ties",
    )
    diagnosis = Diagnosis(torch_reproducible=True, first_divergence=found, seconds=0.01)
    head = run(_over(diagnosis=diagnosis))
    report = render_report(head, compare(head, None, Thresholds(), DEFAULT_FAIL_ON))
    details = report.split("### Details")[1]
    assert "**Diagnosis** (10 ms):" in details
    assert "- torch against itself: a re-run reproduces its recorded outputs" in details
    assert "first divergence:" in details and "`TopK`" in details and "`topk_ties`" in details
    assert "<img" not in report and "@octocat" not in report
