"""The demo runs end to end against its own real broker and ZooKeeper."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.control.cpus import worker_count
from proxy.tools.demo import run, summary
from proxy.tools.rig.ports import can_connect

pytestmark = pytest.mark.integration


def test_demo_moves_every_record_and_stops_its_components(tmp_path: Path) -> None:
    result = run(tmp_path, records=200, partitions=2)

    assert result.ok
    assert (result.produced, result.consumed, result.committed, result.missing) == (
        200,
        200,
        200,
        0,
    )
    # The group was coordinated by the sidecar: its offsets are in ZooKeeper, one per
    # partition, adding up to every record.
    assert set(result.zookeeper_offsets) == {0, 1}
    assert sum(result.zookeeper_offsets.values()) == 200
    assert "coordinated by the sidecar (sidecar.coordinator=embedded)" in summary(result)
    # sidecar.workers=0: as many workers as the CPUs the sidecar is given (test_worker_count.py),
    # all ready; with no CPU limit or cpuset, one process (no worker series).
    assert result.workers == {-1: (worker_count(0), worker_count(0))}
    # Traffic went through a real `ksidecar run` in front of the broker.
    assert result.bootstrap != result.broker
    assert "ksidecar run in front of the broker" in result.via
    assert result.quota.startswith("127.0.0.99 limited to 10 connections/s via AlterClientQuotas")
    assert '"connection_creation_rate": "10"' in result.quota
    # Tansu serves no client quotas: the sidecar holds and enforces the user's byte rate.
    assert result.client_quota == (
        "user demo-reader held to producer_byte_rate 1048576 B/s via AlterClientQuotas, enforced by the "
        "sidecar (sidecar.client.quotas=auto); ZooKeeper /config/users/demo-reader holds "
        "producer_byte_rate=1048576")
    assert result.policy.startswith("CreateTopics scratch-") and "refused: POLICY_VIOLATION" in result.policy
    assert "does not match policy.create.topics.name.pattern 'demo-.*'" in result.policy
    # The same topic, created once the sidecar reloaded a wider pattern from its file.
    scratch = result.policy.split()[1]
    assert result.reload == ("ksidecar reload: reloaded (ksidecar reload): policy.create.topics.name.pattern; "
                             f"then CreateTopics {scratch} was not refused")
    assert "ksidecar" in (tmp_path / "ksidecar.log").read_text()
    assert result.zookeeper.endswith("/ksidecar")
    # ksidecar.audit.format was finalized at 1 over the wire before any traffic: the
    # demo's rows are schema version 3 and name confluent-kafka's client software; at most
    # the UpdateFeatures request itself was recorded before the switch (version 2).
    assert result.audit_format == "ksidecar.audit.format was upgraded to 1.; share.version was upgraded to 1."
    # Two ShareConsumers read the topic as a queue: every record once between them.
    assert "2 ShareConsumers read 200 of 200 records as a queue" in result.queue
    assert result.queue.endswith(", 0 twice, 0 missing")
    assert set(result.audit_versions) <= {"2", "3"} and result.audit_versions.get("2", 0) <= 1
    assert result.audit_versions["3"] + result.audit_versions.get("2", 0) == result.audit_rows
    assert "confluent-kafka-python" in result.client_software
    assert "ksidecar.audit.format and share.version finalized at 1" in summary(result)
    assert "result     OK" in summary(result)
    # The audit report accounts for every record, by principal: the anonymous producer, the
    # SCRAM consumer (at least once: a consumer may fetch a record again) and the anonymous
    # share group's members (ShareFetch rows: each record once, nothing was redelivered).
    assert result.audited_in == {"User:ANONYMOUS": 200}
    assert result.audited_out.get("User:demo-reader", 0) >= 200
    assert result.audited_out.get("User:ANONYMOUS") == 200
    assert set(result.audited_out) == {"User:demo-reader", "User:ANONYMOUS"}
    page = Path(result.report)
    assert page.name == "index.html" and page.is_relative_to(tmp_path)
    assert 'id="chart-' in page.read_text()
    # The audit's own inventory, no list supplied: both topics, the idle one unused.
    assert result.inventory[result.topic] == 2 and result.inventory[result.idle_topic] == 1
    assert result.idle_topic in result.unused and result.topic not in result.unused
    # The group's JoinGroup and SyncGroup are long polls, not SLO breaches.
    assert "JoinGroup" in result.long_polls and "Fetch" in result.long_polls and "ShareFetch" in result.long_polls
    assert not {"JoinGroup", "SyncGroup", "ShareFetch"} & set(result.slo_breaches)
    # The page opens in a real browser, offline, without an error (screenshots beside it).
    from tests.spark_jobs.browser import chromium, launch, load

    binary = chromium()
    if binary is not None:
        with launch(binary) as browser:
            visit = load(browser, page, shots={"demo": None})
        assert visit.errors == [] and visit.requests == []
        assert (page.parent / "screenshot-demo.png").is_file()
    assert (tmp_path / "tansu-broker.log").read_text().count("tansu broker 0.6.0") == 1
    assert "binding to port /127.0.0.1:" in (tmp_path / "zookeeper.log").read_text()
    for address in (result.broker, result.bootstrap, result.sasl_bootstrap, result.zookeeper.removesuffix("/ksidecar")):
        host, port = address.rsplit(":", 1)
        assert not can_connect(host, int(port)), f"{address} still accepts connections"


def test_demo_in_the_deployed_shape_a_sidecar_per_broker(tmp_path: Path) -> None:
    """``ksidecar demo --brokers 3``: the same story over librdkafka's mock cluster, a
    sidecar in front of each broker; the summary says, per sidecar, what it forwarded and
    which groups it owns."""
    result = run(tmp_path, records=150, partitions=3, brokers=3)

    assert result.ok, summary(result)
    assert (result.produced, result.consumed, result.committed, result.missing) == (150, 150, 150, 0)
    assert result.broker_kind == "librdkafka's mock cluster, 3 brokers"
    # Leaders spread by the mock's control API: partition p on broker p % 3 + 1, and each
    # broker's Produce went through its own sidecar.
    assert result.led == {1: (0,), 2: (1,), 3: (2,)}
    assert all(result.forwarded[n].get("Produce", 0) >= 1 for n in (1, 2, 3)), result.forwarded
    # The group lives with exactly one sidecar, the one placement picks among 1, 2, 3.
    from coordinator.placement import owner

    assert [n for n, groups in result.owned_groups.items() if result.group in groups] == [
        owner(result.group, [1, 2, 3])]
    text = summary(result)
    for node in (1, 2, 3):
        assert f"sidecar {node}  broker {node} led partitions {node - 1}; forwarded " in text
    # The audit of three sidecars, one report: every record by principal, topics by name.
    assert result.audited_in == {"User:ANONYMOUS": 150}
    assert result.audited_out.get("User:demo-reader", 0) >= 150
    # The share group read through the three leaders' sidecars, every record once.
    assert "2 ShareConsumers read 150 of 150 records as a queue" in result.queue
    assert result.queue.endswith(", 0 twice, 0 missing")
    assert result.audited_out.get("User:ANONYMOUS") == 150
    assert result.idle_topic in result.unused and result.inventory[result.topic] == 3
    for address in (*result.bootstrap.split(","), *result.broker.split(",")):
        host, port = address.rsplit(":", 1)
        assert not can_connect(host, int(port)), f"{address} still accepts connections"
