"""The audit report: every job run over one audit, then one HTML page of charts and tables.

    python -m spark_jobs.report --audit PATH --out DIR [--mirror PATH] [--since T] [--until T]
        [--sidecars 1,2] [--days 7] [--slo-ms 100] …        (also: ksidecar audit report …)

``DIR/data/<job>/`` holds each job's outputs (Parquet, and the cost CSV). ``DIR/index.html``
is built from those files with pyarrow, Altair and vl-convert alone (:func:`render` needs
no Spark): one self-contained page that works offline (:mod:`spark_jobs.page`) with
zoomable Vega-Lite charts (:mod:`spark_jobs.charts`), sortable tables, a per-topic and
per-principal drill-down, and "not enough data" in place of an empty chart; beside it
``DIR/report.png``, the main charts as one picture for e-mail. Without ``--mirror`` the
completeness job is skipped and its section says so.
"""

from __future__ import annotations

import argparse
import html
import importlib
import shutil
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import vl_convert as vlc

from spark_jobs import charts, options, page

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOBS = ("traffic", "unused_topics", "cost_attribution", "latency_slo", "completeness",
        "upgrade_readiness", "least_privilege", "client_throttling")

CHARTS = (
    "traffic_hourly", "top_topics", "requests_by_api", "cost_by_principal",
    "latency_p99", "slo_share", "long_polls", "completeness", "readiness_matrix", "throttling",
)
"""The charts a full report holds (``completeness`` only when a mirror was compared)."""

TABLES = ("traffic-topics", "traffic-api", "cost", "latency", "long-polls", "unused",
          "inventory", "completeness", "readiness-breaking", "readiness-old", "readiness-clients",
          "denied", "proposed-acls", "throttled")
"""The ids of the tables (or their "nothing to show" notes) a full report holds."""

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
    parts.append(f"readiness for {args.target}")
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


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _num(text: str, value: Any) -> page.Cell:
    """A cell that sorts by ``value`` (nulls first)."""
    return page.Cell(text=text, sort="" if value is None else float(value))


def _when(value: Any) -> page.Cell:
    return page.Cell(text=_time(value), sort="" if value is None else _iso(value))


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


def _largest(table: pa.Table, key: str, value: str, n: int) -> list[Any]:
    """The ``n`` values of ``key`` with the largest sums of ``value``."""
    sums = _sum(table, [key], [value])
    return _col(_top(sums, sums.column(value), n), key)


def _col(table: pa.Table, name: str) -> list[Any]:
    values: list[Any] = table.column(name).to_pylist()
    return values


# ---------------------------------------------------------------------------------------------
# The page


#: Topics the hourly chart keeps apart (the rest are summed as OTHER_TOPICS).
CHART_TOPICS = 30
OTHER_TOPICS = "(other topics)"
EXPORT = "report.png"


def render(out: Path, *, title: str = "", export: bool = True) -> Path:
    """Build ``out/index.html`` from the job outputs under ``out/data`` (and, with
    ``export``, the static ``out/report.png``)."""
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    p = page.Page(title=title or "audit report")
    still: list[charts.Spec] = []
    p.sections += [
        _traffic(p, data, still),
        _cost(p, data),
        _latency(p, data, still),
        _unused(p, data),
        _completeness(p, data),
        _readiness(p, data, still),
        _denied(p, data),
        _throttling(p, data),
    ]
    if export and still:
        (out / EXPORT).write_bytes(vlc.vegalite_to_png(
            charts.overview(still, f"ksidecar audit report — {p.title}"), scale=1.5))
        p.export = EXPORT
    else:
        (out / EXPORT).unlink(missing_ok=True)
    return page.write(out, p, generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))


