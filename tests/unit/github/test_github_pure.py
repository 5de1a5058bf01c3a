"""Pure helpers of observer_ci.github.sticky and observer_ci.github.client (no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from observer_ci.action.settings import event_facts, read_event
from observer_ci.github.client import GitHubClient, GitHubError, rate_limit_delay
from observer_ci.github.sticky import (
    MARKER,
    StickyMarker,
    is_ours,
    our_copies,
    parse_marker,
    repo_from_env,
    select_sticky_comment,
    sticky_marker,
    with_marker,
)

# -- event parsing ------------------------------------------------------------------


def _write_event(tmp_path: Path, payload: object) -> Path:
    path = tmp_path / "event.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"action": "opened", "pull_request": {"number": 42}}, 42),
        ({"action": "created", "issue": {"number": 7, "pull_request": {"url": "x"}}}, 7),
        ({"action": "created", "issue": {"number": 7}}, None),  # comment on a plain issue
        ({"ref": "refs/heads/main", "commits": []}, None),  # push
        ({"pull_request": {"number": "12"}}, 12),
        ({"pull_request": {"number": True}}, None),
        ({"pull_request": {"number": 0}}, None),
        ({"pull_request": {"number": 1}}, 1),
        ({"pull_request": {}}, None),
        ([1, 2, 3], None),
    ],
)
def test_pr_number_from_event(tmp_path: Path, payload: object, expected: int | None) -> None:
    assert read_event(str(_write_event(tmp_path, payload))).pr_number == expected
    assert event_facts(payload).pr_number == expected


def test_event_shas_are_read_with_the_pr_number(tmp_path: Path) -> None:
    payload = {"pull_request": {"number": 5, "base": {"sha": "b" * 40}, "head": {"sha": "h" * 40}}}
    facts = read_event(str(_write_event(tmp_path, payload)))
    assert (facts.pr_number, facts.base_sha, facts.head_sha) == (5, "b" * 40, "h" * 40)
    assert facts.warning is None


def test_no_event_file_configured_is_not_a_warning() -> None:
    assert read_event(None).pr_number is None and read_event(None).warning is None
    assert read_event("").warning is None


def test_a_missing_event_file_is_a_warning(tmp_path: Path) -> None:
    facts = read_event(str(tmp_path / "missing.json"))
    assert facts.pr_number is None
    assert "does not exist" in facts.warning


def test_an_invalid_event_file_is_a_warning_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "event.json"
    path.write_text("{not json", encoding="utf-8")
    facts = read_event(str(path))
    assert facts.pr_number is None and "unreadable" in facts.warning


def test_event_facts_prefer_pull_request() -> None:
    event = {"pull_request": {"number": 3}, "issue": {"number": 9, "pull_request": {}}}
    assert event_facts(event).pr_number == 3


# -- repository parsing -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("octo/hello-world", ("octo", "hello-world")),
        ("  pytorch/pytorch\n", ("pytorch", "pytorch")),
        ("a-b/c.d_e", ("a-b", "c.d_e")),
    ],
)
def test_repo_from_env(value: str, expected: tuple[str, str]) -> None:
    assert repo_from_env(value) == expected


@pytest.mark.parametrize(
    "value",
    [None, "", "octo", "octo/", "/repo", "a/b/c", "octo/hel lo", "-octo/repo", "octo/..", "o/."],
)
def test_repo_from_env_rejects(value: str | None) -> None:
    with pytest.raises(ValueError, match="GITHUB_REPOSITORY"):
        repo_from_env(value)


# -- marker handling ----------------------------------------------------------------


def test_marker_line_round_trips_and_the_bare_marker_reads_as_default() -> None:
    marker = sticky_marker("cpu-3.11", "f" * 40, "77", "2")
    line = marker.render()
    assert (
        line == f"<!-- observer-ci:sticky-comment key=cpu-3.11 sha={'f' * 40} run=77 attempt=2 -->"
    )
    assert parse_marker(f"{line}\nreport") == marker
    assert parse_marker(f"\n  {MARKER}\nold") == StickyMarker()  # older releases
    assert parse_marker(f"see below\n{MARKER}") is None  # not on the first line
    assert parse_marker(f"> {MARKER}") is None  # quoted
    assert parse_marker(None) is None and parse_marker("no marker") is None
    assert sticky_marker(head_sha="not a sha; -->", run_id="x").render() == (
        "<!-- observer-ci:sticky-comment key=default -->"
    )


def test_with_marker_replaces_a_leading_marker_once() -> None:
    marker = sticky_marker(run_id=3, attempt=1)
    body = with_marker(f"{MARKER}\n## Report", marker)
    assert body == f"{marker.render()}\n## Report"
    assert with_marker(body, marker) == body
    assert with_marker("## Report", marker) == f"{marker.render()}\n## Report"


def _comment(cid: int, body: str, login: str = "github-actions[bot]") -> dict:
    kind = "Bot" if login.endswith("[bot]") else "User"
    return {"id": cid, "body": body, "user": {"login": login, "type": kind}}


def test_select_sticky_comment_keeps_the_oldest_of_ours() -> None:
    comments = [
        _comment(3, f"{MARKER}\nnew"),
        _comment(2, "unrelated"),
        _comment(1, f"{MARKER}\nold"),
    ]
    assert select_sticky_comment(comments)["id"] == 1
    assert [c["id"] for c in our_copies(comments, "default", None)] == [1, 3]


def test_a_persons_comment_is_never_ours() -> None:
    person = _comment(1, f"{MARKER}\ncopied the raw report", login="octocat")
    assert select_sticky_comment([person]) is None
    bot = _comment(2, f"{MARKER}\nreport")
    assert select_sticky_comment([person, bot])["id"] == 2
    # with a known identity only its own comments count, even a person's (a PAT)
    assert select_sticky_comment([person, bot], identity="octocat")["id"] == 1
    assert not is_ours(bot, "octocat")


def test_select_sticky_comment_by_key() -> None:
    a = _comment(1, sticky_marker("a").render())
    b = _comment(2, sticky_marker("b").render())
    assert select_sticky_comment([a, b], "b")["id"] == 2
    assert select_sticky_comment([a, b]) is None


def test_select_sticky_comment_none() -> None:
    assert select_sticky_comment([]) is None
    assert select_sticky_comment([_comment(1, "hi"), {"id": 2, "body": None}]) is None


# -- client helpers -----------------------------------------------------------------


def test_rate_limit_delay() -> None:
    assert rate_limit_delay({}, now=100.0) is None
    assert rate_limit_delay({"Retry-After": "7"}, now=100.0) == 7.0
    assert rate_limit_delay({"Retry-After": "Thu, 01 Jan 1970 00:01:50 GMT"}, now=100.0) == 10.0
    headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "160"}
    assert rate_limit_delay(headers, now=100.0) == 60.0
    assert rate_limit_delay({"X-RateLimit-Remaining": "12"}, now=100.0) is None
    assert rate_limit_delay({"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "5"}, 100.0) == 0


def test_error_and_client_never_show_token() -> None:
    token = "ghp_supersecret123"
    client = GitHubClient("https://api.github.com/", token)
    assert token not in repr(client)
    assert token not in str(client)
    assert "api.github.com" in repr(client)
    error = GitHubError("Bad credentials", status=401, method="GET", url="https://x/y")
    assert str(error) == "GET https://x/y -> HTTP 401: Bad credentials"
    assert (error.status, error.message, error.method, error.url) == (
        401,
        "Bad credentials",
        "GET",
        "https://x/y",
    )
    assert str(GitHubError("boom")) == "no response: boom"


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"Retry-After": "0"}, 0.0),
        ({"Retry-After": "soon"}, 0.0),  # unreadable: retry at once
        ({"Retry-After": "Thu, 01 Jan 1970 00:00:10 GMT"}, 0.0),  # a date in the past
        ({"X-RateLimit-Remaining": "0"}, 0.0),  # no reset time given
        ({"X-RateLimit-Remaining": " 0 ", "X-RateLimit-Reset": "130"}, 30.0),
    ],
)
def test_rate_limit_delay_edges(headers, wait):
    assert rate_limit_delay(headers, now=100.0) == wait


def test_github_error_defaults() -> None:
    error = GitHubError("boom")
    assert error.args == ("boom",) and error.message == "boom"
    assert error.ambiguous is False and error.rate_limited is False
    assert (error.status, error.method, error.url) == (None, None, None)
    assert (error.retry_after_s, error.rate_limit_reset) == (None, None)
