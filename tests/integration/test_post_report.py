"""action.comment.post_report: from the action's settings to the step outputs, against the
local fake GitHub (tests/support/fake_github.py). Which gate stops a post, what the marker carries,
the shorter retry after a 422, and every failure as an output plus a warning."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import pytest

from observer_ci.action import comment
from observer_ci.action.main import github_client
from observer_ci.action.settings import EventFacts, Settings
from observer_ci.core.constants import GITHUB_COMMENT_MAX_CHARS, MARKER
from observer_ci.github.client import GitHubError
from observer_ci.github.sticky import (
    FALLBACK_COMMENT_MAX_CHARS,
    StickyMarker,
    parse_marker,
    post_failure,
)
from tests.support.fake_github import DEFAULT_TOKEN, FakeGitHub

OWNER, REPO, PR = "octo", "widgets", 17
LIST_RE = rf"^/repos/{OWNER}/{REPO}/issues/{PR}/comments$"
SHA = "ab12" * 10


class Render:
    """A report renderer that records the limits it was asked for; its report is
    ``size`` characters (or the limit, if smaller) after the bare marker line."""

    def __init__(self, size: int = 1000) -> None:
        self.size = size
        self.limits: list[int] = []

    def __call__(self, max_chars: int) -> str:
        self.limits.append(max_chars)
        body = "# report\n" + "x" * self.size
        return f"{MARKER}\n{body[: max(0, max_chars - len(MARKER) - 1)]}"


def settings_for(gh: FakeGitHub, **changes: object) -> Settings:
    base = Settings(
        scripts=["examples/x.py"],
        token=DEFAULT_TOKEN,
        github_api_url=gh.url,
        repository=f"{OWNER}/{REPO}",
        run_id="4321",
        run_attempt="2",
        head_sha=SHA,
        event=EventFacts(pr_number=PR),
    )
    return dataclasses.replace(base, **changes)


def post_report(settings: Settings, render: Callable[[int], str]) -> dict[str, str]:
    """Posts as the action does: with the job's one client."""
    return comment.post_report(settings, github_client(settings), render)


def warnings_of(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("::warning")]


# -- gates: the first that applies decides ------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "status", "logged"),
    [
        ({"post_comment": False, "dry_run": True}, "disabled", []),
        (
            {"dry_run": True, "event": EventFacts(warning="unreadable")},
            "dry-run",
            ["dry run: not posting"],
        ),
        (
            {"event": EventFacts(warning="unreadable"), "token": ""},
            "failed",
            ["the event could not be read: no comment posted"],
        ),
        (
            {"event": EventFacts(), "token": ""},
            "not-a-pull-request",
            ["not a pull request event: no comment"],
        ),
        ({"token": ""}, "no-token", []),
    ],
)
def test_a_gate_stops_the_post_before_any_request(
    gh: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    log_lines: Callable[[], list[str]],
    changes: dict,
    status: str,
    logged: list[str],
) -> None:
    render = Render()
    assert post_report(settings_for(gh, **changes), render) == {"comment_status": status}
    assert gh.requests == [] and render.limits == []
    assert log_lines() == logged
    warned = warnings_of(capsys.readouterr().out)
    if status == "no-token":
        assert warned == [
            "::warning title=observer-ci::no token: the report is in the job summary only"
        ]
    else:
        assert warned == []


# -- posting ------------------------------------------------------------------------------------