def _hour_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows of ``table`` with ``hour`` as ISO text and ``hour_end`` an hour later."""
    rows: list[dict[str, Any]] = table.to_pylist()
    for r in rows:
        r["hour_end"] = _iso(r["hour"] + timedelta(hours=1))
        r["hour"] = _iso(r["hour"])
    return rows


def _traffic(p: page.Page, data: Path, still: list[charts.Spec]) -> str:
    topics = _read(data, "traffic", "topics")
    apis = _read(data, "traffic", "api_keys")
    if topics is None or apis is None:
        return page.section("traffic", "Traffic", '<p class="empty">No traffic output.</p>')
    flows = ["bytes_in", "records_in", "bytes_out", "records_out"]
    totals = {name: pc.sum(topics.column(name)).as_py() or 0 for name in flows}
    requests = pc.sum(apis.column("requests")).as_py() or 0
    p.summary += [
        ("bytes in (produced)", _bytes(totals["bytes_in"])),
        ("bytes out (fetched)", _bytes(totals["bytes_out"])),
        ("records in", _int(totals["records_in"])),
        ("records out", _int(totals["records_out"])),
        ("requests", _int(requests)),
        ("topics with traffic", _int(pc.count_distinct(topics.column("topic")).as_py())),
        ("principals", _int(pc.count_distinct(topics.column("principal")).as_py())),
    ]
    p.topics.update(t for t in _col(topics, "topic") if t is not None)
    p.principals.update(_col(topics, "principal"))
    per_topic = _sum(topics, ["topic", "principal"], ["bytes_in", "bytes_out"])
    kept = set(_largest(per_topic.append_column(
        "bytes", pc.add(per_topic.column("bytes_in"), per_topic.column("bytes_out"))),
        "topic", "bytes", CHART_TOPICS))
    label = pc.if_else(pc.is_in(topics.column("topic"), pa.array(sorted(kept), pa.string())),
                       topics.column("topic"), pa.scalar(OTHER_TOPICS))
    hourly = _sum(topics.set_column(topics.schema.get_field_index("topic"), "topic", label),
                  ["hour", "topic", "principal"], ["bytes_in", "bytes_out"])
    flow = [
        {**r, "direction": direction, "mib": r[column] / MIB}
        for r in _hour_rows(hourly)
        for direction, column in (("produced", "bytes_in"), ("fetched", "bytes_out"))
    ]
    by_topic = [
        {"topic": r["topic"], "principal": r["principal"], "direction": direction,
         "mib": r[column] / MIB}
        for r in per_topic.to_pylist()
        for direction, column in (("produced", "bytes_in"), ("fetched", "bytes_out"))
    ]
    per_api = _sum(apis, ["api_key", "api_name"],
                   ["requests", "request_bytes", "response_bytes", "no_response"])
    per_api = per_api.sort_by([("requests", "descending")])
    flow_spec = charts.hourly_flow(flow) if flow else None
    top_spec = charts.top_topics(by_topic, TOP) if by_topic else None
    if flow:
        still += [charts.hourly_flow(flow, interactive=False), charts.top_topics(by_topic, TOP)]
    topic_totals = _sum(topics, ["topic", "principal"], flows)
    topic_rows = [
        page.Row(topic=r["topic"], principal=r["principal"], cells=[
            _text(r["topic"]), _text(r["principal"]),
            _num(_bytes(r["bytes_in"]), r["bytes_in"]), _num(_int(r["records_in"]), r["records_in"]),
            _num(_bytes(r["bytes_out"]), r["bytes_out"]), _num(_int(r["records_out"]), r["records_out"])])
        for r in topic_totals.sort_by([("bytes_in", "descending")]).to_pylist()
    ]
    api_rows = [
        page.Row(cells=[
            f"{r['api_name']} ({r['api_key']})", _num(_int(r["requests"]), r["requests"]),
            _num(_bytes(r["request_bytes"]), r["request_bytes"]),
            _num(_bytes(r["response_bytes"]), r["response_bytes"]),
            _num(_int(r["no_response"]), r["no_response"])])
        for r in per_api.to_pylist()
    ]
    api_spec = charts.bars([{"api": r["api_name"], "requests": r["requests"]} for r in per_api.to_pylist()],
                           label="api", value="requests", title="Requests per API",
                           unit="requests") if per_api.num_rows else None
    return page.section(
        "traffic", "Traffic",
        page.chart(p, "traffic_hourly", flow_spec, "bytes per hour"),
        page.chart(p, "top_topics", top_spec, "the top topics"),
        '<p class="note">Per topic and principal (click a header to sort; the drill-down '
        "above filters rows and charts):</p>",
        page.table("traffic-topics", ["topic", "principal", "bytes in", "records in",
                                      "bytes out", "records out"], topic_rows,
                   empty="No Produce or Fetch traffic in the audit read."),
        page.chart(p, "requests_by_api", api_spec, "requests per API"),
        page.table("traffic-api", ["API", "requests", "request bytes", "response bytes",
                                   "no response"], api_rows, empty="No requests in the audit read."),
    )


def _cost(p: page.Page, data: Path) -> str:
    shares = _read(data, "cost_attribution", "shares")
    if shares is None:
        return page.section("cost", "Cost attribution", '<p class="empty">No output.</p>')
    traffic = pc.add(shares.column("bytes_in"), shares.column("bytes_out"))
    shares = shares.append_column("bytes", traffic)
    p.principals.update(_col(shares, "principal"))
    topics = set(_largest(shares, "topic", "bytes", CHART_TOPICS))
    principals = set(_largest(shares, "principal", "bytes", 8))
    stacked: dict[tuple[str, str], float] = {}
    for r in shares.to_pylist():
        if r["topic"] in topics:
            key = (r["topic"], r["principal"] if r["principal"] in principals else "others")
            stacked[key] = stacked.get(key, 0.0) + r["bytes"] / MIB
    spec = charts.cost_by_principal(
        [{"topic": t, "principal": who, "mib": mib} for (t, who), mib in stacked.items()]
    ) if stacked else None
    rows = [
        page.Row(topic=r["topic"], principal=r["principal"], cells=[
            _text(r["topic"]), _text(r["principal"]),
            _num(_bytes(r["bytes_in"]), r["bytes_in"]), _num(_share(r["share_bytes_in"]), r["share_bytes_in"]),
            _num(_bytes(r["bytes_out"]), r["bytes_out"]), _num(_share(r["share_bytes_out"]), r["share_bytes_out"]),
            _num(_int(r["requests"]), r["requests"]), _num(_share(r["share_requests"]), r["share_requests"])])
        for r in shares.to_pylist()[: 20 * TOP]
    ]
    more = f" (the page shows {20 * TOP} of {shares.num_rows} rows)" if shares.num_rows > 20 * TOP else ""
    return page.section(
        "cost", "Cost attribution",
        page.chart(p, "cost_by_principal", spec, "bytes per topic by principal"),
        f'<p class="note">Full table{html.escape(more)}: '
        '<a href="data/cost_attribution/cost_attribution.csv">cost_attribution.csv</a>.</p>',
        page.table("cost", ["topic", "principal", "bytes in", "share in", "bytes out",
                            "share out", "requests", "share of requests"], rows,
                   empty="No Produce or Fetch traffic to attribute."),
    )


def _latency(p: page.Page, data: Path, still: list[charts.Spec]) -> str:
    latency = _read(data, "latency_slo", "latency")
    polls = _read(data, "latency_slo", "long_polls")
    if latency is None:
        return page.section("latency", "Latency and SLO", '<p class="empty">No output.</p>')
    slo = _col(latency, "slo_ms")[0] if latency.num_rows else None
    answered = pc.subtract(latency.column("requests"), latency.column("no_response"))
    latency = latency.append_column("answered", answered)
    over = pc.sum(latency.column("over_slo")).as_py() or 0
    total = pc.sum(answered).as_py() or 0
    p.summary.append((f"requests over the {slo:g} ms SLO" if slo else "requests over the SLO",
                      _share(over / total if total else None)))
    worst = latency.group_by(["hour", "api_name"]).aggregate([("p99_us", "max")])
    p99 = [{"hour": _iso(r["hour"]), "api": r["api_name"], "p99_ms": max(r["p99_us_max"], 1) / 1000}
           for r in worst.to_pylist() if r["p99_us_max"] is not None]
    hourly = _sum(latency, ["hour"], ["over_slo", "answered"]).sort_by("hour")
    share = [{**r, "share": r["over_slo"] / r["answered"]} for r in _hour_rows(hourly) if r["answered"]]
    p99_spec = charts.latency_p99(p99, slo) if p99 else None
    share_spec = charts.hourly_share(share, title="Share of requests over the SLO per hour") if share else None
    if p99:
        still += [charts.latency_p99(p99, slo, interactive=False),
                  charts.hourly_share(share, title="Share of requests over the SLO per hour",
                                      interactive=False)]
    breaches = latency.filter(pc.greater(latency.column("over_slo"), 0))
    breaches = _top(breaches, breaches.column("over_slo"), 20 * TOP)
    rows = [
        page.Row(topic=r["topic"], principal=r["principal"], cells=[
            _when(r["hour"]), _text(r["api_name"]), _text(r["topic"]), _text(r["principal"]),
            _num(_int(r["requests"]), r["requests"]), _num(_ms(r["p50_us"]), r["p50_us"]),
            _num(_ms(r["p99_us"]), r["p99_us"]), _num(_int(r["over_slo"]), r["over_slo"]),
            _num(_share(r["share_over_slo"]), r["share_over_slo"])])
        for r in breaches.to_pylist()
    ]
    parts = [
        '<p class="note">JoinGroup and SyncGroup are held until their rebalance completes, '
        "and a Fetch may be held up to its max wait: that waiting is by design, reported "
        "under Long polls, and not judged. A Fetch is judged on its time beyond its max "
        "wait (docs/spark_jobs.md).</p>",
        page.chart(p, "latency_p99", p99_spec, "latency percentiles"),
        page.chart(p, "slo_share", share_spec, "the share over the SLO"),
        "<p>Groups (hour, API, topic, principal) with requests over the SLO, most first:</p>",
        page.table("latency", ["hour", "API", "topic", "principal", "requests", "p50", "p99",
                               "over SLO", "share over SLO"], rows,
                   empty="No request exceeded the SLO."),
    ]
    if polls is not None:
        poll_rows = [{"hour": r["hour"], "hour_end": r["hour_end"], "api": r["api_name"],
                      "principal": r["principal"], "held_p99_ms": (r["held_p99_us"] or 0) / 1000}
                     for r in _hour_rows(polls)]
        polls_spec = charts.long_polls(poll_rows) if poll_rows else None
        table_rows = [
            page.Row(principal=r["principal"], cells=[
                _when(r["hour"]), _text(r["api_name"]), _text(r["principal"]),
                _num(_int(r["requests"]), r["requests"]),
                _num(_ms(r["held_p50_us"]), r["held_p50_us"]), _num(_ms(r["held_p99_us"]), r["held_p99_us"]),
                _num(_ms(r["beyond_wait_p99_us"]), r["beyond_wait_p99_us"]),
                _num(_int(r["max_wait_ms"]), r["max_wait_ms"])])
            for r in polls.sort_by([("hour", "ascending"), ("api_name", "ascending")]).to_pylist()
        ]
        parts += [
            "<h3>Long polls</h3>",
            page.chart(p, "long_polls", polls_spec, "long polls"),
            page.table("long-polls", ["hour", "API", "principal", "requests", "held p50",
                                      "held p99", "beyond the wait p99", "max wait (ms)"],
                       table_rows, empty="No Fetch, JoinGroup or SyncGroup requests."),
        ]
    return page.section("latency", "Latency and SLO", *parts)


def _unused(p: page.Page, data: Path) -> str:
    topics = _read(data, "unused_topics", "topics")
    if topics is None:
        return page.section("unused", "Topic inventory and unused topics",
                            '<p class="empty">No output.</p>')
    unused = topics.filter(pc.field("unused"))
    p.summary.append(("unused topics", f"{unused.num_rows:,} of {topics.num_rows:,}"))
    p.topics.update(_col(topics, "topic"))
    partitions = topics.column("partitions") if "partitions" in topics.column_names else None

    def row(r: dict[str, Any]) -> page.Row:
        return page.Row(topic=r["topic"], cells=[
            _text(r["topic"]), _num(_int(r.get("partitions")), r.get("partitions")),
            _when(r.get("last_reported")), _when(r["last_produce"]), _when(r["last_fetch"]),
            _num("—" if r["idle_days"] is None else f"{r['idle_days']:g}", r["idle_days"]),
            "unused" if r["unused"] else "in use"])

    headers = ["topic", "partitions", "last reported", "last produce", "last fetch",
               "idle days", "status"]
    reported = 0 if partitions is None else topics.num_rows - partitions.null_count
    return page.section(
        "unused", "Topic inventory and unused topics",
        f'<p class="note">{reported:,} of {topics.num_rows:,} topics were reported by '
        "Metadata responses the sidecars saw (the audit's inventory); a topic with no "
        "Produce or Fetch in the window is unused.</p>",
        "<h3>Unused topics</h3>",
        page.table("unused", headers, [row(r) for r in unused.to_pylist()],
                   empty="Every topic in the inventory was used."),
        "<h3>Inventory</h3>",
        page.table("inventory", headers, [row(r) for r in topics.sort_by("topic").to_pylist()],
                   empty="No topic known: the audit read has no Metadata inventory and no traffic."),
    )


def _completeness(p: page.Page, data: Path) -> str:
    windows = _read(data, "completeness", "windows")
    if windows is None:
        p.summary.append(("windows differing from the mirror", "not compared"))
        return page.section("completeness", "Completeness",
                            '<p class="empty">Not run: no mirror audit given (<code>--mirror</code>).</p>')
    differ = windows.filter(pc.field("differs"))
    p.summary.append(("windows differing from the mirror",
                      f"{differ.num_rows:,} of {windows.num_rows:,}"))
    bars = [{"window": f"{r['topic']} {_time(r['window_start'])}", "topic": r["topic"],
             "difference": r["difference"]} for r in differ.slice(0, 4 * TOP).to_pylist()]
    rows = [
        page.Row(topic=r["topic"], cells=[
            _text(r["topic"]), _when(r["window_start"]), _when(r["window_end"]),
            _num(_int(r["source_records"]), r["source_records"]),
            _num(_int(r["mirror_records"]), r["mirror_records"]),
            _num(_int(r["difference"]), r["difference"])])
        for r in differ.to_pylist()
    ]
    return page.section(
        "completeness", "Completeness",
        page.chart(p, "completeness", charts.differences(bars) if bars else None,
                   "differing windows", empty="Every window matches: nothing to draw."),
        page.table("completeness", ["topic", "window start", "window end", "source records",
                                    "mirror records", "difference"], rows,
                   empty="Every window matches the mirror."),
    )


UNKNOWN_SOFTWARE = "unknown software"


def software_label(name: str | None, version: str | None) -> str:
    """A client's software as people read it; :data:`UNKNOWN_SOFTWARE` when its connection
    named none (ApiVersions before v3, or an audit file before schema version 3)."""
    if name is None:
        return UNKNOWN_SOFTWARE
    return name if version is None else f"{name} {version}"


def matrix_label(row: Mapping[str, Any]) -> str:
    """A row of the readiness matrix: its software, or for unknown software the client.id
    that keeps it apart (``unknown software (legacy-app)``)."""
    label = software_label(row["software_name"], row["software_version"])
    if row["software_name"] is None and row.get("client_id") is not None:
        return f"{label} ({row['client_id']})"
    return label


def versions_label(versions: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` → ``0–2, 5``."""
    spans: list[str] = []
    ordered = sorted(set(versions))
    start = previous = ordered[0] if ordered else 0
    for v in [*ordered[1:], None]:
        if v is not None and v == previous + 1:
            previous = v
            continue
        spans.append(str(start) if start == previous else f"{start}–{previous}")
        if v is not None:
            start = previous = v
    return ", ".join(spans) if ordered else ""


