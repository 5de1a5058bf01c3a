"""The accept path's pure parts: matching (the policy's), pinned values, the hidden ledger."""

from __future__ import annotations

import base64

from observer_ci.action.accept import (
    SECTION_START,
    Acceptance,
    Held,
    Outcome,
    apply,
    read_state,
    strip_section,
)
from observer_ci.action.check_run import conclusion
from observer_ci.report.rules import Regression

SHA, NEW_SHA = "a" * 40, "b" * 40


def regression(model: str = "net", rule: str = "latency_ratio", value: float = 2.0) -> Regression:
    return Regression(model, rule, f"{rule} x{value}", 1.0, value, True)


def by(rule: str = "latency_ratio", model: str = "net", source: str = "comment") -> Acceptance:
    return Acceptance(rule, model, "maint", "2026-12-03T10:00:00Z", source)


def test_a_matching_acceptance_reports_without_failing_and_names_who_and_when():
    outcome = apply([regression(), regression("other")], [by()], {}, SHA)
    accepted, other = outcome.regressions
    assert not accepted.fails_build and accepted.accepted.startswith("accepted by @maint")
    assert "2026-12-03T10:00:00Z" in accepted.message and accepted.message.endswith("x2.0")
    assert other.fails_build and not other.accepted
    assert [h.value for h in outcome.held] == [2.0] and outcome.held[0].sha == SHA
    assert conclusion(outcome.regressions) == "failure"  # the other one still fails
    assert conclusion(outcome.regressions[:1]) == "neutral"


def test_globs_rules_and_the_label_match_as_the_policy_file_does():
    label = Acceptance("all", "*", "maint", "t", "label")
    assert not any(
        r.fails_build
        for r in apply([regression("a"), regression("b")], [label], {}, SHA).regressions
    )
    glob = apply([regression("enc_1"), regression("dec_1")], [by(model="enc_*")], {}, SHA)
    assert [r.fails_build for r in glob.regressions] == [False, True]
    other_rule = apply([regression()], [by(rule="discrepancy")], {}, SHA)
    assert other_rule.regressions[0].fails_build


def test_a_new_head_keeps_the_acceptance_only_while_the_regression_did_not_grow():
    pinned = {("latency_ratio", "net"): Held("latency_ratio", "net", 2.0, SHA, "n")}
    same = apply([regression(value=2.05)], [by()], pinned, NEW_SHA)
    assert not same.regressions[0].fails_build and same.held[0].value == 2.0  # still pinned
    grown = apply([regression(value=3.0)], [by()], pinned, NEW_SHA)
    assert grown.regressions[0].fails_build and not grown.held
    assert "lapsed" in grown.lines[0] and "3.0" in grown.lines[0]
    # on the commit it was accepted on, the value moves with reruns
    rerun = apply([regression(value=3.0)], [by()], pinned, SHA)
    assert not rerun.regressions[0].fails_build


def test_without_an_acceptance_nothing_changes_even_with_a_pinned_value():
    pinned = {("latency_ratio", "net"): Held("latency_ratio", "net", 2.0, SHA, "n")}
    outcome = apply([regression()], [], pinned, NEW_SHA)
    assert outcome.regressions[0].fails_build and not outcome.held


def test_the_ledger_round_trips_through_the_comment_and_is_rewritten_not_appended():
    outcome = apply([regression()], [by()], {}, SHA)
    body = "report" + outcome.section()
    pinned, raw = read_state(body)
    assert pinned[("latency_ratio", "net")].value == 2.0
    assert raw[0].fails_build and raw[0].message == "latency_ratio x2.0"  # before acceptance
    again = strip_section(body) + Outcome(outcome.regressions, outcome.held).section()
    assert again.count(SECTION_START) == 1 and again.startswith("report")


def test_a_tampered_ledger_is_ignored_not_trusted():
    for payload in (b"not json", b'{"held": [{"rule": 1}]}', b'{"held": [{"evil": "x"}]}'):
        body = f"<!-- observer-ci:accepted {base64.b64encode(payload).decode()} -->"
        assert read_state(body) == ({}, [])
    assert read_state("<!-- observer-ci:accepted !!! -->") == ({}, [])
    assert read_state(None) == ({}, [])


def test_untrusted_names_in_the_section_are_escaped():
    outcome = apply([regression("<img src=x>")], [by(model="*")], {}, SHA)
    text = outcome.section()
    assert "<img" not in text.split("<!-- observer-ci:accepted")[0].replace(SECTION_START, "")
