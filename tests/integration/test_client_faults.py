"""Lost connections and retry timing against the real local fake GitHub (no mocks).

A POST whose connection drops may or may not have created the comment: the client must not
re-post blindly; the sticky logic lists the comments again and updates what it finds.
"""

from __future__ import annotations

import pytest
import requests

from observer_ci.github import MARKER, upsert_sticky_comment
from observer_ci.github_client import GitHubClient, GitHubError
from tests.support.fake_github import DEFAULT_TOKEN, FakeGitHub

OWNER, REPO, PR = "octo", "widgets", 5
LIST_PATH = f"/repos/{OWNER}/{REPO}/issues/{PR}/comments"
ONE_PATH = rf"/repos/{OWNER}/{REPO}/issues/comments/\d+$"


def count(gh: FakeGitHub, method: str, path: str = LIST_PATH) -> int:
    return sum(1 for r in gh.requests if r.method == method and r.path == path)


def stickies(gh: FakeGitHub) -> list[dict]:
    return [c for c in gh.comments(OWNER, REPO, PR) if MARKER in c["body"]]


def test_post_lost_after_it_took_effect_is_not_posted_twice(gh, client, sleep):
    gh.inject_disconnect("POST", LIST_PATH, after_effect=True)
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report v1")
    assert result.action == "updated"  # found by listing again, then updated
    (only,) = stickies(gh)
    assert only["id"] == result.comment_id and only["body"] == f"{MARKER}\nreport v1"
    assert (count(gh, "POST"), count(gh, "GET")) == (1, 2)
    assert sleep.calls == [1.0]


def test_post_lost_before_it_took_effect_is_created_after_listing(gh, client, sleep):
    gh.inject_disconnect("POST", LIST_PATH)
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    assert result.action == "created"
    assert len(stickies(gh)) == 1
    assert (count(gh, "POST"), count(gh, "GET")) == (2, 2)


def test_the_client_alone_never_retries_a_lost_post(gh, client, sleep):
    gh.inject_disconnect("POST", LIST_PATH, after_effect=True)
    with pytest.raises(GitHubError) as info:
        client.post_json(LIST_PATH, {"body": "x"})
    assert info.value.ambiguous and info.value.status is None
    assert "connection failed" in str(info.value) and info.value.method == "POST"
    assert count(gh, "POST") == 1 and sleep.calls == []


def test_every_post_lost_gives_up_after_max_retries(gh, sleep, session):
    client = GitHubClient(gh.url, DEFAULT_TOKEN, max_retries=2, sleep=sleep, session=session)
    gh.inject_disconnect("POST", LIST_PATH, times=10)
    with pytest.raises(GitHubError) as info:
        upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    assert info.value.ambiguous
    assert count(gh, "POST") == 3 and count(gh, "GET") == 3
    assert sleep.calls == [1.0, 2.0]
    assert gh.comments(OWNER, REPO, PR) == []


def test_lost_patch_and_lost_listing_are_retried_by_the_client(gh, client, sleep):
    first = upsert_sticky_comment(client, OWNER, REPO, PR, "v1")
    gh.inject_disconnect("GET", LIST_PATH)
    gh.inject_disconnect("PATCH", ONE_PATH, after_effect=True)
    second = upsert_sticky_comment(client, OWNER, REPO, PR, "v2")
    assert (second.action, second.comment_id) == ("updated", first.comment_id)
    assert [c["body"] for c in stickies(gh)] == [f"{MARKER}\nv2"]
    assert count(gh, "POST") == 1 and sleep.calls == [1.0, 1.0]


def test_a_comment_deleted_since_listing_is_recreated(gh, client):
    first = upsert_sticky_comment(client, OWNER, REPO, PR, "v1")
    gh.inject("PATCH", ONE_PATH, 404)
    second = upsert_sticky_comment(client, OWNER, REPO, PR, "v2")
    assert second.action == "created" and second.comment_id != first.comment_id


