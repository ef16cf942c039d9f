"""The audit writes the schema version of the finalized ``ksidecar.audit.format`` level and
switches live: level 0 writes version 2, level 1 version 3 (client software columns), and
rows after a switch start new files. Both isolations (the process one starts a real child).
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from prometheus_client import CollectorRegistry

from coordinator.features import AUDIT_FORMAT
from observers.api import ObserverConfig
from observers.audit import AuditObserver
from observers.audit_schema import FORMAT_FEATURE, VERSION_KEY, schema_for, version_at_level
from observers.hub import ObserverHub, Settings
from protocol.apis import DEFAULT_REGISTRY
from protocol.headers import decode_request_header
from tests.observers.test_audit_isolation import SMALL, produce
from tests.observers.test_audit_rows import response_frame
from tests.proxy.wire import request_frame

RDKAFKA = ("confluent-kafka-python", "2.6.0-rdkafka-2.6.0")
API_VERSIONS = (request_frame(18, 3, 6, {}), response_frame(18, 3, 6, {"ErrorCode": 0}))


class Fleet:
    """The finalized levels an audit reads (what FeatureState.level answers in a sidecar)."""

    def __init__(self) -> None:
        self.levels: dict[str, int] = {}
        self.asked: list[str] = []

    def level(self, name: str) -> int:
        self.asked.append(name)
        return self.levels.get(name, 0)


class Audit:
    """An audit observer behind a hub that is never started: deliveries and ticks run here."""

    def __init__(self, directory: Path, isolation: str, fleet: Fleet) -> None:
        self.audit = AuditObserver()
        registry = CollectorRegistry()
        self.audit.configure(ObserverConfig(
            {"observer.audit.dir": str(directory), "observer.audit.isolation": isolation},
            registry=registry, feature_level=fleet.level))
        self.hub = ObserverHub([(self.audit, "audit", Settings())], DEFAULT_REGISTRY, registry)
        self.tap = self.hub.tap("PLAINTEXT", "10.1.2.3", 40000, 2)
        self.worker = self.hub.workers[0]

    def feed(self, exchange: tuple[bytes, bytes | None], software: tuple[str, str] | None) -> None:
        request, response = exchange
        header = decode_request_header(request[4:])
        head = DEFAULT_REGISTRY.api(header.api_key).response_header_version(header.api_version)
        self.tap.completed(header=header, response_header_version=head, principal="User:alice",
                           client_software=software, frame=request, request_size=len(request),
                           received_at=1_700_000_000.5, expects_response=response is not None,
                           local=False, response=response, elapsed=0.004, upstream_elapsed=0.003)
        while self.worker.items:
            self.worker.deliver(self.worker.items.popleft())  # type: ignore[arg-type]


def files(directory: Path) -> list[tuple[bytes, list[str], list[dict[str, object]]]]:
    """Each visible file's schema version, columns and rows, oldest first."""
    found = []
    for path in sorted(directory.glob("dt=*/hour=*/part-*.parquet"), key=lambda p: p.name.split("-")[2:]):
        table = pq.read_table(path)
        found.append((table.schema.metadata[VERSION_KEY.encode()], table.schema.names, table.to_pylist()))
    return found


