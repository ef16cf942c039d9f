"""deploy/grafana/ksidecar.json: a well-formed dashboard whose every metric exists.

The names are taken from every PromQL text in the dashboard (panel targets and the
templating query) and in the alert rules, and compared with the /metrics output of the
live sidecar run from the Kubernetes ConfigMap, with the audit observer and the embedded
group coordinator configured, after real client traffic: a produce through the sidecar, a
consumer group that joins, commits and leaves, an ApiVersions answered locally and a request
with an API key nobody supports.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from proxy.tools.rig.sidecar import SidecarServer
from tests.deploy.support import (
    DASHBOARD,
    consume_and_commit,
    dashboard_exprs,
    exposed_names,
    metric_names,
    produce,
    rule_exprs,
    send_unsupported,
)


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def test_dashboard_is_well_formed() -> None:
    board = dashboard()
    assert board["uid"] == "ksidecar" and board["title"]
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    graphs = [p for p in panels(board) if p["type"] != "row"]
    assert graphs
    for panel in graphs:
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for target in panel["targets"]:
            assert metric_names(target["expr"]) or "up{" in target["expr"], target
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"


def test_dashboard_covers_what_the_issue_asks() -> None:
    """Request rate and latency per API (upstream and sidecar), bytes, connections, KIP-612
    accept rate and throttle time, unknown and local requests, observer drops, audit rows."""
    used = set().union(*(metric_names(e) for e in dashboard_exprs(dashboard())))
    assert used >= {
        "ksidecar_requests_total",
        "ksidecar_upstream_latency_seconds_bucket", "ksidecar_sidecar_latency_seconds_bucket",
        "ksidecar_request_bytes_total", "ksidecar_response_bytes_total",
        "ksidecar_connections_active", "ksidecar_connection_accept_rate",
        "ksidecar_connection_accept_throttle_time_ms", "ksidecar_unsupported_requests_total",
        "ksidecar_local_responses_total", "ksidecar_observer_dropped_total",
        "ksidecar_audit_rows_written_total",
    }


def test_metric_name_extraction() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, api) (rate(ksidecar_upstream_latency_seconds_bucket'
            '{job="ksidecar", note="ksidecar_in_a_string"}[5m]))) / on() ksidecar_up')
    assert metric_names(expr) == {"ksidecar_upstream_latency_seconds_bucket", "ksidecar_up"}
    exposition = (
        "# HELP ksidecar_requests_total x\n# TYPE ksidecar_requests_total counter\n"
        'ksidecar_requests_total{api="Produce"} 1.0\n'
        "# HELP ksidecar_lat_seconds x\n# TYPE ksidecar_lat_seconds histogram\n"
        "# HELP ksidecar_depth x\n# TYPE ksidecar_depth gauge\nksidecar_depth 0.0\n"
    )
    assert exposed_names(exposition) == {
        "ksidecar_requests_total", "ksidecar_lat_seconds_bucket", "ksidecar_lat_seconds_sum",
        "ksidecar_lat_seconds_count", "ksidecar_depth",
    }


def test_dashboard_and_alerts_cover_the_group_coordinator() -> None:
    """Issue 15: groups by state and protocol, members, rebalance rate and duration,
    offset-commit write rate and latency; alerts for a rebalance storm and slow commits."""
    used = set().union(*(metric_names(e) for e in dashboard_exprs(dashboard())))
    assert used >= {
        "ksidecar_groups", "ksidecar_group_members", "ksidecar_group_rebalances_total",
        "ksidecar_group_rebalance_duration_seconds_bucket", "ksidecar_offset_commit_writes_total",
        "ksidecar_offset_commit_write_seconds_bucket",
    }
    alerted = set().union(*(metric_names(e) for e in rule_exprs()))
    assert alerted >= {"ksidecar_group_rebalances_total", "ksidecar_offset_commit_write_seconds_bucket"}


def test_dashboard_and_alerts_cover_configuration_reloads() -> None:
    """Issue 45: reloads by result and the keys that wait for a restart on the dashboard;
    alerts for a reload that failed (the files are not what serves) and a restart pending."""
    used = set().union(*(metric_names(e) for e in dashboard_exprs(dashboard())))
    assert used >= {
        "ksidecar_config_reloads_total", "ksidecar_config_last_reload_successful",
        "ksidecar_config_restart_pending_keys",
    }
    alerted = set().union(*(metric_names(e) for e in rule_exprs()))
    assert alerted >= {"ksidecar_config_last_reload_successful", "ksidecar_config_restart_pending_keys"}


@pytest.mark.integration
def test_every_queried_metric_exists_in_a_live_sidecar(deployed_sidecar: SidecarServer) -> None:
    topic = f"deploy-grafana-{uuid.uuid4().hex[:8]}"
    produce(deployed_sidecar.bootstrap, topic)
    consume_and_commit(deployed_sidecar.bootstrap, topic, f"deploy-group-{uuid.uuid4().hex[:8]}")
    send_unsupported(deployed_sidecar.host, deployed_sidecar.port)
    scraped = deployed_sidecar.scrape()
    # The commit went through the embedded coordinator: ZooKeeper has it, and it was counted.
    assert 'ksidecar_offset_commit_writes_total{result="ok"}' in scraped
    exposed = exposed_names(scraped)
    queried: dict[str, set[str]] = {}
    for source, exprs in (("dashboard", dashboard_exprs(dashboard())), ("alerts", rule_exprs())):
        for expr in exprs:
            for name in metric_names(expr):
                queried.setdefault(name, set()).add(source)
    missing = {name: sorted(where) for name, where in queried.items() if name not in exposed}
    assert not missing, f"queried but not in the live sidecar's /metrics: {missing}"
