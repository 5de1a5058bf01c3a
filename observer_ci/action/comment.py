"""Posting this job's report: which gate stops a post (disabled, dry run, no pull request,
no token), the sticky marker it carries, one shorter retry after a 422. The GitHub
mechanics (finding our comment, upserting it) live in :mod:`observer_ci.github.sticky`."""

from __future__ import annotations

from collections.abc import Callable

from observer_ci.action.settings import Settings
from observer_ci.core.constants import (
    COMMENT_DISABLED,
    COMMENT_DRY_RUN,
    COMMENT_FAILED,
    COMMENT_NO_TOKEN,
    COMMENT_NOT_A_PULL_REQUEST,
    DEFAULT_COMMENT_KEY,
    GITHUB_COMMENT_MAX_CHARS,
    MARKER,
)
from observer_ci.core.logs import logger
from observer_ci.core.workflow_commands import command
from observer_ci.github.client import GitHubClient, GitHubError
from observer_ci.github.sticky import (
    FALLBACK_COMMENT_MAX_CHARS,
    PostResult,
    StickyMarker,
    post_failure,
    repo_from_env,
    sticky_marker,
    upsert_sticky_comment,
)

RenderReport = Callable[[int], str]  # max_chars -> report body


def post_report(settings: Settings, client: GitHubClient, render: RenderReport) -> dict[str, str]:
    """Posts or updates this job's sticky comment (``settings.sticky_key``) with the job's
    one ``client``; returns the step outputs ``comment_status`` (and ``comment_url``). Any
    failure is a warning, never a lost result."""
    return {
        ("comment_status" if k == "comment" else k): v
        for k, v in _post_report(settings, client, render).items()
    }


def _post_report(settings: Settings, client: GitHubClient, render: RenderReport) -> dict[str, str]:
    if not settings.post_comment:
        return {"comment": COMMENT_DISABLED}
    if settings.dry_run:
        logger.info("dry run: not posting")
        return {"comment": COMMENT_DRY_RUN}
    if settings.event.warning:
        logger.info("the event could not be read: no comment posted")
        return {"comment": COMMENT_FAILED}
    if settings.pr_number is None:
        logger.info("not a pull request event: no comment")
        return {"comment": COMMENT_NOT_A_PULL_REQUEST}
    if not settings.token:
        command("warning", "no token: the report is in the job summary only")
        return {"comment": COMMENT_NO_TOKEN}
    try:
        marker = sticky_marker(
            settings.sticky_key or DEFAULT_COMMENT_KEY,
            settings.head_sha,
            settings.run_id,
            settings.run_attempt,
        )
        posted = _upsert_fitting(settings, client, settings.pr_number, render, marker)
    except GitHubError as e:
        kind, why = post_failure(e)
        command("warning", f"{why}; the report is in the job summary and report.md")
        return {"comment": kind}
    except Exception as e:  # a failed post must never hide the results already written
        command("warning", f"could not post: {type(e).__name__}: {e}")
        return {"comment": COMMENT_FAILED}
    logger.info("comment %s: %s", posted.action, posted.html_url)
    return {"comment": posted.action, "comment_url": posted.html_url}


def _upsert_fitting(
    settings: Settings,
    client: GitHubClient,
    pr: int,
    render: RenderReport,
    marker: StickyMarker,
) -> PostResult:
    """Posts the report; on 422 (too long by GitHub's count) once more, clearly shorter."""
    owner, repo = repo_from_env(settings.repository)
    # the full marker is longer than the bare one the report starts with
    extra = len(marker.render()) - len(MARKER)
    body = render(GITHUB_COMMENT_MAX_CHARS - extra)
    try:
        return upsert_sticky_comment(client, owner, repo, pr, body, marker)
    except GitHubError as e:
        if e.status != 422:
            raise
        logger.info("comment rejected (%s); retrying with a shorter report", e.message)
    body = render(min(FALLBACK_COMMENT_MAX_CHARS, len(body) * 3 // 4) - extra)
    return upsert_sticky_comment(client, owner, repo, pr, body, marker)
