"""The action's history settings: which baselines read it, what the workspace then runs,
where a push records, the bounds of ``history_runs``."""

from __future__ import annotations

import json

import pytest

from observer_ci.action.history import (
    is_default_branch_push,
    record_history,
    wants_history,
    workspace_settings,
)
from observer_ci.action.settings import EventFacts, Settings, SettingsError, event_facts
from tests.support.builders import model, run


def test_history_baselines_and_what_the_workspace_runs_for_them():
    for baseline, history, workspace in (
        ("history", True, ""),
        ("history+base", True, "base"),
        ("history:some/dir", True, ""),
        ("base", False, "base"),
        ("old/results.json", False, "old/results.json"),
    ):
        s = Settings(scripts=["x.py"], baseline=baseline)
        assert wants_history(s) is history, baseline
        assert workspace_settings(s).baseline == workspace, baseline


def test_only_a_push_to_the_default_branch_records(tmp_path):
    main = EventFacts(default_branch="main")
    push = Settings(
        scripts=["x.py"],
        event=main,
        event_name="push",
        ref="refs/heads/main",
        out_dir=str(tmp_path),
    )
    head = run(model("net"))
    assert is_default_branch_push(push)
    recorded = record_history(push, head)
    assert recorded is not None and (recorded / "results.json").is_file()
    for other in (
        Settings(scripts=["x.py"], event=main, event_name="push", ref="refs/heads/dev"),
        Settings(scripts=["x.py"], event=main, event_name="pull_request", ref="refs/heads/main"),
        Settings(scripts=["x.py"], event_name="push", ref="refs/heads/main"),  # branch unknown
    ):
        assert record_history(other, head) is None


def test_the_event_names_the_default_branch():
    facts = event_facts({"ref": "refs/heads/main", "repository": {"default_branch": "trunk"}})
    assert facts.default_branch == "trunk"
    pr = event_facts({"pull_request": {"number": 3}, "repository": {"default_branch": "main"}})
    assert pr.pr_number == 3 and pr.default_branch == "main"
    assert event_facts({"repository": "not an object"}).default_branch is None


@pytest.mark.parametrize("value", ["0", "101", "x"])
def test_history_runs_out_of_bounds_is_a_usage_error(tmp_path, value):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({}))
    env = {"INPUT_SCRIPT": "x.py", "INPUT_HISTORY_RUNS": value, "GITHUB_WORKSPACE": str(tmp_path)}
    with pytest.raises(SettingsError, match="history_runs"):
        Settings.from_env(env)
