"""The report's charts: Vega-Lite specs built with Altair, rendered in the page by the Vega
runtime bundled into it, and to one PNG by vl-convert for e-mail.

Why Altair and Vega-Lite (not Plotly): a chart is a declarative spec (data plus encoding)
that Altair validates against the Vega-Lite schema when it is built, so a broken chart
fails the report, not the reader's browser; ``vl-convert`` (a wheel from PyPI, no
browser, no network) bundles the matching Vega, Vega-Lite and vega-embed JavaScript into
the page — about 1 MB once per page, where Plotly's script is 4.5 MB — and renders the
same specs to PNG and PDF for the static export.

What every chart does:

* time runs on a UTC axis as wide as the data: an hour of audit is one hour wide, each
  hour one bar spanning it (``hour`` to ``hour_end``), and dragging or scrolling zooms
  (an interval bound to the x scale; double-click resets);
* legends sit below the plot in columns, never over it, and clicking a legend entry
  highlights its series;
* charts whose rows carry a ``topic`` or a ``principal`` react to the page's drill-down
  selects: two Vega signals, :data:`TOPIC` and :data:`PRINCIPAL` (null: everything),
  that the page sets in every view;
* a chart with no data is not drawn: the page shows :func:`empty_text` instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt

#: The drill-down signals the page sets in every view (null: no filter).
TOPIC = "topic_filter"
PRINCIPAL = "principal_filter"

WIDTH = 760
HEIGHT = 220
Spec = dict[str, Any]
Rows = Sequence[Mapping[str, Any]]

_UTC = alt.Scale(type="utc")
_HOUR_AXIS = alt.Axis(format="%b %d %H:%M", labelAngle=-30, title=None)  # the utc scale formats in UTC
_HOUR_TIP = alt.Tooltip("hour:T", timeUnit="utcyearmonthdatehoursminutes", title="hour (UTC)")
_LEGEND = alt.Legend(orient="bottom", columns=4, symbolLimit=0, labelLimit=220, title=None)


def empty_text(what: str) -> str:
    """The "not enough data" message shown instead of a chart."""
    return f"Not enough data to draw {what}: the audit read has none."


def _data(rows: Rows) -> Any:
    """Rows inlined into the spec (the page needs no file beside it)."""
    return alt.Data(values=[dict(r) for r in rows])  # type: ignore[no-untyped-call]


def _drill(chart: alt.Chart, *, topic: bool, principal: bool) -> alt.Chart:
    """Filter ``chart``'s rows by the drill-down signals (declared by :func:`_spec`)."""
    clauses = []
    if topic:
        clauses.append(f"({TOPIC} == null || datum.topic == {TOPIC})")
    if principal:
        clauses.append(f"({PRINCIPAL} == null || datum.principal == {PRINCIPAL})")
    return chart.transform_filter(" && ".join(clauses)) if clauses else chart


def _zoomable(chart: alt.Chart, interactive: bool) -> alt.Chart:
    """``chart`` zoomable along x (drag, wheel; double-click resets) when ``interactive``."""
    if not interactive:
        return chart
    return chart.add_params(alt.selection_interval(bind="scales", encodings=["x"]))


def _spec(chart: alt.TopLevelMixin) -> Spec:
    """The Vega-Lite spec of ``chart`` (validated by Altair), with the drill-down signals
    declared at its top level (every view has them, so the page may set them anywhere)."""
    spec: Spec = chart.to_dict()
    spec["params"] = [{"name": TOPIC, "value": None}, {"name": PRINCIPAL, "value": None},
                      *spec.get("params", [])]
    return spec


