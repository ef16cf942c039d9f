"""Issue 23's readiness Done-when: real clients through one ``ksidecar run`` in front of Tansu,
the audit in schema version 3, then ``ksidecar audit readiness --target 4.0``.

kafka-python pinned to ``api_version=(0, 10, 1)`` consumes in a group and commits (it must
still work through the sidecar), then aiokafka and confluent-kafka produce and consume in a
group. The pinned kafka-python does not produce: at 0.10.1 it sends Produce v2 with message
format v1, which Tansu does not take (it closes the connection; through the sidecar the
producer fails with UNKNOWN_PRODUCER_ID), so a confluent-kafka producer (client.id
``readiness-feeder``) fills its topic. The audit
format is finalized at level 1 first (``ksidecar features upgrade``, over the wire, as a
separate process), so the rows carry the client software each connection's ApiVersions
v3+ named.

Expectations, written by hand:

* kafka-python at 0.10.1 consumes with the versions Kafka 0.10.1 had: Fetch v3, JoinGroup
  v1 (and ListOffsets v1, Metadata v1, OffsetCommit v2, OffsetFetch v1, FindCoordinator v0,
  Heartbeat/SyncGroup/LeaveGroup v0). KIP-896 removed in 4.0 Fetch v0-v3 and JoinGroup
  v0-v1 (ListOffsets only v0, OffsetCommit v0-v1, OffsetFetch v0; Metadata,
  FindCoordinator, Heartbeat, SyncGroup and LeaveGroup none): so the report names it for
  exactly Fetch [3] and JoinGroup [1]. Its ApiVersions is v0, which has no software
  fields: it shows as unknown software, with its client.id and principal.
* aiokafka and confluent-kafka use versions 4.0 serves: neither is named.
* Against Tansu's own profile (``ksidecar audit profile``, captured from the broker itself)
  kafka-python is not named: Tansu served its Fetch v3 and JoinGroup v1 (passthrough).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from kazoo.client import KazooClient

from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer

# Four clients, a sidecar process and two Spark runs: about three minutes under load.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

RECORDS = 50
SESSION_MS = 6000
"""Each consumer's group session: Tansu holds a first JoinGroup for half of it (a client's
default, 45 s for librdkafka, would hold the group 22 s for nothing)."""
LEGACY, AIO, CONFLUENT = "legacy-kafka-python", "aiokafka-app", "confluent-app"
FEEDER = "readiness-feeder"
ANONYMOUS = "User:ANONYMOUS"


def zk(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect, timeout=10)
    client.start(timeout=10)
    return client


@pytest.fixture
def sidecar(tansu: TansuServer, zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[SidecarServer]:
    """One ``ksidecar run`` with the audit observer on, registered under a fresh chroot
    (the features live there); anonymous clients may update features (loopback)."""
    chroot = f"/ksidecar-tests/readiness-{uuid.uuid4().hex[:8]}"
    client = zk(zookeeper.connect)
    client.ensure_path(chroot)
    client.stop()
    client.close()
    server = start_sidecar(tmp_path, tansu.bootstrap, name="readiness-sidecar", keys={
        "zookeeper.connect": zookeeper.connect_string(chroot),
        "super.users": ANONYMOUS,
        "observer.class.names": "audit",
        "observer.audit.dir": str(tmp_path / "audit"),
    })
    try:
        yield server
    finally:
        server.stop()
        client = zk(zookeeper.connect)
        client.delete(chroot, recursive=True)
        client.stop()
        client.close()


def wait_for(check: Callable[[], bool], seconds: float, what: str) -> None:
    end = time.monotonic() + seconds
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def create_topics(bootstrap: str, *topics: str) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "readiness-admin"})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(30)


def run_kafka_python(bootstrap: str, topic: str, group: str) -> list[bytes]:
    from confluent_kafka import Producer
    from kafka import KafkaConsumer

    feeder = Producer({"bootstrap.servers": bootstrap, "client.id": FEEDER})
    for i in range(RECORDS):
        feeder.produce(topic, f"{topic}-{i}".encode())
    assert feeder.flush(30) == 0
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, api_version=(0, 10, 1),
                             client_id=LEGACY, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=SESSION_MS)
    got: list[bytes] = []
    end = time.monotonic() + 90
    while len(got) < RECORDS and time.monotonic() < end:
        for records in consumer.poll(timeout_ms=1000).values():
            got.extend(r.value for r in records)
        if got:
            consumer.commit()
    consumer.close()
    return got


def run_aiokafka(bootstrap: str, topic: str, group: str) -> list[bytes]:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def main() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=AIO)
        await producer.start()
        for i in range(RECORDS):
            await producer.send(topic, f"{topic}-{i}".encode())
        await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    client_id=AIO, auto_offset_reset="earliest",
                                    enable_auto_commit=False, session_timeout_ms=SESSION_MS)
        await consumer.start()
        got: list[bytes] = []
        end = asyncio.get_running_loop().time() + 90
        while len(got) < RECORDS and asyncio.get_running_loop().time() < end:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                got.extend(r.value for r in records)
            if got:
                await consumer.commit()
        await consumer.stop()
        return got

    return asyncio.run(main())


def run_confluent(bootstrap: str, topic: str, group: str) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": CONFLUENT})
    for i in range(RECORDS):
        producer.produce(topic, f"{topic}-{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": CONFLUENT, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": SESSION_MS})
    consumer.subscribe([topic])
    got: list[bytes] = []
    end = time.monotonic() + 90
    while len(got) < RECORDS and time.monotonic() < end:
        for message in consumer.consume(100, timeout=1.0):
            value = message.value()
            assert message.error() is None and value is not None, message.error()
            got.append(value)
        if got:
            consumer.commit(asynchronous=False)
    consumer.close()
    return got


def test_readiness_for_4_0_names_the_pinned_kafka_python_client_only(
    sidecar: SidecarServer, tansu: TansuServer, spark: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import confluent_kafka

    from proxy.tools import cli, readiness

    audit = tmp_path / "audit"
    # The operator finalizes the audit format at 1 (schema version 3, client software).
    upgrade = subprocess.run(
        [sys.executable, "-m", "proxy.tools.cli", "features", "--bootstrap-server", sidecar.bootstrap,
         "upgrade", "--feature", "ksidecar.audit.format=1"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (upgrade.returncode, upgrade.stdout) == (0, "ksidecar.audit.format was upgraded to 1.\n"), upgrade.stderr
    # The audit completes its version 2 file (the UpdateFeatures request) when it takes level 1.
    wait_for(lambda: any(audit.glob("dt=*/hour=*/part-*.parquet")), 10.0, "the audit's version 2 file")

    runs = {LEGACY: run_kafka_python, AIO: run_aiokafka, CONFLUENT: run_confluent}
    topics = {name: f"readiness-{name}-{uuid.uuid4().hex[:6]}" for name in runs}
    create_topics(sidecar.bootstrap, *topics.values())
    for name, client in runs.items():
        got = client(sidecar.bootstrap, topics[name], f"g-{topics[name]}")
        assert sorted(got) == sorted(f"{topics[name]}-{i}".encode() for i in range(RECORDS)), name

    # The broker's own ApiVersions as a target profile, with the command as a process.
    profile = tmp_path / "tansu.json"
    captured = subprocess.run(
        [sys.executable, "-m", "proxy.tools.cli", "audit", "profile", "--bootstrap-server",
         tansu.bootstrap, "--out", str(profile)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert captured.returncode == 0, captured.stderr
    tansu_serves = {int(k): tuple(v) for k, v in json.loads(profile.read_text()).items()}
    assert tansu_serves[18][0] == 0 and 1 in tansu_serves

    assert sidecar.stop() == 0  # SIGTERM: every audit row lands in a visible file
    versions = {pq.read_schema(p).metadata[b"ksidecar.audit.schema"]
                for p in audit.glob("dt=*/hour=*/part-*.parquet")}
    assert versions == {b"2", b"3"}

    printed = io.StringIO()
    out = tmp_path / "readiness"
    run_here = readiness.run
    monkeypatch.setattr(readiness, "run", lambda args: run_here(args, spark, printed))
    assert cli.main(["audit", "readiness", "--audit", str(audit), "--target", "4.0",
                     "--out", str(out)]) == 0

    breaking = pq.read_table(out / "breaking").to_pylist()
    named = {(r["software_name"], r["software_version"], r["client_id"], r["principal"],
              r["client_host"]) for r in breaking}
    assert named == {(None, None, LEGACY, ANONYMOUS, "127.0.0.1")}, breaking
    assert {r["api_name"]: (r["versions"], r["target_min"]) for r in breaking} == {
        "Fetch": ([3], 4), "JoinGroup": ([1], 2)}
    assert all(r["requests"] >= 1 for r in breaking)

    clients = pq.read_table(out / "clients").to_pylist()
    software = {(c["client_id"], c["software_name"]): c for c in clients}
    # confluent-kafka names itself in ApiVersions v3; its rows say so.
    confluent = ("confluent-kafka-python",
                 f"{confluent_kafka.__version__}-rdkafka-{confluent_kafka.libversion()[0]}")
    assert any(c["client_id"] == CONFLUENT and (c["software_name"], c["software_version"]) == confluent
               for c in clients), software.keys()
    assert all(c["unsupported_requests"] == 0 for c in clients if c["client_id"] != LEGACY)
    assert any(c["client_id"] == AIO for c in clients)

    text = printed.getvalue()
    assert "Clients that would break on Kafka 4.0: 1 of " in text
    legacy_lines = [line.split() for line in text.splitlines() if LEGACY in line and "(" in line]
    assert {" ".join(words[5:7]) for words in legacy_lines if words[0] == "unknown"} >= {
        "Fetch (1)", "JoinGroup (11)"}, text

    matrix = pq.read_table(out / "matrix").to_pylist()
    # Against Tansu's profile: the target is that file, and kafka-python is not named.
    monkeypatch.setattr(readiness, "run", lambda args: run_here(args, spark, io.StringIO()))
    assert cli.main(["audit", "readiness", "--audit", str(audit), "--target", str(profile),
                     "--out", str(tmp_path / "on-tansu")]) == 0
    target = pq.read_table(tmp_path / "on-tansu" / "target").to_pylist()
    assert {t["api_key"]: (t["min_version"], t["max_version"]) for t in target} == tansu_serves
    assert {t["target"] for t in target} == {"profile tansu.json"}
    on_tansu = pq.read_table(tmp_path / "on-tansu" / "breaking").to_pylist()
    assert LEGACY not in {r["client_id"] for r in on_tansu}, on_tansu

    # Unknown software is split by client.id in the matrix: kafka-python's row alone has
    # the removed versions; aiokafka (no software name either) is a row of its own.
    seen = {(m["client_id"], m["api_name"], m["api_version"], m["supported"])
            for m in matrix if m["software_name"] is None}
    assert {(LEGACY, "Fetch", 3, False), (LEGACY, "JoinGroup", 1, False)} <= seen
    assert {api for client_id, api, _, supported in seen if not supported} == {"Fetch", "JoinGroup"}
    assert {client_id for client_id, *_ in seen} >= {LEGACY, AIO}
