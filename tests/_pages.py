"""Reading a run's page as a test does: its tables, images, links and scripts (`Page`), and
report.md's tables (`markdown_tables`), to compare one with the other and with the store."""

from __future__ import annotations

import re
from html.parser import HTMLParser


class Page(HTMLParser):
    """What a test reads of a page: its tables (rows of cell texts, the header row first), images,
    links, scripts and every URL-valued attribute."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.images: list[str] = []
        self.links: list[str] = []
        self.scripts: list[dict] = []
        self.urls: list[str] = []
        self.svgs = 0
        self._cell: list[str] | None = None
        self._depth = 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]
        if tag == "table":
            self._depth += 1
            if self._depth == 1:
                self.tables.append([])
        elif tag == "tr" and self._depth == 1:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self._depth == 1:
            self._cell = []
        elif tag == "img":
            self.images.append(a.get("src", ""))
        elif tag == "a":
            self.links.append(a.get("href", ""))
        elif tag == "script":
            self.scripts.append(a)
        elif tag == "svg":
            self.svgs += 1

    def handle_endtag(self, tag):
        if tag == "table":
            self._depth -= 1
        elif tag in ("td", "th") and self._cell is not None and self._depth == 1:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def markdown_tables(text: str) -> list[list[list[str]]]:
    """report.md's tables as rows of cells, the separator lines left out."""
    tables, current = [], None
    for line in text.splitlines():
        line = line.strip()  # a table inside a list item is indented
        if line.startswith("|"):
            if current is None:
                current = []
                tables.append(current)
            if not re.fullmatch(r"\|(---\|)+", line):
                current.append([c.strip() for c in line.strip("|").split("|")])
        else:
            current = None
    return tables