def served_label(low: Any, high: Any) -> str:
    """What the target serves of an API: ``3–12``, or ``not served``."""
    if low is None:
        return "not served"
    return str(low) if low == high else f"{low}–{high}"


#: Client software rows the readiness matrix draws (the most requests first).
MATRIX_SOFTWARE = 30


def _readiness(p: page.Page, data: Path, still: list[charts.Spec]) -> str:
    clients = _read(data, "upgrade_readiness", "clients")
    breaking = _read(data, "upgrade_readiness", "breaking")
    old = _read(data, "upgrade_readiness", "old_software")
    matrix = _read(data, "upgrade_readiness", "matrix")
    target_table = _read(data, "upgrade_readiness", "target")
    title = "Upgrade readiness and client software"
    if clients is None or breaking is None or old is None or matrix is None or target_table is None:
        return page.section("readiness", title, '<p class="empty">No output.</p>')
    target = (_col(target_table, "target") or ["the target"])[0]
    source = (_col(target_table, "source") or [""])[0]
    at_risk = clients.filter(pc.greater(clients.column("unsupported_requests"), 0))
    p.summary.append((f"clients that would break on {target}",
                      f"{at_risk.num_rows:,} of {clients.num_rows:,}"))
    p.principals.update(_col(clients, "principal"))

    def who(r: dict[str, Any]) -> list[page.Cell | str]:
        return [software_label(r["software_name"], r["software_version"]), _text(r["client_id"]),
                _text(r["principal"]), _text(r["client_host"])]

    breaking_rows = [
        page.Row(principal=r["principal"], cells=[
            *who(r), f"{r['api_name']} ({r['api_key']})", versions_label(r["versions"]),
            served_label(r["target_min"], r["target_max"]), _when(r["first_seen"]),
            _when(r["last_seen"]), _num(_int(r["requests"]), r["requests"])])
        for r in breaking.to_pylist()
    ]
    old_rows = [
        page.Row(principal=r["principal"], cells=[
            *who(r), _text(r["minimum"]), _when(r["first_seen"]), _when(r["last_seen"]),
            _num(_int(r["requests"]), r["requests"])])
        for r in old.to_pylist()
    ]
    client_rows = [
        page.Row(principal=r["principal"], cells=[
            *who(r), _when(r["first_seen"]), _when(r["last_seen"]),
            _num(_int(r["requests"]), r["requests"]),
            _num(_int(r["unsupported_requests"]), r["unsupported_requests"])])
        for r in clients.to_pylist()
    ]
    cells: dict[tuple[str, str, int], dict[str, Any]] = {}
    per_software: dict[str, int] = {}
    for r in matrix.to_pylist():
        software = matrix_label(r)
        api = f"{r['api_name']} ({r['api_key']})"
        cell = cells.setdefault((software, api, r["api_key"]),
                                {"versions": [], "refused": [], "requests": 0})
        cell["versions"].append(r["api_version"])
        cell["requests"] += r["requests"]
        if not r["supported"]:
            cell["refused"].append(r["api_version"])
        per_software[software] = per_software.get(software, 0) + r["requests"]
    shown = set(sorted(per_software, key=lambda s: -per_software[s])[:MATRIX_SOFTWARE])
    spec_rows = [
        {"software": software, "api": api, "api_key": key, "requests": c["requests"],
         "versions": versions_label(c["versions"]), "refused": versions_label(c["refused"]) or "none",
         "status": "breaks" if c["refused"] else "served"}
        for (software, api, key), c in cells.items() if software in shown
    ]
    matrix_spec = charts.readiness_matrix(spec_rows, target) if spec_rows else None
    if matrix_spec is not None:
        still.append(matrix_spec)
    unknown = sum(1 for r in clients.to_pylist() if r["software_name"] is None)
    more = (f" The matrix shows the {MATRIX_SOFTWARE} of its {len(per_software)} rows with the "
            "most requests (a row per client software; unknown software, one per client.id)."
            if len(per_software) > MATRIX_SOFTWARE else "")
    if clients.num_rows == 0:
        verdict = ("Not enough data: the audit read has no requests, so it cannot tell which "
                   "clients would break.")
    elif at_risk.num_rows == 0:
        verdict = (f"No client would break on {target}: every request in the audit read used "
                   "an API version it serves.")
    else:
        verdict = (f"{at_risk.num_rows:,} of {clients.num_rows:,} clients used API versions "
                   f"{target} does not serve (KIP-896 removed the oldest versions of many APIs "
                   "in Kafka 4.0); the broker would refuse those requests.")
    return page.section(
        "readiness", title,
        f'<p class="note">Target: {html.escape(target)} ({html.escape(source)}). A client is '
        "its software (from its ApiVersions v3+ request), client.id, principal and source IP; "
        f"{unknown:,} of {clients.num_rows:,} sent no software name (ApiVersions v0-v2, or "
        f"audit files before schema version 3) and show as {UNKNOWN_SOFTWARE}.{html.escape(more)}</p>",
        f'<p id="readiness-verdict">{html.escape(verdict)}</p>',
        "<h3>Clients that would break</h3>",
        page.table("readiness-breaking", ["software", "client.id", "principal", "source IP",
                                          "API", "versions used", "target serves",
                                          "first seen", "last seen", "requests"],
                   breaking_rows, empty=f"No client used a version {target} does not serve."),
        page.chart(p, "readiness_matrix", matrix_spec, "the API versions per client software"),
        "<h3>Client software older than the minimum</h3>",
        page.table("readiness-old", ["software", "client.id", "principal", "source IP",
                                     "minimum", "first seen", "last seen", "requests"],
                   old_rows, empty="No client software older than a minimum given "
                   "(--min-software NAME=VERSION; none given, or every client meets it)."),
        "<h3>Client software inventory</h3>",
        page.table("readiness-clients", ["software", "client.id", "principal", "source IP",
                                         "first seen", "last seen", "requests",
                                         "requests the target refuses"],
                   client_rows, empty="No clients in the audit read."),
    )


