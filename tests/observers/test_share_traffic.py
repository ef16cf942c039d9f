"""The audit's rows of a ShareFetch response (KIP-932): records out per topic-partition, as
for Fetch. Batches are built by kafka-python's record builder (no code shared with ours), the
response by our encoder from values written here; expected counts and sizes by hand."""

from __future__ import annotations

import uuid

from observers.traffic import PartitionTraffic, TopicNames, share_fetch_traffic
from protocol.apis import DEFAULT_REGISTRY
from protocol.schema import encode
from tests.bench.kafka import record_batch

ORDERS = uuid.UUID(int=7)


def share_fetch_body(version: int, parts: list[tuple[int, int, bytes]]) -> bytes:
    """A ShareFetch response body: topic ORDERS, ``(partition, error, records)`` each."""
    return encode(DEFAULT_REGISTRY.api(78).response, version, {
        "ThrottleTimeMs": 25, "ErrorCode": 0, "ErrorMessage": None, "AcquisitionLockTimeoutMs": 30000,
        "Responses": [{"TopicId": ORDERS, "Partitions": [
            {"PartitionIndex": index, "ErrorCode": error, "ErrorMessage": None, "AcknowledgeErrorCode": 0,
             "AcknowledgeErrorMessage": None, "CurrentLeader": {"LeaderId": -1, "LeaderEpoch": -1},
             "Records": records, "AcquiredRecords": [{"FirstOffset": 0, "LastOffset": 0, "DeliveryCount": 1}]}
            for index, error, records in parts]}],
        "NodeEndpoints": []})


def test_share_fetch_rows_count_the_records_each_member_received() -> None:
    three, two = record_batch(3, 10), record_batch(2, 10)
    names = TopicNames()
    names.learn_pairs([("orders", ORDERS)])
    for version in (1, 2):
        body = memoryview(share_fetch_body(version, [(0, 0, three + two), (1, 0, b""), (2, 6, b"")]))
        assert share_fetch_traffic(version, body, names) == [
            PartitionTraffic("orders", 0, len(three) + len(two), 5, 0),
            PartitionTraffic("orders", 1, 0, 0, 0),
            PartitionTraffic("orders", 2, 0, 0, 6),
        ]


def test_a_topic_id_nobody_named_is_reported_as_its_id() -> None:
    body = memoryview(share_fetch_body(1, [(0, 0, record_batch(1, 10))]))
    (row,) = share_fetch_traffic(1, body, TopicNames())
    assert row.topic == str(ORDERS) and row.records == 1
