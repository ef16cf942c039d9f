"""``observer.audit.isolation=process``: the audit process writes what thread mode writes,
its metrics reach the sidecar's registry, its errors come back, and it never outlives
its sidecar (each test starts a real child process)."""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from observers.api import ObserverConfig
from observers.audit import AuditObserver
from observers.audit_process import PICK_IN_PARENT_BYTES, ProcessAudit
from observers.hub import ObserverError, ObserverHub, Settings
from protocol.apis import DEFAULT_REGISTRY
from protocol.headers import decode_request_header
from proxy.config.keys import ConfigError, build_config
from tests.bench.kafka import record_batch
from tests.observers.test_audit_clients import read_audit
from tests.observers.test_audit_rows import response_frame
from tests.proxy.wire import request_frame

TOPIC_ID = uuid.UUID(int=0x5EED)
BIG = record_batch(200, 1024)
SMALL = record_batch(3, 100)


def produce(correlation_id: int, records: bytes) -> tuple[bytes, bytes]:
    request = request_frame(0, 9, correlation_id, {
        "TransactionalId": None, "Acks": -1, "TimeoutMs": 1000, "TopicData": [
            {"Name": "t1", "PartitionData": [{"Index": 0, "Records": records},
                                             {"Index": 1, "Records": records}]}]})
    response = response_frame(0, 9, correlation_id, {"Responses": [
        {"Name": "t1", "PartitionResponses": [{"Index": 0, "ErrorCode": 0},
                                              {"Index": 1, "ErrorCode": 6}]}]})
    return request, response


def fetch(correlation_id: int, records: bytes) -> tuple[bytes, bytes]:
    request = request_frame(1, 13, correlation_id, {"Topics": [
        {"TopicId": TOPIC_ID, "Partitions": [{"Partition": 0}]}]})
    response = response_frame(1, 13, correlation_id, {"Responses": [
        {"TopicId": TOPIC_ID, "Partitions": [{"PartitionIndex": 0, "Records": records}]}]})
    return request, response


EXCHANGES = [
    (request_frame(3, 12, 1, {"Topics": None}), response_frame(3, 12, 1, {
        "Topics": [{"Name": "orders", "TopicId": TOPIC_ID, "Partitions": []}]})),
    produce(2, SMALL), produce(3, BIG), fetch(4, SMALL), fetch(5, BIG),
    (request_frame(18, 3, 6, {}), response_frame(18, 3, 6, {"ErrorCode": 35})),
    (produce(7, SMALL)[0], None),
]


class Audit:
    """An audit observer behind a hub that is never started: deliveries run here."""

    def __init__(self, directory: Path, isolation: str,
                 topic_name: Callable[[uuid.UUID], str | None] | None = None, **keys: str) -> None:
        self.registry = CollectorRegistry()
        self.audit = AuditObserver()
        self.audit.configure(ObserverConfig(
            {"observer.audit.dir": str(directory), "observer.audit.isolation": isolation, **keys},
            registry=self.registry, topic_name=topic_name))
        self.hub = ObserverHub([(self.audit, "audit", Settings())], DEFAULT_REGISTRY, self.registry)
        self.tap = self.hub.tap("PLAINTEXT", "10.1.2.3", 40000, 2)
        self.worker = self.hub.workers[0]

    def feed(self, exchanges: list[tuple[bytes, bytes | None]]) -> None:
        for request, response in exchanges:
            header = decode_request_header(request[4:])
            head = DEFAULT_REGISTRY.api(header.api_key).response_header_version(header.api_version)
            self.tap.completed(header=header, response_header_version=head,
                               principal="User:alice", frame=request, request_size=len(request),
                               received_at=1_700_000_000.5, expects_response=response is not None,
                               local=False, response=response, elapsed=0.004,
                               upstream_elapsed=0.003)
        while self.worker.items:
            self.worker.deliver(self.worker.items.popleft())  # type: ignore[arg-type]

    def value(self, name: str) -> float | None:
        return self.registry.get_sample_value(name, {"observer": "audit"} if "observer_" in name else None)

    @property
    def remote(self) -> ProcessAudit:
        assert isinstance(self.audit.audit, ProcessAudit)
        return self.audit.audit


def rows(directory: Path) -> list[dict[str, Any]]:
    return sorted(read_audit(directory).to_pylist(),
                  key=lambda r: (r["request_id"], r["partition"] or 0))