def _denied(p: page.Page, data: Path) -> str:
    """Denied requests (what the sidecar's ACLs refused, or would have in shadow mode) and
    the least-privilege ACLs proposed from the traffic seen (spark_jobs.least_privilege)."""
    denied = _read(data, "least_privilege", "denied")
    acls = _read(data, "least_privilege", "acls")
    title = "Denied requests and least-privilege ACLs"
    if denied is None or acls is None:
        return page.section("denied-requests", title, '<p class="empty">No output.</p>')
    modes = {"enforce": 0, "shadow": 0}
    for r in denied.to_pylist():
        modes[r["mode"]] = modes.get(r["mode"], 0) + r["requests"]
    p.summary.append(("denials (refused / shadow)", f"{modes['enforce']:,} / {modes['shadow']:,}"))
    p.principals.update(_col(denied, "principal"))
    p.principals.update(_col(acls, "principal"))

    def topic(rtype: str, name: str) -> str | None:
        return name if rtype == "Topic" else None

    denied_rows = [
        page.Row(principal=r["principal"], topic=topic(r["resource_type"], r["resource_name"]), cells=[
            _text(r["principal"]), f"{r['resource_type']} {r['resource_name']}", _text(r["operation"]),
            "refused" if r["mode"] == "enforce" else "shadow (served)", ", ".join(r["apis"] or []),
            _num(_int(r["requests"]), r["requests"]), _when(r["first_seen"]), _when(r["last_seen"])])
        for r in denied.to_pylist()
    ]
    acl_rows = [
        page.Row(principal=r["principal"], topic=topic(r["resource_type"], r["name"]), cells=[
            _text(r["principal"]), _text(r["resource_type"]), r["pattern_type"].lower(), _text(r["name"]),
            _text(r["operation"]), _num(_int(len(r["names"] or [])), len(r["names"] or [])),
            _num(_int(r["requests"]), r["requests"]), _text(r["ksidecar_command"])])
        for r in acls.to_pylist()
    ]
    if denied.num_rows == 0:
        verdict = ("Nothing was denied: no request in the audit read was refused by the sidecar's "
                   "ACLs, or would have been in shadow mode (or the audit has no denials: "
                   "sidecar.authorizer=acls and audit schema version 3 record them).")
    else:
        verdict = (f"{modes['enforce']:,} denial(s) refused and {modes['shadow']:,} that shadow "
                   "mode would have refused, over "
                   f"{len(set(_col(denied, 'principal'))):,} principal(s).")
    return page.section(
        "denied-requests", title,
        '<p class="note">Each row is a principal, a resource and an operation the ACLs refused '
        "(enforce mode) or would have refused (shadow mode: the request was served). Requests "
        "count the requests that needed it; a request refused on several resources counts on "
        "each.</p>",
        f'<p id="denied-verdict">{html.escape(verdict)}</p>',
        page.table("denied", ["principal", "resource", "operation", "mode", "APIs", "requests",
                              "first seen", "last seen"], denied_rows,
                   empty="No request was denied, in enforce or shadow mode."),
        "<h3>Proposed least-privilege ACLs</h3>",
        '<p class="note">The smallest ALLOW set per principal for the traffic seen: shadow-mode '
        "denials and served Produce and Fetch (docs/spark_jobs.md, least_privilege); "
        "<code>data/least_privilege/acls.sh</code> and <code>kafka-acls.sh</code> add them.</p>",
        page.table("proposed-acls", ["principal", "resource type", "pattern", "name", "operation",
                                     "names seen", "requests", "command"], acl_rows,
                   empty="No ACL to propose: the audit read has no principal traffic or shadow-mode denials."),
    )


