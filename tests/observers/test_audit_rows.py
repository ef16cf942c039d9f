"""Audit rows from whole frames, through the hub's worker (decode included).

Record data is built by kafka-python's batch builders (v2, and a gzip-compressed v1
message set), which share no code with ours, so sizes and counts are known
independently. Garbage frames (Hypothesis) must never raise out of the worker.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from prometheus_client import CollectorRegistry

from observers.api import ObserverConfig
from observers.audit import AuditObserver, ThreadAudit
from observers.audit_rows import error_picker
from observers.hub import ObserverHub, Settings
from observers.prometheus import PrometheusObserver
from protocol.apis import DEFAULT_REGISTRY
from protocol.headers import decode_request_header, encode_response_header
from protocol.schema import encode
from protocol.spec import MessageSpec
from spark_jobs.common import REQUEST_KEY
from tests.bench.kafka import record_batch
from tests.protocol.strategies import message_values
from tests.proxy.wire import request_frame


def response_frame(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    api = DEFAULT_REGISTRY.api(api_key)
    data = encode_response_header(correlation_id, api.response_header_version(version))
    data += encode(api.response, version, body)
    return len(data).to_bytes(4, "big") + data


class Harness:
    """An audit observer behind a hub that is never started: deliveries run here."""

    def __init__(self, directory: Path, worker: int = 0) -> None:
        self.registry = CollectorRegistry()
        self.audit = AuditObserver()
        self.audit.configure(ObserverConfig({"observer.audit.dir": str(directory)},
                                            registry=self.registry, worker=worker))
        self.hub = ObserverHub([(self.audit, "audit", Settings())], DEFAULT_REGISTRY, self.registry,
                               worker=worker)
        self.tap = self.hub.tap("PLAINTEXT", "10.1.2.3", 40000, 2)
        assert isinstance(self.audit.audit, ThreadAudit) and self.audit.audit.recorder is not None
        self.sink = self.audit.audit.recorder.sink

    def exchange(self, request: bytes, response: bytes | None, *, acks0: bool = False,
                 principal: str = "User:ANONYMOUS", received: float = 1_700_000_000.5,
                 ) -> list[dict[str, Any]]:
        header = decode_request_header(request[4:])
        api = DEFAULT_REGISTRY.get(header.api_key)
        known = api is not None and header.api_version in api.versions
        head = api.response_header_version(header.api_version) if api is not None and known else 0
        self.tap.completed(header=header, response_header_version=head, principal=principal,
                           frame=request, request_size=len(request), received_at=received,
                           expects_response=not acks0, local=False, response=response,
                           elapsed=0.004, upstream_elapsed=0.003)
        worker = self.hub.workers[0]
        before = len(self.sink._buffer)
        while worker.items:
            worker.deliver(worker.items.popleft())  # type: ignore[arg-type]
        rows = self.sink._buffer[before:]
        return [dict(zip(self.sink.schema.names, r, strict=True)) for r in rows]  # v2 or v3 rows


def test_produce_rows_per_partition_with_their_errors(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    b1, b2, b3 = record_batch(3, 100), record_batch(1, 10), record_batch(40, 7)
    request = request_frame(0, 9, 42, {
        "TransactionalId": None, "Acks": -1, "TimeoutMs": 1000, "TopicData": [
            {"Name": "t1", "PartitionData": [{"Index": 0, "Records": b1}, {"Index": 1, "Records": b2}]},
            {"Name": "t2", "PartitionData": [{"Index": 0, "Records": b3}]}]},
        client_id="producer-1")
    response = response_frame(0, 9, 42, {"Responses": [
        {"Name": "t1", "PartitionResponses": [{"Index": 0, "ErrorCode": 0}, {"Index": 1, "ErrorCode": 6}]},
        {"Name": "t2", "PartitionResponses": [{"Index": 0, "ErrorCode": 0}]}]})
    rows = h.exchange(request, response)
    got = [(r["topic"], r["partition"], r["bytes"], r["records"], r["error_code"], r["first_row"])
           for r in rows]
    assert got == [("t1", 0, len(b1), 3, 0, True), ("t1", 1, len(b2), 1, 6, False),
                   ("t2", 0, len(b3), 40, 0, False)]
    first = rows[0]
    assert first["time"] == 1_700_000_000_500_000 and first["sidecar_broker_id"] == 2
    assert (first["client_host"], first["client_port"], first["client_id"]) == ("10.1.2.3", 40000, "producer-1")
    assert (first["api_name"], first["api_version"], first["correlation_id"], first["acks"]) == ("Produce", 9, 42, -1)
    assert first["request_bytes"] == len(request) and first["response_bytes"] == len(response)
    assert (first["latency_us"], first["upstream_latency_us"]) == (4000, 3000)


def test_produce_with_acks_0_gets_rows_without_a_response(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    batch = record_batch(5, 20)
    request = request_frame(0, 3, 1, {"TransactionalId": None, "Acks": 0, "TimeoutMs": 1,
                                      "TopicData": [{"Name": "t", "PartitionData": [{"Index": 2, "Records": batch}]}]})
    (row,) = h.exchange(request, None, acks0=True)
    assert (row["acks"], row["records"], row["bytes"], row["partition"]) == (0, 5, len(batch), 2)
    assert row["response_bytes"] is None and row["error_code"] is None and row["latency_us"] is None


def test_fetch_rows_map_topic_ids_learned_from_metadata_and_walk_legacy_sets(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    known, unknown = uuid.uuid4(), uuid.uuid4()
    h.exchange(request_frame(3, 12, 1, {"Topics": None}),
               response_frame(3, 12, 1, {"Topics": [{"Name": "orders", "TopicId": known, "Partitions": []}]}))
    batch = record_batch(9, 50)
    fetch = request_frame(1, 13, 2, {"Topics": [{"TopicId": known, "Partitions": [{"Partition": 0}]}]})
    rows = h.exchange(fetch, response_frame(1, 13, 2, {"Responses": [
        {"TopicId": known, "Partitions": [{"PartitionIndex": 0, "Records": batch}]},
        {"TopicId": unknown, "Partitions": [{"PartitionIndex": 3, "ErrorCode": 1, "Records": None}]}]}))
    got = [(r["topic"], r["partition"], r["bytes"], r["records"], r["error_code"]) for r in rows]
    assert got == [("orders", 0, len(batch), 9, 0), (str(unknown), 3, 0, 0, 1)]

    legacy = LegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=1 << 16)
    for i in range(6):
        legacy.append(i, timestamp=1000, key=None, value=b"x" * i)
    data = bytes(legacy.build())
    rows = h.exchange(request_frame(1, 3, 3, {"Topics": []}), response_frame(1, 3, 3, {"Responses": [
        {"Topic": "old", "Partitions": [{"PartitionIndex": 0, "Records": data + data[:10]}]}]}))
    assert [(r["topic"], r["bytes"], r["records"]) for r in rows] == [("old", len(data) + 10, 6)]


def test_other_apis_get_one_row_with_the_top_level_or_first_error(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    row, inventory = h.exchange(request_frame(3, 1, 5, {"Topics": []}), response_frame(3, 1, 5, {
        "Topics": [{"Name": "a", "ErrorCode": 0}, {"Name": "b", "ErrorCode": 3}]}))
    assert (row["api_name"], row["error_code"], row["topic"], row["first_row"]) == ("Metadata", 3, None, True)
    assert (inventory["topic"], inventory["topic_partitions"], inventory["first_row"]) == ("a", 0, False)
    (row,) = h.exchange(request_frame(18, 3, 6, {}), response_frame(18, 3, 6, {"ErrorCode": 35}))
    assert (row["api_name"], row["error_code"]) == ("ApiVersions", 35)
    fetch_nothing = request_frame(1, 12, 7, {"Topics": []})
    (row,) = h.exchange(fetch_nothing, response_frame(1, 12, 7, {"ErrorCode": 0, "Responses": []}))
    assert (row["api_name"], row["topic"], row["error_code"]) == ("Fetch", None, 0)


@given(key=st.sampled_from([0, 1, 3, 18, 19, 999]), version=st.integers(0, 13),
       body=st.binary(max_size=200), answer=st.one_of(st.none(), st.binary(max_size=200)))
def test_garbage_never_escapes_the_worker_and_still_gets_a_row(
    tmp_path_factory: Any, key: int, version: int, body: bytes, answer: bytes | None
) -> None:
    h = _harness(tmp_path_factory)
    frame = request_frame(key, version, 11, body)
    response = None if answer is None else len(answer + b"\0\0\0\x0b").to_bytes(4, "big") + b"\0\0\0\x0b" + answer
    rows = h.exchange(frame, response)
    errors = h.registry.get_sample_value("ksidecar_observer_errors_total", {"observer": "audit"})
    assert rows or errors  # a row, or a counted failure: never an exception out of deliver
    assert all(r["first_row"] for r in rows[:1])


_HARNESS: list[Harness] = []


def _harness(factory: Any) -> Harness:
    if not _HARNESS:
        _HARNESS.append(Harness(factory.mktemp("garbage")))
    return _HARNESS[0]


def test_the_worker_flushes_on_tick(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.exchange(request_frame(3, 1, 5, {"Topics": []}), response_frame(3, 1, 5, {"Topics": []}))
    h.audit.tick(time.time() + 5)
    assert list(tmp_path.rglob(".part-*.journal"))
    h.audit.close(1)
    assert len(list(tmp_path.rglob("part-*.parquet"))) == 1


def test_two_workers_files_hold_every_request_once_under_distinct_request_keys(tmp_path: Path) -> None:
    """The workers of one sidecar audit into one directory, each with its own hub: the same
    requests at the same microsecond in both (the worst case) stay six requests for the
    Spark jobs, which count ``first_row`` rows and group rows by the request key."""
    workers = [Harness(tmp_path, worker=0), Harness(tmp_path, worker=1)]
    batch = record_batch(1, 10)
    for h in workers:
        for correlation in (1, 2, 3):
            request = request_frame(0, 9, correlation, {
                "TransactionalId": None, "Acks": 1, "TimeoutMs": 1000, "TopicData": [
                    {"Name": "t", "PartitionData": [{"Index": 0, "Records": batch},
                                                    {"Index": 1, "Records": batch}]}]})
            response = response_frame(0, 9, correlation, {"Responses": [
                {"Name": "t", "PartitionResponses": [{"Index": 0, "ErrorCode": 0},
                                                     {"Index": 1, "ErrorCode": 0}]}]})
            assert len(h.exchange(request, response)) == 2
        h.audit.close(5)
    names = sorted(p.name for p in tmp_path.rglob("part-*.parquet"))
    assert [n.split("-")[2] for n in names] == ["w0", "w1"]
    table = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 2 * 3 * 2  # workers × requests × partitions
    assert sum(table.column("first_row").to_pylist()) == 2 * 3
    keys = table.group_by(list(REQUEST_KEY)).aggregate([("first_row", "count")])
    assert keys.num_rows == 2 * 3 and set(keys.column("first_row_count").to_pylist()) == {2}


def test_produce_v13_names_topics_by_id_once_metadata_taught_them(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    known, unknown = uuid.uuid4(), uuid.uuid4()
    h.exchange(request_frame(3, 12, 1, {"Topics": None}),
               response_frame(3, 12, 1, {"Topics": [{"Name": "orders", "TopicId": known, "Partitions": []}]}))
    b1, b2 = record_batch(2, 30), record_batch(7, 5)
    request = request_frame(0, 13, 2, {"TransactionalId": None, "Acks": -1, "TimeoutMs": 100, "TopicData": [
        {"TopicId": known, "PartitionData": [{"Index": 4, "Records": b1}]},
        {"TopicId": unknown, "PartitionData": [{"Index": 0, "Records": b2}]}]})
    response = response_frame(0, 13, 2, {"Responses": [
        {"TopicId": unknown, "PartitionResponses": [{"Index": 0, "ErrorCode": 29}]},
        {"TopicId": known, "PartitionResponses": [{"Index": 4, "ErrorCode": 0}]}]})
    rows = h.exchange(request, response)
    assert [(r["topic"], r["partition"], r["bytes"], r["records"], r["error_code"], r["acks"])
            for r in rows] == [("orders", 4, len(b1), 2, 0, -1), (str(unknown), 0, len(b2), 7, 29, -1)]


def test_a_response_that_cannot_be_read_leaves_the_partition_errors_null(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    batch = record_batch(1, 10)
    request = request_frame(0, 9, 3, {"TransactionalId": None, "Acks": 1, "TimeoutMs": 100,
                                      "TopicData": [{"Name": "t", "PartitionData": [{"Index": 0, "Records": batch}]}]})
    cut = response_frame(0, 9, 3, {"Responses": [{"Name": "t", "PartitionResponses": [{"Index": 0}]}]})
    short = (len(cut) - 4 - 3).to_bytes(4, "big") + cut[4:-3]
    (row,) = h.exchange(request, short)
    assert (row["topic"], row["records"], row["error_code"], row["response_bytes"]) == ("t", 1, None, len(short))


def expected_error(spec: MessageSpec, version: int, value: Any) -> int:
    """The audit's rule, read off the field values: the top-level ErrorCode, else the first
    non-zero ErrorCode of a top-level array's entries (field order), else 0."""
    if any(f.name == "ErrorCode" and f.present_in(version) for f in spec.fields):
        top: int = value["ErrorCode"]
        return top
    for f in spec.fields:
        if f.is_array and f.is_struct and f.present_in(version):
            for item in value[f.name] or ():
                if item.get("ErrorCode"):
                    found: int = item["ErrorCode"]
                    return found
    return 0


