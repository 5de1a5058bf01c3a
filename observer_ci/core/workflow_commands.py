"""Workflow commands and files: annotations, the job summary, step outputs.

Every text written as a workflow command goes through :func:`workflow_escape`, so a
newline in untrusted text cannot start a command of its own, and :func:`strip_unsafe`,
so control and bidi characters (ESC, NUL, U+202E...) cannot disguise it. Output of the
repository's code (install, scripts) is forwarded to the job log only inside
:func:`commands_stopped`: ``::stop-commands::<random token>`` ... ``::<token>::``, so the
runner ignores any ``::command::`` line it prints.
"""

from __future__ import annotations

import re
import secrets
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Protocol

from observer_ci.core.constants import STEP_SUMMARY_MAX_BYTES
from observer_ci.core.logs import ENDGROUP_MARKER, GROUP_MARKER

MAX_ANNOTATIONS = 10  # per level; GitHub shows at most 10 of each per step anyway


class Finding(Protocol):
    """What an annotation shows of a rule's finding (``report.rules.Regression`` is one)."""

    @property
    def model(self) -> str: ...
    @property
    def rule(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def fails_build(self) -> bool: ...


# C0 controls but tab/newline/CR, DEL, C1 controls, and the bidi and invisible format
# characters that can make text read differently than it is (Trojan Source).
_UNSAFE_CHARS = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u2069\ufeff]"
)


def strip_unsafe(text: str) -> str:
    """``text`` without control, bidi and zero-width format characters."""
    return _UNSAFE_CHARS.sub("", text)


def command(level: str, message: str, *, title: str = "observer-ci") -> None:
    """Prints one ``::error``/``::warning``/``::notice`` workflow command."""
    title = workflow_escape(strip_unsafe(title), prop=True)
    line = f"::{level} title={title}::{workflow_escape(strip_unsafe(message))}"
    with _guard_lock:
        if _guard_depth:  # the runner would ignore it now: emit it when the guard closes
            _held_commands.append(line)
        else:
            _write_line(line)


# -- untrusted output: one stop-commands guard for every concurrent forwarder ---------

_guard_lock = threading.RLock()
_guard_depth = 0
_guard_token = ""
_at_line_start = True
_held_commands: list[str] = []


@contextmanager
def commands_stopped() -> Iterator[None]:
    """While inside, the runner ignores workflow commands on our output (re-entrant and
    shared by threads: nested or concurrent users keep one guard open)."""
    global _guard_depth, _guard_token
    with _guard_lock:
        if _guard_depth == 0:
            _guard_token = secrets.token_hex(16)
            _write_line(f"::stop-commands::{_guard_token}")
        _guard_depth += 1
    try:
        yield
    finally:
        with _guard_lock:
            _guard_depth -= 1
            if _guard_depth == 0:
                _write_line(f"::{_guard_token}::")
                for line in _held_commands:
                    _write_line(line)
                _held_commands.clear()


def forward_untrusted(data: bytes) -> None:
    """Copies repository output to the job log; call only inside :func:`commands_stopped`."""
    global _at_line_start
    if not data:
        return
    with _guard_lock:
        if _guard_depth == 0:
            raise RuntimeError("forward_untrusted outside commands_stopped()")
        sys.stdout.flush()
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is not None:
            buffer.write(data)
            buffer.flush()
        else:
            sys.stdout.write(data.decode("utf-8", errors="replace"))
            sys.stdout.flush()
        _at_line_start = data.endswith(b"\n")


class ChildOutput:
    """Forwards an action child's output to the job log inside the guard, except the group
    markers it prints (:data:`observer_ci.core.logs.GROUP_MARKER`): each becomes our own
    ``::group::`` / ``::endgroup::`` line between two guards, so the log folds. Call
    :meth:`feed` and :meth:`close` only inside :func:`commands_stopped`."""

    _MARKERS = (GROUP_MARKER.encode(), ENDGROUP_MARKER.encode())

    def __init__(self) -> None:
        self._pending = b""  # the start of a line that may still become a marker

    def feed(self, data: bytes) -> None:
        data, self._pending = self._pending + data, b""
        plain = bytearray()
        for line in data.splitlines(keepends=True):
            if not line.endswith((b"\n", b"\r")):
                if any(m.startswith(line) or line.startswith(m) for m in self._MARKERS):
                    self._pending = line  # wait for its end
                    break
                plain += line
            elif line.startswith(self._MARKERS):
                forward_untrusted(bytes(plain))
                plain.clear()
                _between_guards(_group_line(line))
            else:
                plain += line
        forward_untrusted(bytes(plain))

    def close(self) -> None:
        """Forwards what is left (a last line without its end)."""
        forward_untrusted(self._pending)
        self._pending = b""


def _group_line(marker: bytes) -> str:
    text = marker.decode("utf-8", errors="replace").rstrip("\r\n")
    if text.startswith(ENDGROUP_MARKER):
        return "::endgroup::"
    title = strip_unsafe(text[len(GROUP_MARKER) :])
    return f"::group::{workflow_escape(title)}"


def _between_guards(line: str) -> None:
    """Our own ``line`` while the guard is open: the guard is closed, the line written, and
    a new guard (a new token) opened."""
    global _guard_token
    with _guard_lock:
        if _guard_depth == 0:
            _write_line(line)
            return
        _write_line(f"::{_guard_token}::")
        _write_line(line)
        _guard_token = secrets.token_hex(16)
        _write_line(f"::stop-commands::{_guard_token}")


def _write_line(line: str) -> None:
    """One line of ours on stdout, starting on a line of its own (a runner only reads
    commands at the start of a line)."""
    global _at_line_start
    with _guard_lock:
        prefix = "" if _at_line_start else "\n"
        print(prefix + line, flush=True)
        _at_line_start = True


def write_summary(path: str, report: str) -> None:
    """Appends the report to the job summary file (cut to GitHub's 1 MiB limit)."""
    if not path:
        return
    text = report
    if len(text.encode("utf-8")) > STEP_SUMMARY_MAX_BYTES:
        text = render_cut(report, STEP_SUMMARY_MAX_BYTES)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text + "\n")


def render_cut(report: str, limit_bytes: int) -> str:
    note = "\n\n…report cut to fit the job summary; the full report is in report.md.\n"
    budget = limit_bytes - len(note.encode("utf-8"))
    return report.encode("utf-8")[:budget].decode("utf-8", errors="ignore") + note


def annotate(regressions: Sequence[Finding]) -> None:
    """Workflow annotations: errors for rules that fail the build, warnings for the rest."""
    shown = {"error": 0, "warning": 0}
    for r in regressions:
        level = "error" if r.fails_build else "warning"
        shown[level] += 1
        if shown[level] > MAX_ANNOTATIONS:
            continue
        command(level, r.message, title=f"observer-ci: {r.model}: {r.rule}")
    for level, count in shown.items():
        if count > MAX_ANNOTATIONS:
            command(level, f"{count - MAX_ANNOTATIONS} more {level}s: see the report")


def workflow_escape(text: str, *, prop: bool = False) -> str:
    """Escapes a workflow command's message (``prop=False``) or property value."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def write_outputs(path: str, outputs: Mapping[str, str]) -> None:
    """Appends step outputs to ``GITHUB_OUTPUT`` with random heredoc delimiters."""
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        for key, value in outputs.items():
            delimiter = f"ghadelim_{uuid.uuid4().hex}"
            f.write(f"{key}<<{delimiter}\n{value}\n{delimiter}\n")
