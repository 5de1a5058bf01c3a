"""The accept path: a maintainer accepts a known regression without editing the workflow.

Two ways, both on the pull request: the label :data:`ACCEPT_LABEL` (every regression that
fails the build now) or a comment ``/observer-ci accept <rule> <model>`` (a rule name or
``all``; a model name or glob). Each counts only when
``GET /repos/{o}/{r}/collaborators/{user}/permission`` says ``write`` or ``admin`` for its
author (the labeler: the issue's ``labeled`` event); anyone else, the pull request's author
included, is refused and the comment says so. Matching is the policy file's
(:meth:`observer_ci.report.policy.Policy.accept`): accepted regressions are reported, never
fail the build, and the check run turns ``neutral``.

The value of each accepted regression is pinned in a ledger hidden in the sticky comment
(base64 JSON in an HTML comment): on a new head commit an acceptance holds only while the
regression did not grow (numbers: at most :data:`GROWTH_SLACK` over the pinned value; other
values: unchanged). An ``issue_comment`` event re-judges the last report (:func:`rejudge`):
nothing is run, the stored regressions are judged again, the comment and a check run updated.
"""

from __future__ import annotations

import base64
import binascii
import glob
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from observer_ci.core.logs import logger
from observer_ci.core.workflow_commands import command
from observer_ci.github.client import GitHubClient, GitHubError
from observer_ci.report.accepted import accepted_section
from observer_ci.report.escape import escape_text
from observer_ci.report.policy import Entry, Policy
from observer_ci.report.rules import RULES, Regression

ACCEPT_LABEL = "observer-ci:accept"
COMMAND_RE = re.compile(r"^/observer-ci[ \t]+accept[ \t]+(\S+)[ \t]+(\S+)[ \t]*$", re.MULTILINE)
WRITE_PERMISSIONS = ("admin", "write")  # the endpoint reports "maintain" as "write"
GROWTH_SLACK = 0.05  # a pinned latency may wobble this much before the acceptance lapses
SECTION_START = "<!-- observer-ci:accept-section -->"
STATE_RE = re.compile(r"<!-- observer-ci:accepted ([A-Za-z0-9+/=]*) -->")
MAX_STATE_CHARS = 200_000
MAX_SECTION_CHARS = 20_000  # past it the stored regressions are left out (no re-judging)
# A crash is not a known regression to live with: these are never accepted here.
NOT_ACCEPTABLE = frozenset({"script_failed", "export_failed", "ort_failed"})


def acceptable(regressions: Iterable[Regression]) -> list[Regression]:
    """The regressions failing the build that a maintainer may accept."""
    return [r for r in regressions if r.fails_build and r.rule not in NOT_ACCEPTABLE]


@dataclass(frozen=True)
class Acceptance:
    """One accepted (rule, model) request, confirmed as coming from a maintainer."""

    rule: str  # a rule name or "all"
    model: str  # a model name or glob
    by: str
    at: str
    source: str  # "label" or "comment"

    @property
    def note(self) -> str:
        return f"accepted by @{self.by} ({self.source}, {self.at})"


@dataclass(frozen=True)
class Held:
    """A regression accepted, its value pinned when it was first accepted."""

    rule: str
    model: str
    value: float | str | None
    sha: str
    note: str


@dataclass
class Outcome:
    """The regressions after the acceptances, the ledger and the lines for the comment."""

    regressions: list[Regression]
    held: list[Held] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    raw: list[Regression] = field(default_factory=list)  # before any acceptance (stored)

    def visible(self) -> str:
        """The accept section a reader sees (who accepted what and when), without the
        ledger: "" without acceptances (report.md and the job summary carry it)."""
        return accepted_section([_held_line(h) for h in self.held] + self.lines)

    def section(self) -> str:
        """Markdown for the comment and the check run (empty without acceptances), the
        hidden ledger and regressions after it."""
        raw = acceptable(self.raw)
        if not (self.held or self.lines or raw):
            return ""
        text = self.visible()
        section = ""
        for stored in (raw, []):  # without the stored regressions when they are too many
            state = {"held": [asdict(h) for h in self.held], "raw": [asdict(r) for r in stored]}
            encoded = base64.b64encode(json.dumps(state).encode()).decode()
            section = f"\n\n{SECTION_START}\n{text}<!-- observer-ci:accepted {encoded} -->\n"
            if len(section) <= MAX_SECTION_CHARS:
                break
        return section


def _held_line(held: Held) -> str:
    value = f", at {held.value:.4g}" if isinstance(held.value, float) else ""
    return escape_text(f"{held.rule} on {held.model}: {held.note}{value}")


