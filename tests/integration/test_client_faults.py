"""The GitHub client and the sticky comment under the faults a real API serves: lost
connections, 5xx, rate limits, a comment deleted under us, pagination, slow answers.

Every call goes over HTTP to the local fake (tests/support/fake_github.py); waits go
through the recording ``sleep`` of tests/conftest.py, so nothing here sleeps except the
slow-answer tests (a fraction of a second each). The outcome that matters is asserted:
how many comments exist and what they hold, not just that no exception escaped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import requests

from observer_ci.github.client import GitHubClient, GitHubError
from observer_ci.github.sticky import (
    StickyMarker,
    find_sticky_comment,
    parse_marker,
    post_failure,
    upsert_sticky_comment,
    whoami,
)
from tests.conftest import RecordingSleep
from tests.support.fake_github import BOT_LOGIN, DEFAULT_TOKEN, FakeGitHub

OWNER, REPO, PR = "octo", "faults", 3
LIST_PATH = f"/repos/{OWNER}/{REPO}/issues/{PR}/comments"
LIST_RE = rf"^{LIST_PATH}$"
ONE_RE = rf"^/repos/{OWNER}/{REPO}/issues/comments/\d+$"
LINE = StickyMarker().render()  # the marker of a run without a run id


def one_path(comment_id: int) -> str:
    return f"/repos/{OWNER}/{REPO}/issues/comments/{comment_id}"


def calls(gh: FakeGitHub, method: str, path: str = LIST_PATH) -> int:
    return sum(1 for r in gh.requests if (r.method, r.path) == (method, path))


def trace(gh: FakeGitHub) -> list[str]:
    """The requests after ``GET /user``, as ``METHOD list|one``."""
    kinds = {LIST_PATH: "list"}
    return [f"{r.method} {kinds.get(r.path, 'one')}" for r in gh.requests if r.path != "/user"]


def only_comment(gh: FakeGitHub) -> dict:
    (comment,) = gh.comments(OWNER, REPO, PR)
    return comment


def seed_ours(gh: FakeGitHub, *bodies: str) -> list[dict]:
    return gh.seed_comments(OWNER, REPO, PR, len(bodies), lambda i: bodies[i], login=BOT_LOGIN)


def quick_client(
    gh: FakeGitHub, sleep: RecordingSleep, session: requests.Session, **kwargs: float
) -> GitHubClient:
    return GitHubClient(gh.url, DEFAULT_TOKEN, sleep=sleep, session=session, **kwargs)


# -- a lost connection ---------------------------------------------------------------------------


@pytest.mark.parametrize("took_effect", [False, True], ids=["lost-before", "lost-after"])
def test_a_post_whose_connection_is_lost_leaves_exactly_one_comment(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep, took_effect: bool
) -> None:
    gh.inject_disconnect("POST", LIST_RE, after_effect=took_effect)
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    comment = only_comment(gh)
    assert comment["body"] == f"{LINE}\nreport"
    assert result.comment_id == comment["id"]
    assert sleep.calls == [1.0]
    if took_effect:  # listed again, found, nothing left to change
        assert result.action == "updated"
        assert trace(gh) == ["GET list", "POST list", "GET list"]
    else:  # listed again, not there: posted once more
        assert result.action == "created"
        assert trace(gh) == ["GET list", "POST list", "GET list", "POST list", "GET list"]


def test_the_client_never_reposts_after_a_lost_connection_itself(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    gh.inject_disconnect("POST", LIST_RE, after_effect=True)
    with pytest.raises(GitHubError) as info:
        client.post_json(LIST_PATH, {"body": "x"})
    assert info.value.ambiguous and info.value.status is None
    assert "connection failed" in str(info.value)
    assert calls(gh, "POST") == 1 and sleep.calls == []
    assert len(gh.comments(OWNER, REPO, PR)) == 1


def test_a_lost_list_patch_and_delete_are_retried_by_the_client(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    kept, extra = seed_ours(gh, f"{LINE}\nold", f"{LINE}\ncopy")
    gh.inject_disconnect("GET", LIST_RE)
    gh.inject_disconnect("PATCH", ONE_RE, after_effect=True)
    gh.inject_disconnect("DELETE", ONE_RE)
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "new")
    assert (result.action, result.comment_id, result.deleted) == ("updated", kept["id"], 1)
    assert only_comment(gh)["body"] == f"{LINE}\nnew"
    assert calls(gh, "GET") == 2 and calls(gh, "PATCH", one_path(kept["id"])) == 2
    assert calls(gh, "DELETE", one_path(extra["id"])) == 2
    assert sleep.calls == [1.0, 1.0, 1.0]
    assert calls(gh, "POST") == 0


def test_a_delete_lost_after_it_took_effect_still_leaves_one_comment(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    kept, extra = seed_ours(gh, f"{LINE}\nold", f"{LINE}\ncopy")
    gh.inject_disconnect("DELETE", ONE_RE, after_effect=True)  # the retry then gets a 404
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "new")
    assert (result.action, result.comment_id) == ("updated", kept["id"])
    assert only_comment(gh)["id"] == kept["id"]
    assert calls(gh, "DELETE", one_path(extra["id"])) == 2


# -- 5xx ---------------------------------------------------------------------------------------


def test_a_patch_answered_503_is_retried_with_backoff(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    (kept,) = seed_ours(gh, f"{LINE}\nold")
    gh.inject("PATCH", ONE_RE, 503, times=2)
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "new")
    assert (result.action, result.comment_id) == ("updated", kept["id"])
    assert only_comment(gh)["body"] == f"{LINE}\nnew"
    assert sleep.calls == [1.0, 2.0] and calls(gh, "PATCH", one_path(kept["id"])) == 3


def test_a_post_answered_5xx_each_time_it_took_effect_is_posted_once(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    gh.inject("POST", LIST_RE, 502, times=5, after_effect=True)
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    assert result.action == "updated" and result.comment_id == only_comment(gh)["id"]
    assert calls(gh, "POST") == 1 and gh.pending_faults() == 4
    assert sleep.calls == [1.0]


def test_a_post_refused_with_5xx_every_time_gives_up_without_a_comment(
    gh: FakeGitHub, sleep: RecordingSleep, session: requests.Session
) -> None:
    client = quick_client(gh, sleep, session, max_retries=2, timeout_s=5)
    gh.inject("POST", LIST_RE, 500, times=10)
    with pytest.raises(GitHubError) as info:
        upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    assert (info.value.status, info.value.ambiguous) == (500, True)
    assert calls(gh, "POST") == 3 and calls(gh, "GET") == 3  # listed before each try
    assert sleep.calls == [1.0, 2.0]
    assert gh.comments(OWNER, REPO, PR) == []
    assert post_failure(info.value)[0] == "failed"


# -- rate limits ---------------------------------------------------------------------------------


def test_x_ratelimit_reset_is_waited_for_until_the_reset(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    reset = int(time.time()) + 3
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)}  # lower case
    gh.inject("GET", LIST_RE, 403, headers=headers, body={"message": "API rate limit exceeded"})
    assert upsert_sticky_comment(client, OWNER, REPO, PR, "r").action == "created"
    (wait,) = sleep.calls
    assert 1.0 < wait <= 3.0
    assert calls(gh, "GET") == 3  # the refused list, its retry, the list after the post


def test_retry_after_wins_over_the_reset_time(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    reset = int(time.time()) + 25
    headers = {"Retry-After": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)}
    gh.inject("PATCH", ONE_RE, 429, headers=headers)
    seed_ours(gh, f"{LINE}\nold")
    assert upsert_sticky_comment(client, OWNER, REPO, PR, "new").action == "updated"
    assert sleep.calls == [2.0]
    assert only_comment(gh)["body"] == f"{LINE}\nnew"


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (429, "Too Many Requests"),
        (403, "You have exceeded a secondary rate limit. Please wait a few minutes"),
    ],
)
def test_a_rate_limit_without_headers_backs_off_and_retries_the_post(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep, status: int, message: str
) -> None:
    gh.inject("POST", LIST_RE, status, body={"message": message}, times=2)
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    assert result.action == "created" and result.comment_id == only_comment(gh)["id"]
    assert sleep.calls == [1.0, 2.0] and calls(gh, "POST") == 3


def test_a_rate_limit_that_outlasts_the_retries_is_reported_as_such(
    gh: FakeGitHub, sleep: RecordingSleep, session: requests.Session
) -> None:
    client = quick_client(gh, sleep, session, max_retries=2, timeout_s=5)
    gh.inject("POST", LIST_RE, 429, headers={"Retry-After": "1"}, times=10)
    with pytest.raises(GitHubError) as info:
        upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    error = info.value
    assert (error.status, error.retry_after_s, error.ambiguous) == (429, 1.0, False)
    assert error.rate_limited and error.rate_limit_reset == pytest.approx(time.time() + 1, abs=5)
    assert sleep.calls == [1.0, 1.0] and calls(gh, "POST") == 3
    assert gh.comments(OWNER, REPO, PR) == []
    kind, warning = post_failure(error)
    assert kind == "rate-limited" and "fork" not in warning


def test_a_retry_after_longer_than_the_backoff_cap_is_not_waited_for(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    gh.inject("GET", LIST_RE, 429, headers={"Retry-After": "120"})
    with pytest.raises(GitHubError) as info:
        upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    assert sleep.calls == [] and calls(gh, "GET") == 1
    assert info.value.retry_after_s == 120.0
    kind, warning = post_failure(info.value, now=info.value.rate_limit_reset - 120)
    assert kind == "rate-limited" and "in about 2 min" in warning


# -- a comment deleted between our list and our edit ---------------------------------------------


def test_a_comment_deleted_before_our_patch_is_created_again(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    (gone,) = seed_ours(gh, f"{LINE}\nold")
    gh.before("PATCH", ONE_RE, lambda: gh.delete_comment(OWNER, REPO, gone["id"]))
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "new")
    comment = only_comment(gh)
    assert comment["id"] != gone["id"] and comment["body"] == f"{LINE}\nnew"
    assert (result.action, result.comment_id) == ("created", comment["id"])
    assert trace(gh) == ["GET list", "PATCH one", "GET list", "POST list", "GET list"]
    assert sleep.calls == [1.0]


def test_a_duplicate_deleted_by_another_run_first_is_not_an_error(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    kept, extra = seed_ours(gh, f"{LINE}\nold", f"{LINE}\ncopy")
    gh.before("DELETE", ONE_RE, lambda: gh.delete_comment(OWNER, REPO, extra["id"]))
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "new")
    assert (result.action, result.comment_id, result.deleted) == ("updated", kept["id"], 0)
    assert only_comment(gh)["body"] == f"{LINE}\nnew"
    assert calls(gh, "DELETE", one_path(extra["id"])) == 1 and sleep.calls == []


# -- pagination ------------------------------------------------------------------------------------


def test_our_comment_on_page_two_is_updated_not_duplicated(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    seeded = gh.seed_comments(OWNER, REPO, PR, 130, lambda i: f"chat {i}", login="octocat")
    (ours,) = seed_ours(gh, f"{LINE}\nold")  # comment 131: page 2 of 100
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "new")
    assert (result.action, result.comment_id) == ("updated", ours["id"])
    assert calls(gh, "POST") == 0 and len(gh.comments(OWNER, REPO, PR)) == len(seeded) + 1
    pages = [r.query for r in gh.requests if r.path == LIST_PATH]
    assert pages == [{"per_page": "100"}, {"per_page": "100", "page": "2"}]


def test_a_fault_on_page_two_retries_that_page_only(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    seeded = gh.seed_comments(OWNER, REPO, PR, 230)
    gh.inject("GET", LIST_RE, 502, query={"page": "2"})
    gh.inject_disconnect("GET", LIST_RE, query={"page": "3"})
    listed = list(client.paginate(LIST_PATH))
    assert [c["id"] for c in listed] == [c["id"] for c in seeded]  # each once, in order
    pages = [r.query.get("page", "1") for r in gh.requests]
    assert pages == ["1", "2", "2", "3", "3"]
    assert sleep.calls == [1.0, 1.0]


# -- slow answers ----------------------------------------------------------------------------------


def test_a_list_slower_than_the_timeout_is_retried(
    gh: FakeGitHub, sleep: RecordingSleep, session: requests.Session
) -> None:
    client = quick_client(gh, sleep, session, timeout_s=0.3)
    gh.inject("GET", LIST_RE, 200, body=[], delay_s=3)
    assert upsert_sticky_comment(client, OWNER, REPO, PR, "report").action == "created"
    assert calls(gh, "GET") == 3 and sleep.calls == [1.0]
    assert only_comment(gh)["body"] == f"{LINE}\nreport"


@pytest.mark.parametrize("took_effect", [False, True], ids=["not-created", "created"])
def test_a_post_slower_than_the_timeout_leaves_exactly_one_comment(
    gh: FakeGitHub,
    sleep: RecordingSleep,
    session: requests.Session,
    took_effect: bool,
) -> None:
    client = quick_client(gh, sleep, session, timeout_s=0.3)
    gh.inject("POST", LIST_RE, 201, body={}, delay_s=3, after_effect=took_effect)
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    comment = only_comment(gh)
    assert result.comment_id == comment["id"] and comment["body"] == f"{LINE}\nreport"
    assert result.action == ("updated" if took_effect else "created")
    assert calls(gh, "POST") == (1 if took_effect else 2)
    assert sleep.calls == [1.0]


def test_an_answer_within_the_timeout_is_waited_for_not_retried(
    gh: FakeGitHub, sleep: RecordingSleep, session: requests.Session
) -> None:
    client = quick_client(gh, sleep, session, timeout_s=2.0)
    gh.inject("GET", LIST_RE, 200, body=[{"id": 5, "body": "hi"}], delay_s=0.2)
    assert client.get_json(LIST_PATH) == [{"id": 5, "body": "hi"}]
    assert calls(gh, "GET") == 1 and sleep.calls == []


def test_a_marker_found_after_faults_is_still_ours_only(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    # a person's pasted copy (older) and a lost POST: the re-list must not adopt theirs
    (person,) = gh.seed_comments(OWNER, REPO, PR, 1, lambda i: f"{LINE}\npasted", login="octocat")
    gh.inject_disconnect("POST", LIST_RE)
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    first, second = gh.comments(OWNER, REPO, PR)
    assert first == person
    assert (result.action, result.comment_id) == ("created", second["id"])
    assert parse_marker(second["body"]) == StickyMarker() and second["user"]["login"] == BOT_LOGIN
    assert sleep.calls == [1.0]


# -- answers that are not what a comment endpoint returns -----------------------------------------


@pytest.mark.parametrize(
    ("method", "body", "action"),
    [("POST", {"message": "no id"}, "created"), ("PATCH", [], "updated")],
)
def test_an_answer_without_a_comment_is_an_error_naming_the_step(
    gh: FakeGitHub, client: GitHubClient, method: str, body: object, action: str
) -> None:
    if method == "PATCH":
        seed_ours(gh, f"{LINE}\nold")
    gh.inject(method, LIST_RE if method == "POST" else ONE_RE, 200, body=body)
    with pytest.raises(GitHubError) as info:
        upsert_sticky_comment(client, OWNER, REPO, PR, "new")
    assert (
        str(info.value)
        == f"no response: unexpected response when the comment was {action}: {body!r}"
    )


def test_a_patch_answer_without_html_url_gives_an_empty_url(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    (kept,) = seed_ours(gh, f"{LINE}\nold")
    gh.inject("PATCH", ONE_RE, 200, body={"id": kept["id"]})
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "new")
    assert (result.action, result.comment_id, result.html_url) == ("updated", kept["id"], "")


def test_a_list_that_does_not_show_our_new_comment_yet_keeps_the_oldest_copy(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    # the list after our POST is stale: it misses our comment but shows a younger copy
    user = {"login": BOT_LOGIN, "type": "Bot"}
    younger = {"id": 99_999_999, "body": f"{LINE}\nracing", "user": user}
    gh.before("POST", LIST_RE, lambda: gh.inject("GET", LIST_RE, 200, body=[younger]))
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    comment = only_comment(gh)
    assert (result.action, result.comment_id) == ("created", comment["id"])
    assert calls(gh, "DELETE", one_path(younger["id"])) == 1  # 404 here: already gone
    assert result.deleted == 0 and calls(gh, "PATCH", one_path(younger["id"])) == 0


def test_another_apps_copy_appearing_meanwhile_is_not_adopted(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    # identity unknown (App token): after creating, only our login counts, not any Bot
    def other_app_posts() -> None:
        gh.seed_comments(OWNER, REPO, PR, 1, lambda i: f"{LINE}\ntheirs", login="other[bot]")

    gh.before("POST", LIST_RE, other_app_posts)
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    theirs, ours = gh.comments(OWNER, REPO, PR)
    assert theirs["body"] == f"{LINE}\ntheirs" and theirs["user"]["login"] == "other[bot]"
    assert (result.action, result.comment_id, result.deleted) == ("created", ours["id"], 0)
    assert not [r for r in gh.requests if r.method in ("PATCH", "DELETE")]


def test_every_duplicate_is_deleted_and_counted(gh: FakeGitHub, client: GitHubClient) -> None:
    kept, *copies = seed_ours(gh, f"{LINE}\na", f"{LINE}\nb", f"{LINE}\nc")
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "new")
    assert (result.comment_id, result.deleted) == (kept["id"], 2)
    assert [c["id"] for c in gh.comments(OWNER, REPO, PR)] == [kept["id"]]


@pytest.mark.parametrize(
    ("answer", "identity"),
    [
        ({"login": "ci-user", "id": 1}, "ci-user"),
        ([{"login": "ci-user"}], None),
        ({"login": 5}, None),
        ({"login": ""}, None),
        ({"id": 1}, None),
    ],
)
def test_whoami_takes_only_a_login_string(
    gh: FakeGitHub, client: GitHubClient, answer: object, identity: str | None
) -> None:
    gh.inject("GET", r"^/user$", 200, body=answer)
    assert whoami(client) == identity


def test_find_sticky_comment_honours_the_identity(gh: FakeGitHub, client: GitHubClient) -> None:
    (person,) = gh.seed_comments(OWNER, REPO, PR, 1, lambda i: f"{LINE}\nmine", login="octocat")
    (bot,) = seed_ours(gh, f"{LINE}\nbot")
    assert find_sticky_comment(client, OWNER, REPO, PR) == bot
    assert find_sticky_comment(client, OWNER, REPO, PR, identity="octocat") == person


# -- what the job log says ------------------------------------------------------------------------


def test_the_log_says_who_we_are_what_was_removed_and_who_was_newer(
    gh: FakeGitHub, client: GitHubClient, log_lines: Callable[[], list[str]]
) -> None:
    newer = StickyMarker("default", "", 5000, 1)
    seed_ours(gh, f"{newer.render()}\nrun 5000", f"{LINE}\ncopy")
    result = upsert_sticky_comment(
        client, OWNER, REPO, PR, "old", StickyMarker("default", "", 4999, 1)
    )
    assert result.action == "superseded"
    assert only_comment(gh)["body"] == f"{newer.render()}\nrun 5000"
    assert log_lines() == [
        "token identity unknown (GET /user -> 403): Bot comments count as ours",
        "removed 1 duplicate sticky comment(s)",
        "a newer run (5000, attempt 1) already reported here: left as it is",
    ]


# -- error texts: what GitHub said, as the warning shows it ----------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {
                "message": "Validation Failed",
                "errors": [
                    {"resource": "IssueComment", "field": "body", "code": "custom"},
                    {"message": "body is too long", "code": "ignored"},
                    "a plain string",
                    {},
                ],
            },
            "Validation Failed: IssueComment body custom; body is too long; a plain string",
        ),
        ({"message": "Validation Failed", "errors": []}, "Validation Failed"),
        ({"documentation_url": "x"}, "Unprocessable Entity"),  # no message: the reason
        (["not", "an", "object"], "['not', 'an', 'object']"),
        (list(range(400)), str(list(range(400)))[:500]),
        ("  plain text error\n", "plain text error"),
        ("t" * 600, "t" * 500),
        ("", "Unprocessable Entity"),
    ],
)
def test_github_error_messages_are_read_from_any_body(
    gh: FakeGitHub, client: GitHubClient, body: object, message: str
) -> None:
    gh.inject("POST", LIST_RE, 422, body=body)
    with pytest.raises(GitHubError) as info:
        client.post_json(LIST_PATH, {"body": "x"})
    assert info.value.message == message
    assert str(info.value) == f"POST {gh.url}{LIST_PATH} -> HTTP 422: {message}"
    assert (info.value.status, info.value.method, info.value.url) == (
        422,
        "POST",
        gh.url + LIST_PATH,
    )


def test_a_body_that_is_not_json_is_an_error_and_an_empty_one_is_none(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    gh.inject("GET", LIST_RE, 200, body="<html>proxy page</html>")
    with pytest.raises(GitHubError) as info:
        client.get_json(LIST_PATH, params={"since": "2024"})
    url = f"{gh.url}{LIST_PATH}?since=2024"
    assert str(info.value) == f"GET {url} -> HTTP 200: response is not valid JSON"
    gh.inject("GET", LIST_RE, 200, body="")
    assert client.get_json(LIST_PATH) is None
    assert [r.query for r in gh.requests] == [{"since": "2024"}, {}]


def test_a_paginated_endpoint_answering_no_list_is_an_error(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    gh.inject("GET", LIST_RE, 200, body={"message": "not a list"})
    with pytest.raises(GitHubError) as info:
        list(client.paginate(LIST_PATH))
    assert str(info.value) == (
        f"GET {gh.url}{LIST_PATH}?per_page=100 -> HTTP 200: "
        "expected a JSON list from a paginated endpoint"
    )


def test_a_link_to_another_origin_is_named_without_its_query(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    link = '<https://evil.example/steal?token=a?b>; rel="next"'
    gh.inject("GET", LIST_RE, 200, headers={"Link": link}, body=[])
    with pytest.raises(GitHubError) as info:
        list(client.paginate(LIST_PATH))
    assert info.value.url == "https://evil.example/steal"
    assert str(info.value) == (
        "https://evil.example/steal -> no response: "
        "refusing to send credentials to a different origin"
    )


def test_each_retry_is_logged_with_what_failed(
    gh: FakeGitHub, client: GitHubClient, log_lines: Callable[[], list[str]]
) -> None:
    gh.inject_disconnect("GET", LIST_RE)
    gh.inject("GET", LIST_RE, 503)
    assert client.get_json(LIST_PATH) == []
    url = gh.url + LIST_PATH
    assert log_lines() == [
        f"GitHub GET {url} failed (connection error), retry 1/4 in 1.0s",
        f"GitHub GET {url} failed (503), retry 2/4 in 2.0s",
    ]


def test_a_retry_after_equal_to_the_backoff_cap_is_waited_for(
    gh: FakeGitHub, sleep: RecordingSleep, session: requests.Session
) -> None:
    client = quick_client(gh, sleep, session, max_backoff_s=5.0, timeout_s=5)
    gh.inject("GET", LIST_RE, 429, headers={"Retry-After": "5"})
    assert client.get_json(LIST_PATH) == [] and sleep.calls == [5.0]
    gh.inject("GET", LIST_RE, 429, headers={"Retry-After": "5.5"})
    with pytest.raises(GitHubError):
        client.get_json(LIST_PATH)
    assert sleep.calls == [5.0]


@pytest.mark.parametrize("body", ["", {"documentation_url": "x"}])
def test_an_unknown_status_without_a_message_has_an_empty_message(
    gh: FakeGitHub, client: GitHubClient, body: object
) -> None:
    gh.inject("GET", LIST_RE, 499, body=body)  # no reason phrase on the status line either
    with pytest.raises(GitHubError) as info:
        client.get_json(LIST_PATH)
    assert (info.value.status, info.value.message) == (499, "")


def test_a_400_is_an_error_not_an_answer(gh: FakeGitHub, client: GitHubClient) -> None:
    gh.inject("GET", LIST_RE, 400, body={"message": "Problems parsing JSON"})
    with pytest.raises(GitHubError) as info:
        client.get_json(LIST_PATH)
    assert (info.value.status, info.value.message) == (400, "Problems parsing JSON")


def test_a_client_past_its_deadline_sends_nothing_and_says_what_it_gave_up(
    gh: FakeGitHub, sleep: RecordingSleep, session: requests.Session
) -> None:
    client = quick_client(gh, sleep, session, deadline_s=0.0)
    with pytest.raises(GitHubError) as info:
        client.get_json(LIST_PATH)
    assert str(info.value) == (
        f"GET {gh.url}{LIST_PATH} -> no response: "
        "gave up: no usable answer from the GitHub API within 0s"
    )
    assert gh.requests == [] and sleep.calls == []