def test_the_feature_is_the_one_the_coordinator_defines() -> None:
    assert FORMAT_FEATURE == AUDIT_FORMAT == "ksidecar.audit.format"
    assert (version_at_level(0), version_at_level(1)) == (2, 3)
    assert schema_for(3).names[-4:] == ["client_software_name", "client_software_version", "denials",
                                        "throttle_time_ms"]
    assert schema_for(2).names == schema_for(3).names[:-4] and len(schema_for(2)) == 26


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_level_0_writes_v2_and_finalizing_level_1_switches_to_v3_in_new_files(
        tmp_path: Path, isolation: str) -> None:
    fleet = Fleet()
    audit = Audit(tmp_path, isolation, fleet)
    audit.feed(produce(1, SMALL), RDKAFKA)  # two partitions: two rows
    audit.audit.tick(time.time())
    fleet.levels[AUDIT_FORMAT] = 1  # the operator finalizes level 1; the next tick sees it
    audit.audit.tick(time.time())
    audit.feed(produce(2, SMALL), RDKAFKA)
    audit.feed(API_VERSIONS, None)  # a client that sent no ApiVersions v3 software fields
    audit.audit.close(30)

    (v2, names2, rows2), (v3, names3, rows3) = files(tmp_path)
    assert (v2, v3) == (b"2", b"3")
    assert len(names2) == 26 and "client_software_name" not in names2
    assert [r["correlation_id"] for r in rows2] == [1, 1]
    assert names3[-4:] == ["client_software_name", "client_software_version", "denials", "throttle_time_ms"]
    assert [(r["correlation_id"], r["client_software_name"], r["client_software_version"]) for r in rows3] == [
        (2, "confluent-kafka-python", "2.6.0-rdkafka-2.6.0"),
        (2, "confluent-kafka-python", "2.6.0-rdkafka-2.6.0"),
        (6, None, None),
    ]
    assert set(fleet.asked) == {"ksidecar.audit.format"}


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_the_level_read_after_configure_counts_from_the_first_exchange(tmp_path: Path, isolation: str) -> None:
    """A sidecar configures its observers before it reads /feature: the level it finds
    there applies to the very first row, not after the first tick."""
    fleet = Fleet()
    audit = Audit(tmp_path, isolation, fleet)
    fleet.levels[AUDIT_FORMAT] = 1
    audit.feed(produce(1, SMALL), RDKAFKA)
    audit.audit.close(30)
    ((version, names, rows),) = files(tmp_path)
    assert version == b"3" and len(names) == 30
    assert [r["client_software_name"] for r in rows] == ["confluent-kafka-python"] * 2


def test_without_features_the_audit_writes_version_2(tmp_path: Path) -> None:
    """No ZooKeeper, no finalized features: level 0, the format every release reads."""
    audit = AuditObserver()
    audit.configure(ObserverConfig({"observer.audit.dir": str(tmp_path)}))
    hub = ObserverHub([(audit, "audit", Settings())], DEFAULT_REGISTRY, None)
    tap = hub.tap("PLAINTEXT", "10.1.2.3", 40000, 2)
    request, response = API_VERSIONS
    header = decode_request_header(request[4:])
    tap.completed(header=header, response_header_version=0, principal="User:alice", client_software=RDKAFKA,
                  frame=request, request_size=len(request), received_at=1_700_000_000.5,
                  expects_response=True, local=False, response=response, elapsed=0.004, upstream_elapsed=0.003)
    worker = hub.workers[0]
    while worker.items:
        worker.deliver(worker.items.popleft())  # type: ignore[arg-type]
    audit.close(30)
    ((version, names, rows),) = files(tmp_path)
    assert version == b"2" and len(names) == 26 and len(rows) == 1


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_switch_completes_the_old_versions_files_without_waiting_for_traffic(
        tmp_path: Path, isolation: str) -> None:
    """Rows of the old version are visible as soon as the audit follows the new level (an
    operator, or a test, can see the switch happened), before any new exchange."""
    fleet = Fleet()
    audit = Audit(tmp_path, isolation, fleet)
    audit.feed(produce(1, SMALL), RDKAFKA)
    audit.audit.tick(time.time())
    assert files(tmp_path) == []  # in a journal, not yet a file
    fleet.levels[AUDIT_FORMAT] = 1
    deadline = time.monotonic() + 10  # the child process answers in its own time
    audit.audit.tick(time.time())
    while not files(tmp_path) and time.monotonic() < deadline:
        audit.audit.tick(time.time())
        time.sleep(0.01)
    ((version, _, rows),) = files(tmp_path)
    assert version == b"2" and [r["correlation_id"] for r in rows] == [1, 1]
    audit.audit.close(30)
    assert len(files(tmp_path)) == 1  # nothing recorded after the switch: no v3 file


def test_a_downgrade_to_level_0_writes_version_2_again(tmp_path: Path) -> None:
    fleet = Fleet()
    fleet.levels[AUDIT_FORMAT] = 1
    audit = Audit(tmp_path, "thread", fleet)
    audit.feed(produce(1, SMALL), RDKAFKA)
    del fleet.levels[AUDIT_FORMAT]  # downgraded (SAFE_DOWNGRADE to 0: absent from /feature)
    audit.audit.tick(time.time())
    audit.feed(produce(2, SMALL), RDKAFKA)
    audit.audit.close(30)
    assert [(v, [r["correlation_id"] for r in rows]) for v, _, rows in files(tmp_path)] == [
        (b"3", [1, 1]), (b"2", [2, 2])]
