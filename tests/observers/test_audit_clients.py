"""The audit trail against a known workload: real clients, a real sidecar, real Tansu.

Each client library (confluent-kafka, kafka-python, aiokafka) produces and consumes
:data:`RECORDS` records to its own topic, and a raw client produces batches it built
itself (kafka-python's record-batch builder, so the test knows every byte), with acks=1
and acks=0. The sidecar is then stopped (which flushes the audit), and the Parquet
totals per topic and principal must equal what the test sent, exactly.

A second test runs the same raw workload as three principals at once: SCRAM and PLAIN
users logged in on a ``SASL_PLAINTEXT`` listener and an anonymous client on a plaintext
one, plus real clients logging in with each mechanism; each principal's rows must hold
exactly its own workload.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import trio
from kafka.net.sasl.scram import ScramClient

from observers.audit_schema import ANONYMOUS
from proxy.config.keys import build_config
from proxy.control.server import Sidecar
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.auth.conftest import USERS, run_users
from tests.auth.test_clients import RECORDS as SASL_RECORDS
from tests.auth.test_clients import run_confluent as sasl_confluent
from tests.auth.test_clients import run_kafka_python as sasl_kafka_python
from tests.bench.kafka import produce_request, record_batch
from tests.proxy.conftest import sidecar_keys
from tests.proxy.test_clients import CLIENTS
from tests.proxy.wire import Wire, create_topic, our_decode, sample

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECORDS = 1000
#: Raw Produce requests: (records per batch, bytes per record, acks).
RAW_BATCHES = [(1, 100, 1), (7, 1000, 1), (50, 10, -1), (3, 333, 0), (1, 1, 0)] * 4



def read_audit(directory: Path) -> Any:
    """Every visible audit row, partition columns included."""
    return ds.dataset(directory, format="parquet", partitioning="hive").to_table()


def audit_keys(directory: Path, **extra: str) -> dict[str, str]:
    """Sidecar keys with the audit and Prometheus observers on."""
    return {
        "observer.class.names": "audit,prometheus",
        "observer.audit.dir": str(directory),
        "observer.audit.flush.interval.ms": "200",
        "observer.audit.overflow": "block",
        **extra,
    }


async def login(wire: Wire, mechanism: str, user: str, password: str) -> None:
    """SaslHandshake v1 + SaslAuthenticate v1 as ``user`` (kafka-python's SCRAM client)."""
    _, shake = our_decode(await wire.call(17, 1, 1, {"Mechanism": mechanism}), 17, 1)
    assert shake.ErrorCode == 0
    if mechanism == "PLAIN":
        token = b"\0" + user.encode() + b"\0" + password.encode()
        _, done = our_decode(await wire.call(36, 1, 2, {"AuthBytes": token}), 36, 1)
    else:
        scram = ScramClient(user, password, mechanism)
        _, first = our_decode(await wire.call(36, 1, 2, {"AuthBytes": scram.first_message()}), 36, 1)
        scram.process_server_first_message(first.AuthBytes)
        _, done = our_decode(await wire.call(36, 1, 3, {"AuthBytes": scram.final_message()}), 36, 1)
    assert done.ErrorCode == 0, done


async def raw_workload(
    port: int, topic: str, credentials: tuple[str, str, str] | None = None
) -> dict[str, int]:
    """Produce :data:`RAW_BATCHES` on one connection (logged in with ``credentials``:
    mechanism, user, password); return what was sent."""
    wire = await Wire.connect("127.0.0.1", port)
    if credentials is not None:
        await login(wire, *credentials)
    await create_topic(wire, topic)
    sent = Counter[str]()
    for i, (count, size, acks) in enumerate(RAW_BATCHES):
        batch = record_batch(count, size)
        frame = produce_request(1000 + i, topic, batch, acks)
        await wire.send(frame)
        if acks != 0:
            assert await wire.read_frame() is not None
        sent["records"] += count
        sent["bytes"] += len(batch)
        sent["requests"] += 1
        sent["acks0"] += acks == 0
    # A request after the acks=0 ones, answered: the sidecar has forwarded them all.
    await wire.call(3, 1, 9999, {"Topics": []})
    await wire.aclose()
    return dict(sent)


async def test_audit_totals_equal_the_workload(tansu: TansuServer, tmp_path: Path) -> None:
    principal = ANONYMOUS
    audit_dir = tmp_path / "audit"
    config = build_config(sidecar_keys(tansu.bootstrap) | audit_keys(audit_dir))
    suffix = uuid.uuid4().hex[:8]
    raw_topic = f"audit-raw-{suffix}"
    client_topics = {name: f"audit-{name}-{suffix}" for name in CLIENTS}
    async with trio.open_nursery() as nursery:
        sidecar: Sidecar = await nursery.start(Sidecar(config).serve)
        port = sidecar.bound["PLAINTEXT"].port
        bootstrap = f"127.0.0.1:{port}"
        with trio.fail_after(60):
            raw = await raw_workload(port, raw_topic)
        for name, run in CLIENTS.items():
            values = [f"{name}-{i}".encode() * (1 + i % 5) for i in range(RECORDS)]
            with trio.fail_after(240):
                result = await trio.to_thread.run_sync(
                    run, bootstrap, client_topics[name], f"g-{name}-{suffix}", values
                )
            assert len(result["values"]) == RECORDS
        observed_in = sample(sidecar, "ksidecar_observed_records_total", direction="in",
                             topic=raw_topic, principal=principal)
        nursery.cancel_scope.cancel()  # stops the sidecar: the audit writes its last files
    assert observed_in == raw["records"]
    assert sample(sidecar, "ksidecar_observer_dropped_total", observer="audit") == 0
    assert sample(sidecar, "ksidecar_observer_errors_total", observer="audit") == 0
    assert not list(audit_dir.rglob(".*")), "journals or temporary files were left behind"

    rows = read_audit(audit_dir).to_pylist()
    produce = [r for r in rows if r["api_name"] == "Produce"]
    raw_rows = [r for r in produce if r["topic"] == raw_topic]
    assert sum(r["records"] for r in raw_rows) == raw["records"]
    assert sum(r["bytes"] for r in raw_rows) == raw["bytes"]
    assert sum(r["first_row"] for r in raw_rows) == raw["requests"]
    silent = [r for r in raw_rows if r["acks"] == 0]
    assert len(silent) == raw["acks0"]
    assert all(r["response_bytes"] is None and r["error_code"] is None for r in silent)
    assert all(r["error_code"] == 0 for r in raw_rows if r["acks"] != 0)
    assert {r["principal"] for r in rows} == {principal}
    assert {(r["client_host"], r["listener"]) for r in rows} == {("127.0.0.1", "PLAINTEXT")}

    for name, topic in client_topics.items():
        mine = [r for r in produce if r["topic"] == topic]
        assert sum(r["records"] for r in mine) == RECORDS, name
        assert all(r["error_code"] == 0 for r in mine), name
        fetched = sum(r["records"] or 0 for r in rows if r["api_name"] == "Fetch" and r["topic"] == topic)
        assert fetched >= RECORDS, name
    # Every request is one first_row, with ids unique in the run.
    firsts = [r["request_id"] for r in rows if r["first_row"]]
    assert len(firsts) == len(set(firsts))
    assert all(r["latency_us"] is not None and r["latency_us"] >= 0 for r in rows
               if r["response_bytes"] is not None)


#: The raw workload's principals: (principal, listener, mechanism or None, user).
SASL_PRINCIPALS = [
    ("User:alice", "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice"),
    ("User:bob", "SASL_PLAINTEXT", "PLAIN", "bob"),
    (ANONYMOUS, "PLAINTEXT", None, ""),
]
#: Real clients logging in: (client, mechanism, user).
SASL_CLIENTS = [("confluent-kafka", "SCRAM-SHA-256", "alice"), ("kafka-python", "PLAIN", "bob")]


async def test_audit_totals_per_principal_over_sasl(
    tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str, tmp_path: Path
) -> None:
    connect = zookeeper.connect_string(zk_path)
    plain_file = tmp_path / "plain-users"
    for name, password in USERS.items():
        for where in (["--zookeeper", connect], ["--plain-file", str(plain_file)]):
            code = await trio.to_thread.run_sync(run_users, [*where, "add", name], tmp_path, password)
            assert code == 0
    audit_dir = tmp_path / "audit"
    config = build_config(sidecar_keys(
        tansu.bootstrap,
        listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        zookeeper_connect=connect,
        sidecar_sasl_plain_users_file=str(plain_file),
    ) | audit_keys(audit_dir))
    suffix = uuid.uuid4().hex[:8]
    raw_topics = {p: f"audit-{p[5:].lower()}-{suffix}" for p, *_ in SASL_PRINCIPALS}
    client_topics = {c: f"audit-sasl-{c}-{suffix}" for c, *_ in SASL_CLIENTS}
    sent: dict[str, dict[str, int]] = {}
    async with trio.open_nursery() as nursery:
        sidecar: Sidecar = await nursery.start(Sidecar(config).serve)
        with trio.fail_after(120):
            for principal, listener, mechanism, user in SASL_PRINCIPALS:
                credentials = None if mechanism is None else (mechanism, user, USERS[user])
                port = sidecar.bound[listener].port
                sent[principal] = await raw_workload(port, raw_topics[principal], credentials)
            bootstrap = f"127.0.0.1:{sidecar.bound['SASL_PLAINTEXT'].port}"
            runners = {"confluent-kafka": sasl_confluent, "kafka-python": sasl_kafka_python}
            for client, mechanism, user in SASL_CLIENTS:
                got = await trio.to_thread.run_sync(
                    runners[client], bootstrap, mechanism, user, USERS[user], client_topics[client])
                assert len(got) == len(SASL_RECORDS)
        nursery.cancel_scope.cancel()  # stops the sidecar: the audit writes its last files
    assert sample(sidecar, "ksidecar_observer_dropped_total", observer="audit") == 0

    rows = read_audit(audit_dir).to_pylist()
    produce = [r for r in rows if r["api_name"] == "Produce"]
    for principal, topic in raw_topics.items():
        mine = [r for r in produce if r["topic"] == topic]
        assert {r["principal"] for r in mine} == {principal}
        assert sum(r["records"] for r in mine) == sent[principal]["records"], principal
        assert sum(r["bytes"] for r in mine) == sent[principal]["bytes"], principal
        assert sum(r["first_row"] for r in mine) == sent[principal]["requests"], principal
    for client, _, user in SASL_CLIENTS:
        mine = [r for r in produce if r["topic"] == client_topics[client]]
        assert {r["principal"] for r in mine} == {f"User:{user}"}, client
        assert sum(r["records"] for r in mine) == len(SASL_RECORDS), client
        fetched = [r for r in rows if r["api_name"] == "Fetch" and r["topic"] == client_topics[client]]
        assert sum(r["records"] or 0 for r in fetched) >= len(SASL_RECORDS), client
        assert {r["principal"] for r in fetched} == {f"User:{user}"}, client
    # The SASL exchanges themselves are audited, under the principal known when each ended.
    sasl = [r for r in rows if r["api_name"] == "SaslAuthenticate" and r["listener"] == "SASL_PLAINTEXT"]
    assert sasl and all(r["error_code"] == 0 for r in sasl)
