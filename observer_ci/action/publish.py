"""Publish mode: post what earlier jobs left as payloads, one sticky comment for all of them.

Used by a ``workflow_run`` job after a pull request from a fork (the pull-request job had
a read-only token), and by one job after a matrix (the legs' results merged: a red leg
is never hidden by a green one). Nothing of the pull request is checked out or run here;
the payloads are untrusted (:mod:`observer_ci.action.artifact` validates them), the report is
re-rendered from their ``results.json``, and before posting, the API must confirm that the
pull request belongs to the run the payload came from. Then the maintainers' acceptances on
that pull request are applied as run mode applies them
(:func:`observer_ci.action.verdict.accept_in_run`): the comment gets the accept section and
the check run turns ``neutral``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from observer_ci.action.artifact import ArtifactError, NoPayloadError, Part, read_parts
from observer_ci.action.check_run import SUMMARY_MAX_CHARS, CheckRun
from observer_ci.action.comment import post_report
from observer_ci.action.main import write_and_summarise, write_outputs
from observer_ci.action.settings import EventFacts, Settings
from observer_ci.action.verdict import accept_in_run, with_section
from observer_ci.core import workflow_commands as workflow
from observer_ci.core.constants import (
    COMMENT_FAILED,
    COMMENT_NO_PAYLOAD,
    COMMENT_REJECTED,
    COMMENT_STALE,
)
from observer_ci.core.exceptions import Rejected
from observer_ci.core.legs import merge_results
from observer_ci.core.logs import logger
from observer_ci.core.results import RunResults
from observer_ci.github.client import GitHubClient, GitHubError
from observer_ci.github.sticky import repo_from_env
from observer_ci.report.rules import Thresholds, compare

EXIT_REJECTED = 1


@dataclass(frozen=True)
class Combined:
    """The parts' results as one run, and what they agree on."""

    head: RunResults
    base: RunResults | None
    pr_number: int | None
    head_sha: str
    run_id: str
    comment_key: str
    thresholds: Thresholds
    fail_on: frozenset[str]


def publish(settings: Settings, client: GitHubClient) -> int:
    """Reads, validates, merges, reports and posts with ``client`` (the job's one client);
    returns the exit code (1 if rejected)."""
    Path(settings.out_dir).mkdir(parents=True, exist_ok=True)
    run_id = settings.event.workflow_run_id or settings.run_id
    try:
        combined = combine(read_parts(settings.payload_path), settings.comment_key, run_id)
    except NoPayloadError as e:
        workflow.command("warning", f"{e}: nothing to publish")
        write_outputs(settings, {"comment_status": COMMENT_NO_PAYLOAD})
        return 0
    except ArtifactError as e:
        return _reject(settings, str(e))
    target = dataclasses.replace(
        settings,
        event=EventFacts(pr_number=combined.pr_number, head_sha=combined.head_sha),
        head_sha=combined.head_sha,
        run_id=combined.run_id,
        comment_key=combined.comment_key,
        label="",
    )
    regressions = compare(combined.head, combined.base, combined.thresholds, combined.fail_on)
    refused = _refusal(target, client)
    # only once the pull request is confirmed as the payload's are its comments read
    accepted = accept_in_run(target, client, regressions) if refused is None else None
    regressions = accepted.regressions if accepted is not None else regressions
    try:
        outputs, render = write_and_summarise(
            target, combined.head, combined.base, regressions, combined.head.label
        )
    except Exception as e:  # validated, yet the renderer chokes: still untrusted data
        return _reject(settings, f"the results could not be rendered ({type(e).__name__})")
    if refused is not None:
        level = "error" if refused.status == COMMENT_REJECTED else "warning"
        workflow.command(level, f"not posting: {refused}")
        write_outputs(settings, {**outputs, "comment_status": refused.status})
        return EXIT_REJECTED if refused.status == COMMENT_REJECTED else 0
    render = with_section(render, accepted)
    outputs.update(post_report(target, client, render))
    check = CheckRun(target)  # the head commit's check run, completed at once
    outputs.update(check.finish(client, regressions, render(SUMMARY_MAX_CHARS), combined.head))
    write_outputs(settings, outputs)
    return 0


