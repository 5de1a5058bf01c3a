"""Make untrusted text (tensor names, exception messages, script output) safe in Markdown.

Everything a model, a script or an exception can put into a pull-request comment
goes through this module first. Only what can do harm is escaped, so the raw
``report.md`` stays readable (``input_ids`` stays ``input_ids``):

- HTML: ``<`` becomes ``&lt;`` (no tag, comment or autolink can start), and an
  ``&`` that would start a character reference becomes ``&amp;``;
- tables: ``|`` becomes ``\\|`` and newlines leave the cell;
- Markdown structure: the characters that open emphasis, code spans, links or
  strikethrough get a backslash (``_`` only where it could open emphasis, never
  inside ``snake_case``), and so does a backslash that would escape our escape;
- math: ``$`` gets a backslash (no ``$...$``, ``$$...$$`` or ``$`...`$`` formula);
- live references: GitHub turns some plain text into links or pictures after the
  Markdown is rendered, so a backslash cannot stop them; a zero-width joiner (ZWJ,
  renders as nothing) breaks each pattern instead: after every ``@`` (mentions,
  ``user/repo@sha``, e-mail autolinks), after ``#`` and ``GH-`` before a digit
  (``#12``, ``owner/repo#12``, ``GH-12``), every 6 characters of a run of 7 or more
  hex digits (commit SHAs), before the ``.`` of ``www.`` and after the ``:`` of
  ``://`` (bare URLs), and after the first ``:`` of an emoji shortcode (``:tada:``);
- commands: a line that would start a bot command (``/``) or a workflow command
  (``::``) starts with a zero-width joiner.

Text placed inside raw HTML (``<summary>``, ``<pre>``) is not parsed as Markdown,
so it only needs :func:`escape_html` (HTML, live references, commands).

:func:`escape_message` is for the messages observer-ci writes around untrusted
parts (causes, next steps, regressions): a pair of backticks there marks code and
becomes a real code span, whose content GitHub shows verbatim and links nothing in;
what could leave the span or show as a tag in the raw text (a backtick, ``|``, a newline,
``<``, ``&``) is refused in it.
"""

from __future__ import annotations

import re

ZWJ = "\u200d"  # zero-width joiner: "@\u200duser" renders as "@user" but is no mention
TRUNCATED_NOTE = "…truncated"
DEFAULT_BLOCK_CHARS = 4000

# ``&`` only where it would start a character reference; ``_`` only where it could
# open or close emphasis (not between two letters or digits); a backslash only
# where it would escape the next character.
_ENTITY_AMP = r"&(?=#?[A-Za-z0-9]+;)"
_EMPHASIS_UNDERSCORE = r"(?<![^\W_])_|_(?![^\W_])"
_ESCAPING_BACKSLASH = r"\\(?=[!-/:-@\[-`{-~\n]|$)"  # before "\n": a hard break
_INLINE_RE = re.compile(
    "|".join([_ENTITY_AMP, _EMPHASIS_UNDERSCORE, _ESCAPING_BACKSLASH, r"[<|*`\[~$]"])
)
_HTML_RE = re.compile("[&<]")  # HTML reads some references without ";"
# Line starts that would open a heading, list, quote, setext underline or code block.
_LINE_START_RE = re.compile(r"^[ \t]*([#\-+=>])", re.MULTILINE)
_ORDERED_LIST_RE = re.compile(r"^[ \t]*(\d+)([.)])", re.MULTILINE)
_COMMAND_START_RE = re.compile(r"^(?=[ \t]*(?:/|::))", re.MULTILINE)
# C0 controls except tab/newline, DEL, and Unicode bidi overrides/isolates.
_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")
# Where GitHub's post-render filters would find a reference: a ZWJ goes at the match.
_REFERENCE_RE = re.compile(
    "|".join(
        [
            r"(?<=@)",  # @user, @org/team, user/repo@sha, e-mail addresses
            r"(?<=#)(?=\d)",  # #12, owner/repo#12
            r"(?i:(?<=\bgh-))(?=\d)",  # GH-12
            r"(?i:(?<=\bwww))(?=\.)",  # www.example.com
            r"(?<=:)(?=//)",  # http://, https://, ftp://, any scheme
            r"(?<=:)(?=[\w+-]+:)",  # :emoji_shortcode:
        ]
    )
)
_HEX_RUN_RE = re.compile(r"(?<![0-9A-Za-z_])[0-9a-fA-F]{7,}(?![0-9A-Za-z_])")
_SHA_CHUNK = 6  # at most this many hex digits in a row: no commit SHA (7 or more)
# A code span of our messages: one backtick each side, not next to another backtick,
# nothing inside that could end it or the table cell it sits in, and no "<" or "&" (shown
# verbatim in a span, they could not be escaped, and the raw comment stays free of tags).
_SPAN_RE = re.compile(r"(?<!`)`([^`|\n<&]+)`(?!`)")
SPAN_UNSAFE = "`|\n<&"  # what a code span refuses to hold


def _normalise(s: object) -> str:
    """``str(s)`` with CRLF/CR turned into LF and control characters removed."""
    text = "" if s is None else str(s)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL_RE.sub("", text)