#: Principals the throttling chart draws apart (the rest are summed as ``others``).
CHART_PRINCIPALS = 15


def _throttling(p: page.Page, data: Path) -> str:
    """Client throttling (spark_jobs.client_throttling): per principal, client id and API,
    the responses a client quota throttled and for how long."""
    throttled = _read(data, "client_throttling", "throttled")
    totals = _read(data, "client_throttling", "totals")
    title = "Client throttling"
    if throttled is None or totals is None:
        return page.section("throttling", title, '<p class="empty">No output.</p>')
    total = (totals.to_pylist() or [{"requests": 0, "recorded": 0, "throttled": 0,
                                     "throttle_ms_total": 0}])[0]
    p.summary.append(("throttled responses", f"{total['throttled']:,} of {total['recorded']:,}"))
    p.principals.update(_col(throttled, "principal"))
    per_principal = _sum(throttled, ["principal"], ["throttle_ms_total"])
    kept = set(_largest(per_principal, "principal", "throttle_ms_total", CHART_PRINCIPALS))
    seconds: dict[str, float] = {}
    for r in per_principal.to_pylist():
        who = r["principal"] if r["principal"] in kept else "others"
        seconds[who] = seconds.get(who, 0.0) + r["throttle_ms_total"] / 1000
    spec = charts.bars([{"principal": who, "seconds": s} for who, s in seconds.items()],
                       label="principal", value="seconds", title="Throttle time per principal",
                       unit="seconds throttled") if seconds else None
    rows = [
        page.Row(principal=r["principal"], cells=[
            _text(r["principal"]), _text(r["client_id"]), f"{r['api_name']} ({r['api_key']})",
            _num(_int(r["throttled"]), r["throttled"]), _num(_int(r["responses"]), r["responses"]),
            _num(_share(r["share_throttled"]), r["share_throttled"]),
            _num(_ms(r["throttle_ms_total"] * 1000), r["throttle_ms_total"]),
            _num(_ms(r["throttle_ms_max"] * 1000), r["throttle_ms_max"]),
            _when(r["first_throttled"]), _when(r["last_throttled"])])
        for r in throttled.to_pylist()
    ]
    if total["recorded"] == 0:
        verdict = ("No throttled request, and no throttle time recorded: the audit read has no "
                   "response that carried one (throttle times are in audit schema version 3, "
                   "written once ksidecar.audit.format is finalized at 1).")
    elif total["throttled"] == 0:
        verdict = (f"No throttled request: none of the {total['recorded']:,} responses that "
                   "carried a throttle time was throttled.")
    else:
        who = len(set(zip(_col(throttled, "principal"), _col(throttled, "client_id"), strict=True)))
        verdict = (f"{total['throttled']:,} of {total['recorded']:,} responses were throttled, "
                   f"{_ms(total['throttle_ms_total'] * 1000)} in all, over {who:,} client(s) "
                   "(principal and client.id).")
    return page.section(
        "throttling", title,
        '<p class="note">A response over a client quota (producer_byte_rate, consumer_byte_rate) '
        "carries its throttle time, the larger of the broker's and the sidecar's, and the "
        "client's connection is then muted for that long. Per principal, client.id and API: "
        "the throttled responses, of those that carried a throttle time, and their total and "
        "longest throttle.</p>",
        f'<p id="throttling-verdict">{html.escape(verdict)}</p>',
        page.chart(p, "throttling", spec, "throttle time per principal",
                   empty="No throttled request: nothing to draw."),
        page.table("throttled", ["principal", "client.id", "API", "throttled", "responses",
                                 "share throttled", "throttle time", "longest", "first throttled",
                                 "last throttled"], rows, empty="No throttled request."),
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