def combine(parts: list[Part], comment_key: str, run_id: str) -> Combined:
    """One run from the parts (merged when there are several); they must agree on the
    pull request, commit, run, gate, and the comment key unless ``comment_key`` is given.
    The sticky comment is the one run mode would post to: the key, else a single part's
    label; merged legs share one comment (the default, or the key)."""
    first = parts[0]
    for part in parts[1:]:
        for name in ("pr_number", "head_sha", "run_id", "thresholds", "fail_on"):
            if getattr(part.payload, name) != getattr(first.payload, name):
                raise ArtifactError(f"payloads {first.where} and {part.where} disagree on {name}")
    if run_id and first.payload.run_id != run_id:
        raise ArtifactError(
            f"the payload names run {first.payload.run_id} but came from run {run_id}"
        )
    keys = sorted({p.payload.comment_key for p in parts})
    if not comment_key and len(keys) > 1:
        raise ArtifactError(f"payloads disagree on comment_key ({', '.join(keys)}): set one")
    head, base = _merged(parts)
    if not comment_key:  # as run mode: the key, else a single leg's label (merged: no label)
        comment_key = keys[0] or (first.payload.label if len(parts) == 1 else "")
    return Combined(
        head=head,
        base=base,
        pr_number=first.payload.pr_number,
        head_sha=first.payload.head_sha,
        run_id=first.payload.run_id,
        comment_key=comment_key,
        thresholds=first.payload.thresholds,
        fail_on=first.payload.fail_on,
    )


def _merged(parts: list[Part]) -> tuple[RunResults, RunResults | None]:
    if len(parts) == 1:
        part = parts[0]
        return dataclasses.replace(part.head, label=part.payload.label), part.base
    head = merge_results([dataclasses.replace(p.head, label=p.payload.label) for p in parts])
    with_base = [p for p in parts if p.base is not None]
    if len(with_base) == len(parts):
        bases = [
            dataclasses.replace(p.base, label=p.payload.label) for p in parts if p.base is not None
        ]
        return head, merge_results(bases)
    if with_base:
        head.environment.setdefault("notes", []).append(
            f"{len(with_base)} of {len(parts)} legs had a baseline: compared without one"
        )
    return head, None


def _refusal(settings: Settings, client: GitHubClient) -> Rejected | None:
    """Why the report must not be posted (:func:`verify_origin`), or None."""
    if not _will_post(settings):
        return None
    try:
        verify_origin(settings, client)
    except Rejected as e:
        return e
    return None


def _will_post(settings: Settings) -> bool:
    return bool(
        settings.post_comment and not settings.dry_run and settings.pr_number and settings.token
    )


def verify_origin(settings: Settings, client: GitHubClient) -> None:
    """Raises :class:`Rejected` unless the API confirms that the pull request belongs to
    the run the payload came from (its head commit is the run's, from the run's repository)."""
    owner, repo = repo_from_env(settings.repository)
    base = f"/repos/{quote(owner, safe='')}/{quote(repo, safe='')}"
    pr = settings.pr_number
    if pr is None:  # publish checks it first (_will_post)
        raise Rejected("the payload names no pull request")
    try:
        run = _object(client.get_json(f"{base}/actions/runs/{int(settings.run_id)}"))
    except GitHubError as e:
        raise Rejected(
            f"run {settings.run_id} could not be read ({e}); the job needs actions: read",
            COMMENT_FAILED,
        ) from None
    if run.get("head_sha") != settings.head_sha:
        raise Rejected(f"the payload's commit is not the head commit of run {settings.run_id}")
    numbers = [p.get("number") for p in run.get("pull_requests") or [] if isinstance(p, dict)]
    if pr in numbers:
        return
    # Runs of pull requests from forks list no pull requests: ask the pull request instead.
    try:
        pull = _object(client.get_json(f"{base}/pulls/{int(pr)}"))
    except GitHubError as e:
        raise Rejected(f"pull request #{pr} could not be read ({e.status})") from None
    pull_head = _object(pull.get("head"))
    run_repo = _object(run.get("head_repository")).get("full_name")
    if not run_repo or _object(pull_head.get("repo")).get("full_name") != run_repo:
        raise Rejected(f"pull request #{pr} does not come from the run's repository")
    if pull_head.get("sha") != settings.head_sha:
        raise Rejected(
            f"pull request #{pr} has newer commits than run {settings.run_id}: "
            "its own run will publish",
            COMMENT_STALE,
        )
    logger.info("pull request #%s belongs to run %s", pr, settings.run_id)


def _object(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _reject(settings: Settings, reason: str) -> int:
    workflow.command("error", f"payload rejected, nothing posted: {reason}")
    write_outputs(settings, {"comment_status": COMMENT_REJECTED})
    return EXIT_REJECTED
