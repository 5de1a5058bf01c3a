"""What GitHub makes live in a comment: links, references, mentions, pictures, math, footnotes.

GitHub renders a comment in two stages, and both are reproduced here from the rendered tokens,
never by searching the Markdown source:
1. the Markdown: cmark-gfm itself (``cmarkgfm``: tables, autolinks ``www.``/``http://``/e-mail,
   footnotes, raw HTML), read as HTML elements (``<a>``, ``<img>``, a footnote reference), and
   math, which cmark-gfm leaves to GitHub: markdown-it-py's ``dollarmath`` tokens (``$x$``,
   ``$$x$$``, ``$`x`$``), with backslash escapes as CommonMark reads them;
2. the filters GitHub runs on the rendered text nodes outside ``code``, ``pre`` and ``a``:
   @mentions, ``#12``, ``GH-12``, ``owner/repo#12``, commit SHAs and emoji shortcodes, matched
   with the patterns GitHub documents for them ("Autolinked references and URLs").
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

_FILTERS = {
    "mention": re.compile(r"(?<![\w`])@[A-Za-z0-9][A-Za-z0-9-]*(?:/[\w.-]+)?"),
    "issue": re.compile(r"(?<![\w&])#\d+"),
    "cross-repo issue": re.compile(r"[\w.-]+/[\w.-]+#\d+"),
    "GH issue": re.compile(r"(?i)\bGH-\d+"),
    "commit": re.compile(r"(?i)(?<![\w@])\b[0-9a-f]{7,40}\b"),
    "cross-repo commit": re.compile(r"[\w.-]+(?:/[\w.-]+)?@[0-9a-f]{7,40}\b"),
    "emoji": re.compile(r":[a-z0-9_+-]+:"),
}
_INERT = {"code", "pre", "a", "script", "style"}


class _Live(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, str]] = []
        self._stack: list[str] = []
        self._href: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a":
            self.found.append(("link", attrs.get("href") or ""))
        if tag == "img":
            self.found.append(("image", attrs.get("src") or ""))
        if tag == "sup" and "footnote-ref" in (attrs.get("class") or ""):
            self.found.append(("footnote", ""))
        if tag == "section" and "data-footnotes" in attrs:
            self.found.append(("footnotes", ""))
        if tag not in ("br", "img", "hr", "input"):
            self._stack.append(tag)

    def handle_endtag(self, tag):
        if tag in self._stack:
            while self._stack and self._stack.pop() != tag:
                pass

    def handle_data(self, data):
        if any(t in _INERT for t in self._stack):
            return
        for kind, pattern in _FILTERS.items():
            self.found += [(kind, m.group(0)) for m in pattern.finditer(data)]


def render(markdown: str) -> str:
    """The comment's HTML as GitHub's cmark-gfm renders it (raw HTML kept, footnotes on)."""
    import cmarkgfm
    from cmarkgfm.cmark import Options

    options = Options.CMARK_OPT_UNSAFE | Options.CMARK_OPT_FOOTNOTES
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=options)


def _math(markdown: str) -> list[tuple[str, str]]:
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    md = MarkdownIt("commonmark", {"html": True}).enable("table").use(dollarmath_plugin)
    found = []
    for token in md.parse(markdown):
        for t in [token, *(token.children or [])]:
            if t.type.startswith("math"):
                found.append(("math", t.content))
    return found


def live(markdown: str) -> list[tuple[str, str]]:
    """Everything in ``markdown`` that GitHub would turn into a link, a reference, a mention, a
    picture, a footnote or a formula: ``[(kind, text), ...]`` in document order (math last)."""
    parser = _Live()
    parser.feed(render(markdown))
    parser.close()
    return parser.found + _math(markdown)
