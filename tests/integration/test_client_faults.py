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


# -- what a failure says ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {
                "message": "Validation Failed",
                "errors": [{"resource": "IssueComment", "field": "body", "code": "missing_field"}],
            },
            "Validation Failed: IssueComment body missing_field",
        ),
        (
            {"message": "Validation Failed", "errors": ["bad", {"message": "worse"}]},
            "Validation Failed: bad; worse",
        ),
        ({"errors": []}, "Not Found"),  # no message: the HTTP reason
        (["not", "a", "dict"], "['not', 'a', 'dict']"),
        ("plain text " * 100, ("plain text " * 100)[:500].strip()),
        ("", "Not Found"),
    ],
)
def test_error_messages_carry_what_github_said(gh, client, body, message):
    gh.inject("GET", LIST_PATH, 404, body=body)
    with pytest.raises(GitHubError) as info:
        client.get_json(LIST_PATH)
    error = info.value
    assert error.message == message and error.args == (message,)
    assert (error.status, error.method, error.url) == (404, "GET", gh.url + LIST_PATH)
    assert error.ambiguous is False


def test_an_empty_success_body_is_none(gh, client):
    gh.inject("GET", LIST_PATH, 200, body="")
    assert client.get_json(LIST_PATH) is None


def test_a_non_list_page_is_a_clear_error(gh, client):
    gh.inject("GET", LIST_PATH, 200, body={"message": "not a list"})
    with pytest.raises(GitHubError) as info:
        list(client.paginate(LIST_PATH))
    assert info.value.message == "expected a JSON list from a paginated endpoint"
    assert (info.value.status, info.value.method) == (200, "GET")
    assert info.value.url.startswith(gh.url + LIST_PATH)


def test_get_json_sends_the_query(gh, client):
    client.get_json(LIST_PATH, params={"page": "2"})
    assert gh.requests[-1].query == {"page": "2"}


def test_a_refused_origin_is_named_without_its_query(gh, client):
    link = '<https://evil.example/steal?page=2?x=1>; rel="next"'
    gh.inject("GET", LIST_PATH, 200, headers={"Link": link}, body=[])
    with pytest.raises(GitHubError) as info:
        list(client.paginate(LIST_PATH))
    assert info.value.url == "https://evil.example/steal"


def test_retries_are_logged_with_method_url_cause_and_count(gh, client, caplog):
    caplog.set_level("WARNING", logger="observer_ci.github_client")
    gh.inject("GET", LIST_PATH, 502)
    gh.inject_disconnect("GET", LIST_PATH)
    client.get_json(LIST_PATH)
    url = gh.url + LIST_PATH
    assert [r.getMessage() for r in caplog.records] == [
        f"GitHub GET {url} failed (502), retry 1/4 in 1.0s",
        f"GitHub GET {url} failed (connection error), retry 2/4 in 2.0s",
    ]


# -- the sticky comment: custom marker, odd answers, odd names ----------------------------------


def test_a_custom_marker_is_used_to_find_and_to_mark(gh, client):
    marker = "<!-- other-bot -->"
    gh.seed_comments(OWNER, REPO, PR, 1, body_fn=lambda i: f"{MARKER}\ndefault report")
    first = upsert_sticky_comment(client, OWNER, REPO, PR, "custom v1", marker=marker)
    second = upsert_sticky_comment(client, OWNER, REPO, PR, "custom v2", marker=marker)
    assert first.action == "created" and (second.action, second.comment_id) == (
        "updated",
        first.comment_id,
    )
    bodies = [c["body"] for c in gh.comments(OWNER, REPO, PR)]
    assert bodies == [f"{MARKER}\ndefault report", f"{marker}\ncustom v2"]


def test_an_answer_without_id_is_an_error_and_a_missing_url_is_empty(gh, client):
    gh.inject("POST", LIST_PATH, 201, body={"html_url": "https://x"})
    with pytest.raises(GitHubError, match="unexpected response when the comment was created"):
        upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    gh.inject("POST", LIST_PATH, 201, body={"id": 7})
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    assert (result.comment_id, result.html_url) == (7, "")


def test_owner_and_repo_are_quoted_as_one_path_segment(gh, client):
    result = upsert_sticky_comment(client, "o/x", "a/b", PR, "report")
    assert result.action == "created"
    assert gh.requests[-1].path == f"/repos/o%2Fx/a%2Fb/issues/{PR}/comments"


@pytest.mark.parametrize("body", ["", {"errors": []}])
def test_an_error_without_message_or_reason_is_empty_not_invented(gh, client, body):
    gh.inject("GET", LIST_PATH, 499, body=body)  # no standard reason phrase
    with pytest.raises(GitHubError) as info:
        client.get_json(LIST_PATH)
    assert info.value.message == "" and info.value.status == 499


def test_a_long_non_dict_error_body_is_cut_at_500_characters(gh, client):
    gh.inject("GET", LIST_PATH, 404, body=list(range(300)))
    with pytest.raises(GitHubError) as info:
        client.get_json(LIST_PATH)
    assert info.value.message == str(list(range(300)))[:500]
