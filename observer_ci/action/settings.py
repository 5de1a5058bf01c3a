"""Action settings, read and parsed once from the environment (``INPUT_*`` and ``GITHUB_*``).

Everything downstream gets typed values: thresholds, ``fail_on``, the pull request number
and the base/head commits are parsed here, once; the event file is read here, once.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from observer_ci.core.constants import COMMENT_KEY_PATTERN
from observer_ci.core.exceptions import ScriptPathError, SettingsError
from observer_ci.core.run_options import parse_cache_max_mb
from observer_ci.core.script_paths import resolve_scripts
from observer_ci.core.variants import DEFAULT_PROVIDERS, parse_providers, parse_variants
from observer_ci.report.policy import Policy, find_policy
from observer_ci.report.rules import DEFAULT_FAIL_ON, Thresholds

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}
# Longest run a self-hosted runner allows (5 days); beyond it a timeout means "never".
MAX_TIMEOUT_MINUTES = 7200.0
# Timed runs per observation; more only measures the same median for hours.
MAX_REPEAT = 10_000
MODE_RUN = "run"  # run the scripts, write results and the payload, post when allowed
MODE_PUBLISH = "publish"  # post the payload(s) of earlier jobs (workflow_run, after a matrix)
MODES = (MODE_RUN, MODE_PUBLISH)
# A comment key or label goes into the sticky marker (an HTML comment): a plain word only.
KEY_RE = re.compile(rf"^{COMMENT_KEY_PATTERN}$")
# Inputs renamed (old name -> new name): the old names work until the next release.
DEPRECATED_INPUTS = {"comment": "post_comment"}


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
    workflow_run_id: str | None = None  # the run a ``workflow_run`` event follows
    default_branch: str | None = None  # ``repository.default_branch`` (history on push)


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
    repository = payload.get("repository")
    branch = repository.get("default_branch") if isinstance(repository, dict) else None
    facts = _event_facts(payload)
    if isinstance(branch, str) and branch:
        return dataclasses.replace(facts, default_branch=branch)
    return facts


def _event_facts(payload: dict) -> EventFacts:
    pull_request = payload.get("pull_request")
    if isinstance(pull_request, dict):
        return EventFacts(
            pr_number=_positive_int(pull_request.get("number")),
            base_sha=_sha(pull_request.get("base")),
            head_sha=_sha(pull_request.get("head")),
        )
    workflow_run = payload.get("workflow_run")
    if isinstance(workflow_run, dict):
        run_id = _positive_int(workflow_run.get("id"))
        return EventFacts(workflow_run_id=str(run_id) if run_id else None)
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
    post_comment: bool = True
    mode: str = MODE_RUN
    label: str = ""  # the matrix leg, shown in the report title and the merged report
    comment_key: str = ""  # separate sticky comments per workflow / subproject
    payload_dir: str = ""  # "" is <out_dir>/payload
    deprecations: tuple[str, ...] = ()
    token: str = field(default="", repr=False)
    out_dir: str = "observer-ci-out"
    cache_dir: str = ""  # export cache, shared by base and head (relative to the workspace)
    cache_max_mb: int | None = None  # its size cap (None: the run's default, 0: no cap)
    dry_run: bool = False
    verbose: bool = False  # show third-party warnings in the job log
    repeat: int = 10
    variants: tuple[str, ...] = ()  # fp16, int8, optimized (core.variants)
    providers: tuple[str, ...] = DEFAULT_PROVIDERS
    timeout_minutes: float = 60.0  # per run of the scripts (head, base) and for install
    github_api_url: str = "https://api.github.com"
    github_server_url: str = "https://github.com"
    repository: str = ""
    run_id: str = ""
    run_attempt: str = ""
    base_ref: str = ""
    head_sha: str = ""
    workspace: str = "."
    step_summary: str = ""
    output_path: str = ""
    event: EventFacts = field(default_factory=EventFacts)
    policy: Policy = field(default_factory=Policy)  # .observer-ci.yml (or input 'policy')
    history_runs: int = 20  # baseline history: the default branch's last runs read back
    check_run: bool = True  # a check run on the head commit (needs checks: write)
    event_name: str = ""  # GITHUB_EVENT_NAME
    ref: str = ""  # GITHUB_REF

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, dry_run: bool = False) -> Settings:
        def get(name: str, default: str = "") -> str:
            return env.get(name, default) or default

        mode = get("INPUT_MODE", MODE_RUN).strip().lower() or MODE_RUN
        if mode not in MODES:
            raise SettingsError(f"input 'mode' must be one of {', '.join(MODES)}, got {mode!r}")
        scripts = [s for s in shlex.split(get("INPUT_SCRIPT")) if s]
        if not scripts and mode == MODE_RUN:
            raise SettingsError(
                "input 'script' is required: one or more observation scripts (globs allowed)"
            )
        post_comment, deprecations = _post_comment(env)
        try:
            named = get("INPUT_POLICY").strip()
            workspace = Path(get("GITHUB_WORKSPACE", "."))
            policy = find_policy(workspace / named if named else None, root=workspace)
            thresholds = policy.base_thresholds(get("INPUT_THRESHOLDS"))
            fail_on = frozenset(policy.base_fail_on(get("INPUT_FAIL_ON", "default")))
            variants = parse_variants(get("INPUT_VARIANTS"))
            providers = parse_providers(get("INPUT_PROVIDERS", "cpu"))
        except ValueError as e:  # a PolicyError names the file and the line
            raise SettingsError(str(e)) from e
        event = read_event(get("GITHUB_EVENT_PATH"))
        return cls(
            scripts=scripts,
            timeout_minutes=_timeout_minutes(get("INPUT_TIMEOUT_MINUTES", "60")),
            install=get("INPUT_INSTALL").strip(),
            baseline=get("INPUT_BASELINE").strip(),
            thresholds=thresholds,
            fail_on=fail_on,
            post_comment=post_comment,
            mode=mode,
            label=_key("label", get("INPUT_LABEL")),
            comment_key=_key("comment_key", get("INPUT_COMMENT_KEY")),
            payload_dir=get("INPUT_PAYLOAD_DIR").strip(),
            deprecations=deprecations,
            token=get("INPUT_TOKEN") or get("GITHUB_TOKEN"),
            out_dir=get("INPUT_OUT", "observer-ci-out"),
            cache_dir=get("INPUT_CACHE_DIR").strip(),
            cache_max_mb=_cache_max_mb(get("INPUT_CACHE_MAX_MB")),
            dry_run=dry_run or _bool("dry_run", env.get("INPUT_DRY_RUN"), False),
            verbose=_bool("verbose", env.get("INPUT_VERBOSE"), False),
            repeat=_repeat(get("INPUT_REPEAT", "10")),
            variants=variants,
            providers=providers,
            github_api_url=get("GITHUB_API_URL", "https://api.github.com").rstrip("/"),
            github_server_url=get("GITHUB_SERVER_URL", "https://github.com").rstrip("/"),
            repository=get("GITHUB_REPOSITORY"),
            run_id=get("GITHUB_RUN_ID"),
            run_attempt=get("GITHUB_RUN_ATTEMPT"),
            base_ref=get("GITHUB_BASE_REF"),
            head_sha=event.head_sha or get("GITHUB_SHA"),
            workspace=get("GITHUB_WORKSPACE", "."),
            step_summary=get("GITHUB_STEP_SUMMARY"),
            output_path=get("GITHUB_OUTPUT"),
            event=event,
            policy=policy,
            history_runs=_history_runs(get("INPUT_HISTORY_RUNS", "20")),
            check_run=_bool("check_run", env.get("INPUT_CHECK_RUN"), True),
            event_name=get("GITHUB_EVENT_NAME"),
            ref=get("GITHUB_REF"),
        )

    def check_scripts(self, *, installed: bool = False) -> None:
        """Run mode: every script path and glob names a readable file in the workspace,
        else :class:`SettingsError` (exit 2) naming what matched. With an ``install``
        command, a miss before it ran is not final (install may create the scripts): the
        action checks again once it succeeded (``installed``)."""
        if self.mode != MODE_RUN or self.rejudges:
            return
        try:
            resolve_scripts(self.scripts, self.workspace)
        except ScriptPathError as e:
            if self.install and not installed:
                return
            raise SettingsError(f"input 'script': {e}") from e

    @property
    def rejudges(self) -> bool:
        """An ``issue_comment`` event (an accept command) re-judges the last report and runs
        no script (``action/verdict.py``)."""
        return self.mode == MODE_RUN and self.event_name == "issue_comment"

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

    @property
    def payload_path(self) -> Path:
        """Where run mode writes the payload and publish mode reads it."""
        return Path(self.payload_dir or Path(self.out_dir) / "payload")

    @property
    def comment(self) -> bool:
        """Deprecated name of :attr:`post_comment` (kept for one release)."""
        return self.post_comment

    @property
    def sticky_key(self) -> str:
        """The sticky comment this job owns: ``comment_key``, else the leg's ``label``."""
        return self.comment_key or self.label


