"""GitHubClient and the sticky-comment logic against a real local HTTP fake of GitHub.

No mocks: every call goes over HTTP to ``tests.support.fake_github``. Waits go
through a recording ``sleep`` so retry timing is asserted without sleeping.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest
import requests

from observer_ci.github.client import GitHubClient, GitHubError
from observer_ci.github.sticky import (
    MARKER,
    PostResult,
    StickyMarker,
    find_sticky_comment,
    parse_marker,
    post_failure,
    sticky_marker,
    upsert_sticky_comment,
)
from tests.conftest import RecordingSleep
from tests.support.fake_github import BOT_LOGIN, DEFAULT_TOKEN, FakeGitHub

TOKEN = DEFAULT_TOKEN  # what the shared `gh` fixture (tests/conftest.py) accepts
OWNER, REPO, PR = "octo", "widgets", 17
LIST_PATH = f"/repos/{OWNER}/{REPO}/issues/{PR}/comments"
DEFAULT_LINE = StickyMarker().render()  # default key, no run


def make_client(
    gh: FakeGitHub,
    sleep: RecordingSleep,
    session: requests.Session,
    *,
    token: str = TOKEN,
    **kwargs: float,
) -> GitHubClient:
    return GitHubClient(gh.url, token, sleep=sleep, session=session, timeout_s=5, **kwargs)


def calls(gh: FakeGitHub, method: str, path: str = LIST_PATH) -> int:
    return sum(1 for r in gh.requests if (r.method, r.path) == (method, path))


# -- the fake itself ----------------------------------------------------------------


def test_fake_paginates_like_github(gh: FakeGitHub, session: requests.Session) -> None:
    gh.seed_comments(OWNER, REPO, PR, 75)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    first = session.get(gh.url + LIST_PATH, headers=auth)
    assert first.status_code == 200 and len(first.json()) == 30
    assert set(first.links) == {"next", "last"}
    assert first.links["next"]["url"].startswith(gh.url)
    assert "page=3" in first.links["last"]["url"]
    last = session.get(first.links["last"]["url"], headers=auth)
    assert len(last.json()) == 15 and set(last.links) == {"prev", "first"}
    comment = last.json()[-1]
    assert {"id", "body", "html_url", "created_at", "user"} <= comment.keys()
    assert comment["user"]["login"] and comment["body"] == "comment 74"
    assert session.get(gh.url + LIST_PATH).status_code == 401
    wrong = {"Authorization": "Bearer not-the-token"}
    assert session.get(gh.url + LIST_PATH, headers=wrong).status_code == 401


# -- pagination and sticky comment ------------------------------------------------------


def test_finds_marker_comment_on_page_three(gh: FakeGitHub, client: GitHubClient) -> None:
    seeded = gh.seed_comments(
        OWNER,
        REPO,
        PR,
        250,
        body_fn=lambda i: f"{MARKER}\nreport" if i == 230 else f"hi {i}",
        login=BOT_LOGIN,
    )
    found = find_sticky_comment(client, OWNER, REPO, PR)
    assert found is not None and found["id"] == seeded[230]["id"]
    pages = [r.query for r in gh.requests if r.method == "GET"]
    assert [q.get("page", "1") for q in pages] == ["1", "2", "3"]
    assert all(q["per_page"] == "100" for q in pages)


def test_keeps_the_oldest_of_our_copies_and_deletes_the_others(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    seeded = gh.seed_comments(
        OWNER,
        REPO,
        PR,
        150,
        body_fn=lambda i: f"{MARKER}\nv{i}" if i in (5, 120) else "x",
        login=BOT_LOGIN,
    )
    assert find_sticky_comment(client, OWNER, REPO, PR)["id"] == seeded[5]["id"]
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "fresh")
    assert (result.action, result.comment_id, result.deleted) == ("updated", seeded[5]["id"], 1)
    ours = [c for c in gh.comments(OWNER, REPO, PR) if parse_marker(c["body"])]
    assert [(c["id"], c["body"]) for c in ours] == [(seeded[5]["id"], f"{DEFAULT_LINE}\nfresh")]
    assert calls(gh, "DELETE", f"/repos/{OWNER}/{REPO}/issues/comments/{seeded[120]['id']}") == 1


def test_create_then_update_never_duplicates(gh: FakeGitHub, client: GitHubClient) -> None:
    gh.seed_comments(OWNER, REPO, PR, 3)
    created = upsert_sticky_comment(client, OWNER, REPO, PR, "## Report v1")
    assert created.action == "created"
    assert created.html_url.endswith(f"#issuecomment-{created.comment_id}")
    for version in (2, 3):
        updated = upsert_sticky_comment(client, OWNER, REPO, PR, f"## Report v{version}")
        assert (updated.action, updated.comment_id) == ("updated", created.comment_id)
    stickies = [c for c in gh.comments(OWNER, REPO, PR) if parse_marker(c["body"])]
    assert len(stickies) == 1
    assert stickies[0]["body"] == f"{DEFAULT_LINE}\n## Report v3"
    assert calls(gh, "POST") == 1
    assert calls(gh, "PATCH", f"/repos/{OWNER}/{REPO}/issues/comments/{created.comment_id}") == 2


def test_a_marker_line_in_the_body_is_replaced_by_the_runs_marker(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    marker = sticky_marker("nightly", "a" * 40, "812", "2")
    upsert_sticky_comment(client, OWNER, REPO, PR, f"{MARKER}\n# Already marked", marker)
    line = "<!-- observer-ci:sticky-comment key=nightly sha=" + "a" * 40 + " run=812 attempt=2 -->"
    assert [c["body"] for c in gh.comments(OWNER, REPO, PR)] == [f"{line}\n# Already marked"]
    assert parse_marker(line) == marker


# -- issue 7: whose comment, which copy, which run ------------------------------------


@pytest.mark.parametrize("quoted", [False, True])
def test_a_persons_comment_carrying_the_marker_is_never_patched(
    gh: FakeGitHub, client: GitHubClient, quoted: bool
) -> None:
    text = f"> {MARKER}\n> old report" if quoted else f"{MARKER}\ncopied by hand"
    (person,) = gh.seed_comments(OWNER, REPO, PR, 1, body_fn=lambda i: text, login="octocat")
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    assert result.action == "created" and result.comment_id != person["id"]
    comments = gh.comments(OWNER, REPO, PR)
    assert comments[0] == person  # untouched
    assert comments[1]["user"]["login"] == BOT_LOGIN
    assert not [r for r in gh.requests if r.method in ("PATCH", "DELETE")]


def test_with_a_known_identity_only_its_comments_are_ours(
    sleep: RecordingSleep, session: requests.Session
) -> None:
    # a personal token: GET /user answers, so even another bot's marker is not ours
    with FakeGitHub(token=TOKEN, login="ci-user", user_endpoint=True) as server:
        other = server.seed_comments(
            OWNER, REPO, PR, 1, body_fn=lambda i: f"{MARKER}\nx", login="other-app[bot]"
        )
        mine = server.seed_comments(
            OWNER, REPO, PR, 1, body_fn=lambda i: f"{MARKER}\ny", login="ci-user"
        )
        client = make_client(server, sleep, session)
        result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
        assert (result.action, result.comment_id) == ("updated", mine[0]["id"])
        assert server.comments(OWNER, REPO, PR)[0] == other[0]
        assert ("GET", "/user") in [(r.method, r.path) for r in server.requests]


def test_two_clients_racing_end_with_one_comment(
    sleep: RecordingSleep, session: requests.Session
) -> None:
    # both list the empty PR before either posts (held), so both create; then they converge
    with FakeGitHub(token=TOKEN, latency_s=0.02) as server:
        server.hold("GET", rf"^{LIST_PATH}$", 2)
        results: dict[str, PostResult] = {}

        def post(run: int) -> None:
            with requests.Session() as own:
                own.trust_env = False
                client = make_client(server, sleep, own)
                marker = sticky_marker(run_id=run, attempt=1)
                results[str(run)] = upsert_sticky_comment(
                    client, OWNER, REPO, PR, f"report of run {run}", marker
                )

        threads = [threading.Thread(target=post, args=(run,)) for run in (900, 901)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert calls(server, "POST") == 2  # the race happened
        (comment,) = server.comments(OWNER, REPO, PR)
        assert comment["body"].endswith("report of run 901")  # the newer run's report
        assert parse_marker(comment["body"]).run == 901
        assert sum(r.deleted for r in results.values()) >= 1


def test_an_older_run_never_overwrites_a_newer_report(gh: FakeGitHub, client: GitHubClient) -> None:
    newer = sticky_marker(head_sha="b" * 40, run_id=5000, attempt=1)
    first = upsert_sticky_comment(client, OWNER, REPO, PR, "report of run 5000", newer)
    older = sticky_marker(head_sha="a" * 40, run_id=4999, attempt=3)
    late = upsert_sticky_comment(client, OWNER, REPO, PR, "report of run 4999", older)
    assert (late.action, late.comment_id) == ("superseded", first.comment_id)
    (comment,) = gh.comments(OWNER, REPO, PR)
    assert comment["body"].endswith("report of run 5000")
    assert calls(gh, "PATCH", f"/repos/{OWNER}/{REPO}/issues/comments/{first.comment_id}") == 0
    # a re-run of the newer run (attempt 2) and a later run do replace it
    rerun = sticky_marker(head_sha="b" * 40, run_id=5000, attempt=2)
    assert upsert_sticky_comment(client, OWNER, REPO, PR, "rerun", rerun).action == "updated"
    assert gh.comments(OWNER, REPO, PR)[0]["body"].endswith("rerun")


def test_a_report_of_an_older_release_without_a_run_is_replaced(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    (old,) = gh.seed_comments(
        OWNER, REPO, PR, 1, body_fn=lambda i: f"{MARKER}\nv0", login=BOT_LOGIN
    )
    marker = sticky_marker(run_id=1, attempt=1)
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "v1", marker)
    assert (result.action, result.comment_id) == ("updated", old["id"])


def test_comment_keys_keep_separate_comments(gh: FakeGitHub, client: GitHubClient) -> None:
    a = upsert_sticky_comment(client, OWNER, REPO, PR, "cpu", comment_key="cpu")
    b = upsert_sticky_comment(client, OWNER, REPO, PR, "gpu", comment_key="gpu")
    again = upsert_sticky_comment(client, OWNER, REPO, PR, "cpu 2", comment_key="cpu")
    assert a.comment_id != b.comment_id and again.comment_id == a.comment_id
    assert [parse_marker(c["body"]).key for c in gh.comments(OWNER, REPO, PR)] == ["cpu", "gpu"]
    with pytest.raises(ValueError, match="comment key"):
        sticky_marker("bad key -->")


def test_sends_github_headers(gh: FakeGitHub, client: GitHubClient) -> None:
    client.get_json(LIST_PATH)
    headers = gh.request_headers[-1]
    assert headers["Accept"] == "application/vnd.github+json"
    assert headers["X-GitHub-Api-Version"] == "2022-11-28"
    assert headers["User-Agent"] == "observer-ci"
    assert headers["Authorization"] == "***"  # present and correct, else 401


# -- retries ------------------------------------------------------------------------


def test_502_twice_then_success(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    (seeded,) = gh.seed_comments(OWNER, REPO, PR, 1, body_fn=lambda i: MARKER, login=BOT_LOGIN)
    gh.inject("GET", r"/comments$", 502, times=2)
    assert find_sticky_comment(client, OWNER, REPO, PR)["id"] == seeded["id"]
    assert calls(gh, "GET") == 3
    assert sleep.calls == [1.0, 2.0]
    assert gh.pending_faults() == 0


@pytest.mark.parametrize("status", [429, 403])
def test_retry_after_is_honoured(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep, status: int
) -> None:
    gh.inject("POST", r"/issues/\d+/comments$", status, headers={"Retry-After": "1"})
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    assert result.action == "created"
    assert sleep.calls == [1.0]
    assert calls(gh, "POST") == 2
    assert len(gh.comments(OWNER, REPO, PR)) == 1


def test_a_rate_limit_resetting_an_hour_away_is_not_waited_for_nor_called_forbidden(
    gh: FakeGitHub, sleep: RecordingSleep, session: requests.Session
) -> None:
    client = make_client(gh, sleep, session, max_backoff_s=5.0)
    reset = int(time.time()) + 3600
    headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)}
    gh.inject("GET", r"/comments$", 403, headers=headers, body={"message": "API rate limit"})
    with pytest.raises(GitHubError) as info:
        client.get_json(LIST_PATH)
    assert sleep.calls == [] and calls(gh, "GET") == 1
    assert info.value.rate_limited and abs(info.value.rate_limit_reset - reset) < 5
    kind, warning = post_failure(info.value, now=reset - 3600)
    assert kind == "rate-limited"
    assert "rate limit" in warning and "in about 60 min" in warning and "fork" not in warning
    # a short wait is still waited for
    gh.inject("GET", r"/comments$", 403, headers={"Retry-After": "2"}, body={"message": "slow"})
    assert client.get_json(LIST_PATH) == [] and sleep.calls == [2.0]


def test_a_plain_403_is_forbidden_with_the_fork_hint() -> None:
    kind, warning = post_failure(GitHubError("Resource not accessible", status=403))
    assert kind == "forbidden" and "fork" in warning


def test_an_api_that_never_answers_costs_at_most_the_deadline(
    gh: FakeGitHub, session: requests.Session
) -> None:
    # every answer comes 30 s late; nested retries (upsert x client) must stop at the deadline
    gh.inject("*", r".", 200, body=[], times=1000, delay_s=30)
    client = GitHubClient(gh.url, TOKEN, session=session, timeout_s=0.5, deadline_s=2.0)
    begin = time.monotonic()
    with pytest.raises(GitHubError) as info:
        upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    assert time.monotonic() - begin < 4.0
    assert info.value.status is None
    assert gh.comments(OWNER, REPO, PR) == []


def test_plain_403_is_not_retried(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    message = "Resource not accessible by integration"
    gh.inject("POST", r"/comments$", 403, body={"message": message}, times=5)
    with pytest.raises(GitHubError) as info:
        upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    assert info.value.status == 403
    assert message in info.value.message and message in str(info.value)
    assert info.value.method == "POST"
    assert calls(gh, "POST") == 1
    assert sleep.calls == []
    assert gh.comments(OWNER, REPO, PR) == []


def test_422_body_too_long_surfaces_github_message(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    with pytest.raises(GitHubError) as info:
        upsert_sticky_comment(client, OWNER, REPO, PR, "x" * 70_000)
    assert info.value.status == 422
    assert "Validation Failed" in info.value.message
    assert "body is too long (maximum is 65536 characters)" in str(info.value)
    assert calls(gh, "POST") == 1
    assert sleep.calls == []


def test_persistent_500_is_bounded(
    gh: FakeGitHub, sleep: RecordingSleep, session: requests.Session
) -> None:
    client = make_client(gh, sleep, session, max_retries=3, max_backoff_s=2.0)
    gh.inject("GET", r"/comments$", 500, times=100)
    with pytest.raises(GitHubError) as info:
        client.get_json(LIST_PATH)
    assert info.value.status == 500
    assert calls(gh, "GET") == 3 + 1
    assert sleep.calls == [1.0, 2.0, 2.0]


def test_connection_errors_are_retried_then_raised(
    sleep: RecordingSleep, session: requests.Session
) -> None:
    with socket.socket() as sock:  # grab a free port, then close it: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = GitHubClient(
        f"http://127.0.0.1:{port}", TOKEN, max_retries=2, sleep=sleep, session=session
    )
    with pytest.raises(GitHubError) as info:
        client.get_json("/rate_limit")
    assert info.value.status is None
    assert len(sleep.calls) == 2


# -- errors and secrets -------------------------------------------------------------


def test_unknown_comment_is_404(gh: FakeGitHub, client: GitHubClient) -> None:
    with pytest.raises(GitHubError) as info:
        client.patch_json(f"/repos/{OWNER}/{REPO}/issues/comments/999", {"body": "x"})
    assert info.value.status == 404


def test_refuses_to_follow_links_to_other_hosts(gh: FakeGitHub, client: GitHubClient) -> None:
    link = '<https://evil.example/steal?page=2>; rel="next"'
    gh.inject("GET", r"/comments$", 200, headers={"Link": link}, body=[{"id": 1, "body": "x"}])
    with pytest.raises(GitHubError, match="different origin"):
        list(client.paginate(LIST_PATH))
    assert len(gh.requests) == 1


def test_token_never_leaks(
    gh: FakeGitHub,
    sleep: RecordingSleep,
    session: requests.Session,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    client = make_client(gh, sleep, session)
    assert TOKEN not in repr(client) and TOKEN not in str(client)
    gh.inject("GET", r"/comments$", 502)
    gh.inject("GET", r"/comments$", 403, body={"message": f"token {TOKEN} lacks scope"})
    with pytest.raises(GitHubError) as info:
        client.get_json(LIST_PATH)
    assert info.value.status == 403
    wrong = make_client(gh, sleep, session, token="ghp_wrong_token_456")
    with pytest.raises(GitHubError) as bad:
        wrong.get_json(LIST_PATH)
    assert bad.value.status == 401 and "Bad credentials" in str(bad.value)
    for text in (str(info.value), repr(info.value), str(bad.value), repr(bad.value), caplog.text):
        assert TOKEN not in text and "ghp_wrong_token_456" not in text
    (retry,) = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert retry.startswith("GitHub GET http") and "failed (502), retry 1/4 in 1.0s" in retry


def test_lost_post_response_is_not_posted_twice(
    gh: FakeGitHub, client: GitHubClient, sleep: RecordingSleep
) -> None:
    # the comment is created, but the answer is a 502: re-listing finds it and updates it
    gh.inject("POST", LIST_PATH, 502, after_effect=True)
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    assert result.action == "updated"
    assert len(gh.comments(OWNER, REPO, PR)) == 1
    assert calls(gh, "POST") == 1 and sleep.calls == [1.0]


def test_post_refused_with_502_is_created_after_relisting(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    gh.inject("POST", LIST_PATH, 502)  # refused before taking effect
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "report")
    assert result.action == "created"
    assert len(gh.comments(OWNER, REPO, PR)) == 1
    # list, POST (502), list again, POST, list again to catch a racing copy
    assert calls(gh, "POST") == 2 and calls(gh, "GET") == 3


def test_post_is_not_retried_blindly_by_the_client(gh: FakeGitHub, client: GitHubClient) -> None:
    gh.inject("POST", LIST_PATH, 500)
    with pytest.raises(GitHubError) as info:
        client.post_json(LIST_PATH, {"body": "x"})
    assert info.value.ambiguous and info.value.status == 500
    assert calls(gh, "POST") == 1
