"""What a rendered report must hold, checked from the HTML alone (for the report and e2e tests)."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """Chart places (id → drawn or "not enough data"), each chart's spec, tables' cell
    text by id, every URL the page refers to, and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, bool] = {}
        self.specs: dict[str, Any] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self.empty: set[str] = set()
        self.urls: list[str] = []
        self.text: list[str] = []
        self._table: str | None = None
        self._script: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        element_id = a.get("id") or ""
        if a.get("data-empty") == "true":
            self.empty.add(element_id)
        if tag == "div" and "chart" in (a.get("class") or "").split():
            self.charts[element_id.removeprefix("chart-")] = a.get("data-empty") != "true"
        elif tag == "table":
            self._table = element_id
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag == "script":
            self._script = element_id
            if a.get("src"):
                self.urls.append(a["src"] or "")
        for name in ("href", "src"):
            if tag != "script" and a.get(name):
                self.urls.append(a[name] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag == "script":
            self._script = None

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            if self._script == "ks-specs":
                self.specs = json.loads(data)
            return
        self.text.append(data)
        if self._table is not None and self.tables[self._table] and data.strip():
            self.tables[self._table][-1].append(data)


def parse(index: Path) -> Page:
    """Parse ``index``; check it refers to nothing off the disk, and that the static export
    beside it is a PNG."""
    page = Page()
    page.feed(index.read_text(encoding="utf-8"))
    page.close()
    for url in page.urls:
        assert "://" not in url and not url.startswith("//"), url  # offline: nothing fetched
    assert set(page.specs) == {name for name, drawn in page.charts.items() if drawn}
    export = index.parent / "report.png"
    if page.specs:
        assert export.read_bytes()[:8] == PNG_MAGIC
    return page


def summary(page: Page, label: str) -> str:
    """The value of the summary card labelled ``label``."""
    text = [t.strip() for t in page.text if t.strip()]
    return text[text.index(label) - 1]