def test_the_report_is_posted_with_the_runs_marker_and_fits_it(
    gh: FakeGitHub, log_lines: Callable[[], list[str]]
) -> None:
    render = Render()
    outputs = post_report(settings_for(gh, comment_key="cpu"), render)
    (comment,) = gh.comments(OWNER, REPO, PR)
    assert outputs == {"comment_status": "created", "comment_url": comment["html_url"]}
    assert log_lines()[-1] == f"comment created: {comment['html_url']}"
    marker = StickyMarker("cpu", SHA, 4321, 2)
    assert comment["body"] == f"{marker.render()}\n# report\n" + "x" * 1000
    # the limit leaves room for the longer marker line
    assert render.limits == [GITHUB_COMMENT_MAX_CHARS - (len(marker.render()) - len(MARKER))]
    again = post_report(settings_for(gh, comment_key="cpu"), Render(5))
    assert again == {"comment_status": "updated", "comment_url": comment["html_url"]}
    assert [c["body"] for c in gh.comments(OWNER, REPO, PR)] == [
        f"{marker.render()}\n# report\nxxxxx"
    ]


@pytest.mark.parametrize(
    ("comment_key", "label", "key"),
    [("", "", "default"), ("", "py311", "py311"), ("cpu", "py311", "cpu")],
)
def test_the_sticky_key_is_the_comment_key_else_the_label(
    gh: FakeGitHub, comment_key: str, label: str, key: str
) -> None:
    settings = settings_for(gh, comment_key=comment_key, label=label)
    assert post_report(settings, Render())["comment_status"] == "created"
    (comment,) = gh.comments(OWNER, REPO, PR)
    assert parse_marker(comment["body"]) == StickyMarker(key, SHA, 4321, 2)


def test_a_run_with_unusable_facts_posts_a_marker_without_them(gh: FakeGitHub) -> None:
    settings = settings_for(gh, head_sha="not a sha -->", run_id="", run_attempt="x")
    assert post_report(settings, Render())["comment_status"] == "created"
    (comment,) = gh.comments(OWNER, REPO, PR)
    assert comment["body"].split("\n", 1)[0] == StickyMarker().render()


