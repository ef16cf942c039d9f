"""What a rendered report must hold, checked from the HTML alone (for the report and e2e tests)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """The ids of images and tables, image sources, and each table's cell text by id."""

    def __init__(self) -> None:
        super().__init__()
        self.images: dict[str, str] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self.text: list[str] = []
        self._table: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img":
            self.images[a.get("id") or ""] = a.get("src") or ""
        elif tag == "table":
            self._table = a.get("id") or ""
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._table is not None and self.tables[self._table] and data.strip():
            self.tables[self._table][-1].append(data)


def parse(index: Path) -> Page:
    """Parse ``index`` and check every image is a PNG file beside it."""
    page = Page()
    page.feed(index.read_text(encoding="utf-8"))
    page.close()
    for src in page.images.values():
        assert "/" not in src and src.endswith(".png"), src
        assert (index.parent / src).read_bytes()[:8] == PNG_MAGIC, src
    return page


def summary(page: Page, label: str) -> str:
    """The value of the summary card labelled ``label``."""
    text = [t.strip() for t in page.text if t.strip()]
    return text[text.index(label) - 1]
