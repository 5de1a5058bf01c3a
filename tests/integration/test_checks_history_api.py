"""The client's history and check-run endpoints against the loopback fake GitHub: artifact
downloads (the token never sent to storage, a size cap), the commit graph, check runs
(annotations 50 per request, the summary cut, a 403 falling back once), history fetch errors."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from observer_ci.action.accept import Outcome
from observer_ci.action.check_run import SUMMARY_MAX_CHARS, CheckRun
from observer_ci.action.history import HISTORY_ARTIFACT, fetch_history
from observer_ci.action.settings import EventFacts, Settings
from observer_ci.action.verdict import rejudge
from observer_ci.core.exceptions import GitHubError
from observer_ci.github.sticky import sticky_marker
from observer_ci.report.rules import Regression
from tests.support.fake_github import DEFAULT_TOKEN

OWNER, REPO = "octo", "models"
SHA = "c" * 40


def settings(gh, **fields) -> Settings:
    return Settings(
        scripts=["observe/net.py"],
        token=DEFAULT_TOKEN,
        head_sha=SHA,
        repository=f"{OWNER}/{REPO}",
        github_api_url=gh.url,
        **fields,
    )


def regressions(n: int, fails: bool = True) -> list[Regression]:
    return [Regression(f"m{i}", "discrepancy", f"abs {i}", None, 1.0, fails) for i in range(n)]


def test_an_artifact_downloads_through_the_redirect_without_the_token(gh, client):
    gh.add_run(OWNER, REPO, 5, head_sha=SHA, event="push", head_branch="main")
    made = gh.more.add_artifact(OWNER, REPO, 5, HISTORY_ARTIFACT, {"results.json": b"{}"})
    (listed,) = client.run_artifacts(OWNER, REPO, 5, HISTORY_ARTIFACT)
    assert listed["id"] == made["id"] and listed["workflow_run"]["head_sha"] == SHA
    blob = client.download_artifact(OWNER, REPO, made["id"])
    assert blob[:2] == b"PK" and gh.more.blob_auth == [None]
    with pytest.raises(GitHubError, match="larger than"):
        client.download(f"/repos/{OWNER}/{REPO}/actions/artifacts/{made['id']}/zip", max_bytes=10)


def test_runs_are_listed_newest_first_with_their_filters(gh, client):
    gh.add_run(OWNER, REPO, 1, head_sha="1" * 40, event="push", head_branch="main")
    gh.add_run(OWNER, REPO, 2, head_sha="2" * 40, event="pull_request", head_branch="main")
    gh.add_run(OWNER, REPO, 3, head_sha="3" * 40, event="push", head_branch="main")
    gh.add_run(OWNER, REPO, 4, head_sha="4" * 40, event="push", head_branch="dev")
    found = client.workflow_runs(OWNER, REPO, branch="main", event="push", status="success")
    assert [r["id"] for r in found] == [3, 1]


def test_compare_and_the_commits_list_follow_the_commit_graph(gh, client):
    a, b, c, d = ("a" * 40, "b" * 40, "c" * 40, "d" * 40)
    gh.more.add_commits(OWNER, REPO, [(a, []), (b, [a]), (c, [b]), (d, [b])])
    assert client.ancestors(OWNER, REPO, c) == [c, b, a]
    assert client.compare(OWNER, REPO, a, c)["status"] == "ahead"
    diverged = client.compare(OWNER, REPO, c, d)
    assert diverged["status"] == "diverged" and diverged["merge_base_commit"]["sha"] == b


def test_annotations_go_50_per_request_and_the_summary_is_cut(gh, client):
    check = CheckRun(settings(gh))
    check.start(client)
    assert check.check_id is not None
    outputs = check.finish(client, regressions(120), "x" * (SUMMARY_MAX_CHARS + 5000))
    (run,) = gh.more.checks(OWNER, REPO)
    assert run["conclusion"] == "failure" and len(run["annotations"]) == 120
    assert len(run["output"]["summary"]) == SUMMARY_MAX_CHARS
    assert run["updates"] == 3  # completed with 50, then 50 and 20 more
    assert outputs == {"check_run_url": run["html_url"]}
    assert {a["path"] for a in run["annotations"]} == {"observe/net.py"}


def test_a_token_without_checks_write_falls_back_to_the_comment_said_once(gh, client):
    gh.inject(
        "POST",
        r"/check-runs$",
        403,
        body={"message": "Resource not accessible by integration"},
        times=2,
    )
    check = CheckRun(settings(gh))
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        check.start(client)
        outputs = check.finish(client, regressions(1), "report")
    assert outputs == {} and check.disabled
    assert stdout.getvalue().count("checks: write") == 1
    assert gh.more.checks(OWNER, REPO) == []
    assert sum(r.path.endswith("/check-runs") for r in gh.requests) == 1  # not tried again


def test_conclusions_follow_the_gate(gh, client):
    accepted = [Regression("m", "discrepancy", "x", None, 1.0, False, accepted="by @maint")]
    for found, expected in ((regressions(1, fails=False), "success"), (accepted, "neutral")):
        CheckRun(settings(gh)).finish(client, found, "report")
        assert gh.more.checks(OWNER, REPO)[-1]["conclusion"] == expected


def test_history_without_actions_read_is_a_note_not_a_failure(gh, client, tmp_path):
    gh.inject(
        "GET", r"/actions/runs$", 403, body={"message": "Resource not accessible by integration"}
    )
    notes: list[str] = []
    event = EventFacts(pr_number=1, base_sha=SHA, default_branch="main")
    found = fetch_history(settings(gh, event=event), client, tmp_path / "h", notes)
    assert found is None and "actions: read" in notes[0]


def test_a_run_without_a_usable_artifact_is_skipped(gh, client, tmp_path):
    gh.add_run(OWNER, REPO, 8, head_sha=SHA, event="push", head_branch="main")
    gh.add_run(OWNER, REPO, 9, head_sha=SHA, event="push", head_branch="main")
    gh.more.add_artifact(
        OWNER, REPO, 8, HISTORY_ARTIFACT, {"results.json": json.dumps({}).encode()}
    )
    gh.more.add_artifact(OWNER, REPO, 9, HISTORY_ARTIFACT, {"other.txt": b"x"})
    notes: list[str] = []
    event = EventFacts(pr_number=1, base_sha=SHA, default_branch="main")
    found = fetch_history(settings(gh, event=event), client, tmp_path / "h", notes)
    assert found == tmp_path / "h" and [p.parent.name for p in found.rglob("results.json")] == ["8"]


def report_comment(gh, pr: int, tail: str = "") -> None:
    body = sticky_marker("default", SHA).render() + "\nreport" + tail
    gh.seed_comments(OWNER, REPO, pr, 1, lambda i: body, login="github-actions[bot]")


def test_re_judging_a_report_that_stored_nothing_writes_no_check(gh, client):
    report_comment(gh, 3)
    gh.add_pull(OWNER, REPO, 3, head_sha=SHA, head_repository=f"{OWNER}/{REPO}")
    event = EventFacts(pr_number=3)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert rejudge(settings(gh, event=event), client) == 0
    assert "stored no regression" in out.getvalue() and gh.more.checks(OWNER, REPO) == []


def test_re_judging_a_pull_request_with_newer_commits_leaves_it_to_its_next_run(gh, client):
    stored = Outcome([], raw=regressions(1)).section()
    report_comment(gh, 4, stored)
    gh.add_pull(OWNER, REPO, 4, head_sha="e" * 40, head_repository=f"{OWNER}/{REPO}")
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert rejudge(settings(gh, event=EventFacts(pr_number=4)), client) == 0
    assert "newer commits" in out.getvalue() and gh.more.checks(OWNER, REPO) == []