def test_a_422_is_answered_with_a_shorter_report_once(
    gh: FakeGitHub, log_lines: Callable[[], list[str]]
) -> None:
    gh.inject("POST", LIST_RE, 422, body={"message": "Validation Failed"})
    render = Render(size=70_000)
    outputs = post_report(settings_for(gh), render)
    assert outputs["comment_status"] == "created"
    extra = len(StickyMarker("default", SHA, 4321, 2).render()) - len(MARKER)
    first = GITHUB_COMMENT_MAX_CHARS - extra
    # the first body was `first` long: the retry asks for 3/4 of it, capped by the fallback
    assert render.limits == [first, min(FALLBACK_COMMENT_MAX_CHARS, first * 3 // 4) - extra]
    (comment,) = gh.comments(OWNER, REPO, PR)
    assert len(comment["body"]) == render.limits[1] + extra
    assert "comment rejected (Validation Failed); retrying with a shorter report" in log_lines()


def test_a_short_report_rejected_with_422_is_retried_at_three_quarters(gh: FakeGitHub) -> None:
    gh.inject("POST", LIST_RE, 422, body={"message": "Validation Failed"})
    render = Render(size=991)  # a 1000-character report with the bare marker line
    assert post_report(settings_for(gh), render)["comment_status"] == "created"
    extra = len(StickyMarker("default", SHA, 4321, 2).render()) - len(MARKER)
    body_len = len(MARKER) + 1 + len("# report\n") + 991
    assert render.limits[1] == body_len * 3 // 4 - extra


def test_a_second_422_is_a_failure_with_a_warning(
    gh: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    gh.inject("POST", LIST_RE, 422, body={"message": "Validation Failed"}, times=2)
    render = Render()
    assert post_report(settings_for(gh), render) == {"comment_status": "failed"}
    assert len(render.limits) == 2 and gh.comments(OWNER, REPO, PR) == []
    (warning,) = warnings_of(capsys.readouterr().out)
    assert "could not post the PR comment: POST http" in warning and "HTTP 422" in warning
    assert warning.endswith("; the report is in the job summary and report.md")


# -- failures: an output and a warning, never an exception ---------------------------------


def test_a_read_only_token_is_forbidden_with_the_fork_hint(
    gh: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    gh.inject("POST", LIST_RE, 403, body={"message": "Resource not accessible by integration"})
    render = Render()
    assert post_report(settings_for(gh), render) == {"comment_status": "forbidden"}
    assert len(render.limits) == 1  # not re-rendered: only a 422 is about the size
    (warning,) = warnings_of(capsys.readouterr().out)
    assert warning == (
        "::warning title=observer-ci::could not post the PR comment (a pull request from a fork"
        " gets a read-only token: post from a workflow_run job with mode: publish, see the"
        f" README's two-step example): POST {gh.url}/repos/{OWNER}/{REPO}/issues/{PR}/comments"
        " -> HTTP 403: Resource not accessible by integration; the report is in the job"
        " summary and report.md"
    )


def test_a_rate_limit_is_reported_as_such(
    gh: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    gh.inject("GET", LIST_RE, 429, headers={"Retry-After": "600"})
    assert post_report(settings_for(gh), Render()) == {"comment_status": "rate-limited"}
    (warning,) = warnings_of(capsys.readouterr().out)
    assert "rate limit" in warning and "fork" not in warning and "in about 10 min" in warning


def test_other_failures_are_failed_with_the_cause(
    gh: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    assert post_report(settings_for(gh, repository="not a repo"), Render()) == {
        "comment_status": "failed"
    }
    gh.inject("GET", LIST_RE, 404)
    assert post_report(settings_for(gh), Render()) == {"comment_status": "failed"}

    def broken(max_chars: int) -> str:
        raise RuntimeError("renderer broke")

    assert post_report(settings_for(gh), broken) == {"comment_status": "failed"}
    first, second, third = warnings_of(capsys.readouterr().out)
    assert "could not post: ValueError: GITHUB_REPOSITORY must look like" in first
    assert "could not post the PR comment: GET http" in second and "HTTP 404" in second
    assert third.endswith("could not post: RuntimeError: renderer broke")
    assert gh.comments(OWNER, REPO, PR) == []


# -- the warning's words -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "minutes"), [(0, 0), (29, 0), (31, 1), (90, 2), (150, 2), (3600, 60), (-50, 0)]
)
def test_a_rate_limit_warning_says_when_it_resets(seconds: int, minutes: int) -> None:
    error = GitHubError("API rate limit exceeded", status=403)
    error.retry_after_s = float(max(0, seconds))
    error.rate_limit_reset = 1_700_000_000.0 + seconds
    kind, warning = post_failure(error, now=1_700_000_000.0)
    assert kind == "rate-limited"
    assert f"(in about {minutes} min): " in warning
    assert warning.startswith("could not post the PR comment: GitHub's API rate limit; it resets")


def test_the_reset_time_is_printed_in_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # a runner's local time need not be UTC
    time.tzset()
    try:
        error = GitHubError("slow down", status=429)
        error.rate_limit_reset = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
        kind, warning = post_failure(error, now=1_700_000_000.0 - 120)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert kind == "rate-limited"
    assert "it resets at 22:13:20 UTC (in about 2 min): HTTP 429: slow down" in warning


@pytest.mark.parametrize(
    ("error", "kind", "text"),
    [
        (GitHubError("API rate limit exceeded", status=403), "rate-limited", "rate limit: HTTP"),
        (GitHubError("Too many", status=429), "rate-limited", "rate limit: HTTP 429: Too many"),
        (GitHubError("Resource not accessible", status=403), "forbidden", "the README's"),
        (GitHubError("Not Found", status=404), "failed", "comment: HTTP 404: Not Found"),
        (GitHubError("connection failed"), "failed", "comment: no response: connection"),
    ],
)
def test_post_failure_kinds(error: GitHubError, kind: str, text: str) -> None:
    got_kind, warning = post_failure(error)
    assert got_kind == kind and text in warning
    assert ("fork" in warning) is (kind == "forbidden")
    assert ("resets at" in warning) is False
