"""The policy file: per-model tolerances and fail_on, accepted regressions, errors that
name the file and the line."""

from __future__ import annotations

import pytest

from observer_ci.report.markdown import render_report
from observer_ci.report.policy import PolicyError, find_policy, load_policy
from observer_ci.report.rules import ACCEPTED, RULES, Thresholds, compare
from tests.support.builders import model, observation, run

POLICY = """\
defaults:
  abs_max: 1e-5
  fail_on: default,latency_ratio
models:
  encoder_*:
    abs_max: 1e-2
  legacy:
    accept: [discrepancy]
"""


def write(tmp_path, text):
    path = tmp_path / ".observer-ci.yml"
    path.write_text(text)
    return path


def off_by(name, error):
    return model(name, "discrepancy", observations=[observation(0, abs_=error, success=False)])


def test_one_model_passes_at_its_tolerance_while_another_fails_at_the_default(tmp_path):
    policy = load_policy(write(tmp_path, POLICY))
    thresholds, fail_on = policy.base_thresholds(""), policy.base_fail_on("default")
    assert thresholds.abs_max == 1e-5 and "latency_ratio" in fail_on
    head = run(off_by("encoder_text", 5e-3), off_by("decoder", 5e-3))
    regs = compare(head, None, thresholds, fail_on, policy)
    assert [(r.model, r.rule, r.fails_build) for r in regs] == [("decoder", "discrepancy", True)]
    assert policy.thresholds_for("encoder_text", thresholds).abs_max == 1e-2


def test_inputs_override_the_defaults_and_models_override_the_inputs(tmp_path):
    policy = load_policy(write(tmp_path, POLICY))
    run_thresholds = policy.base_thresholds("abs_max=1e-3")
    assert run_thresholds.abs_max == 1e-3
    assert policy.thresholds_for("encoder_x", run_thresholds).abs_max == 1e-2
    assert policy.base_fail_on("none") == set()
    assert ("encoder_*", 1e-2, None) in policy.tolerances()


def test_an_accepted_regression_is_reported_and_never_fails(tmp_path):
    policy = load_policy(write(tmp_path, POLICY))
    (reg,) = compare(run(off_by("legacy", 1.0)), None, Thresholds(), {"discrepancy"}, policy)
    assert not reg.fails_build and reg.message.startswith(ACCEPTED)
    report = render_report(run(off_by("legacy", 1.0)), [reg], policy_lines=policy.describe())
    assert "Policy file" in report and r"encoder\_\*: abs_max=0.01" in report  # escaped


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("defaults:\n  abs_max: 1e-3\n  abs_mx: 2\n", 3, "unknown key 'abs_mx'"),
        ("models:\n  m:\n    abs_max: tiny\n", 3, "abs_max must be a number"),
        ("models:\n  m:\n    rel_max: true\n", 3, "rel_max must be a number"),
        ("models:\n  m:\n    accept: [latency]\n", 3, "unknown rule 'latency'"),
        ("defaults:\n  fail_on: default,nope\n", 2, "unknown rule 'nope'"),
        ("thresholds:\n  abs_max: 1\n", 1, "valid keys: defaults, models"),
        ("models: [a, b]\n", 1, "must be a mapping"),
        ("defaults:\n  abs_max: -1\n", 2, "non-negative"),
        ("defaults: {abs_max: 1\n", 2, "not valid YAML"),
        ("defaults:\n  skip: slow\n", 2, "skip belongs under models"),
        ("models:\n  m:\n    skip: true\n", 3, "skip must be the reason"),
        ("models:\n  m:\n    skip: ''\n", 3, "skip must give a reason"),
        ("models:\n  m:\n    outputs: {logits: {atol: 1}}\n", 3, "valid keys: abs_max, rel_max"),
        ("models:\n  m:\n    outputs:\n      logits: {}\n", 4, "sets nothing"),
        ("models:\n  m:\n    outputs:\n      logits:\n        abs_max: x\n", 5, "a number"),
        ("models:\n  m:\n    outputs: [logits]\n", 3, "must be a mapping"),
    ],
)
def test_a_malformed_policy_names_file_line_and_valid_keys(tmp_path, text, line, says):
    path = write(tmp_path, text)
    with pytest.raises(PolicyError) as error:
        load_policy(path)
    message = str(error.value)
    assert message.startswith(f"{path}:{line}:") and says in message, message


def test_a_missing_named_policy_is_an_error_and_no_file_is_an_empty_policy(tmp_path):
    with pytest.raises(PolicyError, match="policy file not found"):
        find_policy(tmp_path / "nope.yml")
    empty = find_policy(None, root=tmp_path)
    assert empty.models == () and empty.base_thresholds("") == Thresholds()


SKIPS_AND_OUTPUTS = """\
models:
  llama_*:
    outputs:
      logits: {abs_max: 1e-2}
      "past_key_values.*": {rel_max: 0.5}
  llama_big:
    skip: "  needs   40 GB "
    outputs:
      logits: {rel_max: 0.2}
"""


def test_skips_and_output_tolerances_resolve_per_model_later_entries_winning(tmp_path):
    policy = load_policy(write(tmp_path, SKIPS_AND_OUTPUTS))
    assert policy.skip_for("llama_big") == "needs 40 GB" and policy.skip_for("llama_s") is None
    assert policy.skips() == [("llama_big", "needs 40 GB")]
    assert policy.outputs_for("llama_s") == (
        ("logits", 1e-2, None),
        ("past_key_values.*", None, 0.5),
    )
    assert policy.outputs_for("llama_big")[-1] == ("logits", None, 0.2)
    assert ("llama_*", "logits", 1e-2, None) in policy.output_tolerances()
    lines = policy.effective(["llama_s", "llama_big", "other"], Thresholds())
    assert lines == [
        "llama_s: abs_max=0.001, rel_max=0.1, outputs logits (abs_max=0.01, rel_max=0.1), "
        "outputs past_key_values.* (abs_max=0.001, rel_max=0.5)",
        "llama_big: skipped (needs 40 GB)",
    ]


def test_a_skipped_model_never_fails_the_gate(tmp_path):
    policy = load_policy(write(tmp_path, SKIPS_AND_OUTPUTS))
    skipped = model("llama_big", "skipped", export=None, observations=[], probe=None)
    base = run(model("llama_big"))
    assert compare(run(skipped), base, Thresholds(), set(RULES), policy) == []
