"""Real client libraries through a real sidecar in front of the real Tansu broker.

Each of confluent-kafka, kafka-python and aiokafka creates a topic, produces 10,000
records, consumes them all in a consumer group with commits, lists groups and describes
the cluster. Every broker address a client is given must be the sidecar's, and every
record must arrive byte-identical (SHA-256 over the values in offset order, computed on
both sides), the large Fetch responses among them forwarded while they arrived.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from typing import Any

import pytest
import trio

from proxy.control.server import Sidecar
from tests.proxy.conftest import StartSidecar

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECORDS = 10_000
GROUP_SETTINGS = {"session_timeout_ms": 6000}


def payloads(seed: str) -> list[bytes]:
    """Distinct, varied-length values (so a dropped, reordered or altered record shows)."""
    return [
        hashlib.sha256(f"{seed}-{i}".encode()).digest() * (1 + i % 7) + os.urandom(i % 5)
        for i in range(RECORDS)
    ]


def digest(values: list[bytes]) -> str:
    h = hashlib.sha256()
    for v in values:
        h.update(len(v).to_bytes(4, "big"))
        h.update(v)
    return h.hexdigest()


def assert_only_sidecar(addresses: set[tuple[str, int]], sidecar: Sidecar) -> None:
    bound = sidecar.bound["PLAINTEXT"]
    assert addresses, "the client saw no broker at all"
    assert addresses == {("127.0.0.1", bound.port)}, f"client saw {addresses}, sidecar is {bound}"


def run_confluent(bootstrap: str, topic: str, group: str, values: list[bytes]) -> dict[str, Any]:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for v in values:
        producer.produce(topic, v)
        producer.poll(0)
    assert producer.flush(30) == 0
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 6000,
    })
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = Deadline(90)
    while len(got) < len(values) and not deadline.passed():
        for message in consumer.consume(1000, timeout=1.0):
            assert message.error() is None, message.error()
            got.append(message.value())
        if got:
            consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    brokers = consumer.list_topics(timeout=10).brokers
    seen = {(b.host, b.port) for b in brokers.values()}
    consumer.close()
    groups = admin.list_consumer_groups().result(timeout=30)
    cluster = admin.describe_cluster().result(timeout=30)
    seen |= {(n.host, n.port) for n in cluster.nodes}
    described = admin.describe_consumer_groups([group])[group].result(timeout=30)
    seen.add((described.coordinator.host, described.coordinator.port))
    return {
        "values": got,
        "committed": committed,
        "groups": {g.group_id for g in groups.valid},
        "seen": seen,
    }


def run_kafka_python(bootstrap: str, topic: str, group: str, values: list[bytes]) -> dict[str, Any]:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for v in values:
        producer.send(topic, v)
    producer.flush(30)
    seen = {(b.host, b.port) for b in producer._metadata.brokers()}
    producer.close()
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
        enable_auto_commit=False, **GROUP_SETTINGS,
    )
    got: list[bytes] = []
    deadline = Deadline(90)
    while len(got) < len(values) and not deadline.passed():
        for records in consumer.poll(timeout_ms=1000).values():
            got.extend(r.value for r in records)
        if got:
            consumer.commit()
    seen |= {(b.host, b.port) for b in consumer._client.cluster.brokers()}
    consumer.close()
    from kafka import TopicPartition

    offsets = admin.list_group_offsets({group: [TopicPartition(topic, 0)]})[group]
    committed = offsets[TopicPartition(topic, 0)].offset
    groups = {g["group_id"] if isinstance(g, dict) else g[0] for g in admin.list_groups()}
    cluster = admin.describe_cluster()
    seen |= {(b["host"], b["port"]) for b in cluster["brokers"]}
    admin.close()
    return {"values": got, "committed": committed, "groups": groups, "seen": seen}


def run_aiokafka(bootstrap: str, topic: str, group: str, values: list[bytes]) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def main() -> dict[str, Any]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 1, 1)])
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        await producer.start()
        batch = [await producer.send(topic, v) for v in values]
        await asyncio.gather(*batch)
        seen = {(b.host, b.port) for b in producer.client.cluster.brokers()}
        await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=6000,
        )
        await consumer.start()
        got: list[bytes] = []
        loop = asyncio.get_running_loop()
        end = loop.time() + 90
        while len(got) < len(values) and loop.time() < end:
            result = await consumer.getmany(timeout_ms=1000, max_records=2000)
            for records in result.values():
                got.extend(r.value for r in records)
            if got:
                await consumer.commit()
        committed = await consumer.committed(TopicPartition(topic, 0))
        seen |= {(b.host, b.port) for b in consumer._client.cluster.brokers()}
        await consumer.stop()
        groups = {g[0] if isinstance(g, tuple) else g for g in await admin.list_consumer_groups()}
        cluster = await admin.describe_cluster()
        seen |= {(b["host"], b["port"]) for b in cluster["brokers"]}
        await admin.close()
        return {"values": got, "committed": committed, "groups": groups, "seen": seen}

    return asyncio.run(main())


class Deadline:
    """A wall-clock deadline usable from a worker thread (no trio there)."""

    def __init__(self, seconds: float) -> None:
        import time

        self._time = time.monotonic
        self._end = self._time() + seconds

    def passed(self) -> bool:
        return self._time() >= self._end


CLIENTS = {
    "confluent-kafka": run_confluent,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_client_round_trip_through_sidecar(client: str, start_sidecar: StartSidecar) -> None:
    sidecar = await start_sidecar()
    bootstrap = f"127.0.0.1:{sidecar.bound['PLAINTEXT'].port}"
    topic = f"t-{client}-{uuid.uuid4().hex[:8]}"
    group = f"g-{client}-{uuid.uuid4().hex[:8]}"
    values = payloads(topic)
    with trio.fail_after(240):
        result = await trio.to_thread.run_sync(CLIENTS[client], bootstrap, topic, group, values)
    assert len(result["values"]) == RECORDS
    assert digest(result["values"]) == digest(values)
    assert result["committed"] == RECORDS
    assert group in result["groups"]
    assert_only_sidecar(result["seen"], sidecar)
    # The sidecar saw the traffic: forwarded produce and fetch requests were counted.
    metrics = sidecar.metrics
    forwarded = {
        s.labels["api"]
        for family in metrics.registry.collect()
        if family.name == "ksidecar_requests"
        for s in family.samples
        if s.name == "ksidecar_requests_total" and s.labels["outcome"] == "forwarded" and s.value > 0
    }
    assert {"Produce", "Fetch", "Metadata", "FindCoordinator", "JoinGroup", "SyncGroup",
            "OffsetCommit"} <= forwarded
    # Fetch responses of over a megabyte went on while they arrived (cut-through), and
    # every record still arrived byte-identical (the digest above).
    streamed = metrics.registry.get_sample_value("ksidecar_streamed_responses_total", {"api": "Fetch"})
    assert streamed, "no Fetch response was forwarded while it arrived"
