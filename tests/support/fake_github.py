"""A real HTTP server faking the GitHub issue-comment endpoints, for tests.

Emulated, with in-memory state:

- ``GET   /repos/{owner}/{repo}/issues/{number}/comments`` (``per_page``/``page``, ``Link``)
- ``POST  /repos/{owner}/{repo}/issues/{number}/comments`` (201)
- ``PATCH /repos/{owner}/{repo}/issues/comments/{id}`` (200, 404 for unknown ids)
- ``DELETE /repos/{owner}/{repo}/issues/comments/{id}`` (204, 404 for unknown ids)
- ``GET   /repos/{owner}/{repo}/issues/comments/{id}``
- ``GET   /user``: the token's identity (``login``) when ``user_endpoint=True``; else 403
  "Resource not accessible by integration", as GitHub answers an App token (``GITHUB_TOKEN``)
- ``GET   /repos/{owner}/{repo}/actions/runs/{run_id}`` (seeded with :meth:`FakeGitHub.add_run`)
- ``GET   /repos/{owner}/{repo}/pulls/{number}`` (seeded with :meth:`FakeGitHub.add_pull`)

The history, check-run and accept endpoints (:mod:`tests.support.fake_github_more`, shapes as
GitHub's REST description gives them): workflow runs listed (``branch``, ``event``,
``status``, ``head_sha`` filters), a run's artifacts and their zip download (a ``302`` to a
storage URL that needs no credentials), ``compare/{base}...{head}`` and the commits list
over a seeded commit graph, check runs created and updated (``checks: write``; summary,
annotations and conclusion validated), issue labels and events, collaborator permission.

Comments created through the API are authored by ``login`` (default
``github-actions[bot]``, a Bot). Every request needs ``Authorization: Bearer <token>``
(else 401). Faults queued with :meth:`FakeGitHub.inject` are served before normal
handling (optionally after a delay: an API that does not answer); :meth:`FakeGitHub.hold`
makes the first N matching requests wait for each other (a deterministic race);
``latency_s`` delays every answer; :meth:`FakeGitHub.before` runs an action (e.g.
:meth:`FakeGitHub.delete_comment`) just before a matching request is handled.
Requests are served concurrently, state changes one at a time. The server binds to and
only answers loopback clients.

    with FakeGitHub(token="t") as gh:
        gh.inject("GET", r"/comments$", 502, times=2)
        client = GitHubClient(gh.url, "t")
"""

from __future__ import annotations

import copy
import ipaddress
import json
import math
import re
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlencode, urlsplit

from tests.support.fake_github_more import BLOB_PREFIX, MoreState, route_more

DEFAULT_TOKEN = "fake-github-token"
BOT_LOGIN = "github-actions[bot]"
MAX_BODY_CHARS = 65536
MAX_REQUEST_BYTES = 1 << 20
DEFAULT_PER_PAGE = 30
MAX_PER_PAGE = 100
DOCS_URL = "https://docs.github.com/rest"
_EPOCH = datetime(2024, 1, 1, tzinfo=timezone.utc)

_LIST_RE = re.compile(r"^/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/issues/(?P<number>\d+)/comments$")
_ONE_RE = re.compile(r"^/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/issues/comments/(?P<id>\d+)$")

_RUN_RE = re.compile(r"^/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/actions/runs/(?P<id>\d+)$")
_PULL_RE = re.compile(r"^/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/pulls/(?P<number>\d+)$")

_Key = tuple[str, str, int]


class RecordedRequest(NamedTuple):
    """One request as the server saw it (``query`` keeps the last value of each key)."""

    method: str
    path: str
    query: dict[str, str]