def neutralise_mentions(s: str) -> str:
    """Insert a zero-width joiner after every ``@`` so GitHub pings nobody."""
    return s.replace("@", "@" + ZWJ)


def neutralise_references(s: str) -> str:
    """Break every pattern GitHub links or replaces after rendering (mentions, issue and
    pull request references, commit SHAs, bare URLs, emoji shortcodes) with a ZWJ."""
    s = _HEX_RUN_RE.sub(lambda m: _chunked(m.group(0)), s)
    return _REFERENCE_RE.sub(ZWJ, s)


def _chunked(hex_run: str) -> str:
    return ZWJ.join(hex_run[i : i + _SHA_CHUNK] for i in range(0, len(hex_run), _SHA_CHUNK))


def neutralise_commands(s: str) -> str:
    """A zero-width joiner before every line that starts with ``/`` or ``::``."""
    return _COMMAND_START_RE.sub(ZWJ, s)


def _replace_inline(match: re.Match[str]) -> str:
    char = match.group(0)
    if char == "<":
        return "&lt;"
    if char == "&":
        return "&amp;"
    return "\\" + char


def _escape_inline(s: str) -> str:
    return neutralise_references(_INLINE_RE.sub(_replace_inline, s))


def escape_html(s: object) -> str:
    """Escape untrusted text placed inside raw HTML (``<summary>``, ``<pre>``).

    Markdown is not parsed there, so only ``<``, ``&``, mentions and command
    lines are neutralised.
    """
    text = _HTML_RE.sub(lambda m: "&lt;" if m.group(0) == "<" else "&amp;", _normalise(s))
    return neutralise_commands(neutralise_references(text))


def escape_text(s: object) -> str:
    """Escape untrusted text for a Markdown paragraph; newlines are kept.

    Leading indentation is dropped (it would open a code block); line starts that
    open a block (``#``, ``-``, ``>``, ``1.``, ...) get a backslash.
    """
    lines = [line.lstrip(" \t") for line in _normalise(s).split("\n")]
    text = _escape_inline("\n".join(lines))
    text = _LINE_START_RE.sub(lambda m: "\\" + m.group(1), text)
    text = _ORDERED_LIST_RE.sub(lambda m: f"{m.group(1)}\\{m.group(2)}", text)
    return neutralise_commands(text)


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


def _one_line_text(s: object, max_chars: int | None) -> str:
    text = _normalise(s).replace("\t", " ")
    lines = [line.strip() for line in text.split("\n")]
    text = "\n".join(line for line in lines if line)
    return text if max_chars is None else truncate(text, max_chars)


def escape_cell(s: object, max_chars: int | None = None, *, newline: str = "<br>") -> str:
    """Escape untrusted text for one table cell (or one line): no raw ``|``, no newline.

    Newlines become ``newline`` (``<br>`` by default), blank lines are dropped,
    and the raw text is capped at ``max_chars`` before escaping.
    """
    return _escape_inline(_one_line_text(s, max_chars)).replace("\n", newline)


def escape_message(s: object, max_chars: int | None = None, *, newline: str = " ") -> str:
    """Like :func:`escape_cell`, but a pair of backticks becomes a code span (see the
    module docstring): ``use `torch.where` here`` renders ``torch.where`` as code.

    Inside a span GitHub shows every character as typed and links nothing; its content
    only gets the joiner after ``@`` (so even the raw comment names nobody; a line number
    or a hash in code stays as typed). A backtick with no partner, or a span holding ``<`` or
    ``&``, is escaped like any other text.
    """
    text = _one_line_text(s, max_chars)
    parts, start = [], 0
    for match in _SPAN_RE.finditer(text):
        span = "`" + neutralise_mentions(match.group(1)) + "`"
        parts += [_escape_inline(text[start : match.start()]), span]
        start = match.end()
    parts.append(_escape_inline(text[start:]))
    return "".join(parts).replace("\n", newline)


def code_block(
    s: object,
    summary: str = "Error",
    *,
    max_chars: int = DEFAULT_BLOCK_CHARS,
    keep: str = "tail",
    open_: bool = False,
) -> str:
    """A collapsed ``<details><pre>`` block for multi-line untrusted text.

    The text is HTML-escaped with mentions and command lines neutralised; longer
    than ``max_chars`` it keeps its ``keep`` end (``"tail"`` for tracebacks) and
    says how much was cut. ``summary`` is untrusted too and is escaped.
    """
    text = _normalise(s).strip("\n")
    if len(text) > max_chars:
        omitted = len(text) - max_chars
        kept = text[-max_chars:] if keep == "tail" else text[:max_chars]
        note = f"{TRUNCATED_NOTE} ({omitted:,} characters omitted)"
        text = f"{note}\n{kept}" if keep == "tail" else f"{kept}\n{note}"
    body = escape_html(text)
    label = escape_html(truncate(" ".join(_normalise(summary).split()), 200))
    attr = " open" if open_ else ""
    return f"<details{attr}><summary>{label}</summary>\n\n<pre>\n{body}\n</pre>\n\n</details>"