def test_a_failed_update_other_than_404_is_raised_not_recreated(gh, client):
    upsert_sticky_comment(client, OWNER, REPO, PR, "v1")
    gh.inject("PATCH", ONE_PATH, 422)
    with pytest.raises(GitHubError) as info:
        upsert_sticky_comment(client, OWNER, REPO, PR, "v2")
    assert info.value.status == 422 and count(gh, "POST") == 1


# -- waits ------------------------------------------------------------------------------------


def test_backoff_doubles_and_is_capped(gh, sleep, session):
    client = GitHubClient(
        gh.url, DEFAULT_TOKEN, max_retries=5, max_backoff_s=3.0, sleep=sleep, session=session
    )
    gh.inject("GET", LIST_PATH, 503, times=5)
    assert client.get_json(LIST_PATH) == []
    assert sleep.calls == [1.0, 2.0, 3.0, 3.0, 3.0]


@pytest.mark.parametrize(
    ("status", "headers", "body", "waits"),
    [
        (429, {}, {"message": "slow down"}, [1.0]),  # no hint: backoff
        (403, {}, {"message": "You have exceeded a secondary rate limit"}, [1.0]),
        (403, {"Retry-After": "2"}, {"message": "x"}, [2.0]),
        (403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "0"}, {"message": "x"}, [0.0]),
        (429, {"Retry-After": "90"}, {"message": "x"}, [30.0]),  # capped at max_backoff_s
    ],
)
def test_rate_limit_answers_are_retried_for_a_post(gh, client, sleep, status, headers, body, waits):
    gh.inject("POST", LIST_PATH, status, headers=headers, body=body)
    assert client.post_json(LIST_PATH, {"body": "x"})["body"] == "x"
    assert sleep.calls == waits and count(gh, "POST") == 2


@pytest.mark.parametrize("status", [400, 401, 404, 410, 422])
def test_client_errors_are_not_retried(gh, client, sleep, status):
    gh.inject("GET", LIST_PATH, status, times=3)
    with pytest.raises(GitHubError) as info:
        client.get_json(LIST_PATH)
    assert info.value.status == status and not info.value.ambiguous
    assert count(gh, "GET") == 1 and sleep.calls == []


def test_a_5xx_on_patch_is_retried_but_on_post_is_ambiguous(gh, client, sleep):
    created = client.post_json(LIST_PATH, {"body": "x"})
    gh.inject("PATCH", ONE_PATH, 502)
    path = f"/repos/{OWNER}/{REPO}/issues/comments/{created['id']}"
    assert client.patch_json(path, {"body": "y"})["body"] == "y"
    assert sleep.calls == [1.0]
    gh.inject("POST", LIST_PATH, 502)
    with pytest.raises(GitHubError) as info:
        client.post_json(LIST_PATH, {"body": "z"})
    assert info.value.ambiguous and info.value.status == 502


def test_a_post_marked_idempotent_is_retried(gh, client, sleep):
    gh.inject_disconnect("POST", LIST_PATH)
    response = client.request("POST", LIST_PATH, json={"body": "x"}, idempotent=True)
    assert response.status_code == 201 and sleep.calls == [1.0]


def test_a_non_json_answer_is_a_clear_error(gh, client):
    gh.inject("GET", LIST_PATH, 200, body="<html>maintenance</html>")
    with pytest.raises(GitHubError, match="not valid JSON") as info:
        client.get_json(LIST_PATH)
    assert info.value.status == 200


def test_constructor_rejects_bad_settings():
    with pytest.raises(ValueError, match="api_url"):
        GitHubClient("", DEFAULT_TOKEN)
    with pytest.raises(ValueError, match="max_retries"):
        GitHubClient("http://127.0.0.1:9", DEFAULT_TOKEN, max_retries=-1)


def test_session_is_the_one_given(gh, sleep):
    with requests.Session() as session:
        session.trust_env = False
        session.headers["X-Probe"] = "kept"
        client = GitHubClient(gh.url, DEFAULT_TOKEN, sleep=sleep, session=session)
        client.get_json(LIST_PATH)
    assert gh.request_headers[-1]["X-Probe"] == "kept"