def test_process_mode_writes_what_thread_mode_writes_and_reports_its_metrics(tmp_path: Path) -> None:
    assert len(BIG) >= PICK_IN_PARENT_BYTES > len(SMALL)  # both paths of the hand-off
    results = {}
    for isolation in ("thread", "process"):
        audit = Audit(tmp_path / isolation, isolation)
        audit.feed(EXCHANGES)
        audit.audit.tick(time.time())
        audit.audit.close(30)
        results[isolation] = rows(tmp_path / isolation)
        assert audit.value("ksidecar_audit_rows_written_total") == len(results[isolation])
        assert audit.value("ksidecar_audit_files_written_total") == 1
        assert audit.value("ksidecar_audit_buffered_rows") == 0
        assert (audit.value("ksidecar_audit_last_flush_timestamp_seconds") or 0) > 0
        assert audit.value("ksidecar_observer_errors_total") == 0
    assert results["process"] == results["thread"]
    fetched = [(r["topic"], r["records"]) for r in results["process"] if r["api_name"] == "Fetch"]
    assert fetched == [("orders", 3), ("orders", 200)]  # ids named from Metadata, both ways


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_topic_id_no_metadata_named_is_asked_of_the_broker_once(tmp_path: Path, isolation: str) -> None:
    """In the deployed shape a sidecar serves Fetch requests of clients that asked another
    sidecar for Metadata: the audit asks the sidecar's topic directory (the broker) for the
    name, once per id, in either isolation; an id the broker does not name stays an id."""
    asked: list[uuid.UUID] = []
    nameless = uuid.UUID(int=0xDEAD)

    def topic_name(topic_id: uuid.UUID) -> str | None:
        asked.append(topic_id)
        return "orders" if topic_id == TOPIC_ID else None

    audit = Audit(tmp_path, isolation, topic_name)
    orphan = request_frame(1, 13, 9, {"Topics": [{"TopicId": nameless, "Partitions": [{"Partition": 0}]}]}), \
        response_frame(1, 13, 9, {"Responses": [{"TopicId": nameless, "Partitions": [
            {"PartitionIndex": 0, "Records": SMALL}]}]})
    audit.feed([fetch(1, SMALL), fetch(2, BIG), fetch(3, SMALL), orphan])
    audit.audit.tick(time.time())
    audit.audit.close(30)
    fetched = [(r["topic"], r["records"]) for r in rows(tmp_path) if r["api_name"] == "Fetch"]
    assert fetched == [("orders", 3), ("orders", 200), ("orders", 3), (str(nameless), 3)]
    assert asked == [TOPIC_ID, nameless]


@pytest.mark.parametrize(("keys", "message"), [
    ({"observer.audit.isolation": "elsewhere"}, "observer.audit.isolation='elsewhere'"),
    ({"observer.audit.isolation": "process"}, "observer.audit.dir is required"),
    ({"observer.audit.isolation": "process", "observer.audit.roll.rows": "0"},
     "observer.audit.roll.rows='0'"),
])
def test_a_configure_error_in_the_child_comes_back_naming_the_key(
    tmp_path: Path, keys: dict[str, str], message: str
) -> None:
    entries = {"observer.audit.dir": str(tmp_path)} if "observer.audit.roll.rows" in keys else {}
    with pytest.raises(ObserverError, match=re.escape(message)):
        AuditObserver().configure(ObserverConfig({**entries, **keys}))


def test_the_sidecar_config_validates_the_isolation_key() -> None:
    with pytest.raises(ConfigError, match=re.escape("observer.audit.isolation='fork'")):
        build_config({"listeners": "PLAINTEXT://127.0.0.1:0", "sidecar.upstream": "localhost:9092",
                      "observer.audit.isolation": "fork"})
    config = build_config({"listeners": "PLAINTEXT://127.0.0.1:0", "sidecar.upstream": "localhost:9092",
                           "observer.audit.isolation": "Process"})
    assert config["observer.audit.isolation"] == "process"


def test_exceptions_in_the_child_are_counted_in_the_hub_errors(tmp_path: Path) -> None:
    audit = Audit(tmp_path, "process")
    audit.remote.batch.append(("not", "an", "exchange"))  # type: ignore[arg-type]
    audit.feed(EXCHANGES[:2])
    audit.audit.tick(time.time())
    deadline = time.monotonic() + 10
    while audit.value("ksidecar_observer_errors_total") == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
        audit.audit.tick(time.time())
    assert audit.value("ksidecar_observer_errors_total") == 1
    audit.audit.close(30)
    # the good ones still written: Metadata (its row and one inventory row) and 2 partitions
    assert audit.value("ksidecar_audit_rows_written_total") == 4


def test_a_dead_child_makes_errors_not_a_crash(tmp_path: Path) -> None:
    audit = Audit(tmp_path, "process")
    os.kill(audit.remote.process.pid, signal.SIGKILL)
    audit.remote.process.wait(10)
    audit.feed(EXCHANGES)  # the batch (below BATCH) is sent at the tick, and fails there
    audit.audit.tick(time.time())
    assert audit.remote.failure is not None
    assert audit.value("ksidecar_observer_errors_total") == len(EXCHANGES)
    audit.feed(EXCHANGES)  # refused at once, each counted
    assert audit.value("ksidecar_observer_errors_total") == 2 * len(EXCHANGES)
    began = time.monotonic()
    audit.audit.close(5)
    assert time.monotonic() - began < 5


def test_the_child_flushes_and_exits_when_its_pipe_closes(tmp_path: Path) -> None:
    """What a SIGKILLed sidecar leaves: EOF on the pipe. The child writes what it got."""
    audit = Audit(tmp_path, "process")
    audit.feed(EXCHANGES)
    audit.audit.tick(time.time())  # sends the batch
    audit.remote.conn.close()
    assert audit.remote.process.wait(20) == 0
    assert len(rows(tmp_path)) == 11  # 10 exchange rows and the inventory row of "orders"
    assert not list(tmp_path.rglob(".*"))  # every journal rolled


def test_close_is_bounded_when_the_child_stops_answering(tmp_path: Path) -> None:
    audit = Audit(tmp_path, "process")
    os.kill(audit.remote.process.pid, signal.SIGSTOP)
    try:
        audit.feed(EXCHANGES)
        began = time.monotonic()
        audit.audit.close(1.0)
        assert time.monotonic() - began < 4
        assert audit.remote.process.poll() is not None  # killed, reaped
    finally:
        if audit.remote.process.poll() is None:
            os.kill(audit.remote.process.pid, signal.SIGKILL)
