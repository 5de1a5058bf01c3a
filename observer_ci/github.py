"""Pull-request integration: find, create or update the ONE sticky report comment.

The comment is recognised by :data:`MARKER`, an invisible HTML comment the
report puts on its first line. HTTP details live in :mod:`observer_ci.github_client`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from observer_ci.constants import MARKER
from observer_ci.github_client import GitHubClient, GitHubError

_REPO_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?/[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class PostResult:
    """What :func:`upsert_sticky_comment` did."""

    action: Literal["created", "updated"]
    comment_id: int
    html_url: str


# -- pure helpers -----------------------------------------------------------------


def marker_rank(body: str | None, marker: str = MARKER) -> int:
    """2 if ``body``'s first line is the marker, 1 if it contains it elsewhere, else 0."""
    if not body or marker not in body:
        return 0
    first_line = body.lstrip().split("\n", 1)[0].strip()
    return 2 if first_line.startswith(marker) else 1


def ensure_marker(body: str, marker: str = MARKER) -> str:
    """Return ``body`` with the marker on its first line unless it already carries it."""
    if marker in body:
        return body
    return f"{marker}\n{body}"


def select_sticky_comment(comments: Iterable[dict], marker: str = MARKER) -> dict | None:
    """Pick the sticky comment among ``comments``.

    Comments whose first line is the marker beat those merely containing it; then a
    bot's comment (ours, e.g. github-actions[bot]) beats a person's who quoted the
    marker, since we could not edit theirs; then the most recent (then highest id).
    """
    best: dict | None = None
    best_key: tuple[int, int, str, int] | None = None
    for comment in comments:
        rank = marker_rank(comment.get("body"), marker)
        if rank == 0:
            continue
        user = comment.get("user") if isinstance(comment.get("user"), dict) else {}
        is_bot = int(user.get("type") == "Bot")
        created = str(comment.get("created_at") or "")
        key = (rank, is_bot, created, _int_or_zero(comment.get("id")))
        if best_key is None or key > best_key:
            best, best_key = comment, key
    return best


def pr_number_from_event(event_path: str | os.PathLike[str] | None) -> int | None:
    """PR number from the ``GITHUB_EVENT_PATH`` JSON payload, or None when not a PR event.

    Uses ``pull_request.number``, else ``issue.number`` when that issue is a pull
    request (``issue_comment`` events). A missing path or file gives None; a file
    that is not JSON raises ValueError.
    """
    if not event_path:
        return None
    path = Path(event_path)
    if not path.is_file():
        return None
    try:
        event = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"GitHub event file {path} is not valid JSON: {exc}") from exc
    return pr_number_from_payload(event)


def pr_number_from_payload(event: Any) -> int | None:
    """PR number from an already decoded event payload (see :func:`pr_number_from_event`)."""
    if not isinstance(event, dict):
        return None
    pull_request = event.get("pull_request")
    if isinstance(pull_request, dict):
        return _positive_int(pull_request.get("number"))
    issue = event.get("issue")
    if isinstance(issue, dict) and issue.get("pull_request"):
        return _positive_int(issue.get("number"))
    return None


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


def find_sticky_comment(
    client: GitHubClient, owner: str, repo: str, pr_number: int, marker: str = MARKER
) -> dict | None:
    """The sticky comment on the PR, scanning all pages of its issue comments."""
    path = f"{_repo_path(owner, repo)}/issues/{int(pr_number)}/comments"
    return select_sticky_comment(client.paginate(path), marker)


def upsert_sticky_comment(
    client: GitHubClient,
    owner: str,
    repo: str,
    pr_number: int,
    body: str,
    marker: str = MARKER,
) -> PostResult:
    """Update the sticky comment if present, else create it; never creates a duplicate.

    A create that failed ambiguously (5xx, lost connection) may have gone through, so
    the comments are listed again before the next try instead of re-posting blindly.
    """
    body = ensure_marker(body, marker)
    for attempt in range(client.max_retries + 1):
        try:
            return _upsert_once(client, owner, repo, pr_number, body, marker)
        except GitHubError as exc:
            if not exc.ambiguous or attempt == client.max_retries:
                raise
            client.wait_before_retry(exc, attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _upsert_once(
    client: GitHubClient, owner: str, repo: str, pr_number: int, body: str, marker: str
) -> PostResult:
    existing = find_sticky_comment(client, owner, repo, pr_number, marker)
    if existing is not None:
        path = f"{_repo_path(owner, repo)}/issues/comments/{int(existing['id'])}"
        try:
            return _result("updated", client.patch_json(path, {"body": body}))
        except GitHubError as exc:
            if exc.status != 404:  # deleted since we listed it: fall through and recreate
                raise
    path = f"{_repo_path(owner, repo)}/issues/{int(pr_number)}/comments"
    return _result("created", client.post_json(path, {"body": body}))


# -- internals --------------------------------------------------------------------


def _repo_path(owner: str, repo: str) -> str:
    return f"/repos/{quote(owner, safe='')}/{quote(repo, safe='')}"


def _result(action: Literal["created", "updated"], data: Any) -> PostResult:
    if not isinstance(data, dict) or "id" not in data:
        raise GitHubError(f"unexpected response when the comment was {action}: {data!r:.200}")
    html_url = str(data.get("html_url") or "")
    return PostResult(action=action, comment_id=int(data["id"]), html_url=html_url)


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and value > 0 else None


def _int_or_zero(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