def _post_comment(env: Mapping[str, str]) -> tuple[bool, tuple[str, ...]]:
    """``post_comment``, or the deprecated ``comment`` when a workflow still sets it."""
    old = (env.get("INPUT_COMMENT") or "").strip()
    if old:
        message = deprecation_message("comment")
        return _bool("comment", old, True), (message,)
    return _bool("post_comment", env.get("INPUT_POST_COMMENT"), True), ()


def deprecation_message(old: str) -> str:
    """The one warning text for a renamed input or output."""
    return (
        f"input '{old}' is deprecated and will be removed in the next release: "
        f"use '{DEPRECATED_INPUTS[old]}'"
    )


def _key(name: str, text: str) -> str:
    text = text.strip()
    if text and not KEY_RE.match(text):
        raise SettingsError(
            f"input {name!r} must be 1-64 letters, digits, '.', '_' or '-', got {text!r}"
        )
    return text


def _repeat(text: str) -> int:
    try:
        value = int(text)
    except ValueError as e:
        raise SettingsError(f"input 'repeat' must be an integer, got {text!r}") from e
    if value > MAX_REPEAT:
        raise SettingsError(f"input 'repeat' must be at most {MAX_REPEAT}, got {text!r}")
    return max(1, value)


def _cache_max_mb(text: str) -> int | None:
    if not text.strip():
        return None
    try:
        return parse_cache_max_mb(text)
    except ValueError as e:
        raise SettingsError(f"input 'cache_max_mb' {e}") from e


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


MAX_HISTORY_RUNS = 100  # the cap on history entries read back (one page of runs)


def _history_runs(text: str) -> int:
    try:
        value = int(text)
    except ValueError as e:
        raise SettingsError(f"input 'history_runs' must be an integer, got {text!r}") from e
    if not 1 <= value <= MAX_HISTORY_RUNS:
        raise SettingsError(f"input 'history_runs' must be 1 to {MAX_HISTORY_RUNS}, got {text!r}")
    return value
