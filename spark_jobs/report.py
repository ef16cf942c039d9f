"""The audit report: every job run over one audit, then one HTML page of charts and tables.

    python -m spark_jobs.report --audit PATH --out DIR [--mirror PATH] [--since T] [--until T]
        [--sidecars 1,2] [--days 7] [--slo-ms 100] …        (also: ksidecar audit report …)

``DIR/data/<job>/`` holds each job's outputs (Parquet, and the cost CSV); ``DIR/index.html``
with its PNG charts beside it is built from those files with pyarrow and matplotlib alone
(:func:`render` needs no Spark), links relatively, and opens from a file browser. Without
``--mirror`` the completeness job is skipped and its section says so.
"""

from __future__ import annotations

import argparse
import html
import importlib
import shutil
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_jobs import charts, options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOBS = ("traffic", "unused_topics", "cost_attribution", "latency_slo", "completeness")

CHARTS = (
    "traffic_hourly", "top_topics", "requests_by_api", "cost_by_principal",
    "latency_p99", "slo_share", "completeness",
)
"""The PNGs a full report holds (``completeness`` only when a mirror was compared)."""

TABLES = ("traffic-topics", "traffic-api", "cost", "latency", "unused", "completeness")
"""The ids of the tables a full report holds."""

TOP = 15
MIB = 1024 * 1024
"""Rows shown in "top" charts and tables; the data files hold them all."""


# ---------------------------------------------------------------------------------------------
# Running the jobs


