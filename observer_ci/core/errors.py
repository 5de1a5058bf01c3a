"""Error text shown to users: tails, tracebacks and headlines (torch-free)."""

from __future__ import annotations

import re
import traceback
from collections.abc import Sequence

ERROR_TAIL_CHARS = 3000
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def error_tail(exc: BaseException, limit: int = ERROR_TAIL_CHARS) -> str:
    """``Type: message`` keeping the end of long messages, where exporters say what broke."""
    text = ANSI_ESCAPE.sub("", f"{type(exc).__name__}: {exc}").strip()
    if len(text) <= limit:
        return text
    return "…" + text[-limit:]


def traceback_tail(exc: BaseException, lines: int = 12) -> str:
    """The last frames of a traceback, for scripts that raised."""
    formatted = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return ANSI_ESCAPE.sub("", "".join(formatted[-lines:])).strip()


_NOISE_PREFIXES = ("(Refer to", "For more", "For extended", "For C++", "If you suspect")


def error_headline(text: str | None, limit: int = 200) -> str:
    """The one line of an error tail that says what broke.

    torch.export errors carry an "Exception summary" section; elsewhere the last
    meaningful line is the exception message (tracebacks end with it).
    """
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if "## Exception summary" in lines:
        after = lines[lines.index("## Exception summary") + 1 :]
        if after:
            return _cut(after[0], limit)
    for line in reversed(lines):
        if not line.startswith(_NOISE_PREFIXES):
            return _cut(line, limit)
    return _cut(lines[-1], limit) if lines else ""


def _cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


def listed(items: Sequence[str], limit: int) -> str:
    """``a, b, c and 2 more``: the first ``limit`` items of a list shown to users."""
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
