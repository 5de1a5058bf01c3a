"""A thin, retrying client for the GitHub REST API.

No business logic lives here: only authentication headers, retries with
bounded backoff, rate-limit handling, error mapping and pagination. The token
is never included in ``repr()``, exception messages or log records.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import requests

from observer_ci.core.exceptions import GitHubError

log = logging.getLogger(__name__)

API_VERSION = "2022-11-28"
USER_AGENT = "observer-ci"
PER_PAGE = 100
BACKOFF_BASE_S = 1.0
# Every call of one client, retries and waits included, ends within this many seconds
# (an API that does not answer at all costs at most this, not retries x timeouts).
DEFAULT_DEADLINE_S = 150.0
_MASK = "***"
MAX_DOWNLOAD_BYTES = 50 << 20  # an artifact of results.json files is kilobytes


def error_message(response: requests.Response) -> str:
    """GitHub's error message from a response body, with validation details appended."""
    try:
        data = response.json()
    except ValueError:
        text = response.text.strip()
        return text[:500] or (response.reason or "")
    if not isinstance(data, dict):
        return str(data)[:500]
    message = str(data.get("message") or response.reason or "")
    details = [_error_detail(item) for item in data.get("errors") or []]
    details = [d for d in details if d]
    return f"{message}: {'; '.join(details)}" if details else message


def _error_detail(item: Any) -> str:
    if not isinstance(item, dict):
        return str(item)
    if item.get("message"):
        return str(item["message"])
    parts = [str(item[k]) for k in ("resource", "field", "code") if item.get(k)]
    return " ".join(parts)


