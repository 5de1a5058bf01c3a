"""Variants and providers without a model: parsing (CLI, action, thresholds), the rule, the
report's rows, old results files, and a crash that stays a row."""

from __future__ import annotations

import json
import os
import signal

import pytest

from observer_ci.action.child_run import child_run_options
from observer_ci.action.settings import Settings, SettingsError
from observer_ci.cli import main
from observer_ci.core.results import GraphResult, RunResults, VariantResult
from observer_ci.core.variants import VARIANT_TOLERANCES, parse_providers, parse_variants
from observer_ci.pipeline.isolated import Crashed, run_isolated, run_isolated_steps
from observer_ci.report.markdown import render_report
from observer_ci.report.rules import Thresholds, compare, parse_fail_on, parse_thresholds
from tests.support.builders import model, run


def test_variant_and_provider_lists():
    assert parse_variants("") == parse_variants(None) == parse_variants("none") == ()
    assert parse_variants("optimized, FP16,fp16") == ("fp16", "optimized")  # canonical order
    assert parse_variants("all") == ("fp16", "int8", "optimized")
    assert parse_providers("") == ("cpu",)
    assert parse_providers("cuda,cpu") == ("cuda", "cpu")
    assert parse_providers("all")[:2] == ("cpu", "cuda") and "openvino" in parse_providers("all")
    with pytest.raises(ValueError, match="unknown variant 'int4'; valid: fp16, int8, optimized"):
        parse_variants("fp16,int4")
    with pytest.raises(ValueError, match="unknown provider 'rocm'; valid: cpu, cuda, tensorrt"):
        parse_providers("rocm")


def test_per_variant_tolerances_parse_with_a_dot_and_default_from_one_table():
    th = parse_thresholds("fp16.abs_max=2e-2, int8.rel_max=3")
    assert th.variant_limits("fp16") == (2e-2, VARIANT_TOLERANCES["fp16"][1])
    assert th.variant_limits("int8") == (VARIANT_TOLERANCES["int8"][0], 3.0)
    assert th.variant_limits("optimized") == VARIANT_TOLERANCES["optimized"]
    assert th.variant_limits("float32") == (th.abs_max, th.rel_max)
    assert parse_thresholds("fp16_abs_max=0.5").fp16_abs_max == 0.5  # the field name too
    with pytest.raises(ValueError, match="unknown threshold 'int4_abs_max'"):
        parse_thresholds("int4.abs_max=1")


def test_action_inputs_reach_the_child_with_their_tolerances():
    env = {"INPUT_SCRIPT": "a.py", "INPUT_VARIANTS": "int8,fp16", "INPUT_PROVIDERS": "cuda"}
    env["INPUT_THRESHOLDS"] = "fp16.abs_max=0.05"
    s = Settings.from_env(env)
    assert s.variants == ("fp16", "int8") and s.providers == ("cuda",)
    options = child_run_options(s)  # what the child is told
    assert (options.variants, options.providers) == ("fp16,int8", "cuda")
    limits = parse_thresholds(options.thresholds)
    assert limits.fp16_abs_max == 0.05 and limits.int8_abs_max == VARIANT_TOLERANCES["int8"][0]
    plain = child_run_options(Settings.from_env({"INPUT_SCRIPT": "a.py"}))
    assert (plain.variants, plain.providers, plain.thresholds) == ("", "cpu", "")
    with pytest.raises(SettingsError, match="unknown variant 'bf16'"):
        Settings.from_env({"INPUT_SCRIPT": "a.py", "INPUT_VARIANTS": "bf16"})


def test_a_bad_variant_flag_is_a_usage_error(capsys):
    assert main(["run", "x.py", "--variants", "int3"]) == 2
    assert "unknown variant 'int3'" in capsys.readouterr().err


def variant(name="int8", provider="cpu", **fields) -> VariantResult:
    values = dict(state="ok", abs=1e-3, rel=1e-2, calls=3, calls_within=3, latency_s=1e-4)
    values.update(fields)
    return VariantResult(variant=name, provider=provider, **values)


def with_variants(*variants: VariantResult, name="m"):
    return model(name, graphs=[GraphResult(name="model", variants=list(variants))])


