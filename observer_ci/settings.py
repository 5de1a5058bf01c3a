"""Action settings, read and parsed once from the environment (``INPUT_*`` and ``GITHUB_*``).

Everything downstream gets typed values: thresholds, ``fail_on``, the pull request number
and the base/head commits are parsed here, once; the event file is read here, once.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from observer_ci.rules import DEFAULT_FAIL_ON, Thresholds, parse_fail_on, parse_thresholds


class SettingsError(ValueError):
    """A missing or malformed action input."""


TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}
# Longest run a self-hosted runner allows (5 days); beyond it a timeout means "never".
MAX_TIMEOUT_MINUTES = 7200.0


def _bool(name: str, value: str | None, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    v = value.strip().lower()
    if v in TRUE:
        return True
    if v in FALSE:
        return False
    raise SettingsError(f"input {name!r} must be true or false, got {value!r}")


@dataclass(frozen=True)
class EventFacts:
    """What the workflow event says about the pull request (all optional)."""

    pr_number: int | None = None
    base_sha: str | None = None
    head_sha: str | None = None
    warning: str | None = None  # why the event could not be read, when it could not


def read_event(event_path: str | None) -> EventFacts:
    """Reads ``GITHUB_EVENT_PATH`` once; an unreadable file is a warning, never an error."""
    if not event_path:
        return EventFacts()
    path = Path(event_path)
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return EventFacts(warning=f"the event file {event_path} does not exist")
    except (OSError, ValueError) as e:
        return EventFacts(warning=f"the event file {event_path} is unreadable: {e}")
    return event_facts(payload)


def event_facts(payload: Any) -> EventFacts:
    """PR number (``pull_request.number``, or ``issue.number`` of a PR's issue comment)
    and base/head SHAs from a decoded event payload."""
    if not isinstance(payload, dict):
        return EventFacts(warning="the event payload is not a JSON object")
    pull_request = payload.get("pull_request")
    if isinstance(pull_request, dict):
        return EventFacts(
            pr_number=_positive_int(pull_request.get("number")),
            base_sha=_sha(pull_request.get("base")),
            head_sha=_sha(pull_request.get("head")),
        )
    issue = payload.get("issue")
    if isinstance(issue, dict) and issue.get("pull_request"):
        return EventFacts(pr_number=_positive_int(issue.get("number")))
    return EventFacts()


def _sha(ref: Any) -> str | None:
    sha = ref.get("sha") if isinstance(ref, dict) else None
    return str(sha) if isinstance(sha, str) and sha else None


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and value > 0 else None


@dataclass(frozen=True)
class Settings:
    """What the action does; every field has a matching ``action.yml`` input or GitHub variable."""

    scripts: list[str]
    install: str = ""
    baseline: str = ""  # "", a results.json path, or "base" to run the base commit
    thresholds: Thresholds = field(default_factory=Thresholds)
    fail_on: frozenset[str] = DEFAULT_FAIL_ON
    comment: bool = True
    token: str = field(default="", repr=False)
    out_dir: str = "observer-ci-out"
    dry_run: bool = False
    repeat: int = 10
    timeout_minutes: float = 60.0  # per run of the scripts (head, base) and for install
    github_api_url: str = "https://api.github.com"
    github_server_url: str = "https://github.com"
    repository: str = ""
    run_id: str = ""
    base_ref: str = ""
    head_sha: str = ""
    workspace: str = "."
    step_summary: str = ""
    output_path: str = ""
    event: EventFacts = field(default_factory=EventFacts)

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, dry_run: bool = False) -> Settings:
        def get(name: str, default: str = "") -> str:
            return env.get(name, default) or default

        scripts = [s for s in shlex.split(get("INPUT_SCRIPT")) if s]
        if not scripts:
            raise SettingsError(
                "input 'script' is required: one or more observation scripts (globs allowed)"
            )
        try:
            thresholds = parse_thresholds(get("INPUT_THRESHOLDS"))
            fail_on = frozenset(parse_fail_on(get("INPUT_FAIL_ON", "default")))
        except ValueError as e:
            raise SettingsError(str(e)) from e
        event = read_event(get("GITHUB_EVENT_PATH"))
        return cls(
            scripts=scripts,
            timeout_minutes=_timeout_minutes(get("INPUT_TIMEOUT_MINUTES", "60")),
            install=get("INPUT_INSTALL").strip(),
            baseline=get("INPUT_BASELINE").strip(),
            thresholds=thresholds,
            fail_on=fail_on,
            comment=_bool("comment", env.get("INPUT_COMMENT"), True),
            token=get("INPUT_TOKEN") or get("GITHUB_TOKEN"),
            out_dir=get("INPUT_OUT", "observer-ci-out"),
            dry_run=dry_run or _bool("dry_run", env.get("INPUT_DRY_RUN"), False),
            repeat=_repeat(get("INPUT_REPEAT", "10")),
            github_api_url=get("GITHUB_API_URL", "https://api.github.com").rstrip("/"),
            github_server_url=get("GITHUB_SERVER_URL", "https://github.com").rstrip("/"),
            repository=get("GITHUB_REPOSITORY"),
            run_id=get("GITHUB_RUN_ID"),
            base_ref=get("GITHUB_BASE_REF"),
            head_sha=event.head_sha or get("GITHUB_SHA"),
            workspace=get("GITHUB_WORKSPACE", "."),
            step_summary=get("GITHUB_STEP_SUMMARY"),
            output_path=get("GITHUB_OUTPUT"),
            event=event,
        )

    @property
    def run_url(self) -> str | None:
        if self.repository and self.run_id:
            return f"{self.github_server_url}/{self.repository}/actions/runs/{self.run_id}"
        return None

    @property
    def pr_number(self) -> int | None:
        return self.event.pr_number

    @property
    def base_commit(self) -> str | None:
        """The base commit to run with ``baseline: base``: the event's SHA, else the branch."""
        if self.event.base_sha:
            return self.event.base_sha
        return f"origin/{self.base_ref}" if self.base_ref else None

    @property
    def timeout_seconds(self) -> float:
        return self.timeout_minutes * 60


def _repeat(text: str) -> int:
    try:
        return max(1, int(text))
    except ValueError as e:
        raise SettingsError(f"input 'repeat' must be an integer, got {text!r}") from e


def _timeout_minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError as e:
        raise SettingsError(f"input 'timeout_minutes' must be a number, got {text!r}") from e
    if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_MINUTES:
        raise SettingsError(
            f"input 'timeout_minutes' must be a number of minutes in (0, "
            f"{MAX_TIMEOUT_MINUTES:g}], got {text!r}"
        )
    return value