ERROR_CASES = [
    (api.key, version) for api in DEFAULT_REGISTRY if api.key not in (0, 1)
    for version in range(api.versions.lo, (api.versions.hi or 0) + 1)
]


def test_every_response_of_the_registry_has_anerror_picker() -> None:
    for key, version in ERROR_CASES:
        picker, _ = error_picker(DEFAULT_REGISTRY.api(key).response, version)
        picker.program(version)  # raises Unpickable if a field it needs were tagged


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_other_apis_get_their_error_as_the_values_say(tmp_path_factory: Any, data: st.DataObject) -> None:
    h = _harness(tmp_path_factory)
    key, version = data.draw(st.sampled_from(ERROR_CASES))
    spec = DEFAULT_REGISTRY.api(key).response
    value = data.draw(message_values(spec, version))
    row, *inventory = h.exchange(request_frame(key, version, 21, b""), response_frame(key, version, 21, value))
    assert row["error_code"] == expected_error(spec, version, value)
    assert (key == 3 or not inventory) and all(r["topic_partitions"] is not None for r in inventory)


def test_the_prometheus_observer_counts_from_frames() -> None:
    registry = CollectorRegistry()
    prometheus = PrometheusObserver()
    prometheus.configure(ObserverConfig({}, registry=registry))
    hub = ObserverHub([(prometheus, "prometheus", Settings())], DEFAULT_REGISTRY, registry)
    tap = hub.tap("PLAINTEXT", "10.0.0.1", 1, 1)
    topic_id = uuid.uuid4()

    def exchange(request: bytes, response: bytes | None, principal: str = "User:alice") -> None:
        header = decode_request_header(request[4:])
        api = DEFAULT_REGISTRY.api(header.api_key)
        tap.completed(header=header,
                      response_header_version=api.response_header_version(header.api_version),
                      principal=principal, frame=request, request_size=len(request),
                      received_at=0.0, expects_response=True, local=False, response=response,
                      elapsed=0.1, upstream_elapsed=0.1)
        hub.workers[0].deliver(hub.workers[0].items.popleft())  # type: ignore[arg-type]

    batch = record_batch(3, 40)
    exchange(request_frame(3, 12, 1, {"Topics": None}), response_frame(3, 12, 1, {
        "Topics": [{"Name": "orders", "TopicId": topic_id, "Partitions": []}]}))
    exchange(request_frame(0, 13, 2, {"TransactionalId": None, "Acks": 1, "TimeoutMs": 1, "TopicData": [
        {"TopicId": topic_id, "PartitionData": [{"Index": 0, "Records": batch}]}]}), None)
    exchange(request_frame(1, 13, 3, {"Topics": []}), response_frame(1, 13, 3, {"Responses": [
        {"TopicId": topic_id, "Partitions": [{"PartitionIndex": 0, "Records": batch + batch}]}]}))
    exchange(request_frame(1, 13, 4, {"Topics": []}), None)  # no response: nothing fetched
    exchange(request_frame(0, 9, 5, b"\x00garbage"), None)  # unreadable: nothing counted
    got = {(s.labels["direction"], s.labels["topic"], s.labels["principal"], s.name): s.value
           for family in registry.collect() for s in family.samples
           if s.name in ("ksidecar_observed_bytes_total", "ksidecar_observed_records_total")}
    assert got == {
        ("in", "orders", "User:alice", "ksidecar_observed_bytes_total"): len(batch),
        ("in", "orders", "User:alice", "ksidecar_observed_records_total"): 3,
        ("out", "orders", "User:alice", "ksidecar_observed_bytes_total"): 2 * len(batch),
        ("out", "orders", "User:alice", "ksidecar_observed_records_total"): 6,
    }


