"""deploy/prometheus: promtool accepts the configs and rules, the alert unit tests pass,
and a real Prometheus scrapes a live sidecar with the local configuration.

The live test copies ``prometheus.local.yml`` and ``alerts.yml`` into a temporary
directory, changing nothing but the static target's port, and starts Debian's
``prometheus`` on loopback with a temporary TSDB. Its HTTP API must then show the target
up, the rules loaded and healthy, and ``ksidecar_requests_total`` rising after a real
client produced through the sidecar.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from proxy.tools.rig.ports import LOOPBACK
from proxy.tools.rig.process import ManagedProcess, start_on_port
from proxy.tools.rig.sidecar import SidecarServer
from tests.deploy.support import PROMETHEUS, http_json, produce, prometheus_query, rule_exprs, tool

LOCAL_TARGET = '"127.0.0.1:9404"'
"""The static target in prometheus.local.yml: a sidecar with the default metrics listener."""

DEADLINE = 60.0

T = TypeVar("T")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run promtool in deploy/prometheus (rule files are relative to the config)."""
    return subprocess.run(
        [tool("promtool"), *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("config", ["prometheus.yml", "prometheus.local.yml"])
def test_promtool_checks_config(config: str) -> None:
    result = promtool("check", "config", config)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rule_exprs())} rules found" in result.stdout  # the rule file was followed


def test_promtool_checks_rules() -> None:
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_unit_tests_pass() -> None:
    """alerts.test.yml: each alert fires on the series it is for, and not on others."""
    result = promtool("test", "rules", "alerts.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_where_it_fires() -> None:
    """alerts.test.yml has a case in which each alert of alerts.yml fires, and every alert
    says how urgent it is."""
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    alerts = {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"]}
    cases = yaml.safe_load((PROMETHEUS / "alerts.test.yml").read_text())["tests"]
    fired = {check["alertname"] for case in cases for check in case["alert_rule_test"] if check["exp_alerts"]}
    assert set(alerts) <= fired, f"no firing case in alerts.test.yml: {sorted(set(alerts) - fired)}"
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert "{{ $labels.instance }}" in rule["annotations"]["summary"] or "absent(" in rule["expr"], name


def wait_for(what: str, check: Callable[[], T | None], deadline: float = DEADLINE) -> T:
    """Poll ``check`` until it returns something other than None (errors mean "not yet")."""
    end = time.monotonic() + deadline
    last: object = None
    while True:
        try:
            found = check()
            if found is not None:
                return found
        except OSError as exc:
            last = exc
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {deadline:.0f}s (last error: {last})")
        time.sleep(0.2)


def _ready(base: str) -> bool:
    try:
        http_json(f"{base}/api/v1/status/buildinfo", timeout=1)
    except (OSError, ValueError):
        return False
    return True


@pytest.fixture
def prometheus(tmp_path: Path, deployed_sidecar: SidecarServer) -> Iterator[str]:
    """Prometheus on loopback scraping the live sidecar; yields its base URL."""
    text = (PROMETHEUS / "prometheus.local.yml").read_text()
    assert text.count(LOCAL_TARGET) == 1
    config = tmp_path / "prometheus.yml"
    config.write_text(text.replace(LOCAL_TARGET, f'"{LOOPBACK}:{deployed_sidecar.metrics_port}"'))
    (tmp_path / "alerts.yml").write_text((PROMETHEUS / "alerts.yml").read_text())
    binary = tool("prometheus")

    def build(port: int) -> ManagedProcess:
        return ManagedProcess(
            "prometheus",
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address={LOOPBACK}:{port}"],
            log_path=tmp_path / "prometheus.log",
            probe=lambda: _ready(f"http://{LOOPBACK}:{port}"),
        )

    port, process = start_on_port(build, None)
    try:
        yield f"http://{LOOPBACK}:{port}"
    finally:
        process.stop()


def requests_total(base: str) -> float | None:
    """``sum(ksidecar_requests_total)`` now; None while Prometheus has no sample."""
    result = prometheus_query(base, 'sum(ksidecar_requests_total{job="ksidecar"})')
    return float(result[0]["value"][1]) if result else None


@pytest.mark.integration
def test_prometheus_scrapes_a_live_sidecar(prometheus: str, deployed_sidecar: SidecarServer) -> None:
    def target_up() -> dict[str, Any] | None:
        targets = http_json(f"{prometheus}/api/v1/targets")["data"]["activeTargets"]
        return next((t for t in targets if t["health"] == "up"), None)

    target = wait_for("scrape target up", target_up)
    assert target["labels"]["job"] == "ksidecar"
    assert target["scrapeUrl"] == f"http://{LOOPBACK}:{deployed_sidecar.metrics_port}/metrics"
    # The targets page says "up" as the scrape ends; the series can be queried a moment later.
    up = wait_for("up{job=ksidecar} queryable", lambda: prometheus_query(prometheus, 'up{job="ksidecar"}') or None)
    assert [sample["value"][1] for sample in up] == ["1"]

    def rules_evaluated() -> list[dict[str, Any]] | None:
        groups = http_json(f"{prometheus}/api/v1/rules")["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        # Not yet evaluated: Go's zero time, 0001-01-01T00:00:00Z.
        return rules if rules and not any(r["lastEvaluation"].startswith("0001-") for r in rules) else None

    rules = wait_for("alert rules evaluated", rules_evaluated)
    assert len(rules) == len(rule_exprs())
    assert all(rule["health"] == "ok" for rule in rules), rules

    # The counter before the traffic: Prometheus has scraped, but the sidecar may not
    # have served a request yet (no series), or may have (another test sent some).
    before = requests_total(prometheus) or 0.0
    produce(deployed_sidecar.bootstrap, f"deploy-prometheus-{uuid.uuid4().hex[:8]}")
    after = wait_for(
        "ksidecar_requests_total rising",
        lambda: (value if (value := requests_total(prometheus)) and value > before else None),
    )
    assert after > before
    # Per-API series carry the labels the dashboard groups by.
    produced = prometheus_query(
        prometheus, 'sum by (api) (ksidecar_requests_total{job="ksidecar", api="Produce"})')
    assert produced and float(produced[0]["value"][1]) >= 1
