"""GitHubClient and the sticky-comment logic against a real local HTTP fake of GitHub.

No mocks: every call goes over HTTP to ``tests.support.fake_github``. Waits go
through a recording ``sleep`` so retry timing is asserted without sleeping.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest
import requests

from observer_ci.github import MARKER, find_sticky_comment, upsert_sticky_comment
from observer_ci.github_client import GitHubClient, GitHubError
from tests.support.fake_github import FakeGitHub

TOKEN = "ghs_integration_secret_token_123"
OWNER, REPO, PR = "octo", "widgets", 17
LIST_PATH = f"/repos/{OWNER}/{REPO}/issues/{PR}/comments"


class RecordingSleep:
    """A ``sleep`` that records the requested waits instead of sleeping."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub(token=TOKEN) as server:
        yield server


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        s.trust_env = False  # never route loopback traffic through an environment proxy
        yield s


def make_client(
    gh: FakeGitHub,
    sleep: RecordingSleep,
    session: requests.Session,
    *,
    token: str = TOKEN,
    **kwargs: float,
) -> GitHubClient:
    return GitHubClient(gh.url, token, sleep=sleep, session=session, timeout_s=5, **kwargs)


@pytest.fixture
def client(gh: FakeGitHub, sleep: RecordingSleep, session: requests.Session) -> GitHubClient:
    return make_client(gh, sleep, session)


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
        OWNER, REPO, PR, 250, body_fn=lambda i: f"{MARKER}\nreport" if i == 230 else f"hi {i}"
    )
    found = find_sticky_comment(client, OWNER, REPO, PR)
    assert found is not None and found["id"] == seeded[230]["id"]
    pages = [r.query for r in gh.requests if r.method == "GET"]
    assert [q.get("page", "1") for q in pages] == ["1", "2", "3"]
    assert all(q["per_page"] == "100" for q in pages)


def test_picks_most_recent_of_several_markers(gh: FakeGitHub, client: GitHubClient) -> None:
    seeded = gh.seed_comments(
        OWNER, REPO, PR, 150, body_fn=lambda i: f"{MARKER}\nv{i}" if i in (5, 120) else "x"
    )
    assert find_sticky_comment(client, OWNER, REPO, PR)["id"] == seeded[120]["id"]
    result = upsert_sticky_comment(client, OWNER, REPO, PR, "fresh")
    assert (result.action, result.comment_id) == ("updated", seeded[120]["id"])


def test_create_then_update_never_duplicates(gh: FakeGitHub, client: GitHubClient) -> None:
    gh.seed_comments(OWNER, REPO, PR, 3)
    created = upsert_sticky_comment(client, OWNER, REPO, PR, "## Report v1")
    assert created.action == "created"
    assert created.html_url.endswith(f"#issuecomment-{created.comment_id}")
    for version in (2, 3):
        updated = upsert_sticky_comment(client, OWNER, REPO, PR, f"## Report v{version}")
        assert (updated.action, updated.comment_id) == ("updated", created.comment_id)
    stickies = [c for c in gh.comments(OWNER, REPO, PR) if MARKER in c["body"]]
    assert len(stickies) == 1
    assert stickies[0]["body"] == f"{MARKER}\n## Report v3"
    assert calls(gh, "POST") == 1
    assert calls(gh, "PATCH", f"/repos/{OWNER}/{REPO}/issues/comments/{created.comment_id}") == 2


def test_body_with_marker_is_kept_verbatim(gh: FakeGitHub, client: GitHubClient) -> None:
    body = f"{MARKER}\n# Already marked"
    upsert_sticky_comment(client, OWNER, REPO, PR, body)
    assert [c["body"] for c in gh.comments(OWNER, REPO, PR)] == [body]


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
    (seeded,) = gh.seed_comments(OWNER, REPO, PR, 1, body_fn=lambda i: MARKER)
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


def test_rate_limit_reset_wait_is_capped(
    gh: FakeGitHub, sleep: RecordingSleep, session: requests.Session
) -> None:
    client = make_client(gh, sleep, session, max_backoff_s=5.0)
    reset = str(int(time.time()) + 3600)
    headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset}
    gh.inject("GET", r"/comments$", 403, headers=headers, body={"message": "API rate limit"})
    assert client.get_json(LIST_PATH) == []
    assert sleep.calls == [5.0]


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
    assert caplog.records  # the retry was logged


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
    assert calls(gh, "POST") == 2 and calls(gh, "GET") == 2


def test_post_is_not_retried_blindly_by_the_client(gh: FakeGitHub, client: GitHubClient) -> None:
    gh.inject("POST", LIST_PATH, 500)
    with pytest.raises(GitHubError) as info:
        client.post_json(LIST_PATH, {"body": "x"})
    assert info.value.ambiguous and info.value.status == 500
    assert calls(gh, "POST") == 1