@dataclass
class Reply:
    """An HTTP response to send: a dict/list body is JSON-encoded."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    disconnect: bool = False  # close the connection without sending anything


@dataclass
class _Fault:
    method: str
    pattern: re.Pattern[str]
    reply: Reply
    remaining: int
    after_effect: bool = False  # handle the request normally, then answer with the fault
    delay_s: float = 0.0  # wait this long before answering (outside the state lock)
    query: dict[str, str] = field(default_factory=dict)  # items the query must hold


@dataclass
class _Before:
    method: str
    pattern: re.Pattern[str]
    action: Callable[[], None]
    remaining: int


@dataclass
class _Hold:
    method: str
    pattern: re.Pattern[str]
    barrier: threading.Barrier
    remaining: int


class FakeGitHub:
    """In-memory GitHub issue comments behind a loopback ``ThreadingHTTPServer``."""

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        host: str = "127.0.0.1",
        login: str = BOT_LOGIN,
        user_endpoint: bool = False,
        latency_s: float = 0.0,
    ) -> None:
        if not _is_loopback(host):
            raise ValueError(f"FakeGitHub only binds to loopback addresses, got {host!r}")
        self.token = token
        self.host = host
        self.login = login
        self.user_endpoint = user_endpoint
        self.latency_s = latency_s
        self._stopping = threading.Event()
        self._holds: list[_Hold] = []
        self._befores: list[_Before] = []
        self._lock = threading.Lock()
        self._comments: dict[_Key, list[dict]] = {}
        self._runs: dict[_Key, dict] = {}
        self._pulls: dict[_Key, dict] = {}
        self._faults: list[_Fault] = []
        self.more = MoreState(self)
        self._requests: list[RecordedRequest] = []
        self._request_headers: list[dict[str, str]] = []
        self._next_id = 1_000_001
        self._clock = 0
        self._httpd: _LoopbackHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> FakeGitHub:
        """Bind an ephemeral port and serve from a daemon thread."""
        if self._httpd is not None:
            return self
        httpd = _LoopbackHTTPServer((self.host, 0), _Handler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket (idempotent)."""
        httpd, thread = self._httpd, self._thread
        self._httpd = self._thread = None
        self._stopping.set()  # wake delayed answers
        with self._lock:
            for hold in self._holds:
                hold.barrier.abort()
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:54321`` (use it as the client's ``api_url``)."""
        if self._httpd is None:
            raise RuntimeError("FakeGitHub is not running")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    # -- test controls --------------------------------------------------------------

    def inject(
        self,
        method: str,
        path_regex: str,
        status: int,
        headers: Mapping[str, str] | None = None,
        body: Any = None,
        times: int = 1,
        after_effect: bool = False,
        delay_s: float = 0.0,
        query: Mapping[str, str] | None = None,
    ) -> None:
        """Queue a canned response for the next ``times`` requests matching.

        With ``after_effect`` the request still takes effect (e.g. the comment is created)
        and only the answer is replaced: a response lost on the way back. With ``delay_s``
        the answer comes that late (or never, for a client with a shorter timeout).

        ``method`` is compared case-insensitively (``"*"`` matches any); ``path_regex``
        is searched in the path (without query); ``query`` items (e.g. ``{"page": "2"}``)
        must all be in the request's query. ``body`` defaults to GitHub-like
        ``{"message": <reason>}``; dicts/lists are sent as JSON, str as text.
        """
        if times < 1:
            raise ValueError("times must be >= 1")
        if body is None:
            body = {"message": _reason(status), "documentation_url": DOCS_URL}
        reply = Reply(status, body, dict(headers or {}))
        fault = _Fault(
            method.upper(),
            re.compile(path_regex),
            reply,
            times,
            after_effect,
            delay_s,
            dict(query or {}),
        )
        with self._lock:
            self._faults.append(fault)

    def inject_disconnect(
        self,
        method: str,
        path_regex: str,
        times: int = 1,
        after_effect: bool = False,
        query: Mapping[str, str] | None = None,
    ) -> None:
        """Close the connection of the next ``times`` matching requests without answering.

        With ``after_effect`` the request takes effect first (e.g. the comment is created):
        the client cannot tell whether it did. Matching works as in :meth:`inject`.
        """
        if times < 1:
            raise ValueError("times must be >= 1")
        reply = Reply(0, disconnect=True)
        fault = _Fault(
            method.upper(),
            re.compile(path_regex),
            reply,
            times,
            after_effect,
            query=dict(query or {}),
        )
        with self._lock:
            self._faults.append(fault)

    def hold(self, method: str, path_regex: str, count: int, timeout_s: float = 10.0) -> None:
        """The next ``count`` matching requests wait until all ``count`` have arrived (or
        ``timeout_s`` passed), then are handled: clients racing see the same state."""
        barrier = threading.Barrier(count, timeout=timeout_s)
        with self._lock:
            self._holds.append(_Hold(method.upper(), re.compile(path_regex), barrier, count))

    def before(
        self, method: str, path_regex: str, action: Callable[[], None], times: int = 1
    ) -> None:
        """Run ``action`` (without the state lock: it may call :meth:`delete_comment`)
        just before the next ``times`` matching requests are handled, e.g. a comment
        deleted by someone else between our list and our edit."""
        if times < 1:
            raise ValueError("times must be >= 1")
        with self._lock:
            self._befores.append(_Before(method.upper(), re.compile(path_regex), action, times))

    def pending_faults(self) -> int:
        """How many injected responses have not been served yet."""
        with self._lock:
            return sum(f.remaining for f in self._faults)

    def seed_comments(
        self,
        owner: str,
        repo: str,
        pr: int,
        n: int,
        body_fn: Callable[[int], str] | None = None,
        *,
        login: str = "octocat",
    ) -> list[dict]:
        """Create ``n`` comments (bodies ``body_fn(i)``, default ``"comment {i}"``) by
        ``login`` (a person unless it ends with ``[bot]``)."""
        body_fn = body_fn or (lambda i: f"comment {i}")
        with self._lock:
            created = [self._create(owner, repo, pr, body_fn(i), login) for i in range(n)]
            return copy.deepcopy(created)

    def add_run(
        self,
        owner: str,
        repo: str,
        run_id: int,
        *,
        head_sha: str,
        head_repository: str | None = None,
        pull_requests: tuple[int, ...] = (),
        event: str = "pull_request",
        head_branch: str = "",
        conclusion: str = "success",
    ) -> dict:
        """A workflow run as ``GET .../actions/runs/{id}`` returns it. GitHub lists no
        ``pull_requests`` for a run of a pull request from a fork: leave them out then.
        Runs are listed (``GET .../actions/runs``) newest first, in the order added."""
        head_repository = head_repository or f"{owner}/{repo}"
        with self._lock:
            created_at = self._tick()
        run = {
            "id": int(run_id),
            "name": "observer-ci",
            "event": event,
            "status": "completed",
            "conclusion": conclusion,
            "head_branch": head_branch,
            "created_at": created_at,
            "html_url": f"https://github.com/{owner}/{repo}/actions/runs/{run_id}",
            "head_sha": head_sha,
            "head_repository": {"full_name": head_repository},
            "repository": {"full_name": f"{owner}/{repo}"},
            "pull_requests": [
                {"number": n, "head": {"sha": head_sha}, "base": {"sha": "0" * 40}}
                for n in pull_requests
            ],
        }
        with self._lock:
            self._runs[_key(owner, repo, run_id)] = run
        return copy.deepcopy(run)

    def add_pull(
        self, owner: str, repo: str, number: int, *, head_sha: str, head_repository: str
    ) -> dict:
        """A pull request as ``GET .../pulls/{number}`` returns it (head commit and repo)."""
        pull = {
            "number": int(number),
            "state": "open",
            "head": {"sha": head_sha, "repo": {"full_name": head_repository}},
            "base": {"repo": {"full_name": f"{owner}/{repo}"}},
        }
        with self._lock:
            self._pulls[_key(owner, repo, number)] = pull
        return copy.deepcopy(pull)

    def delete_comment(self, owner: str, repo: str, comment_id: int) -> None:
        """Delete a comment as someone else would (no request is recorded)."""
        with self._lock:
            self._delete(owner, repo, int(comment_id))

    def comments(self, owner: str, repo: str, pr: int) -> list[dict]:
        """A copy of the PR's comments, oldest first."""
        with self._lock:
            return copy.deepcopy(self._comments.get(_key(owner, repo, pr), []))

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received, in order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """Headers of every request, in order, with ``Authorization`` masked."""
        with self._lock:
            return [dict(h) for h in self._request_headers]

    # -- request handling (called from server threads) ---------------------------------

    def handle(self, method: str, target: str, headers: Mapping[str, str], data: bytes) -> Reply:
        """Compute the reply to one HTTP request."""
        parts = urlsplit(target)
        path, query = parts.path, dict(parse_qsl(parts.query, keep_blank_values=True))
        if self.latency_s:
            self._stopping.wait(self.latency_s)
        with self._lock:
            self._record(method, path, query, headers)
            hold = self._take_hold(method, path)
            before = self._take_before(method, path)
        if before is not None:
            before.action()
        if hold is not None:
            try:
                hold.barrier.wait()
            except threading.BrokenBarrierError:
                pass  # timed out or stopping: answer anyway
        with self._lock:
            fault = self._take_fault(method, path, query)
            if fault is None and path.startswith(BLOB_PREFIX):
                return copy.deepcopy(self.more.blob(path, headers))  # storage: no token
            if fault is None:
                if headers.get("Authorization") != f"Bearer {self.token}":
                    return _error(401, "Bad credentials")
                return copy.deepcopy(self._route(method, path, query, data))
            if fault.after_effect:
                self._route(method, path, query, data)
            reply = copy.deepcopy(fault.reply)
        if fault.delay_s:
            self._stopping.wait(fault.delay_s)
        return reply

    def _record(
        self, method: str, path: str, query: dict[str, str], headers: Mapping[str, str]
    ) -> None:
        self._requests.append(RecordedRequest(method, path, query))
        seen = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        if headers.get("Authorization") is not None:
            seen["Authorization"] = "***"
        self._request_headers.append(seen)

    def _take_hold(self, method: str, path: str) -> _Hold | None:
        return _take_first(self._holds, method, path)

    def _take_before(self, method: str, path: str) -> _Before | None:
        return _take_first(self._befores, method, path)

    def _take_fault(self, method: str, path: str, query: dict[str, str]) -> _Fault | None:
        for fault in self._faults:
            if (
                fault.method in ("*", method.upper())
                and fault.pattern.search(path)
                and fault.query.items() <= query.items()
            ):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _route(self, method: str, path: str, query: dict[str, str], data: bytes) -> Reply:
        if path == "/user" and method == "GET":
            if not self.user_endpoint:
                return _error(403, "Resource not accessible by integration")
            return Reply(200, {"login": self.login, "id": 1, "type": _user_type(self.login)})
        more = route_more(self, method, path, query, data)
        if more is not None:
            return more
        if match := _LIST_RE.match(path):
            key = _key(match["owner"], match["repo"], int(match["number"]))
            if method == "GET":
                return self._list(key, path, query)
            if method == "POST":
                return self._post(key, data)
        elif (match := _RUN_RE.match(path)) and method == "GET":
            run = self._runs.get(_key(match["owner"], match["repo"], int(match["id"])))
            return Reply(200, run) if run is not None else _error(404, "Not Found")
        elif (match := _PULL_RE.match(path)) and method == "GET":
            pull = self._pulls.get(_key(match["owner"], match["repo"], int(match["number"])))
            return Reply(200, pull) if pull is not None else _error(404, "Not Found")
        elif match := _ONE_RE.match(path):
            comment = self._find(match["owner"], match["repo"], int(match["id"]))
            if comment is not None and method == "GET":
                return Reply(200, comment)
            if comment is not None and method == "PATCH":
                return self._patch(comment, data)
            if comment is not None and method == "DELETE":
                self._delete(match["owner"], match["repo"], comment["id"])
                return Reply(204)
        return _error(404, "Not Found")

    def _list(self, key: _Key, path: str, query: dict[str, str]) -> Reply:
        return self.page(self._comments.get(key, []), path, query)

    def page(self, items: list, path: str, query: dict[str, str], wrap: str = "") -> Reply:
        """One page of ``items`` (``per_page``/``page``, ``Link``); under ``wrap`` with a
        ``total_count`` when GitHub wraps that list in an object (runs, artifacts)."""
        per_page = min(MAX_PER_PAGE, max(1, _int(query.get("per_page"), DEFAULT_PER_PAGE)))
        page = max(1, _int(query.get("page"), 1))
        start = (page - 1) * per_page
        last = max(1, math.ceil(len(items) / per_page))
        links = self._links(path, query, per_page, page, last)
        headers = {"Link": links} if links else {}
        chunk = items[start : start + per_page]
        body: Any = {"total_count": len(items), wrap: chunk} if wrap else chunk
        return Reply(200, body, headers)

    def _links(self, path: str, query: dict[str, str], per_page: int, page: int, last: int) -> str:
        def link(n: int, rel: str) -> str:
            qs = urlencode({**query, "per_page": per_page, "page": n})
            return f'<{self.url}{path}?{qs}>; rel="{rel}"'

        rels = []
        if page > 1:
            rels.append(link(min(page - 1, last), "prev"))
        if page < last:
            rels += [link(page + 1, "next"), link(last, "last")]
        if page > 1:
            rels.append(link(1, "first"))
        return ", ".join(rels)

    def _post(self, key: _Key, data: bytes) -> Reply:
        body, problem = _parse_body(data)
        if problem is not None:
            return problem
        owner, repo, pr = key
        comment = self._create(owner, repo, pr, body, self.login)
        location = f"{self.url}/repos/{owner}/{repo}/issues/comments/{comment['id']}"
        return Reply(201, comment, {"Location": location})

    def _patch(self, comment: dict, data: bytes) -> Reply:
        body, problem = _parse_body(data)
        if problem is not None:
            return problem
        comment["body"] = body
        comment["updated_at"] = self._tick()
        return Reply(200, comment)

    def _create(self, owner: str, repo: str, pr: int, body: str, login: str) -> dict:
        comment_id, self._next_id = self._next_id, self._next_id + 1
        now = self._tick()
        comment = {
            "id": comment_id,
            "node_id": f"IC_fake{comment_id}",
            "html_url": f"https://github.com/{owner}/{repo}/pull/{pr}#issuecomment-{comment_id}",
            "body": body,
            "user": {"login": login, "type": _user_type(login)},
            "created_at": now,
            "updated_at": now,
            "author_association": "NONE",
        }
        self._comments.setdefault(_key(owner, repo, pr), []).append(comment)
        return comment

    def _find(self, owner: str, repo: str, comment_id: int) -> dict | None:
        for (o, r, _), comments in self._comments.items():
            if (o, r) != (owner.lower(), repo.lower()):
                continue
            for comment in comments:
                if comment["id"] == comment_id:
                    return comment
        return None

    def _delete(self, owner: str, repo: str, comment_id: int) -> None:
        for (o, r, _), comments in self._comments.items():
            if (o, r) == (owner.lower(), repo.lower()):
                comments[:] = [c for c in comments if c["id"] != comment_id]

    def _tick(self) -> str:
        self._clock += 1
        return (_EPOCH + timedelta(seconds=self._clock)).strftime("%Y-%m-%dT%H:%M:%SZ")


class _LoopbackHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeGitHub

    def verify_request(self, request: Any, client_address: Any) -> bool:
        return _is_loopback(client_address[0])


class _Handler(BaseHTTPRequestHandler):
    server: _LoopbackHTTPServer
    protocol_version = "HTTP/1.0"  # one request per connection: clean shutdown
    timeout = 10

    def do_GET(self) -> None:  # http.server's naming
        self._dispatch()

    do_POST = do_PATCH = do_PUT = do_DELETE = do_GET

    def _dispatch(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self._send(_error(400, "Invalid Content-Length"))
            return
        if not 0 <= length <= MAX_REQUEST_BYTES:
            self._send(_error(413, "Payload Too Large"))
            return
        data = self.rfile.read(length) if length else b""
        reply = self.server.fake.handle(self.command, self.path, self.headers, data)
        if reply.disconnect:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)  # no status line: the answer is lost
            return
        self._send(reply)

    def _send(self, reply: Reply) -> None:
        payload, content_type = _encode(reply.body)
        self.send_response(reply.status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log."""


def _parse_body(data: bytes) -> tuple[str, None] | tuple[None, Reply]:
    try:
        payload = json.loads(data or b"null")
    except ValueError:
        return None, _error(400, "Problems parsing JSON")
    body = payload.get("body") if isinstance(payload, dict) else None
    if not isinstance(body, str):
        return None, _validation_error("missing_field")
    if len(body) > MAX_BODY_CHARS:
        too_long = f"body is too long (maximum is {MAX_BODY_CHARS} characters)"
        return None, _validation_error("custom", too_long)
    return body, None


def _validation_error(code: str, message: str | None = None) -> Reply:
    detail = {"resource": "IssueComment", "code": code, "field": "body"}
    if message is not None:
        detail["message"] = message
    body = {"message": "Validation Failed", "errors": [detail], "documentation_url": DOCS_URL}
    return Reply(422, body)


def _error(status: int, message: str) -> Reply:
    return Reply(status, {"message": message, "documentation_url": DOCS_URL})


def _encode(body: Any) -> tuple[bytes, str]:
    if body is None:
        return b"", "application/json; charset=utf-8"
    if isinstance(body, bytes):
        return body, "application/octet-stream"
    if isinstance(body, str):
        return body.encode("utf-8"), "text/plain; charset=utf-8"
    return json.dumps(body).encode("utf-8"), "application/json; charset=utf-8"


def _user_type(login: str) -> str:
    return "Bot" if login.endswith("[bot]") else "User"


def _key(owner: str, repo: str, pr: int) -> _Key:
    return owner.lower(), repo.lower(), int(pr)


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _take_first(entries: list, method: str, path: str):
    """The first entry (a hold or a hook) matching ``method`` and ``path``, used up once."""
    for entry in entries:
        if entry.method in ("*", method.upper()) and entry.pattern.search(path):
            entry.remaining -= 1
            if entry.remaining <= 0:
                entries.remove(entry)
            return entry
    return None