def hourly_flow(rows: Rows, *, interactive: bool = True) -> Spec:
    """Bytes produced and fetched per hour, one panel each (so neither hides the other);
    rows: ``hour``, ``hour_end`` (ISO, UTC), ``topic``, ``principal``, ``direction``
    (``produced`` / ``fetched``), ``mib``."""
    base = _drill(alt.Chart(_data(rows)), topic=True, principal=True)
    bars = (
        base.mark_bar(opacity=0.85)
        .encode(
            x=alt.X("hour:T", scale=_UTC, axis=_HOUR_AXIS),
            x2="hour_end:T",
            y=alt.Y("sum(mib):Q", title="MiB"),
            color=alt.Color("direction:N", legend=_LEGEND,
                            scale=alt.Scale(domain=["produced", "fetched"],
                                            range=["#4c78a8", "#f58518"])),
            tooltip=[_HOUR_TIP,
                     "direction:N", alt.Tooltip("sum(mib):Q", format=",.2f", title="MiB")],
        )
        .properties(width=WIDTH, height=HEIGHT // 2)
    )
    # One zoom for both panels: the x scale is shared, so zooming either zooms the two.
    chart = alt.vconcat(
        _zoomable(bars.transform_filter("datum.direction == 'produced'"), interactive)
        .properties(title="Bytes produced per hour"),
        bars.transform_filter("datum.direction == 'fetched'")
        .properties(title="Bytes fetched per hour"),
    ).resolve_scale(x="shared")
    return _spec(chart)


def top_topics(rows: Rows, n: int) -> Spec:
    """The ``n`` topics with the most bytes (after the principal drill-down), produced and
    fetched side by side; rows: ``topic``, ``principal``, ``direction``, ``mib``."""
    chart = (
        _drill(alt.Chart(_data(rows)), topic=False, principal=True)
        .transform_aggregate(mib="sum(mib)", groupby=["topic", "direction"])
        .transform_joinaggregate(total="sum(mib)", groupby=["topic"])
        .transform_window(rank="dense_rank()", sort=[alt.SortField("total", order="descending")])
        .transform_filter(f"datum.rank <= {n}")
        .mark_bar()
        .encode(
            y=alt.Y("topic:N", sort=alt.EncodingSortField("total", order="descending"), title=None),
            yOffset="direction:N",
            x=alt.X("mib:Q", title="MiB"),
            color=alt.Color("direction:N", legend=_LEGEND,
                            scale=alt.Scale(domain=["produced", "fetched"],
                                            range=["#4c78a8", "#f58518"])),
            tooltip=["topic:N", "direction:N", alt.Tooltip("mib:Q", format=",.2f")],
        )
        .properties(width=WIDTH, title=f"Top {n} topics by bytes")
    )
    return _spec(chart)


def bars(rows: Rows, *, label: str, value: str, title: str, unit: str) -> Spec:
    """Horizontal bars, largest first: ``label`` against ``value`` (no drill-down)."""
    chart = (
        alt.Chart(_data(rows))
        .mark_bar()
        .encode(
            y=alt.Y(f"{label}:N", sort="-x", title=None),
            x=alt.X(f"{value}:Q", title=unit),
            tooltip=[f"{label}:N", alt.Tooltip(f"{value}:Q", format=",")],
        )
        .properties(width=WIDTH, title=title)
    )
    return _spec(chart)


def cost_by_principal(rows: Rows) -> Spec:
    """Bytes in + out per topic, stacked by principal; rows: ``topic``, ``principal``, ``mib``
    (the largest topics and principals, the rest as ``others``)."""
    chart = (
        _drill(alt.Chart(_data(rows)), topic=True, principal=True)
        .mark_bar()
        .encode(
            y=alt.Y("topic:N", sort="-x", title=None),
            x=alt.X("sum(mib):Q", title="MiB in + out"),
            color=alt.Color("principal:N", legend=_LEGEND),
            tooltip=["topic:N", "principal:N", alt.Tooltip("sum(mib):Q", format=",.2f", title="MiB")],
        )
        .properties(width=WIDTH, title="Bytes per topic, by principal")
    )
    return _spec(chart)


def latency_p99(rows: Rows, slo_ms: float | None, *, interactive: bool = True) -> Spec:
    """Worst p99 per API per hour (ms, log scale), one line per API with the SLO drawn;
    rows: ``hour``, ``api``, ``p99_ms``. Click a legend entry to pick out its API."""
    pick = alt.selection_point(fields=["api"], bind="legend")
    highlight = alt.condition(pick, alt.value(1.0), alt.value(0.15)) if interactive else alt.value(1.0)
    lines = (
        alt.Chart(_data(rows))
        .mark_line(point=True)
        .encode(
            x=alt.X("hour:T", scale=_UTC, axis=_HOUR_AXIS),
            y=alt.Y("p99_ms:Q", scale=alt.Scale(type="log"), title="p99, ms (log scale)"),
            color=alt.Color("api:N", legend=_LEGEND),
            opacity=highlight,
            tooltip=[_HOUR_TIP,
                     "api:N", alt.Tooltip("p99_ms:Q", format=",.1f")],
        )
    )
    if interactive:
        lines = _zoomable(lines.add_params(pick), interactive)
    layers: list[Any] = [lines]
    if slo_ms:
        layers.append(alt.Chart(_data([{"slo": slo_ms}])).mark_rule(
            color="#d62728", strokeDash=[6, 4]).encode(y="slo:Q"))
    chart = alt.layer(*layers).properties(
        width=WIDTH, height=HEIGHT,
        title="Worst p99 latency per API (JoinGroup/SyncGroup held by design are left out; "
              "Fetch judged beyond its max wait)",
    )
    return _spec(chart)


def hourly_share(rows: Rows, *, title: str, interactive: bool = True) -> Spec:
    """A share (0–1) per hour as bars spanning their hour; rows: ``hour``, ``hour_end``,
    ``share``."""
    chart = _zoomable(
        alt.Chart(_data(rows))
        .mark_bar(color="#d62728")
        .encode(
            x=alt.X("hour:T", scale=_UTC, axis=_HOUR_AXIS),
            x2="hour_end:T",
            y=alt.Y("share:Q", axis=alt.Axis(format="%"), title=None,
                    scale=alt.Scale(domain=[0, max(0.01, *(float(r["share"]) for r in rows))])),
            tooltip=[_HOUR_TIP,
                     alt.Tooltip("share:Q", format=".2%")],
        ), interactive,
    ).properties(width=WIDTH, height=HEIGHT // 2, title=title)
    return _spec(chart)


def long_polls(rows: Rows, *, interactive: bool = True) -> Spec:
    """Time held by design per long-poll API per hour (p99, ms); rows: ``hour``,
    ``hour_end``, ``api``, ``principal``, ``held_p99_ms``."""
    chart = _zoomable(
        _drill(alt.Chart(_data(rows)), topic=False, principal=True)
        .mark_line(point=True)
        .encode(
            x=alt.X("hour:T", scale=_UTC, axis=_HOUR_AXIS),
            y=alt.Y("max(held_p99_ms):Q", title="held p99, ms"),
            color=alt.Color("api:N", legend=_LEGEND),
            tooltip=[_HOUR_TIP,
                     "api:N", alt.Tooltip("max(held_p99_ms):Q", format=",.1f")],
        ), interactive,
    ).properties(width=WIDTH, height=HEIGHT // 2,
                 title="Long polls: time held by design (p99 per hour; not judged by the SLO)")
    return _spec(chart)


def differences(rows: Rows) -> Spec:
    """Records produced, source minus mirror, per differing window; rows: ``window``,
    ``topic``, ``difference``."""
    chart = (
        _drill(alt.Chart(_data(rows)), topic=True, principal=False)
        .mark_bar()
        .encode(
            y=alt.Y("window:N", sort=None, title=None),
            x=alt.X("difference:Q", title="records, source − mirror"),
            color=alt.condition("datum.difference > 0", alt.value("#d62728"), alt.value("#4c78a8")),
            tooltip=["topic:N", "window:N", alt.Tooltip("difference:Q", format=",")],
        )
        .properties(width=WIDTH, title="Records produced: source − mirror, differing windows")
    )
    return _spec(chart)


def overview(specs: Sequence[Spec], title: str) -> Spec:
    """One spec stacking ``specs`` (built with ``interactive=False``: a picture has no
    selections) under ``title``: the static export's page."""
    parts = [{k: v for k, v in spec.items() if k not in ("$schema", "config", "params")}
             for spec in specs]
    return {
        "$schema": specs[0]["$schema"] if specs else alt.SCHEMA_URL,
        "title": {"text": title, "anchor": "start", "fontSize": 16},
        "params": [{"name": TOPIC, "value": None}, {"name": PRINCIPAL, "value": None}],
        "vconcat": parts,
        "spacing": 30,
        # Each part keeps its own colours and legend (shared, their domains would merge).
        "resolve": {"scale": {"color": "independent"}, "legend": {"color": "independent"}},
    }


def readiness_matrix(rows: Rows, target: str) -> Spec:
    """API keys (columns) and the versions seen (cell text) per client software (rows), red
    where a version seen is one ``target`` does not serve; rows: ``software``, ``api``,
    ``api_key``, ``versions`` (text), ``refused`` (the versions among them ``target`` does not
    serve, text), ``status`` (``breaks`` / ``served``), ``requests``.
    No drill-down: a cell sums every principal's requests."""
    base = alt.Chart(_data(rows)).encode(
        x=alt.X("api:N", title=None, sort=alt.EncodingSortField("api_key", order="ascending"),
                axis=alt.Axis(orient="top", labelAngle=-40, labelLimit=160)),
        y=alt.Y("software:N", title=None, axis=alt.Axis(labelLimit=260)),
    )
    cells = base.mark_rect(stroke="#fff").encode(
        color=alt.Color("status:N", title=None, legend=_LEGEND,
                        scale=alt.Scale(domain=["breaks", "served"], range=["#d62728", "#9ecae1"])),
        tooltip=["software:N", "api:N", alt.Tooltip("versions:N", title="versions seen"),
                 alt.Tooltip("refused:N", title=f"not served by {target}"),
                 alt.Tooltip("requests:Q", format=",")],
    )
    text = base.mark_text(fontSize=10).encode(text="versions:N")
    chart = alt.layer(cells, text).properties(
        width=alt.Step(44), height=alt.Step(22),
        title=f"API versions seen per client software (red: not served by {target})",
    )
    return _spec(chart)
