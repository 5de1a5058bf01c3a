"""Pull-request integration: find, create or update the ONE sticky report comment.

The comment is recognised by its marker, an invisible HTML comment on its first line
(:func:`sticky_marker`) carrying the comment key, the head SHA and the run. Rules:

- Only comments written by our own identity are ever edited or deleted: the login of
  the token (``GET /user``; refused for GitHub App tokens such as ``GITHUB_TOKEN``), else
  any Bot account, narrowed to the login GitHub reports on the comment we create. A
  person's comment carrying the marker (pasted, or quoted with ``> ``) is never touched.
- One comment per key: after creating, and on every run, the oldest of our comments for
  the key is kept and the other copies are deleted (two runs racing both create; each
  then converges on the same oldest comment).
- An older run never replaces a newer report. "Newer" is the larger
  ``(GITHUB_RUN_ID, GITHUB_RUN_ATTEMPT)``: run ids only grow within a repository, so the
  run triggered last wins, and a re-run beats the attempt it repeats. A comment without
  a run (bare marker of an older release) is older than any run. Commit order is not
  consulted (that needs the history; a force-push to an older commit is a newer run).

HTTP details live in :mod:`observer_ci.github.client`.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from observer_ci.core.constants import (
    COMMENT_CREATED,
    COMMENT_FAILED,
    COMMENT_FORBIDDEN,
    COMMENT_KEY_PATTERN,
    COMMENT_RATE_LIMITED,
    COMMENT_SUPERSEDED,
    COMMENT_UPDATED,
    DEFAULT_COMMENT_KEY,
    MARKER,
    MARKER_PREFIX,
)
from observer_ci.core.logs import logger
from observer_ci.github.client import GitHubClient, GitHubError

__all__ = ["MARKER", "PostResult", "StickyMarker", "post_failure", "upsert_sticky_comment"]

# After a 422 (body too long by GitHub's count) the report is rendered once more, shorter.
FALLBACK_COMMENT_MAX_CHARS = 60000
_REPO_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?/[A-Za-z0-9._-]+$")
_KEY_RE = re.compile(rf"^{COMMENT_KEY_PATTERN}$")
_MARKER_RE = re.compile(re.escape(MARKER_PREFIX) + r"(?P<fields>(?: [a-z]+=[A-Za-z0-9._-]*)*) -->")
_SHA_RE = re.compile(r"^[0-9a-fA-F]{4,64}$")


@dataclass(frozen=True)
class PostResult:
    """What :func:`upsert_sticky_comment` did: ``superseded`` when a newer run's report
    was already there (left as it was); ``deleted`` counts the duplicates removed."""

    action: str  # COMMENT_CREATED, COMMENT_UPDATED or COMMENT_SUPERSEDED
    comment_id: int
    html_url: str
    deleted: int = 0


@dataclass(frozen=True)
class StickyMarker:
    """What the marker line of a sticky comment records."""

    key: str = DEFAULT_COMMENT_KEY
    sha: str = ""
    run: int = 0
    attempt: int = 0

    @property
    def order(self) -> tuple[int, int]:
        """Larger is newer: ``(run id, run attempt)``."""
        return (self.run, self.attempt)

    def render(self) -> str:
        fields = [f"key={self.key}"]
        if self.sha:
            fields.append(f"sha={self.sha}")
        if self.run:
            fields += [f"run={self.run}", f"attempt={self.attempt}"]
        return f"{MARKER_PREFIX} {' '.join(fields)} -->"


def valid_comment_key(key: str) -> str:
    """``key`` stripped, or ValueError when it could not live in the marker."""
    key = (key or "").strip() or DEFAULT_COMMENT_KEY
    if not _KEY_RE.match(key):
        raise ValueError(
            "comment key must be 1-64 letters, digits, '.', '_' or '-' "
            f"(starting with a letter or digit), got {key!r}"
        )
    return key


def sticky_marker(
    comment_key: str = DEFAULT_COMMENT_KEY, head_sha: str = "", run_id: Any = "", attempt: Any = ""
) -> StickyMarker:
    """The marker for this run; values that could not be written safely are left out."""
    sha = head_sha if isinstance(head_sha, str) and _SHA_RE.match(head_sha) else ""
    return StickyMarker(
        valid_comment_key(comment_key), sha, _int_or_zero(run_id), _int_or_zero(attempt)
    )


# -- pure helpers -----------------------------------------------------------------


def parse_marker(body: str | None) -> StickyMarker | None:
    """The marker on the first non-blank line of ``body``, or None. The bare marker of
    older releases reads as key ``default`` with no run."""
    if not body:
        return None
    first_line = body.lstrip().split("\n", 1)[0].strip()
    match = _MARKER_RE.match(first_line)
    if match is None:
        return None
    fields = dict(f.split("=", 1) for f in match["fields"].split())
    return StickyMarker(
        key=fields.get("key") or DEFAULT_COMMENT_KEY,
        sha=fields.get("sha", ""),
        run=_int_or_zero(fields.get("run")),
        attempt=_int_or_zero(fields.get("attempt")),
    )


def with_marker(body: str, marker: StickyMarker) -> str:
    """``body`` with ``marker`` as its first line (replacing a marker line already there)."""
    if parse_marker(body) is not None:
        body = body.lstrip().split("\n", 1)[1] if "\n" in body.lstrip() else ""
    return f"{marker.render()}\n{body}"


def marker_for(key: str = "") -> str:
    """The first line of the sticky comment for ``key`` as a run without a run id writes
    it (``""``: the default key). Lines with sha/run differ: compare with
    :func:`parse_marker`."""
    return sticky_marker(key or DEFAULT_COMMENT_KEY).render()


def comment_login(comment: dict) -> str:
    user = comment.get("user")
    return str(user.get("login") or "") if isinstance(user, dict) else ""


def is_ours(comment: dict, identity: str | None) -> bool:
    """Written by our identity: its login (GitHub logins ignore case), or (identity
    unknown) any Bot account."""
    user = comment.get("user")
    user = user if isinstance(user, dict) else {}
    if identity:
        return comment_login(comment).casefold() == identity.casefold()
    return user.get("type") == "Bot"


def our_copies(comments: Iterable[dict], comment_key: str, identity: str | None) -> list[dict]:
    """Our sticky comments for ``comment_key``, oldest (lowest id) first."""
    found = []
    for comment in comments:
        marker = parse_marker(comment.get("body"))
        if marker is not None and marker.key == comment_key and is_ours(comment, identity):
            found.append(comment)
    return sorted(found, key=lambda c: _int_or_zero(c.get("id")))


def select_sticky_comment(
    comments: Iterable[dict],
    comment_key: str = DEFAULT_COMMENT_KEY,
    identity: str | None = None,
) -> dict | None:
    """The sticky comment to keep: the oldest of ours for the key (None if there is none)."""
    copies = our_copies(comments, comment_key, identity)
    return copies[0] if copies else None


def newer_report(copies: Iterable[dict], marker: StickyMarker) -> dict | None:
    """The copy holding the newest report when it is newer than ours (``marker``), else
    None. Newest: the largest ``(run, attempt)``, then the largest id (written last); an
    equal run and attempt (the same run posting again) is not newer."""
    newest = max(copies, key=lambda c: (_order(c), _int_or_zero(c.get("id"))), default=None)
    if newest is None or marker.order >= _order(newest):
        return None
    return newest


def repo_from_env(value: str | None) -> tuple[str, str]:
    """Split ``GITHUB_REPOSITORY`` (``"owner/repo"``) into ``(owner, repo)``."""
    text = (value or "").strip()
    if not _REPO_RE.match(text):
        raise ValueError(f"GITHUB_REPOSITORY must look like 'owner/repo', got {value!r}")
    owner, repo = text.split("/")
    if repo in (".", ".."):
        raise ValueError(f"GITHUB_REPOSITORY has an invalid repository name: {value!r}")
    return owner, repo


# -- API calls --------------------------------------------------------------------


def whoami(client: GitHubClient) -> str | None:
    """The token's login (``GET /user``), or None where that is refused (App tokens,
    including ``GITHUB_TOKEN``) or fails."""
    try:
        data = client.get_json("/user")
    except GitHubError as e:
        logger.info(
            "token identity unknown (GET /user -> %s): Bot comments count as ours", e.status
        )
        return None
    login = data.get("login") if isinstance(data, dict) else None
    return login if isinstance(login, str) and login else None


def find_sticky_comment(
    client: GitHubClient,
    owner: str,
    repo: str,
    pr_number: int,
    comment_key: str = DEFAULT_COMMENT_KEY,
    identity: str | None = None,
) -> dict | None:
    """Our sticky comment on the PR for the key, scanning all pages of its issue comments."""
    return select_sticky_comment(_list(client, owner, repo, pr_number), comment_key, identity)


def upsert_sticky_comment(
    client: GitHubClient,
    owner: str,
    repo: str,
    pr_number: int,
    body: str,
    marker: StickyMarker | None = None,
    *,
    comment_key: str = DEFAULT_COMMENT_KEY,
    identity: str | None = None,
) -> PostResult:
    """Update our sticky comment if present, else create it; then remove duplicates.

    ``marker`` defaults to ``sticky_marker(comment_key)`` (no run: never newer than a
    report that has one). ``identity`` defaults to what ``GET /user`` says.
    A create that failed ambiguously (5xx, lost connection) may have gone through, so
    the comments are listed again before the next try instead of re-posting blindly.
    """
    marker = marker or sticky_marker(comment_key)
    body = with_marker(body, marker)
    identity = identity or whoami(client)
    for attempt in range(client.max_retries + 1):
        try:
            return _upsert_once(client, owner, repo, pr_number, body, marker, identity)
        except GitHubError as exc:
            if not exc.ambiguous or attempt == client.max_retries:
                raise
            client.wait_before_retry(exc, attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _upsert_once(
    client: GitHubClient,
    owner: str,
    repo: str,
    pr_number: int,
    body: str,
    marker: StickyMarker,
    identity: str | None,
) -> PostResult:
    copies = our_copies(_list(client, owner, repo, pr_number), marker.key, identity)
    created: dict | None = None
    if not copies:
        path = f"{_repo_path(owner, repo)}/issues/{int(pr_number)}/comments"
        created = _checked(COMMENT_CREATED, client.post_json(path, {"body": body}))
        identity = identity or comment_login(created) or None
        # another run may have created its copy at the same moment: list again
        copies = our_copies(_list(client, owner, repo, pr_number), marker.key, identity)
        if all(c.get("id") != created["id"] for c in copies):
            copies = sorted([*copies, created], key=lambda c: _int_or_zero(c.get("id")))
    return _converge(client, owner, repo, copies, body, marker, created)


def _converge(
    client: GitHubClient,
    owner: str,
    repo: str,
    copies: list[dict],
    body: str,
    marker: StickyMarker,
    created: dict | None,
) -> PostResult:
    """Keep the oldest copy, holding the newest report (ours unless a newer run's is
    there); delete the other copies."""
    keep = copies[0]
    newer = newer_report(copies, marker)
    wanted = body if newer is None else str(newer.get("body") or "")
    if keep.get("body") != wanted:
        path = f"{_repo_path(owner, repo)}/issues/comments/{int(keep['id'])}"
        try:
            keep = _checked(COMMENT_UPDATED, client.patch_json(path, {"body": wanted}))
        except GitHubError as exc:
            if exc.status == 404:  # deleted since we listed it: list again and retry
                exc.ambiguous = True
            raise
    deleted = 0
    for copy in copies[1:]:
        if _delete_comment(client, owner, repo, int(copy["id"])):
            deleted += 1
    if deleted:
        logger.info("removed %d duplicate sticky comment(s)", deleted)
    if newer is not None:
        action = COMMENT_SUPERSEDED
        logger.info(
            "a newer run (%s, attempt %s) already reported here: left as it is",
            _marker_of(newer).run,
            _marker_of(newer).attempt,
        )
    elif created is not None and keep.get("id") == created.get("id"):
        action = COMMENT_CREATED
    else:
        action = COMMENT_UPDATED
    return PostResult(action, int(keep["id"]), str(keep.get("html_url") or ""), deleted)


def _delete_comment(client: GitHubClient, owner: str, repo: str, comment_id: int) -> bool:
    path = f"{_repo_path(owner, repo)}/issues/comments/{comment_id}"
    try:
        client.delete(path)
    except GitHubError as exc:
        if exc.status == 404:  # another run deleted it first
            return False
        raise
    return True


def _list(client: GitHubClient, owner: str, repo: str, pr_number: int) -> list[dict]:
    path = f"{_repo_path(owner, repo)}/issues/{int(pr_number)}/comments"
    return [c for c in client.paginate(path) if isinstance(c, dict)]


def _marker_of(comment: dict) -> StickyMarker:
    return parse_marker(comment.get("body")) or StickyMarker()


def _order(comment: dict) -> tuple[int, int]:
    return _marker_of(comment).order


def post_failure(error: GitHubError, now: float | None = None) -> tuple[str, str]:
    """The ``comment`` output and the warning for a failed post: a rate limit is not a
    missing permission, and only a plain 403 gets the fork hint."""
    if error.rate_limited:
        when = ""
        if error.rate_limit_reset is not None:
            at = datetime.datetime.fromtimestamp(error.rate_limit_reset, datetime.timezone.utc)
            now = datetime.datetime.now(datetime.timezone.utc).timestamp() if now is None else now
            minutes = max(0, round((error.rate_limit_reset - now) / 60))
            when = f"; it resets at {at:%H:%M:%S} UTC (in about {minutes} min)"
        return (
            COMMENT_RATE_LIMITED,
            f"could not post the PR comment: GitHub's API rate limit{when}: {error}",
        )
    if error.status == 403:
        hint = (
            " (a pull request from a fork gets a read-only token: post from a workflow_run"
            " job with mode: publish, see the README's two-step example)"
        )
        return COMMENT_FORBIDDEN, f"could not post the PR comment{hint}: {error}"
    return COMMENT_FAILED, f"could not post the PR comment: {error}"


# -- internals --------------------------------------------------------------------


def _repo_path(owner: str, repo: str) -> str:
    return f"/repos/{quote(owner, safe='')}/{quote(repo, safe='')}"


def _checked(action: str, data: Any) -> dict:
    if not isinstance(data, dict) or "id" not in data:
        raise GitHubError(f"unexpected response when the comment was {action}: {data!r:.200}")
    return data


def _int_or_zero(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