def metadata(correlation_id: int, topics: dict[str, int], missing: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
    """A Metadata v12 exchange reporting ``topics`` (name → partitions) and ``missing``
    ones with UNKNOWN_TOPIC_OR_PARTITION."""
    reported = [
        {"Name": name, "TopicId": uuid.uuid5(uuid.NAMESPACE_OID, name), "ErrorCode": 0,
         "Partitions": [{"PartitionIndex": i, "LeaderId": 1, "ReplicaNodes": [1], "IsrNodes": [1]}
                        for i in range(count)]}
        for name, count in topics.items()
    ] + [{"Name": name, "ErrorCode": 3, "Partitions": []} for name in missing]
    return (request_frame(3, 12, correlation_id, {"Topics": None}),
            response_frame(3, 12, correlation_id, {"Topics": reported}))


def test_metadata_responses_record_each_topic_once_an_hour(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    ten = 1_767_261_600.0  # 2026-01-01 10:00:00 UTC

    def inventory(at: float, topics: dict[str, int], missing: tuple[str, ...] = ()) -> list[tuple[str, int]]:
        rows = h.exchange(*metadata(int(at) % 1000, topics, missing), received=at)
        assert rows[0]["first_row"] and rows[0]["topic"] is None
        assert all(not r["first_row"] and r["api_name"] == "Metadata" for r in rows[1:])
        return [(r["topic"], r["topic_partitions"]) for r in rows[1:]]

    assert inventory(ten + 5, {"orders": 3, "audit": 1}, ("ghost",)) == [("orders", 3), ("audit", 1)]
    assert inventory(ten + 60, {"orders": 3, "audit": 1}) == []  # same hour, same counts
    assert inventory(ten + 120, {"orders": 6, "new": 2}) == [("orders", 6), ("new", 2)]
    assert inventory(ten + 3599, {"orders": 6}) == []
    assert inventory(ten + 3600, {"orders": 6, "audit": 1}) == [("orders", 6), ("audit", 1)]


def test_fetch_rows_carry_the_requests_max_wait(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    batch = record_batch(2, 10)
    fetch = request_frame(1, 12, 9, {"MaxWaitMs": 500, "MinBytes": 1, "Topics": [
        {"Topic": "t", "Partitions": [{"Partition": 0}]}]})
    rows = h.exchange(fetch, response_frame(1, 12, 9, {"Responses": [
        {"Topic": "t", "Partitions": [{"PartitionIndex": 0, "Records": batch},
                                      {"PartitionIndex": 1, "Records": None}]}]}))
    assert [(r["partition"], r["max_wait_ms"]) for r in rows] == [(0, 500), (1, 500)]
    empty = request_frame(1, 4, 10, {"MaxWaitMs": 100, "Topics": []})
    (row,) = h.exchange(empty, None)
    assert (row["topic"], row["max_wait_ms"], row["latency_us"]) == (None, 100, None)
    produce = request_frame(0, 9, 11, {"TransactionalId": None, "Acks": 1, "TimeoutMs": 1000,
                                       "TopicData": [{"Name": "t", "PartitionData": [{"Index": 0, "Records": batch}]}]})
    (row,) = h.exchange(produce, None)
    assert row["max_wait_ms"] is None
