"""The rig's components are real: a broker that stores and serves records, a ZooKeeper that
keeps znodes, a Spark that computes. Expectations are written out by hand."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AdminClient,
    NewTopic,
)
from kazoo.client import KazooClient

from proxy.tools.rig.tansu import TansuServer, start_proxy
from proxy.tools.rig.zookeeper import ZooKeeperServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

RECORDS = 1000
PARTITIONS = 3


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)]
    )
    futures[topic].result(timeout=30)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=value, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0, "records still in flight after 30 s"
    assert failures == []


def _consume_in_group(
    bootstrap: str, topic: str, group: str, expected: int, timeout: float = 60.0
) -> tuple[list[bytes], int]:
    """Consume `expected` records, committing as we go; return the values and committed total."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,  # Tansu holds JoinGroup for session.timeout.ms / 2
    }
    consumer = Consumer(config)
    try:
        consumer.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(values) < expected and time.monotonic() < deadline:
            batch = consumer.consume(num_messages=500, timeout=1.0)
            for message in batch:
                assert message.error() is None, message.error()
                value = message.value()
                assert value is not None
                values.append(value)
            if batch:
                consumer.commit(asynchronous=False)
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        committed = sum(tp.offset for tp in consumer.committed(partitions, timeout=10))
    finally:
        consumer.close()
    return values, committed


def test_tansu_serves_produced_records_to_a_consumer_group(tansu: TansuServer) -> None:
    topic, group = _unique("rig-topic"), _unique("rig-group")
    values = [f"value-{i:04d}".encode() for i in range(RECORDS)]
    _create_topic(tansu.bootstrap, topic)
    _produce(tansu.bootstrap, topic, values)

    received, committed = _consume_in_group(tansu.bootstrap, topic, group, RECORDS)

    assert len(received) == RECORDS
    assert sorted(received) == values
    assert committed == RECORDS


def test_tansu_answers_api_versions_with_the_core_apis(tansu: TansuServer) -> None:
    versions = tansu.api_versions()
    # Produce, Fetch, Metadata, FindCoordinator, ApiVersions
    assert {0, 1, 3, 10, 18} <= versions.keys()
    assert versions[18][0] == 0


def test_tansu_proxy_forwards_to_the_broker(tansu: TansuServer, tmp_path: Path) -> None:
    topic, group = _unique("rig-proxied"), _unique("rig-group")
    values = [f"proxied-{i}".encode() for i in range(50)]
    with start_proxy(tmp_path, tansu.bootstrap) as proxy:
        assert proxy.api_versions() == tansu.api_versions()
        _create_topic(proxy.bootstrap, topic)
        _produce(proxy.bootstrap, topic, values)
    # Read back directly from the broker: the proxy delivered the records to it.
    received, _ = _consume_in_group(tansu.bootstrap, topic, group, len(values))
    assert sorted(received) == sorted(values)


def test_zookeeper_keeps_an_ephemeral_znode(zookeeper: ZooKeeperServer, zk_path: str) -> None:
    client = KazooClient(hosts=zookeeper.connect, timeout=10.0)
    client.start(timeout=10.0)
    try:
        client.ensure_path(zk_path)
        node = f"{zk_path}/member"
        client.create(node, b"hello", ephemeral=True)

        data, stat = client.get(node)
        assert data == b"hello"
        assert stat.ephemeralOwner == client.client_id[0]
        assert client.get_children(zk_path) == ["member"]

        client.delete(node)
        assert client.exists(node) is None
    finally:
        client.stop()
        client.close()


def test_zookeeper_connect_string_with_chroot(zookeeper: ZooKeeperServer, zk_path: str) -> None:
    root = KazooClient(hosts=zookeeper.connect, timeout=10.0)
    root.start(timeout=10.0)
    try:
        root.ensure_path(zk_path)  # a client does not create its chroot
        chrooted = KazooClient(hosts=zookeeper.connect_string(zk_path), timeout=10.0)
        chrooted.start(timeout=10.0)
        try:
            chrooted.create("/feature", b"{}")
        finally:
            chrooted.stop()
            chrooted.close()
        assert root.get(f"{zk_path}/feature")[0] == b"{}"
    finally:
        root.stop()
        root.close()
    assert zookeeper.four_letter_word("ruok") == "imok"


def test_spark_counts_by_key(spark: SparkSession) -> None:
    rows = [
        ("produce", "10.0.0.1"),
        ("fetch", "10.0.0.1"),
        ("produce", "10.0.0.2"),
        ("metadata", "10.0.0.3"),
        ("produce", "10.0.0.1"),
        ("fetch", "10.0.0.2"),
    ]
    df = spark.createDataFrame(rows, ["api", "client_ip"])

    counts = {row["api"]: row["count"] for row in df.groupBy("api").count().collect()}

    assert counts == {"produce": 3, "fetch": 2, "metadata": 1}
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
