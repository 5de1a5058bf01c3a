"""Make untrusted text (tensor names, exception messages, script output) safe in Markdown.

Everything a model, a script or an exception can put into a pull-request comment
goes through this module first: HTML is escaped so nothing can be injected,
``@`` mentions are neutralised so nobody gets pinged, and the Markdown
characters that change structure (tables, emphasis, links, code, headings) are
replaced by HTML entities, which render as the original character.
"""

from __future__ import annotations

import re

ZWJ = "\u200d"  # zero-width joiner: "@\u200duser" renders as "@user" but is no mention
TRUNCATED_NOTE = "…truncated"
DEFAULT_BLOCK_CHARS = 4000

# Inline characters replaced by entities (``&`` first so entities are not re-escaped).
_INLINE = {
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
    "\\": "&#92;",
    "|": "&#124;",
    "`": "&#96;",
    "*": "&#42;",
    "_": "&#95;",
    "[": "&#91;",
    "]": "&#93;",
    "~": "&#126;",
}
_INLINE_RE = re.compile("|".join(re.escape(c) for c in _INLINE))
# Line starts that would open a heading, list, or setext underline.
_LINE_START_RE = re.compile(r"^([ \t]*)([#\-+=])", re.MULTILINE)
_ORDERED_LIST_RE = re.compile(r"^([ \t]*\d+)([.)])", re.MULTILINE)
# C0 controls except tab/newline, DEL, and Unicode bidi overrides/isolates.
_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")
_PRE_RE = re.compile("[&<>]")
_PRE = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def _normalise(s: object) -> str:
    """``str(s)`` with CRLF/CR turned into LF and control characters removed."""
    text = "" if s is None else str(s)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL_RE.sub("", text)


def neutralise_mentions(s: str) -> str:
    """Insert a zero-width joiner after every ``@`` so GitHub pings nobody."""
    return s.replace("@", "@" + ZWJ)


def _escape_inline(s: str) -> str:
    return neutralise_mentions(_INLINE_RE.sub(lambda m: _INLINE[m.group(0)], s))


def _escape_line_starts(s: str) -> str:
    s = _LINE_START_RE.sub(lambda m: f"{m.group(1)}&#{ord(m.group(2))};", s)
    return _ORDERED_LIST_RE.sub(lambda m: f"{m.group(1)}&#{ord(m.group(2))};", s)


def escape_text(s: object) -> str:
    """Escape untrusted text for a Markdown paragraph; newlines are kept."""
    return _escape_line_starts(_escape_inline(_normalise(s)))


def truncate(s: str, max_chars: int, *, keep: str = "head") -> str:
    """Cap ``s`` at ``max_chars`` characters, marking the cut with ``…``."""
    if max_chars <= 0:
        return ""
    if len(s) <= max_chars:
        return s
    if max_chars == 1:
        return "…"
    if keep == "tail":
        return "…" + s[-(max_chars - 1) :]
    return s[: max_chars - 1] + "…"


def escape_cell(s: object, max_chars: int | None = None, *, newline: str = "<br>") -> str:
    """Escape untrusted text for one table cell: one line, no raw ``|``.

    Newlines become ``newline`` (``<br>`` by default), blank lines are dropped,
    and the raw text is capped at ``max_chars`` before escaping.
    """
    text = _normalise(s).replace("\t", " ")
    lines = [line.strip() for line in text.split("\n")]
    text = "\n".join(line for line in lines if line)
    if max_chars is not None:
        text = truncate(text, max_chars)
    escaped = _escape_inline(text)
    return escaped.replace("\n", newline)


def code_block(
    s: object,
    summary: str = "Error",
    *,
    max_chars: int = DEFAULT_BLOCK_CHARS,
    keep: str = "tail",
    open_: bool = False,
) -> str:
    """A collapsed ``<details><pre>`` block for multi-line untrusted text.

    The text is HTML-escaped with mentions neutralised; longer than
    ``max_chars`` it keeps its ``keep`` end (``"tail"`` for tracebacks) and says
    how much was cut. ``summary`` is untrusted too and is escaped.
    """
    text = _normalise(s).strip("\n")
    note = ""
    if len(text) > max_chars:
        omitted = len(text) - max_chars
        kept = text[-max_chars:] if keep == "tail" else text[:max_chars]
        note = f"{TRUNCATED_NOTE} ({omitted:,} characters omitted)"
        text = f"{note}\n{kept}" if keep == "tail" else f"{kept}\n{note}"
    body = neutralise_mentions(_PRE_RE.sub(lambda m: _PRE[m.group(0)], text))
    label = escape_cell(summary, 200, newline=" ")
    attr = " open" if open_ else ""
    return f"<details{attr}><summary>{label}</summary>\n\n<pre>\n{body}\n</pre>\n\n</details>"