def report_parser() -> argparse.ArgumentParser:
    """The report's command line: every job's options, ``--mirror`` optional."""
    p = argparse.ArgumentParser(
        prog="python -m spark_jobs.report", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options.add_report(p)
    return p


def run(args: argparse.Namespace, spark: SparkSession | None = None) -> Path:
    """Run every job with ``args`` into ``args.out/data`` and render the page; return its path.

    Uses ``spark``, else the active session (leaving either running), else starts and stops
    :func:`session <spark_jobs.common.session>`.
    """
    from pyspark.sql import SparkSession  # Spark only here: render() must work without it

    from spark_jobs import common

    out = Path(args.out).resolve()
    data = out / "data"
    given = spark or SparkSession.getActiveSession()
    session = given if given is not None else common.session("ksidecar-audit-report")
    try:
        for name in JOBS:
            if name == "completeness" and not args.mirror:
                shutil.rmtree(data / name, ignore_errors=True)  # no stale comparison
                continue
            job_args = argparse.Namespace(**{**vars(args), "out": str(data / name)})
            importlib.import_module(f"spark_jobs.{name}").run(session, job_args)
    finally:
        if given is None:
            session.stop()
    return render(out, title=_describe(args))


def run_all(audit: str | Path, out: str | Path, *, spark: SparkSession | None = None,
            **overrides: Any) -> Path:
    """Run every job over ``audit`` and render ``out/index.html``; return its path.

    ``overrides`` set options by their attribute names (``mirror=…``, ``since=datetime``,
    ``slo_ms=…``); the rest keep the command line's defaults.
    """
    args = report_parser().parse_args(["--audit", str(audit), "--out", str(out)])
    for key, value in overrides.items():
        if not hasattr(args, key):
            raise TypeError(f"run_all: unknown option {key!r}")
        setattr(args, key, value)
    return run(args, spark)


def _describe(args: argparse.Namespace) -> str:
    parts = [f"audit {args.audit}"]
    if args.since or args.until:
        parts.append(f"from {args.since or 'the start'} until {args.until or 'the end'}")
    if args.sidecars:
        parts.append(f"sidecars {', '.join(map(str, args.sidecars))}")
    if args.mirror:
        parts.append(f"compared with mirror {args.mirror}")
    return "; ".join(parts)


# ---------------------------------------------------------------------------------------------
# Formatting


def _int(value: Any) -> str:
    return "—" if value is None else f"{int(value):,}"


def _bytes(value: Any) -> str:
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _share(value: Any) -> str:
    return "—" if value is None else f"{float(value):.1%}"


def _ms(value: Any) -> str:
    return "—" if value is None else f"{int(value) / 1000:,.1f} ms"


def _time(value: Any) -> str:
    return "—" if value is None else f"{value:%Y-%m-%d %H:%M}"


def _text(value: Any) -> str:
    return "—" if value is None else str(value)


def _table(table_id: str, headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _img(name: str, alt: str) -> str:
    return f'<img id="chart-{name}" src="{name}.png" alt="{html.escape(alt)}">'


# ---------------------------------------------------------------------------------------------
# Reading the outputs


def _read(data: Path, job: str, table: str) -> pa.Table | None:
    path = data / job / table
    return pq.read_table(path) if path.is_dir() else None


def _sum(table: pa.Table, keys: list[str], values: list[str]) -> pa.Table:
    """``table`` grouped by ``keys`` with ``values`` summed (columns keep their names)."""
    grouped = table.group_by(keys).aggregate([(v, "sum") for v in values])
    return grouped.rename_columns([c.removesuffix("_sum") for c in grouped.column_names])


def _top(table: pa.Table, by: pa.Array | pa.ChunkedArray, n: int = TOP) -> pa.Table:
    """The ``n`` rows with the largest ``by``."""
    order = pc.sort_indices(pa.table({"k": by}), sort_keys=[("k", "descending")])
    return table.take(order[:n])


def _mib(table: pa.Table, name: str) -> list[float]:
    return [v / MIB for v in _col(table, name)]


def _largest(table: pa.Table, key: str, value: str, n: int) -> list[Any]:
    """The ``n`` values of ``key`` with the largest sums of ``value``."""
    sums = _sum(table, [key], [value])
    return _col(_top(sums, sums.column(value), n), key)


def _col(table: pa.Table, name: str) -> list[Any]:
    values: list[Any] = table.column(name).to_pylist()
    return values


# ---------------------------------------------------------------------------------------------
# The page


def render(out: Path, *, title: str = "") -> Path:
    """Build ``out/index.html`` and its charts from the job outputs under ``out/data``."""
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    summary: list[tuple[str, str]] = []
    sections = [
        _traffic(out, data, summary),
        _cost(out, data),
        _latency(out, data, summary),
        _unused(data, summary),
        _completeness(out, data, summary),
    ]
    cards = "".join(
        f'<div class="card"><div class="value">{html.escape(v)}</div>'
        f'<div class="label">{html.escape(k)}</div></div>'
        for k, v in summary
    )
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ksidecar audit report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
.cards {{ display: flex; flex-wrap: wrap; gap: 1em; }}
.card {{ border: 1px solid #ccc; border-radius: 6px; padding: 0.6em 1em; min-width: 9em; }}
.value {{ font-size: 1.4em; font-weight: bold; }} .label {{ color: #666; font-size: 0.9em; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
th, td {{ border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }}
th {{ background: #f4f4f4; }} td:first-child, th:first-child {{ text-align: left; }}
img {{ display: block; margin: 1em 0; max-width: 100%; }}
</style></head>
<body>
<h1>ksidecar audit report</h1>
<p>{html.escape(title)}. Generated {generated}. Data files: <a href="data/">data/</a>.</p>
<section id="summary"><h2>Summary</h2><div class="cards">{cards}</div></section>
{"".join(sections)}
</body></html>
"""
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


def _traffic(out: Path, data: Path, summary: list[tuple[str, str]]) -> str:
    topics = _read(data, "traffic", "topics")
    apis = _read(data, "traffic", "api_keys")
    if topics is None or apis is None:
        return '<section id="traffic"><h2>Traffic</h2><p>No traffic output.</p></section>'
    flows = ["bytes_in", "records_in", "bytes_out", "records_out"]
    totals = {name: pc.sum(topics.column(name)).as_py() or 0 for name in flows}
    requests = pc.sum(apis.column("requests")).as_py() or 0
    summary += [
        ("bytes in (produced)", _bytes(totals["bytes_in"])),
        ("bytes out (fetched)", _bytes(totals["bytes_out"])),
        ("records in", _int(totals["records_in"])),
        ("records out", _int(totals["records_out"])),
        ("requests", _int(requests)),
        ("topics with traffic", _int(pc.count_distinct(topics.column("topic")).as_py())),
        ("principals", _int(pc.count_distinct(topics.column("principal")).as_py())),
    ]
    hourly = _sum(topics, ["hour"], ["bytes_in", "bytes_out"]).sort_by("hour")
    flow = {"in (produced)": _mib(hourly, "bytes_in"), "out (fetched)": _mib(hourly, "bytes_out")}
    charts.lines(out / "traffic_hourly.png", "Bytes per hour", _col(hourly, "hour"), flow, "MiB")
    per_topic = _sum(topics, ["topic"], flows)
    per_topic = _top(per_topic, pc.add(per_topic.column("bytes_in"), per_topic.column("bytes_out")))
    charts.bars(out / "top_topics.png", f"Top {TOP} topics by bytes", _col(per_topic, "topic"),
                {"in": _mib(per_topic, "bytes_in"), "out": _mib(per_topic, "bytes_out")}, "MiB")
    per_api = _sum(apis, ["api_key", "api_name"],
                   ["requests", "request_bytes", "response_bytes", "no_response"])
    per_api = per_api.sort_by([("requests", "descending")])
    charts.bars(out / "requests_by_api.png", "Requests per API", _col(per_api, "api_name"),
                {"requests": _col(per_api, "requests")}, "requests")
    topic_rows = [
        [_text(r["topic"]), _bytes(r["bytes_in"]), _int(r["records_in"]),
         _bytes(r["bytes_out"]), _int(r["records_out"])]
        for r in per_topic.to_pylist()
    ]
    api_rows = [
        [f"{r['api_name']} ({r['api_key']})", _int(r["requests"]), _bytes(r["request_bytes"]),
         _bytes(r["response_bytes"]), _int(r["no_response"])]
        for r in per_api.to_pylist()
    ]
    return (
        '<section id="traffic"><h2>Traffic</h2>'
        + _img("traffic_hourly", "bytes produced and fetched per hour")
        + _img("top_topics", "top topics by bytes")
        + _table("traffic-topics",
                 ["topic", "bytes in", "records in", "bytes out", "records out"], topic_rows)
        + _img("requests_by_api", "requests per API")
        + _table("traffic-api",
                 ["API", "requests", "request bytes", "response bytes", "no response"], api_rows)
        + "</section>"
    )


def _cost(out: Path, data: Path) -> str:
    shares = _read(data, "cost_attribution", "shares")
    if shares is None:
        return '<section id="cost"><h2>Cost attribution</h2><p>No output.</p></section>'
    traffic = pc.add(shares.column("bytes_in"), shares.column("bytes_out"))
    shares = shares.append_column("bytes", traffic)
    topics = _largest(shares, "topic", "bytes", 8)
    principals = _largest(shares, "principal", "bytes", 6)
    lookup = {(r["topic"], r["principal"]): r["bytes"] / MIB for r in shares.to_pylist()}
    series = {p: [float(lookup.get((t, p), 0)) for t in topics] for p in principals}
    others = [
        sum(b for (t2, p), b in lookup.items() if t2 == t and p not in principals) for t in topics
    ]
    if any(others):
        series["others"] = others
    charts.bars(out / "cost_by_principal.png", "Bytes in + out per topic, by principal", topics,
                series, "MiB", stacked=True)
    rows = [
        [_text(r["topic"]), _text(r["principal"]),
         _bytes(r["bytes_in"]), _share(r["share_bytes_in"]),
         _bytes(r["bytes_out"]), _share(r["share_bytes_out"]),
         _int(r["requests"]), _share(r["share_requests"])]
        for r in shares.slice(0, 4 * TOP).to_pylist()
    ]
    more = f" (first {4 * TOP} of {shares.num_rows} rows)" if shares.num_rows > 4 * TOP else ""
    return (
        '<section id="cost"><h2>Cost attribution</h2>'
        + _img("cost_by_principal", "bytes per topic by principal")
        + f'<p>Full table{html.escape(more)}: '
        + '<a href="data/cost_attribution/cost_attribution.csv">cost_attribution.csv</a>.</p>'
        + _table("cost", ["topic", "principal", "bytes in", "share in", "bytes out", "share out",
                          "requests", "share of requests"], rows)
        + "</section>"
    )


def _latency(out: Path, data: Path, summary: list[tuple[str, str]]) -> str:
    latency = _read(data, "latency_slo", "latency")
    if latency is None:
        return '<section id="latency"><h2>Latency</h2><p>No output.</p></section>'
    slo = _col(latency, "slo_ms")[0] if latency.num_rows else None
    answered = pc.subtract(latency.column("requests"), latency.column("no_response"))
    latency = latency.append_column("answered", answered)
    over = pc.sum(latency.column("over_slo")).as_py() or 0
    total = pc.sum(answered).as_py() or 0
    summary.append((f"requests over the {slo:g} ms SLO" if slo else "requests over the SLO",
                    _share(over / total if total else None)))
    worst = latency.group_by(["hour", "api_name"]).aggregate([("p99_us", "max")])
    hours = sorted(set(_col(worst, "hour")))
    by_api: dict[str, dict[datetime, float | None]] = {}
    for r in worst.to_pylist():
        p99 = r["p99_us_max"]
        by_api.setdefault(r["api_name"], {})[r["hour"]] = None if p99 is None else p99 / 1000
    charts.lines(out / "latency_p99.png", "Worst p99 latency per API (over topics and principals)",
                 hours, {api: [v.get(h) for h in hours] for api, v in sorted(by_api.items())}, "ms")
    hourly = _sum(latency, ["hour"], ["over_slo", "answered"]).sort_by("hour")
    pairs = zip(_col(hourly, "over_slo"), _col(hourly, "answered"), strict=True)
    share = [o / a if a else None for o, a in pairs]
    charts.lines(out / "slo_share.png", "Share of requests over the SLO per hour",
                 _col(hourly, "hour"), {"over SLO": share}, "share")
    busiest = _top(latency, latency.column("requests"), 2 * TOP)
    rows = [
        [_time(r["hour"]), _text(r["api_name"]), _text(r["topic"]), _text(r["principal"]),
         _int(r["requests"]), _ms(r["p50_us"]), _ms(r["p95_us"]), _ms(r["p99_us"]),
         _share(r["share_over_slo"])]
        for r in busiest.to_pylist()
    ]
    return (
        '<section id="latency"><h2>Latency and SLO</h2>'
        + _img("latency_p99", "worst p99 latency per API per hour")
        + _img("slo_share", "share of requests over the SLO per hour")
        + f"<p>The {2 * TOP} busiest groups (hour, API, topic, principal):</p>"
        + _table("latency", ["hour", "API", "topic", "principal", "requests", "p50", "p95", "p99",
                             "over SLO"], rows)
        + "</section>"
    )


def _unused(data: Path, summary: list[tuple[str, str]]) -> str:
    topics = _read(data, "unused_topics", "topics")
    if topics is None:
        return '<section id="unused"><h2>Unused topics</h2><p>No output.</p></section>'
    unused = topics.filter(pc.field("unused"))
    summary.append(("unused topics", f"{unused.num_rows:,} of {topics.num_rows:,}"))
    rows = [
        [_text(r["topic"]), _time(r["last_produce"]), _time(r["last_fetch"]),
         "—" if r["idle_days"] is None else f"{r['idle_days']:g}"]
        for r in unused.to_pylist()
    ]
    return (
        '<section id="unused"><h2>Unused topics</h2>'
        + _table("unused", ["topic", "last produce", "last fetch", "idle days"], rows)
        + "</section>"
    )


def _completeness(out: Path, data: Path, summary: list[tuple[str, str]]) -> str:
    windows = _read(data, "completeness", "windows")
    if windows is None:
        summary.append(("windows differing from the mirror", "not compared"))
        return ('<section id="completeness"><h2>Completeness</h2>'
                "<p>Not run: no mirror audit given (<code>--mirror</code>).</p></section>")
    differ = windows.filter(pc.field("differs"))
    summary.append(("windows differing from the mirror",
                    f"{differ.num_rows:,} of {windows.num_rows:,}"))
    labels = [f"{r['topic']} {_time(r['window_start'])}" for r in differ.slice(0, TOP).to_pylist()]
    charts.bars(out / "completeness.png", "Records produced: source − mirror, differing windows",
                labels, {"difference": _col(differ.slice(0, TOP), "difference")}, "records",
                empty="every window matches")
    rows = [
        [_text(r["topic"]), _time(r["window_start"]), _time(r["window_end"]),
         _int(r["source_records"]), _int(r["mirror_records"]), _int(r["difference"])]
        for r in differ.to_pylist()
    ]
    return (
        '<section id="completeness"><h2>Completeness</h2>'
        + _img("completeness", "records produced, source minus mirror")
        + _table("completeness", ["topic", "window start", "window end", "source records",
                                  "mirror records", "difference"], rows)
        + "</section>"
    )


def main_from_args(args: argparse.Namespace) -> int:
    """Run everything with parsed options (``ksidecar audit report``), print where the page is."""
    index = run(args)
    print(f"audit report: {index}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return main_from_args(report_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
