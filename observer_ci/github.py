"""Pull-request integration: find, create or update the ONE sticky report comment.

The comment is recognised by :data:`MARKER`, an invisible HTML comment the
report puts on its first line. HTTP details live in :mod:`observer_ci.github_client`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from observer_ci.constants import GITHUB_COMMENT_MAX_CHARS, MARKER
from observer_ci.github_client import GitHubClient, GitHubError
from observer_ci.logs import logger
from observer_ci.settings import Settings
from observer_ci.workflow import command

# After a 422 (body too long by GitHub's count) the report is rendered once more, shorter.
FALLBACK_COMMENT_MAX_CHARS = 60000
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


def marker_for(key: str = "") -> str:
    """The marker of the sticky comment with ``comment_key`` ``key`` (``""``: the default).

    Keys are validated by the settings (:data:`observer_ci.settings.KEY_RE`), so they
    cannot close the HTML comment; two keys never match each other's marker.
    """
    if not key:
        return MARKER
    return MARKER.replace(" -->", f" key={key} -->")


def with_marker(body: str, marker: str) -> str:
    """``body`` (a report, which starts with the default marker) with ``marker`` first."""
    if body.startswith(MARKER + "\n"):
        return marker + body[len(MARKER) :]
    return ensure_marker(body, marker)


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


# -- posting the report -----------------------------------------------------------

RenderReport = Callable[[int], str]  # max_chars -> report body


def post_report(settings: Settings, render: RenderReport) -> dict[str, str]:
    """Posts or updates the sticky comment; returns the step outputs ``comment_status``
    (and ``comment_url``). Any failure is a warning, never a lost result."""
    return {
        ("comment_status" if k == "comment" else k): v
        for k, v in _post_report(settings, render).items()
    }


def _post_report(settings: Settings, render: RenderReport) -> dict[str, str]:
    if not settings.post_comment:
        return {"comment": "disabled"}
    if settings.dry_run:
        logger.info("dry run: not posting")
        return {"comment": "dry-run"}
    if settings.event.warning:
        command("warning", f"{settings.event.warning}: no comment posted")
        return {"comment": "failed"}
    if settings.pr_number is None:
        logger.info("not a pull request event: no comment")
        return {"comment": "not-a-pull-request"}
    if not settings.token:
        command("warning", "no token: the report is in the job summary only")
        return {"comment": "no-token"}
    try:
        posted = _upsert_fitting(settings, settings.pr_number, render)
    except GitHubError as e:
        kind = "forbidden" if e.status == 403 else "failed"
        hint = (
            " (a pull request from a fork gets a read-only token: post from a workflow_run"
            " job with mode: publish, see the README's two-step example)"
            if e.status == 403
            else ""
        )
        command(
            "warning",
            f"could not post the PR comment{hint}: {e}; "
            "the report is in the job summary and report.md",
        )
        return {"comment": kind}
    except Exception as e:  # a failed post must never hide the results already written
        command("warning", f"could not post: {type(e).__name__}: {e}")
        return {"comment": "failed"}
    logger.info("comment %s: %s", posted.action, posted.html_url)
    return {"comment": posted.action, "comment_url": posted.html_url}


def _upsert_fitting(settings: Settings, pr: int, render: RenderReport) -> PostResult:
    """Posts the report; on 422 (too long by GitHub's count) once more, clearly shorter."""
    owner, repo = repo_from_env(settings.repository)
    client = GitHubClient(settings.github_api_url, settings.token)
    marker = marker_for(settings.sticky_key)
    extra = len(marker) - len(MARKER)  # a keyed marker is longer than the rendered one
    body = with_marker(render(GITHUB_COMMENT_MAX_CHARS - extra), marker)
    try:
        return upsert_sticky_comment(client, owner, repo, pr, body, marker)
    except GitHubError as e:
        if e.status != 422:
            raise
        logger.info("comment rejected (%s); retrying with a shorter report", e.message)
    body = with_marker(render(min(FALLBACK_COMMENT_MAX_CHARS, len(body) * 3 // 4) - extra), marker)
    return upsert_sticky_comment(client, owner, repo, pr, body, marker)


# -- internals --------------------------------------------------------------------


def _repo_path(owner: str, repo: str) -> str:
    return f"/repos/{quote(owner, safe='')}/{quote(repo, safe='')}"


def _result(action: Literal["created", "updated"], data: Any) -> PostResult:
    if not isinstance(data, dict) or "id" not in data:
        raise GitHubError(f"unexpected response when the comment was {action}: {data!r:.200}")
    html_url = str(data.get("html_url") or "")
    return PostResult(action=action, comment_id=int(data["id"]), html_url=html_url)


def _int_or_zero(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
