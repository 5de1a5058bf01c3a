"""The job's verdict beyond the comment: maintainers' acceptances applied in run mode, and
the ``issue_comment`` event's re-judging of the last report (:mod:`observer_ci.action.accept`)
with its check run (:mod:`observer_ci.action.check_run`)."""

from __future__ import annotations

import dataclasses
from urllib.parse import quote

from observer_ci.action.accept import Outcome, acceptable, judge, read_state, strip_section
from observer_ci.action.check_run import CheckRun
from observer_ci.action.comment import RenderReport
from observer_ci.action.settings import Settings
from observer_ci.core.constants import DEFAULT_COMMENT_KEY
from observer_ci.core.logs import logger
from observer_ci.core.workflow_commands import command, write_outputs
from observer_ci.github.client import GitHubClient, GitHubError
from observer_ci.github.sticky import parse_marker, repo_from_env, select_sticky_comment
from observer_ci.report.rules import Regression

MIN_REPORT_CHARS = 4000


def _key(settings: Settings) -> str:
    return settings.sticky_key or DEFAULT_COMMENT_KEY


def accept_in_run(
    settings: Settings, client: GitHubClient, regressions: list[Regression]
) -> Outcome | None:
    """Run mode on a pull request: the acceptances applied to this run's regressions."""
    pr = settings.pr_number
    if pr is None or not settings.token or settings.dry_run or not settings.post_comment:
        return None
    if not acceptable(regressions):
        return None  # nothing a maintainer could accept: no API calls
    try:
        owner, repo = repo_from_env(settings.repository)
    except ValueError:
        return None
    key = _key(settings)
    return judge(
        client,
        owner,
        repo,
        pr,
        regressions,
        settings.head_sha,
        lambda comments: select_sticky_comment(comments, key),
    )


def with_section(render: RenderReport, outcome: Outcome | None) -> RenderReport:
    """The comment renderer with the accept section (and hidden ledger) at its end."""
    if outcome is None:
        return render
    tail = outcome.section()

    def rendered(max_chars: int) -> str:
        if max_chars - len(tail) < MIN_REPORT_CHARS:
            return render(max_chars)  # a tiny budget: the report, without the section
        return render(max_chars - len(tail)) + tail

    return rendered


def rejudge(settings: Settings, client: GitHubClient) -> int:
    """An ``issue_comment`` event: the last report's regressions judged again with the
    acceptances now on the pull request; its comment and a check run updated. Runs nothing
    of the pull request. Returns 0 (problems are warnings)."""
    pr = settings.pr_number
    if pr is None or not settings.token or settings.dry_run:
        logger.info("issue_comment: no pull request or no token, nothing to re-judge")
        return 0
    try:
        owner, repo = repo_from_env(settings.repository)
        base = f"/repos/{quote(owner, safe='')}/{quote(repo, safe='')}"
        ours = select_sticky_comment(client.issue_comments(owner, repo, pr), _key(settings))
        marker = parse_marker(ours.get("body")) if ours else None
        if ours is None or marker is None or not marker.sha:
            command("warning", "no observer-ci report on this pull request yet: nothing accepted")
            return 0
        pull = client.get_json(f"{base}/pulls/{int(pr)}") or {}
        head_sha = (pull.get("head") or {}).get("sha")
        if head_sha != marker.sha:
            command("warning", "the pull request has newer commits: its next run will judge them")
            return 0
        _, raw = read_state(ours.get("body"))
        if not raw:  # nothing stored: never turn a check green from an empty list
            command("warning", "the last report stored no regression to accept: nothing changed")
            return 0
        outcome = judge(
            client,
            owner,
            repo,
            pr,
            raw,
            marker.sha,
            lambda comments: select_sticky_comment(comments, _key(settings)),
        )
        body = strip_section(str(ours.get("body") or "")) + outcome.section()
        client.patch_json(f"{base}/issues/comments/{int(ours['id'])}", {"body": body})
    except (GitHubError, ValueError) as e:
        command("warning", f"the acceptances could not be applied: {e}")
        return 0
    check = CheckRun(dataclasses.replace(settings, head_sha=marker.sha))
    outputs = check.finish(client, outcome.regressions, body)
    write_outputs(settings.output_path, {**outputs, "comment_status": "updated"})
    return 0
