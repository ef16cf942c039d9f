"""The audit's ``denials`` column (schema version 3): what the sidecar's ACLs refused of a
request, or would have in shadow mode, on the request's first row; null everywhere else.

Exchanges are built by hand and fed through a hub that is never started; the expected rows
are written out here, not computed. Both isolations (the process one starts a real child,
and Produce bodies past its pick size are picked in the parent: the denials must travel
with the facts either way). Level 0 (schema version 2) has no such column.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from coordinator.features import AUDIT_FORMAT
from observers.api import ObserverConfig
from observers.audit import AuditObserver
from observers.audit_schema import schema_for
from observers.hub import ObserverHub, Settings
from protocol.apis import DEFAULT_REGISTRY
from protocol.headers import decode_request_header
from tests.observers.test_audit_format import files
from tests.observers.test_audit_isolation import BIG, SMALL, produce
from tests.observers.test_audit_rows import metadata, response_frame
from tests.proxy.wire import request_frame

BOB = "User:bob"
WRITE_T1 = ("Topic", "t1", "Write", "shadow")
GROUP_READ = ("Group", "billing", "Read", "enforce")
DESCRIBE_SECRET = ("Topic", "secret", "Describe", "shadow")


class Audit:
    """An audit observer at ``ksidecar.audit.format`` ``level``; exchanges as bob."""

    def __init__(self, directory: Path, isolation: str, level: int) -> None:
        self.audit = AuditObserver()
        self.audit.configure(ObserverConfig(
            {"observer.audit.dir": str(directory), "observer.audit.isolation": isolation},
            registry=CollectorRegistry(), feature_level=lambda name: level if name == AUDIT_FORMAT else 0))
        self.hub = ObserverHub([(self.audit, "audit", Settings())], DEFAULT_REGISTRY, None)
        self.tap = self.hub.tap("SASL_PLAINTEXT", "10.1.2.3", 40000, 2)
        self.worker = self.hub.workers[0]

    def feed(self, exchange: tuple[bytes, bytes | None], denials: tuple[tuple[str, str, str, str], ...],
             received: float = 1_700_000_000.5) -> None:
        request, response = exchange
        header = decode_request_header(request[4:])
        head = DEFAULT_REGISTRY.api(header.api_key).response_header_version(header.api_version)
        self.tap.completed(header=header, response_header_version=head, principal=BOB, denials=denials,
                           frame=request, request_size=len(request), received_at=received,
                           expects_response=response is not None, local=False, response=response,
                           elapsed=0.004, upstream_elapsed=0.003)
        while self.worker.items:
            self.worker.deliver(self.worker.items.popleft())  # type: ignore[arg-type]

    def close(self) -> None:
        self.audit.tick(time.time())
        self.audit.close(30)


def join_group() -> tuple[bytes, bytes]:
    """A JoinGroup v5 answered GROUP_AUTHORIZATION_FAILED by the sidecar itself."""
    request = request_frame(11, 5, 9, {
        "GroupId": "billing", "SessionTimeoutMs": 6000, "RebalanceTimeoutMs": 6000, "MemberId": "",
        "GroupInstanceId": None, "ProtocolType": "consumer",
        "Protocols": [{"Name": "range", "Metadata": b""}]})
    response = response_frame(11, 5, 9, {
        "ThrottleTimeMs": 0, "ErrorCode": 30, "GenerationId": -1, "ProtocolName": "", "Leader": "",
        "MemberId": "", "Members": []})
    return request, response


def rows_of(directory: Path) -> list[dict[str, Any]]:
    ((version, names, rows),) = files(directory)
    assert version == b"3" and names[-2:] == ["denials", "throttle_time_ms"]
    return rows


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_denials_are_on_the_first_row_of_each_request_only(tmp_path: Path, isolation: str) -> None:
    audit = Audit(tmp_path, isolation, level=1)
    audit.feed(produce(1, SMALL), (WRITE_T1,))  # two partitions: the first row carries them
    audit.feed(produce(2, BIG), (WRITE_T1,))  # picked in the parent under process isolation
    audit.feed(metadata(3, {"orders": 2}, ("secret",)), (DESCRIBE_SECRET,))  # + an inventory row
    audit.feed(join_group(), (GROUP_READ,))
    audit.feed(produce(5, SMALL), ())  # nothing refused
    audit.close()

    got = [(r["correlation_id"], r["api_name"], r["first_row"], r["topic"], r["partition"], r["denials"])
           for r in rows_of(tmp_path)]
    write = [{"resource_type": "Topic", "resource_name": "t1", "operation": "Write", "mode": "shadow"}]
    assert got == [
        (1, "Produce", True, "t1", 0, write),
        (1, "Produce", False, "t1", 1, None),
        (2, "Produce", True, "t1", 0, write),
        (2, "Produce", False, "t1", 1, None),
        (3, "Metadata", True, None, None,
         [{"resource_type": "Topic", "resource_name": "secret", "operation": "Describe", "mode": "shadow"}]),
        (3, "Metadata", False, "orders", None, None),
        (9, "JoinGroup", True, None, None,
         [{"resource_type": "Group", "resource_name": "billing", "operation": "Read", "mode": "enforce"}]),
        (5, "Produce", True, "t1", 0, None),
        (5, "Produce", False, "t1", 1, None),
    ]


def test_several_denials_of_one_request_keep_their_order(tmp_path: Path) -> None:
    audit = Audit(tmp_path, "thread", level=1)
    denials = (("Topic", "t1", "Write", "enforce"), ("TransactionalId", "tx-1", "Write", "enforce"),
               ("Cluster", "kafka-cluster", "IdempotentWrite", "enforce"))
    audit.feed(produce(1, SMALL), denials)
    audit.close()
    first, second = rows_of(tmp_path)
    assert first["denials"] == [
        {"resource_type": "Topic", "resource_name": "t1", "operation": "Write", "mode": "enforce"},
        {"resource_type": "TransactionalId", "resource_name": "tx-1", "operation": "Write", "mode": "enforce"},
        {"resource_type": "Cluster", "resource_name": "kafka-cluster", "operation": "IdempotentWrite",
         "mode": "enforce"},
    ]
    assert second["denials"] is None


def test_level_0_writes_version_2_without_the_column(tmp_path: Path) -> None:
    audit = Audit(tmp_path, "thread", level=0)
    audit.feed(produce(1, SMALL), (WRITE_T1,))
    audit.close()
    ((version, names, rows),) = files(tmp_path)
    assert version == b"2" and "denials" not in names and len(rows) == 2


def test_the_column_is_a_nullable_list_of_four_strings() -> None:
    field = schema_for(3).field("denials")
    assert field.nullable
    assert field.type == pa.list_(pa.struct([
        pa.field("resource_type", pa.string(), nullable=False),
        pa.field("resource_name", pa.string(), nullable=False),
        pa.field("operation", pa.string(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),
    ]))
    assert "denials" not in schema_for(2).names and "denials" not in schema_for(1).names
