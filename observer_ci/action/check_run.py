"""A check run on the head commit (Checks API), so a branch protection rule can require it.

Run mode creates it ``in_progress`` when the job starts and completes it at the end; publish
mode and the accept path create it completed. Its conclusion is the gate's:
``failure`` when a regression fails the build, ``neutral`` when regressions that would have
were accepted (the policy file or a maintainer), else ``success``. ``output.summary`` is the
report (cut to GitHub's 65535 characters); regressions become annotations on their
scripts, 50 per request as the API allows. It needs ``permissions: checks: write``: a token
without it (403) falls back to the comment alone, said once in the log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from observer_ci.action.settings import Settings
from observer_ci.core.logs import logger
from observer_ci.core.results import RunResults
from observer_ci.core.workflow_commands import command
from observer_ci.github.client import GitHubClient, GitHubError
from observer_ci.github.sticky import repo_from_env
from observer_ci.report.rules import Regression

CHECK_NAME = "observer-ci"
SUMMARY_MAX_CHARS = 65535  # output.summary, as the Checks API limits it
ANNOTATIONS_PER_REQUEST = 50  # the Checks API's limit per create/update
MAX_ANNOTATIONS = 150  # in all (three requests)
MESSAGE_MAX_CHARS = 4000
NO_PERMISSION = (
    "the token cannot create check runs (needs permissions: checks: write): "
    "the report is in the comment and the job summary only"
)
SUCCESS, FAILURE, NEUTRAL = "success", "failure", "neutral"


def conclusion(regressions: Iterable[Regression]) -> str:
    """The gate as a check-run conclusion."""
    found = list(regressions)
    if any(r.fails_build for r in found):
        return FAILURE
    return NEUTRAL if any(r.accepted for r in found) else SUCCESS


@dataclass
class CheckRun:
    """This job's check run: its id once created; ``disabled`` after a 403 (said once)."""

    settings: Settings
    check_id: int | None = None
    html_url: str = ""
    disabled: bool = False
    said: list[str] = field(default_factory=list)

    @property
    def wanted(self) -> bool:
        s = self.settings
        return bool(s.check_run and s.token and not s.dry_run and s.head_sha and s.repository)

    def start(self, client: GitHubClient) -> None:
        """Creates the check run ``in_progress`` (run mode, before the scripts run)."""
        if not self.wanted or self.disabled:
            return
        body = {"name": self._name(), "head_sha": self.settings.head_sha, "status": "in_progress"}
        created = self._call(lambda o, r: client.create_check_run(o, r, body))
        if created:
            self.check_id, self.html_url = int(created["id"]), str(created.get("html_url") or "")

    def finish(
        self,
        client: GitHubClient,
        regressions: list[Regression],
        summary: str,
        head: RunResults | None = None,
    ) -> dict[str, str]:
        """Completes (or creates, completed) the check run; returns ``check_run_url``."""
        if not self.wanted or self.disabled:
            return {}
        notes = _annotations(regressions, head, self.settings)
        verdict = conclusion(regressions)
        output: dict[str, Any] = {
            "title": _title(regressions, verdict),
            "summary": summary[:SUMMARY_MAX_CHARS],
            "annotations": notes[:ANNOTATIONS_PER_REQUEST],
        }
        body = {"status": "completed", "conclusion": verdict, "output": output}
        if self.check_id is None:
            first = {"name": self._name(), "head_sha": self.settings.head_sha, **body}
            done = self._call(lambda o, r: client.create_check_run(o, r, first))
        else:
            check_id = self.check_id
            done = self._call(lambda o, r: client.update_check_run(o, r, check_id, body))
        if not done:
            return {}
        self.check_id, self.html_url = int(done["id"]), str(done.get("html_url") or "")
        for start in range(ANNOTATIONS_PER_REQUEST, len(notes), ANNOTATIONS_PER_REQUEST):
            chunk = notes[start : start + ANNOTATIONS_PER_REQUEST]
            if not self._more(client, {"output": {**output, "annotations": chunk}}):
                break
        logger.info("check run %s: %s", verdict, self.html_url)
        return {"check_run_url": self.html_url} if self.html_url else {}

    def _more(self, client: GitHubClient, body: dict[str, Any]) -> bool:
        check_id = self.check_id
        if check_id is None:
            return False
        return self._call(lambda o, r: client.update_check_run(o, r, check_id, body)) is not None

    def _name(self) -> str:
        key = self.settings.comment_key or self.settings.label
        return f"{CHECK_NAME} ({key})" if key else CHECK_NAME

    def _call(self, send: Callable[[str, str], dict]) -> dict | None:
        try:
            owner, repo = repo_from_env(self.settings.repository)
            return send(owner, repo)
        except GitHubError as e:
            if e.status == 403 and not _rate_limited(e):
                self.disabled = True
                self._say(NO_PERMISSION)
            else:
                self._say(f"the check run could not be written ({e}); the comment still is")
        except ValueError as e:  # GITHUB_REPOSITORY unusable
            self._say(f"no check run: {e}")
        return None

    def _say(self, message: str) -> None:
        if message not in self.said:
            self.said.append(message)
            command("warning", message)


def _rate_limited(error: GitHubError) -> bool:
    return error.retry_after_s is not None or "rate limit" in error.message.lower()


def _title(regressions: list[Regression], verdict: str) -> str:
    failing = sum(r.fails_build for r in regressions)
    if verdict == FAILURE:
        return f"{failing} regression{'s' if failing != 1 else ''} fail the build"
    if verdict == NEUTRAL:
        accepted = sum(bool(r.accepted) for r in regressions)
        return f"{accepted} accepted regression{'s' if accepted != 1 else ''}, none failing"
    return "no regression fails the build"


def _annotations(
    regressions: list[Regression], head: RunResults | None, settings: Settings
) -> list[dict[str, Any]]:
    """One annotation per regression on its model's script (line 1), failures first."""
    scripts = {m.name: m.script for m in head.models} if head is not None else {}
    fallback = settings.scripts[0] if settings.scripts else "."
    ordered = sorted(regressions, key=lambda r: not r.fails_build)[:MAX_ANNOTATIONS]
    found = []
    for r in ordered:
        level = "failure" if r.fails_build else ("notice" if r.accepted else "warning")
        found.append(
            {
                "path": _relative(scripts.get(r.model) or fallback, settings.workspace),
                "start_line": 1,
                "end_line": 1,
                "annotation_level": level,
                "title": f"{r.rule}: {r.model}"[:255],
                "message": r.message[:MESSAGE_MAX_CHARS] or r.rule,
            }
        )
    return found


def _relative(script: str, workspace: str) -> str:
    path = Path(script)
    if path.is_absolute():
        try:
            return path.resolve().relative_to(Path(workspace).resolve()).as_posix()
        except ValueError:
            return path.name
    return path.as_posix()