def rate_limit_delay(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds to wait as indicated by rate-limit headers, or None when there are none.

    ``Retry-After`` (seconds or an HTTP date) wins; otherwise
    ``X-RateLimit-Remaining: 0`` with ``X-RateLimit-Reset`` (epoch seconds).
    """
    retry_after = headers.get("Retry-After")
    if retry_after is not None:
        return _parse_retry_after(retry_after.strip(), now)
    if headers.get("X-RateLimit-Remaining", "").strip() == "0":
        try:
            reset = float(headers.get("X-RateLimit-Reset", ""))
        except ValueError:
            return 0.0
        return max(0.0, reset - now)
    return None


def _parse_retry_after(value: str, now: float) -> float:
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, when.timestamp() - now)


class GitHubClient:
    """Minimal GitHub REST client with bounded retries."""

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        max_retries: int = 4,
        max_backoff_s: float = 30.0,
        timeout_s: float = 30.0,
        deadline_s: float = DEFAULT_DEADLINE_S,
        sleep: Callable[[float], None] = time.sleep,
        session: requests.Session | None = None,
    ) -> None:
        if not api_url:
            raise ValueError("api_url must not be empty")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.api_url = api_url.rstrip("/")
        self.__token = token
        self.max_retries = max_retries
        self.max_backoff_s = max(0.0, max_backoff_s)
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self._deadline = time.monotonic() + deadline_s
        self._sleep = sleep
        self._session = session if session is not None else requests.Session()
        self._origin = _origin(self.api_url)

    def __repr__(self) -> str:
        return (
            f"GitHubClient(api_url={self.api_url!r}, token={_MASK!r}, "
            f"max_retries={self.max_retries})"
        )

    # -- public API -------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        idempotent: bool | None = None,
    ) -> requests.Response:
        """Send one API call, retrying transient failures; raise GitHubError on failure.

        At most ``max_retries + 1`` attempts are made and each wait is capped at
        ``max_backoff_s``, so the total sleep is at most ``max_retries * max_backoff_s``;
        and no call starts, waits or reads past the client's deadline (``deadline_s`` after
        it was made). A rate limit that resets later than ``max_backoff_s`` is not waited
        for: the error says when it resets.
        A non-idempotent call (POST by default) is not retried after a 5xx or a lost
        connection, since it may have taken effect: it raises with ``ambiguous=True``.
        Rate-limit answers (the call was refused) are retried for every method.
        """
        method = method.upper()
        url = self._url(path)
        if idempotent is None:
            idempotent = method != "POST"
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            self._check_deadline(method, url)
            try:
                response = self._send(method, url, params, json)
                if response.status_code < 400:
                    _ = response.content  # read the body now: a cut body is transient
                    return response
            except requests.RequestException as exc:
                error = GitHubError(
                    f"connection failed: {type(exc).__name__}",
                    method=method,
                    url=url,
                    ambiguous=not idempotent,
                )
                if last or not idempotent:
                    raise error from None
                delay: float | None = self._backoff(attempt)
            else:
                delay = self._retry_delay(response, attempt)
                error = self._error(response, method, url)
                if response.status_code >= 500 and not idempotent:
                    error.ambiguous = True
                    raise error
                if delay is None or last:
                    raise error
            assert delay is not None  # the branches above raise otherwise
            if delay > self._remaining():
                raise error  # waiting would overrun the deadline
            self._log_retry(error, attempt, delay)
            self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def get_json(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """GET ``path`` and decode the JSON body."""
        return _json_or_none(self.request("GET", path, params=params))

    def post_json(self, path: str, json: Any) -> Any:
        """POST a JSON body to ``path`` and decode the JSON response."""
        return _json_or_none(self.request("POST", path, json=json))

    def patch_json(self, path: str, json: Any) -> Any:
        """PATCH a JSON body to ``path`` and decode the JSON response."""
        return _json_or_none(self.request("PATCH", path, json=json))

    def delete(self, path: str) -> None:
        """DELETE ``path`` (idempotent: retried like a GET)."""
        self.request("DELETE", path)

    def paginate(self, path: str, params: Mapping[str, Any] | None = None) -> Iterator[dict]:
        """Yield every item of a list endpoint, following ``Link: rel="next"`` to the end."""
        query = {"per_page": PER_PAGE, **(params or {})}
        next_url: str | None = path
        while next_url:
            response = self.request("GET", next_url, params=query)
            items = _json_or_none(response)
            if not isinstance(items, list):
                raise GitHubError(
                    "expected a JSON list from a paginated endpoint",
                    status=response.status_code,
                    method="GET",
                    url=response.url,
                )
            yield from items
            next_url = response.links.get("next", {}).get("url")
            query = {}  # the next link already carries the query string

    def download(self, path: str, max_bytes: int = MAX_DOWNLOAD_BYTES) -> bytes:
        """The bytes behind an endpoint that answers ``302`` to a storage URL (an artifact's
        zip): the redirect is followed once *without* credentials (the storage URL is signed;
        the token never leaves the API origin). Larger than ``max_bytes``: GitHubError."""
        response = self.request("GET", path)
        location = response.headers.get("Location")
        if response.status_code not in (301, 302, 303, 307, 308) or not location:
            return _capped(response.content, max_bytes, path)
        self._check_deadline("GET", _strip_query(location))
        try:
            blob = self._session.get(
                location,
                headers={"User-Agent": USER_AGENT},
                timeout=max(0.05, min(self.timeout_s, self._remaining())),
                allow_redirects=False,
                stream=True,
            )
            data = blob.raw.read(max_bytes + 1, decode_content=True)
        except requests.RequestException as exc:
            raise GitHubError(
                f"download failed: {type(exc).__name__}", method="GET", url=_strip_query(location)
            ) from None
        if blob.status_code >= 400:
            raise GitHubError(
                f"download failed: {blob.status_code} {blob.reason or ''}".strip(),
                status=blob.status_code,
                method="GET",
                url=_strip_query(location),
            )
        return _capped(data, max_bytes, path)

    # -- endpoints (thin: one REST call each, shapes as GitHub documents them) -------

    def workflow_runs(self, owner: str, repo: str, **filters: str) -> Iterator[dict]:
        """``GET /repos/{o}/{r}/actions/runs`` (filters: branch, event, status, head_sha),
        newest first, every page."""
        yield from self._wrapped(_repo_path(owner, repo, "actions/runs"), "workflow_runs", filters)

    def run_artifacts(self, owner: str, repo: str, run_id: int, name: str = "") -> list[dict]:
        """``GET /repos/{o}/{r}/actions/runs/{id}/artifacts`` (``name`` filters by name)."""
        path = _repo_path(owner, repo, f"actions/runs/{int(run_id)}/artifacts")
        return list(self._wrapped(path, "artifacts", {"name": name} if name else {}))

    def download_artifact(self, owner: str, repo: str, artifact_id: int) -> bytes:
        """``GET /repos/{o}/{r}/actions/artifacts/{id}/zip``: the artifact's zip archive."""
        return self.download(_repo_path(owner, repo, f"actions/artifacts/{int(artifact_id)}/zip"))

    def ancestors(self, owner: str, repo: str, sha: str, limit: int = PER_PAGE) -> list[str]:
        """``GET /repos/{o}/{r}/commits?sha=``: ``sha`` and its ancestors, newest first."""
        path = _repo_path(owner, repo, "commits")
        commits = self.get_json(path, {"sha": sha, "per_page": min(limit, PER_PAGE)})
        return [c["sha"] for c in commits or [] if isinstance(c, dict) and c.get("sha")]

    def compare(self, owner: str, repo: str, base: str, head: str) -> dict:
        """``GET /repos/{o}/{r}/compare/{base}...{head}`` (``status``: ahead, behind, ...)."""
        path = _repo_path(owner, repo, f"compare/{quote(base, safe='')}...{quote(head, safe='')}")
        return self.get_json(path) or {}

    def create_check_run(self, owner: str, repo: str, body: Mapping[str, Any]) -> dict:
        """``POST /repos/{o}/{r}/check-runs`` (needs ``checks: write``)."""
        return self.post_json(_repo_path(owner, repo, "check-runs"), dict(body)) or {}

    def update_check_run(
        self, owner: str, repo: str, check_id: int, body: Mapping[str, Any]
    ) -> dict:
        """``PATCH /repos/{o}/{r}/check-runs/{id}`` (annotations are appended)."""
        path = _repo_path(owner, repo, f"check-runs/{int(check_id)}")
        return self.patch_json(path, dict(body)) or {}

    def issue_comments(self, owner: str, repo: str, number: int) -> Iterator[dict]:
        """``GET /repos/{o}/{r}/issues/{n}/comments``, oldest first, every page."""
        yield from self.paginate(_repo_path(owner, repo, f"issues/{int(number)}/comments"))

    def issue_labels(self, owner: str, repo: str, number: int) -> list[str]:
        """``GET /repos/{o}/{r}/issues/{n}/labels``: the label names."""
        path = _repo_path(owner, repo, f"issues/{int(number)}/labels")
        return [str(label.get("name")) for label in self.paginate(path)]

    def issue_events(self, owner: str, repo: str, number: int) -> Iterator[dict]:
        """``GET /repos/{o}/{r}/issues/{n}/events`` (``labeled`` events name their actor)."""
        yield from self.paginate(_repo_path(owner, repo, f"issues/{int(number)}/events"))

    def permission(self, owner: str, repo: str, user: str) -> str:
        """``GET /repos/{o}/{r}/collaborators/{user}/permission``: admin, write, read or none."""
        path = _repo_path(owner, repo, f"collaborators/{quote(user, safe='')}/permission")
        return str((self.get_json(path) or {}).get("permission") or "none")

    def _wrapped(self, path: str, key: str, params: Mapping[str, Any]) -> Iterator[dict]:
        """Every item of a list GitHub wraps in an object (``{"total_count", key: [...]}``)."""
        query: dict[str, Any] = {"per_page": PER_PAGE, **params}
        next_url: str | None = path
        while next_url:
            response = self.request("GET", next_url, params=query)
            data = _json_or_none(response)
            items = data.get(key) if isinstance(data, dict) else None
            if not isinstance(items, list):
                raise GitHubError(
                    f"expected an object with a {key!r} list",
                    status=response.status_code,
                    method="GET",
                    url=response.url,
                )
            yield from (item for item in items if isinstance(item, dict))
            next_url = response.links.get("next", {}).get("url")
            query = {}

    # -- internals --------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.__token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": USER_AGENT,
        }

    def _send(
        self, method: str, url: str, params: Mapping[str, Any] | None, json: Any
    ) -> requests.Response:
        return self._session.request(
            method,
            url,
            params=params or None,
            json=json,
            headers=self._headers(),
            timeout=max(0.05, min(self.timeout_s, self._remaining())),
            allow_redirects=False,
        )

    def _url(self, path: str) -> str:
        """Absolute URL for ``path``; absolute URLs must stay on the API origin."""
        if "://" not in path:
            return urljoin(self.api_url + "/", path.lstrip("/"))
        if _origin(path) != self._origin:
            raise GitHubError(
                "refusing to send credentials to a different origin", url=_strip_query(path)
            )
        return path

    def _backoff(self, attempt: int) -> float:
        return min(self.max_backoff_s, BACKOFF_BASE_S * 2**attempt)

    def _retry_delay(self, response: requests.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying ``response``, or None if it must not be retried."""
        status = response.status_code
        if status >= 500:
            return self._backoff(attempt)
        if status not in (403, 429):
            return None
        indicated = rate_limit_delay(response.headers, time.time())
        if indicated is not None:
            # a limit resetting later than we would ever wait: say so, do not hammer
            return indicated if indicated <= self.max_backoff_s else None
        if status == 429 or _mentions_rate_limit(response):
            return self._backoff(attempt)
        return None  # a plain 403 is a permission problem: retrying will not help

    def wait_before_retry(self, error: GitHubError, attempt: int) -> None:
        """Backs off like a transient failure; for callers that retry at a higher level.
        Raises ``error`` when the wait would overrun the deadline."""
        delay = self._backoff(attempt)
        if delay > self._remaining():
            raise error
        self._log_retry(error, attempt, delay)
        self._sleep(delay)

    def _log_retry(self, error: GitHubError, attempt: int, delay: float) -> None:
        log.warning(
            "GitHub %s %s failed (%s), retry %d/%d in %.1fs",
            error.method,
            error.url,
            error.status or "connection error",
            attempt + 1,
            self.max_retries,
            delay,
        )

    def _remaining(self) -> float:
        return self._deadline - time.monotonic()

    def _check_deadline(self, method: str, url: str) -> None:
        if self._remaining() <= 0:
            raise GitHubError(
                f"gave up: no usable answer from the GitHub API within {self.deadline_s:g}s",
                method=method,
                url=url,
            )

    def _error(self, response: requests.Response, method: str, url: str) -> GitHubError:
        message = error_message(response)
        if self.__token:
            message = message.replace(self.__token, _MASK)
        error = GitHubError(message, status=response.status_code, method=method, url=url)
        if response.status_code in (403, 429):
            now = time.time()
            error.retry_after_s = rate_limit_delay(response.headers, now)
            if error.retry_after_s is not None:
                error.rate_limit_reset = now + error.retry_after_s
        return error


def _mentions_rate_limit(response: requests.Response) -> bool:
    """GitHub's secondary rate limit may answer 403 with only a message in the body."""
    return "rate limit" in error_message(response).lower()


def _json_or_none(response: requests.Response) -> Any:
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except ValueError as exc:
        raise GitHubError(
            "response is not valid JSON",
            status=response.status_code,
            method=response.request.method,
            url=response.url,
        ) from exc


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def _strip_query(url: str) -> str:
    return url.split("?", 1)[0]


def _repo_path(owner: str, repo: str, rest: str) -> str:
    return f"/repos/{quote(owner, safe='')}/{quote(repo, safe='')}/{rest}"


def _capped(data: bytes, max_bytes: int, path: str) -> bytes:
    if len(data) > max_bytes:
        raise GitHubError(f"download larger than {max_bytes} bytes", method="GET", url=path)
    return data
