"""Pure helpers of observer_ci.github and observer_ci.github_client (no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from observer_ci.github import (
    MARKER,
    PostResult,
    ensure_marker,
    marker_rank,
    repo_from_env,
    select_sticky_comment,
)
from observer_ci.github_client import GitHubClient, GitHubError, rate_limit_delay
from observer_ci.settings import event_facts, read_event

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


def test_marker_constant() -> None:
    assert MARKER == "<!-- observer-ci:sticky-comment -->"


def test_ensure_marker_prepends_once() -> None:
    body = ensure_marker("## Report\nall good")
    assert body.splitlines()[0] == MARKER
    assert body.endswith("## Report\nall good")
    assert ensure_marker(body) == body
    assert ensure_marker(f"intro\n{MARKER}\n") == f"intro\n{MARKER}\n"


def test_marker_rank() -> None:
    assert marker_rank(f"{MARKER}\nreport") == 2
    assert marker_rank(f"\n  {MARKER}") == 2
    assert marker_rank(f"see below\n{MARKER}") == 1
    assert marker_rank("no marker here") == 0
    assert marker_rank(None) == 0
    assert marker_rank("<!-- other -->", marker="<!-- other -->") == 2


def _comment(cid: int, body: str, created: str) -> dict:
    return {"id": cid, "body": body, "created_at": created}


def test_select_sticky_comment_prefers_most_recent() -> None:
    comments = [
        _comment(1, f"{MARKER}\nold", "2024-01-01T00:00:01Z"),
        _comment(2, "unrelated", "2024-01-01T00:00:02Z"),
        _comment(3, f"{MARKER}\nnew", "2024-01-01T00:00:03Z"),
        _comment(4, "unrelated", "2024-01-01T00:00:04Z"),
    ]
    assert select_sticky_comment(comments)["id"] == 3
    assert select_sticky_comment(reversed(comments))["id"] == 3


def test_select_sticky_comment_prefers_marker_first_line() -> None:
    comments = [
        _comment(1, f"{MARKER}\nreport", "2024-01-01T00:00:01Z"),
        _comment(2, f"quoting the bot: {MARKER}", "2024-01-01T00:00:09Z"),
    ]
    assert select_sticky_comment(comments)["id"] == 1
    assert select_sticky_comment(comments[1:])["id"] == 2


def test_select_sticky_comment_prefers_the_bot_over_a_person_quoting_the_marker() -> None:
    bot = {**_comment(1, f"{MARKER}\nreport", "2024-01-01T00:00:01Z"), "user": {"type": "Bot"}}
    person = {
        **_comment(2, f"{MARKER}\ncopied the raw report", "2024-01-01T00:00:09Z"),
        "user": {"type": "User"},
    }
    assert select_sticky_comment([bot, person])["id"] == 1
    assert select_sticky_comment([person])["id"] == 2  # still found when it is the only one


def test_select_sticky_comment_ties_break_on_id() -> None:
    same = "2024-01-01T00:00:01Z"
    comments = [_comment(5, MARKER, same), _comment(6, MARKER, same)]
    assert select_sticky_comment(comments)["id"] == 6


def test_select_sticky_comment_none() -> None:
    assert select_sticky_comment([]) is None
    assert select_sticky_comment([_comment(1, "hi", "x"), {"id": 2, "body": None}]) is None


def test_post_result_is_a_value() -> None:
    assert PostResult("created", 1, "u") == PostResult("created", 1, "u")


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
