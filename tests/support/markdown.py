"""Render Markdown as GitHub does (CommonMark, raw HTML, tables, strikethrough) and inspect it."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from markdown_it import MarkdownIt

# GitHub pings @user, @org/team: an "@" directly followed by a name character.
MENTION_RE = re.compile(r"@[A-Za-z0-9]")

_GFM = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


class Collector(HTMLParser):
    """Tags, text (entities decoded) and the cell count of every table row."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.tables: list[list[int]] = []  # per table, the cell count of each row
        self.text: list[str] = []
        self.cell_text: list[str] = []  # text of each td/th, in order
        self._cells = 0
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "table":
            self.tables.append([])
        if tag == "tr":
            self._cells = 0
        if tag in ("td", "th"):
            self._cells += 1
            self._in_cell = True
            self.cell_text.append("")

    def handle_endtag(self, tag):
        if tag == "tr":
            self.tables[-1].append(self._cells)
        if tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_cell:
            self.cell_text[-1] += data

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def render_html(markdown: str) -> str:
    return _GFM.render(markdown)


def parse(markdown: str) -> Collector:
    """Render ``markdown`` as GitHub would and collect what the HTML holds."""
    collector = Collector()
    collector.feed(render_html(markdown))
    collector.close()
    return collector
