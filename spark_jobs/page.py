"""The report's HTML: one self-contained file that works offline.

Everything the page needs is inside it: the Vega, Vega-Lite and vega-embed JavaScript
(bundled by ``vl-convert``, cached on disk per version, :func:`vega_bundle`), each chart's
spec with its data, the styles and the page's own script. Nothing is fetched: the page
opens from a file, an e-mail attachment or a USB stick.

The page's script embeds every chart (SVG), then sets ``window.ksReport.ready`` (and
``<body data-ready="true">``); a chart that fails to embed logs a console error (the
browser test fails on any). It makes every table sortable (click a header; numbers sort
by value, not text) and wires the drill-down: two selects (topic, principal) that set the
Vega signals :data:`~spark_jobs.charts.TOPIC` and :data:`~spark_jobs.charts.PRINCIPAL` in
every chart and hide the table rows of other topics and principals.
"""

from __future__ import annotations

import functools
import html
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import vl_convert as vlc

from spark_jobs.charts import PRINCIPAL, TOPIC, Spec, empty_text

#: The Vega-Lite version the bundled runtime compiles (Altair's specs name the same one).
VEGA_LITE = "6.4"


@functools.cache
def vega_bundle() -> str:
    """Vega + Vega-Lite + vega-embed as one script, from vl-convert; cached on disk (the
    bundling takes seconds) under ``$XDG_CACHE_HOME/ksidecar`` (``~/.cache``)."""
    version = getattr(vlc, "__version__", "unknown")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ksidecar"
    path = cache / f"vega-bundle-{version}-vl{VEGA_LITE}.js"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        pass
    bundle: str = vlc.javascript_bundle(vl_version=VEGA_LITE)  # type: ignore[call-arg]  # the snippet is optional
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(bundle, encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: bundle again next time
    return bundle


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    """A table cell: its text, and the value it sorts by (numbers sort as numbers)."""

    text: str
    sort: float | str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """A table row, and the topic and principal it belongs to (for the drill-down)."""

    cells: Sequence[Cell | str]
    topic: str | None = None
    principal: str | None = None


@dataclass(slots=True, kw_only=True)
class Page:
    """What the page is made of, gathered section by section."""

    title: str
    #: Summary cards: (label, value).
    summary: list[tuple[str, str]] = field(default_factory=list)
    #: Sections' HTML, in order.
    sections: list[str] = field(default_factory=list)
    #: Chart id → spec (embedded in ``<div id="chart-<id>">``).
    specs: dict[str, Spec] = field(default_factory=dict)
    topics: set[str] = field(default_factory=set)
    principals: set[str] = field(default_factory=set)
    #: The static export, beside the page (None: not written).
    export: str | None = None


def chart(page: Page, chart_id: str, spec: Spec | None, what: str, *, empty: str | None = None) -> str:
    """A chart's place on the page: its div (the spec goes to the page's script), or the
    "not enough data" box (``empty``, else :func:`~spark_jobs.charts.empty_text`) when
    there is no spec."""
    if spec is None:
        return (f'<div class="chart empty" id="chart-{chart_id}" data-empty="true">'
                f"{html.escape(empty or empty_text(what))}</div>")
    page.specs[chart_id] = spec
    return f'<div class="chart" id="chart-{chart_id}" aria-label="{html.escape(what)}"></div>'


def table(table_id: str, headers: Sequence[str], rows: Iterable[Row], *, empty: str) -> str:
    """A sortable table (or the ``empty`` message when there are no rows)."""
    body = []
    for row in rows:
        attrs = ""
        if row.topic is not None:
            attrs += f' data-topic="{html.escape(row.topic)}"'
        if row.principal is not None:
            attrs += f' data-principal="{html.escape(row.principal)}"'
        cells = []
        for cell in row.cells:
            c = cell if isinstance(cell, Cell) else Cell(text=cell)
            sort = "" if c.sort is None else f' data-sort="{html.escape(str(c.sort))}"'
            cells.append(f"<td{sort}>{html.escape(c.text)}</td>")
        body.append(f"<tr{attrs}>{''.join(cells)}</tr>")
    if not body:
        return f'<p class="empty" id="{table_id}" data-empty="true">{html.escape(empty)}</p>'
    head = "".join(f'<th scope="col" title="sort">{html.escape(h)}</th>' for h in headers)
    return (f'<div class="scroll"><table class="sortable" id="{table_id}"><thead><tr>{head}'
            f"</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def section(section_id: str, title: str, *parts: str) -> str:
    """A section of the page."""
    return f'<section id="{section_id}"><h2>{html.escape(title)}</h2>{"".join(parts)}</section>'


def _options(values: Iterable[str]) -> str:
    return "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>'
                   for v in sorted(values))


def _script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element."""
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


def write(out: Path, page: Page, *, generated: str) -> Path:
    """Write ``out/index.html``."""
    cards = "".join(
        f'<div class="card"><div class="value">{html.escape(v)}</div>'
        f'<div class="label">{html.escape(k)}</div></div>'
        for k, v in page.summary
    )
    export = (f' Static export for e-mail: <a href="{html.escape(page.export)}">'
              f"{html.escape(page.export)}</a>." if page.export else "")
    drill = (
        '<form id="drill" class="drill" onsubmit="return false">'
        '<label>Topic <select id="drill-topic" data-signal="' + TOPIC + '">'
        '<option value="">all topics</option>' + _options(page.topics) + "</select></label>"
        '<label>Principal <select id="drill-principal" data-signal="' + PRINCIPAL + '">'
        '<option value="">all principals</option>' + _options(page.principals) + "</select></label>"
        '<button type="button" id="drill-reset">show all</button></form>'
    )
    text = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ksidecar audit report</title>
<style>{_CSS}</style>
<script>{vega_bundle()}</script>
</head>
<body>
<header><h1>ksidecar audit report</h1>
<p>{html.escape(page.title)}. Generated {html.escape(generated)}. Data files:
<a href="data/">data/</a>.{export}</p>
{drill}</header>
<section id="summary"><h2>Summary</h2><div class="cards">{cards}</div></section>
{"".join(page.sections)}
<script type="application/json" id="ks-specs">{_script_json(page.specs)}</script>
<script>{_JS}</script>
</body></html>
"""
    index = out / "index.html"
    tmp = out / ".index.html.tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(index)
    return index


def counts(values: Mapping[str, int]) -> str:
    """``a 3, b 1`` (for captions)."""
    return ", ".join(f"{k} {v:,}" for k, v in values.items())


_CSS = """
body { font-family: system-ui, sans-serif; margin: 0 2em 2em; color: #222; max-width: 1100px; }
header { position: sticky; top: 0; background: #fff; padding: 0.5em 0; z-index: 2;
         border-bottom: 1px solid #ddd; }
h1 { margin: 0.3em 0; font-size: 1.5em; } h2 { margin-top: 1.6em; }
.drill label { margin-right: 1em; } .drill select { max-width: 22em; }
.cards { display: flex; flex-wrap: wrap; gap: 0.8em; }
.card { border: 1px solid #ccc; border-radius: 6px; padding: 0.5em 0.9em; min-width: 9em; }
.value { font-size: 1.3em; font-weight: bold; } .label { color: #555; font-size: 0.85em; }
.chart { margin: 1em 0; min-height: 60px; }
.empty { border: 1px dashed #bbb; border-radius: 6px; padding: 1.2em; color: #555;
         background: #fafafa; }
.scroll { max-height: 24em; overflow: auto; margin: 1em 0; display: inline-block;
          border: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.88em; }
thead th { position: sticky; top: 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th { background: #f4f4f4; cursor: pointer; user-select: none; white-space: nowrap; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
td:first-child, th:first-child { text-align: left; }
tr.hidden { display: none; }
.note { color: #555; font-size: 0.9em; }
"""

_JS = """
(function () {
  'use strict';
  const report = window.ksReport = { ready: false, views: {}, failed: [] };
  const specs = JSON.parse(document.getElementById('ks-specs').textContent);
  const embeds = Object.entries(specs).map(([id, spec]) =>
    vegaEmbed('#chart-' + id, spec, { renderer: 'svg', actions: false })
      .then((result) => { report.views[id] = result.view; })
      .catch((error) => { report.failed.push(id); console.error('chart ' + id + ' failed:', error); }));
  Promise.all(embeds).then(() => {
    report.ready = true;
    document.body.dataset.ready = 'true';
  });

  function cellValue(row, index) {
    const cell = row.cells[index];
    if (!cell) return '';
    const sort = cell.dataset.sort;
    if (sort === undefined) return cell.textContent;
    const number = Number(sort);
    return sort !== '' && !Number.isNaN(number) ? number : sort;
  }
  function sortBy(table, index, th) {
    const descending = th.getAttribute('aria-sort') === 'ascending';
    table.querySelectorAll('th').forEach((h) => h.removeAttribute('aria-sort'));
    th.setAttribute('aria-sort', descending ? 'descending' : 'ascending');
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    rows.sort((a, b) => {
      const x = cellValue(a, index), y = cellValue(b, index);
      const order = (typeof x === 'number' && typeof y === 'number') ? x - y
        : String(x).localeCompare(String(y), undefined, { numeric: true });
      return descending ? -order : order;
    });
    rows.forEach((row) => body.appendChild(row));
  }
  document.querySelectorAll('table.sortable').forEach((table) => {
    table.querySelectorAll('th').forEach((th, index) =>
      th.addEventListener('click', () => sortBy(table, index, th)));
  });

  const selects = Array.from(document.querySelectorAll('#drill select'));
  function drill() {
    const chosen = {};
    selects.forEach((select) => { chosen[select.dataset.signal] = select.value || null; });
    const runs = Object.values(report.views).map((view) => {
      Object.entries(chosen).forEach(([name, value]) => view.signal(name, value));
      return view.runAsync();
    });
    const topic = document.getElementById('drill-topic').value;
    const principal = document.getElementById('drill-principal').value;
    document.querySelectorAll('tr[data-topic], tr[data-principal]').forEach((row) => {
      const hide = (topic && row.dataset.topic !== undefined && row.dataset.topic !== topic)
        || (principal && row.dataset.principal !== undefined && row.dataset.principal !== principal);
      row.classList.toggle('hidden', Boolean(hide));
    });
    return Promise.all(runs);
  }
  report.drill = function (topic, principal) {
    document.getElementById('drill-topic').value = topic || '';
    document.getElementById('drill-principal').value = principal || '';
    return drill();
  };
  selects.forEach((select) => select.addEventListener('change', drill));
  document.getElementById('drill-reset').addEventListener('click', () => report.drill('', ''));
})();
"""
