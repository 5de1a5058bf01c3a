"""Rule semantics live in ``report.rules.RULE_TABLE``; the README's rule list and the report's
legend are checked against it, so a new or renamed rule cannot go undocumented."""

from __future__ import annotations

import dataclasses
import re

from observer_ci.report.markdown import render_report
from observer_ci.report.rules import RULE_TABLE, RULES, Thresholds
from observer_ci.report.tables import format_float
from tests.support import REPO_ROOT
from tests.support.builders import model, observation, run

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def paragraph(start: str) -> str:
    begin = README.index(start)
    return README[begin : README.index("\n\n", begin)]


def named_rules(text: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)`", text)) & set(RULES)


def test_the_readme_lists_every_rule_and_its_default() -> None:
    gating_list = paragraph("Rules: ")
    warning_list = paragraph("Every failed model gets a **cause**").split("Warning rules flag")[1]
    warning_list = warning_list.split("A model whose probe fails")[0]
    assert named_rules(gating_list) | named_rules(warning_list) == set(RULES)
    warnings = {r.name for r in RULE_TABLE if r.unit == "warning"}
    assert named_rules(warning_list) == warnings  # "they never fail the build"
    assert not any(r.gates_by_default for r in RULE_TABLE if r.name in warnings)
    # "By default latency, node count, op set, size and memory only warn"
    warn_only = {r.name for r in RULE_TABLE if not r.gates_by_default} - warnings
    assert {
        "latency_ratio",
        "node_count_growth",
        "op_set_changed",
        "size_growth",
        "memory_growth",
    } <= (warn_only)
    assert "latency, node count, op set, size and memory only warn" in gating_list


def test_the_legend_states_every_threshold_a_rule_trips_on() -> None:
    fields = [f.name for f in dataclasses.fields(Thresholds)]
    used = sorted({f for r in RULE_TABLE for f in fields if f in r.trips_when})
    assert len(used) >= 5  # abs_max, rel_max, abs_growth, rel_growth, latency_ratio_max, ...
    # distinct values, none a default, so each must come from the thresholds themselves
    thresholds = Thresholds(**{f: 1.0 + 0.0101 * (i + 1) for i, f in enumerate(fields)})
    head = run(model(observations=[observation()]))
    base = run(model(observations=[observation()]), label="base")
    report = render_report(head, [], base, max_chars=None, thresholds=thresholds)
    legend = report[report.index("How to read this report") :]
    missing = [f for f in used if format_float(getattr(thresholds, f)) not in legend]
    assert missing == []