def test_the_rule_judges_each_row_with_the_thresholds_of_the_comparison():
    head = run(
        with_variants(
            variant("float32", abs=5.0),  # the CPU float32 row: the discrepancy rule's
            variant("int8", abs=0.3, calls_within=1),
            variant("fp16", abs=1e-3),
            variant("optimized", state="failed", reason="Could not find an implementation"),
            variant("float32, fp16", "coreml", state="skipped", reason="skipped: ..."),
        )
    )
    regs = [r for r in compare(head, None, Thresholds(), parse_fail_on("all"))]
    messages = [r.message for r in regs if r.rule == "variant_discrepancy"]
    assert messages == [
        "int8 on cpu: max abs 0.3 > int8.abs_max 0.1 (2/3 calls over)",
        "optimized on cpu: failed: Could not find an implementation",
    ]
    assert all(r.fails_build for r in regs if r.rule == "variant_discrepancy")
    base = run(with_variants(variant("int8", abs=0.2)), label="base")
    (still,) = [
        r
        for r in compare(head, base, Thresholds(), parse_fail_on("all"))
        if r.rule == "variant_discrepancy" and "int8" in r.message
    ]
    assert still.message.startswith("still failing: int8") and not still.fails_build
    assert still.base_value == 0.2 and still.head_value == 0.3


def test_report_rows_escape_what_onnxruntime_says():
    hostile = "<img src=x> @octocat ::error::boom"
    head = run(with_variants(variant("fp16", state="failed", reason=hostile), variant("int8")))
    text = render_report(head, compare(head, None, Thresholds(), set()), max_chars=None)
    assert "<img" not in text and "@octocat" not in text.replace("@\u200boctocat", "")
    assert "| ❌ | fp16 | cpu |" in text and "| ✅ | int8 | cpu | 0.001 | 0.01 | 3/3 |" in text
    assert "⚠️ fp16/cpu" in text  # the summary column names the failing variant


def test_old_results_files_without_variants_still_load(tmp_path):
    data = run(model()).to_dict()
    data["schema_version"] = 1
    for m in data["models"]:
        for g in m["graphs"]:
            g.pop("variants", None)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    assert RunResults.read(path).models[0].name == "m"
    again = RunResults.read(run(with_variants(variant())).write(tmp_path / "new.json"))
    assert again.models[0].graphs[0].variants == [variant()]


def test_a_crash_in_the_isolated_step_is_a_reason_and_the_process_lives():
    outcome = run_isolated(lambda: os.kill(os.getpid(), signal.SIGSEGV))
    assert isinstance(outcome, Crashed) and "SIGSEGV" in outcome.reason
    assert run_isolated(lambda: 6 * 7) == 42
    failed = run_isolated(lambda: 1 / 0)
    assert isinstance(failed, Crashed) and "ZeroDivisionError" in failed.reason


def test_steps_in_one_fork_go_on_after_a_crash_in_a_new_one():
    parent = os.getpid()
    steps = [
        os.getpid,
        lambda: os.kill(os.getpid(), signal.SIGSEGV),
        os.getpid,
        lambda: 1 / 0,
        lambda: "last",
    ]
    first, crash, after, error, last = run_isolated_steps(steps)
    assert parent not in (first, after) and first != after  # a new fork after the crash
    assert isinstance(crash, Crashed) and "SIGSEGV" in crash.reason
    assert isinstance(error, Crashed) and "ZeroDivisionError" in error.reason
    assert last == "last"


def test_a_fork_payload_with_variants_is_checked_field_by_field():
    from observer_ci.action.artifact import ArtifactError, parse_results

    data = run(with_variants(variant(), variant("fp16", state="failed", reason="x"))).to_dict()
    parsed = parse_results(data, "payload")
    assert parsed.models[0].graphs[0].variants[1].reason == "x"
    data["models"][0]["graphs"][0]["variants"][0]["abs"] = "0.1; rm -rf"
    with pytest.raises(ArtifactError, match=r"variants\[0\]\.abs has the wrong type"):
        parse_results(data, "payload")
    # a variant name this version does not know is judged with the float32 limits, no crash
    odd = run(with_variants(variant("__class__", abs=0.5)))
    (reg,) = [r for r in compare(odd, None, Thresholds(), set()) if r.rule == "variant_discrepancy"]
    assert "max abs 0.5 > __class__.abs_max 0.001" in reg.message
    assert "__class__" in render_report(odd, [reg], max_chars=None)


def test_a_model_with_two_graphs_gets_a_table_and_messages_per_graph():
    graphs = [
        GraphResult(name="decoder_model", variants=[variant("int8", abs=0.4)]),
        GraphResult(name="decoder_with_past_model", variants=[variant("int8", abs=0.02)]),
    ]
    head = run(model("llm", graphs=graphs))
    regs = [r for r in compare(head, None, Thresholds(), set()) if r.rule == "variant_discrepancy"]
    assert [r.message.split(":")[0] for r in regs] == ["graph decoder_model"]
    text = render_report(head, regs, max_chars=None)
    assert "**Variants of decoder_model**" in text
    assert "**Variants of decoder_with_past_model**" in text
    assert "⚠️ int8/cpu" in text  # one name in the summary column for both graphs