def read_acceptances(
    client: GitHubClient, owner: str, repo: str, pr: int, comments: list[dict], lines: list[str]
) -> list[Acceptance]:
    """The maintainers' acceptances on pull request ``pr``; refusals go to ``lines``."""
    permissions: dict[str, str] = {}

    def allowed(login: str, what: str) -> bool:
        if login not in permissions:
            permissions[login] = client.permission(owner, repo, login)
        if permissions[login] in WRITE_PERMISSIONS:
            return True
        lines.append(
            escape_text(
                f"refused: {what} from @{login}, who has {permissions[login]} permission "
                "(write or admin needed)"
            )
        )
        return False

    found = []
    for comment in comments:
        user = _object(comment.get("user"))
        login, body = str(user.get("login") or ""), str(comment.get("body") or "")
        if not login or user.get("type") == "Bot":
            continue
        for rule, model in COMMAND_RE.findall(body):
            what = f"/observer-ci accept {rule} {model}"
            if rule != "all" and rule not in RULES:
                lines.append(escape_text(f"ignored: {what}: unknown rule {rule!r}"))
            elif allowed(login, what):
                at = str(comment.get("created_at") or "")
                found.append(Acceptance(rule, model, login, at, "comment"))
    if ACCEPT_LABEL in client.issue_labels(owner, repo, pr):
        labeled = _last_labeled(client.issue_events(owner, repo, pr))
        if labeled is not None and allowed(labeled[0], f"the label {ACCEPT_LABEL}"):
            found.append(Acceptance("all", "*", labeled[0], labeled[1], "label"))
    return found


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _last_labeled(events: Iterable[dict]) -> tuple[str, str] | None:
    """(actor, time) of the last ``labeled`` event adding :data:`ACCEPT_LABEL`."""
    last = None
    for event in events:
        label, actor = _object(event.get("label")), _object(event.get("actor"))
        labeled = event.get("event") == "labeled" and label.get("name") == ACCEPT_LABEL
        if labeled and actor.get("login"):
            last = (str(actor["login"]), str(event.get("created_at") or ""))
    return last


def apply(
    raw: list[Regression],
    acceptances: list[Acceptance],
    pinned: dict[tuple[str, str], Held],
    head_sha: str,
    lines: list[str] | None = None,
) -> Outcome:
    """``raw`` with the acceptances that hold (see the module docstring)."""
    lines = lines if lines is not None else []
    requested = Policy(
        models=tuple(Entry(a.model, 0, accept=_rules(a.rule), note=a.note) for a in acceptances)
    )
    held = []
    for r in acceptable(raw):
        if r.rule not in requested.accepted_for(r.model):
            continue
        note = requested.accept_note(r.model, r.rule)
        before = pinned.get((r.rule, r.model))
        if before is not None and before.sha != head_sha and _grew(before.value, r.head_value):
            lines.append(
                escape_text(
                    f"lapsed: {r.rule} on {r.model} grew from {before.value} to {r.head_value} "
                    f"since it was accepted on {before.sha[:12]}: accept it again if intended"
                )
            )
            continue
        value, sha = (before.value, before.sha) if before is not None else (r.head_value, head_sha)
        held.append(Held(r.rule, r.model, value, sha, note))
    policy = Policy(
        models=tuple(
            Entry(glob.escape(h.model), 0, accept=frozenset({h.rule}), note=h.note) for h in held
        )
    )
    return Outcome(policy.accept(raw), held, lines, list(raw))


def _rules(rule: str) -> frozenset[str]:
    return frozenset(RULES) if rule == "all" else frozenset({rule})


def _grew(before: Any, now: Any) -> bool:
    numbers = (int, float)
    if isinstance(before, numbers) and isinstance(now, numbers):
        return float(now) > float(before) * (1 + GROWTH_SLACK) + 1e-12
    return before != now


def read_state(body: str | None) -> tuple[dict[tuple[str, str], Held], list[Regression]]:
    """The ledger and the stored regressions hidden in our comment (empty when absent or
    malformed: the comment is editable, so its contents are checked, never trusted)."""
    match = STATE_RE.search(body or "")
    if match is None or len(match.group(1)) > MAX_STATE_CHARS:
        return {}, []
    try:
        state = json.loads(base64.b64decode(match.group(1), validate=True))
        held = [Held(**_fields(h, Held)) for h in state.get("held", [])]
        raw = [Regression(**_fields(r, Regression)) for r in state.get("raw", [])]
    except (binascii.Error, ValueError, TypeError, AttributeError):
        logger.warning("the sticky comment's accept ledger is unreadable: ignored")
        return {}, []
    return {(h.rule, h.model): h for h in held}, raw


def _fields(item: Any, cls: type) -> dict[str, Any]:
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    if not isinstance(item, dict) or not set(item) <= set(names):
        raise ValueError("unexpected fields")
    for key in ("rule", "model"):
        if not isinstance(item.get(key), str):
            raise ValueError(f"{key} is not a string")
    return item


def strip_section(body: str) -> str:
    """The comment's body without its accept section (it is rewritten each time)."""
    return body.split(f"\n\n{SECTION_START}", 1)[0].split(SECTION_START, 1)[0]


def judge(
    client: GitHubClient,
    owner: str,
    repo: str,
    pr: int,
    raw: list[Regression],
    head_sha: str,
    sticky: Any,
) -> Outcome:
    """Reads the comments (commands, our ledger) and applies the acceptances to ``raw``.
    ``sticky(comments)`` picks our sticky comment. An API failure accepts nothing (a note)."""
    lines: list[str] = []
    try:
        comments = list(client.issue_comments(owner, repo, pr))
        ours = sticky(comments)
        pinned, _ = read_state(ours.get("body") if ours else None)
        acceptances = read_acceptances(client, owner, repo, pr, comments, lines)
    except GitHubError as e:
        command("warning", f"the accept path could not read the pull request ({e})")
        return Outcome(list(raw), [], [f"acceptances could not be read: {escape_text(e)}"], raw)
    for a in acceptances:
        logger.info("accept: %s %s by %s (%s)", a.rule, a.model, a.by, a.source)
    return apply(raw, acceptances, pinned, head_sha, lines)
