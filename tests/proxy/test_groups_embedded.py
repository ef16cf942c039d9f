"""Consumer groups through a sidecar whose coordinator is embedded (real Tansu, ZooKeeper, clients).

Tansu's own group coordinator is never asked: the sidecar answers FindCoordinator with its
own address and serves every group API. Each library's consumers read a 6-partition topic
in one group; every record must be consumed exactly once per group, offsets must land in
ZooKeeper at the documented paths (docs/coordinator.md), and a restarted group resumes
from them.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import trio
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from proxy.control.server import Sidecar
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.proxy.conftest import StartSidecar, sidecar_keys

# One worker runs these one after another (docs/testing.md): each drives three or four client
# threads and a sidecar in one process, and side by side they starved each other's
# heartbeats and rebalances on two cores.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("client-groups")]

PARTITIONS = 6
RECORDS = 20_000
#: Records a member takes per poll, and the seconds it spends on each batch: at most 1,000
#: records a second a member, so the group rebalances while there is still work to hand over.
BATCH = 250
PACE = 0.25


async def embedded(start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer,
                   chroot: str) -> Sidecar:
    return await start_sidecar(sidecar_keys(
        tansu.bootstrap,
        zookeeper_connect=f"{zookeeper.connect}{chroot}",
        sidecar_coordinator="embedded",
        group_initial_rebalance_delay_ms="200",
        group_min_session_timeout_ms="1000",
        sidecar_coordinator_metadata_refresh_ms="500",
        group_consumer_heartbeat_interval_ms="500",
    ))


def produce(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=str(i).encode(), partition=i % PARTITIONS)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def produce_more(bootstrap: str, topic: str, count: int) -> None:
    """``count`` more records, spread evenly over the partitions."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"more", partition=i % PARTITIONS)
    assert producer.flush(30) == 0


class Member(threading.Thread):
    """One consumer of the group: reads in batches, notes what it read, commits each batch
    synchronously (so a record is read again only if the coordinator lost a commit or gave
    a partition to two members at once)."""

    def __init__(self, bootstrap: str, group: str, topic: str, seen: Counter[tuple[int, int]],
                 lock: threading.Lock, extra: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.group, self.topic, self.extra = bootstrap, group, topic, extra
        self.seen, self.lock = seen, lock
        self.stop = threading.Event()
        self.error: BaseException | None = None
        #: Partitions this member read from.
        self.partitions: set[int] = set()

    def note(self, records: list[tuple[int, int]]) -> None:
        with self.lock:
            for partition_offset in records:
                self.seen[partition_offset] += 1
                self.partitions.add(partition_offset[-2])
        time.sleep(PACE)  # a consumer that works: the group must rebalance while it reads

    def run(self) -> None:
        try:
            self.consume()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def consume(self) -> None:
        raise NotImplementedError


class ConfluentMember(Member):
    def consume(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest", **self.extra})
        consumer.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                good = [m for m in consumer.consume(BATCH, 0.2) if m.error() is None]
                if good:
                    if self.topic.startswith("^"):  # a regex: several topics, keyed by name too
                        self.note([(m.topic(), m.partition(), m.offset()) for m in good])  # type: ignore[misc]
                    else:
                        self.note([(m.partition(), m.offset()) for m in good])
                    self.commit(consumer)
        finally:
            consumer.close()

    def commit(self, consumer: Any) -> None:
        """Commit synchronously. A commit that lands while the group completes a rebalance
        is refused as Kafka refuses it (``ClassicGroup.validateOffsetCommit``): with
        REBALANCE_IN_PROGRESS when it carries the new generation, ILLEGAL_GENERATION when it
        left before the member learnt it (a busy machine stretches that window); a
        cooperative member keeps its partitions through the rebalance and commits again
        when it is done. A KIP-848 member's commit that still carries the epoch before its
        assignment changed is refused with STALE_MEMBER_EPOCH (``ConsumerGroup
        .validateOffsetCommit``); librdkafka hands that to a synchronous commit, and the
        commit after the next heartbeat carries the new epoch, which is what Kafka's Java
        consumer does on its own."""
        from confluent_kafka import KafkaError, KafkaException

        retry = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION,
                 KafkaError.STALE_MEMBER_EPOCH}
        for _ in range(100):
            try:
                consumer.commit(asynchronous=False)
                return
            except KafkaException as exc:
                if exc.args[0].code() not in retry:
                    raise
                time.sleep(0.1)
        raise AssertionError("commits were refused for 10 s: the rebalance never completed")


class KafkaPythonMember(Member):
    def consume(self) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 session_timeout_ms=6000, heartbeat_interval_ms=1000, **self.extra)
        try:
            while not self.stop.is_set():
                batch = consumer.poll(timeout_ms=200, max_records=BATCH)
                records = [(r.partition, r.offset) for rs in batch.values() for r in rs]
                if records:
                    self.note(records)
                    consumer.commit()
        finally:
            consumer.close()


class AioMember(Member):
    """aiokafka rejoins from a background task: a rebalance listener makes the rejoin wait
    until the batch in hand is committed (its documented way to avoid redelivery)."""

    def consume(self) -> None:
        import asyncio

        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

        async def main() -> None:
            in_hand = asyncio.Lock()

            class WaitForCommit(ConsumerRebalanceListener):  # type: ignore[misc]
                async def on_partitions_revoked(self, revoked: object) -> None:
                    async with in_hand:
                        pass

                async def on_partitions_assigned(self, assigned: object) -> None:
                    pass

            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                                        enable_auto_commit=False, auto_offset_reset="earliest",
                                        session_timeout_ms=6000, heartbeat_interval_ms=1000, **self.extra)
            consumer.subscribe([self.topic], listener=WaitForCommit())
            await consumer.start()
            try:
                while not self.stop.is_set():
                    batch = await consumer.getmany(timeout_ms=200, max_records=BATCH)
                    async with in_hand:
                        records = [(r.partition, r.offset) for rs in batch.values() for r in rs]
                        if records:
                            self.note(records)
                            await consumer.commit()
            finally:
                await consumer.stop()

        asyncio.run(main())


async def wait_for(predicate: Callable[[], bool], seconds: float) -> None:
    with trio.fail_after(seconds):
        while not predicate():
            await trio.sleep(0.1)


def offsets_in_zookeeper(connect: str, chroot: str, group: str, topic: str) -> dict[int, int]:
    zk = KazooClient(hosts=connect + chroot, timeout=10)
    zk.start(timeout=10)
    try:
        base = f"/consumers/{group}/offsets/{topic}"
        return {int(p): json.loads(zk.get(f"{base}/{p}")[0])["offset"] for p in zk.get_children(base)}
    finally:
        zk.stop()
        zk.close()


VARIANTS = [
    pytest.param(ConfluentMember, {"partition.assignment.strategy": "range"}, id="confluent-range"),
    pytest.param(ConfluentMember, {"partition.assignment.strategy": "cooperative-sticky"},
                 id="confluent-cooperative"),
    pytest.param(ConfluentMember, {"group.protocol": "consumer"}, id="confluent-kip848"),
    pytest.param(KafkaPythonMember, {}, id="kafka-python"),
    pytest.param(AioMember, {}, id="aiokafka"),
]


@pytest.mark.parametrize(("kind", "extra"), VARIANTS)
async def test_group_reads_every_record_once(
    start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer,
    kind: type[Member], extra: dict[str, Any],
) -> None:
    chroot = f"/groups-{uuid.uuid4().hex[:8]}"
    sidecar = await embedded(start_sidecar, tansu, zookeeper, chroot)
    bootstrap = f"127.0.0.1:{sidecar.bound['PLAINTEXT'].port}"
    topic, group = f"g-{uuid.uuid4().hex[:8]}", f"grp-{uuid.uuid4().hex[:6]}"
    await trio.to_thread.run_sync(produce, bootstrap, topic)
    seen: Counter[tuple[int, int]] = Counter()
    lock = threading.Lock()
    members = [kind(bootstrap, group, topic, seen, lock, extra) for _ in range(3)]
    try:
        for member in members[:2]:
            member.start()
        await wait_for(lambda: len(seen) >= RECORDS // 4, 60)
        members[2].start()  # a join mid-way: a rebalance
        await wait_for(lambda: len(seen) >= RECORDS // 2 and bool(members[2].partitions), 60)
        members[0].stop.set()  # a leave mid-way: another
        await trio.to_thread.run_sync(members[0].join, 30)
        # What the leaver had not read yet, the two that stayed read: all of it, once.
        unread_when_it_left = RECORDS - len(seen)
        assert unread_when_it_left > 0
        await wait_for(lambda: len(seen) >= RECORDS, 90)
    finally:  # a failed wait leaves no client behind to knock on a closed sidecar for the rest of the run
        for member in members:
            member.stop.set()
        for member in members:
            if member.ident is not None:  # started
                await trio.to_thread.run_sync(member.join, 30)
    for member in members:
        assert member.error is None, member.error
    assert len(seen) == RECORDS
    assert max(seen.values()) == 1, f"{sum(1 for v in seen.values() if v > 1)} record(s) read twice"
    stored = await trio.to_thread.run_sync(offsets_in_zookeeper, zookeeper.connect, chroot, group, topic)
    assert stored == {p: len(range(p, RECORDS, PARTITIONS)) for p in range(PARTITIONS)}
    handled = sidecar.metrics.registry.get_sample_value(
        "ksidecar_group_request_handling_seconds_count",
        {"api": "ConsumerGroupHeartbeat" if extra.get("group.protocol") == "consumer" else "Heartbeat"})
    assert handled is not None and handled > 0  # the heartbeat handling time is measured
    # The group restarted: it resumes from the committed offsets and reads only what is new.
    await trio.to_thread.run_sync(produce_more, bootstrap, topic, 600)
    seen.clear()
    again = kind(bootstrap, group, topic, seen, lock, extra)
    again.start()
    await wait_for(lambda: len(seen) >= 600, 60)
    await trio.sleep(1)
    again.stop.set()
    await trio.to_thread.run_sync(again.join, 30)
    assert again.error is None, again.error
    assert sorted(seen) == sorted((p, len(range(p, RECORDS, PARTITIONS)) + i)
                                  for p in range(PARTITIONS) for i in range(100))


def commit_one_group(bootstrap: str, group: str, topic: str) -> None:
    """A classic group that read partition 0 up to offset 7, committed, and left (Empty)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    consumer.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
    consumer.close()


def admin_confluent(bootstrap: str, group: str, topic: str) -> dict[str, Any]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    described = admin.describe_consumer_groups([group])[group].result(10)
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])])
    committed = {tp.partition: tp.offset for tp in offsets[group].result(10).topic_partitions}
    admin.delete_consumer_groups([group])[group].result(10)
    after = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    return {"listed": group in listed, "state": str(described.state).rsplit(".", 1)[-1],
            "committed": committed, "after": group in after}


def admin_kafka_python(bootstrap: str, group: str, topic: str) -> dict[str, Any]:
    from kafka import KafkaAdminClient

    def names(groups: Any) -> set[str]:
        return {g["group_id"] if isinstance(g, dict) else g[0] for g in groups}

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        listed = names(admin.list_groups())
        described = admin.describe_groups([group])
        state = described[group]["group_state"] if isinstance(described, dict) else described[0]["group_state"]
        offsets = admin.list_group_offsets({group: None})[group]
        committed = {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}
        admin.delete_groups([group])
        after = names(admin.list_groups())
    finally:
        admin.close()
    return {"listed": group in listed, "state": state, "committed": committed, "after": group in after}


def admin_aiokafka(bootstrap: str, group: str, topic: str) -> dict[str, Any]:
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient

    async def main() -> dict[str, Any]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            listed = {g[0] for g in await admin.list_consumer_groups()}
            described = await admin.describe_consumer_groups([group])
            state = described[0].groups[0][2] if hasattr(described[0], "groups") else described[0]
            offsets = await admin.list_consumer_group_offsets(group)
            committed = {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}
        finally:
            await admin.close()
        # aiokafka 0.14's admin client has no DeleteGroups call: its result is not asked.
        return {"listed": group in listed, "state": state, "committed": committed, "after": None}

    return asyncio.run(main())


@pytest.mark.parametrize("admin", [admin_confluent, admin_kafka_python, admin_aiokafka],
                         ids=["confluent-kafka", "kafka-python", "aiokafka"])
async def test_admin_apis_list_describe_offsets_and_delete_groups(
    start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer,
    admin: Callable[[str, str, str], dict[str, Any]],
) -> None:
    chroot = f"/admin-{uuid.uuid4().hex[:8]}"
    sidecar = await embedded(start_sidecar, tansu, zookeeper, chroot)
    bootstrap = f"127.0.0.1:{sidecar.bound['PLAINTEXT'].port}"
    topic, group = f"a-{uuid.uuid4().hex[:8]}", f"adm-{uuid.uuid4().hex[:6]}"
    await trio.to_thread.run_sync(produce_more, bootstrap, topic, 12)
    await trio.to_thread.run_sync(commit_one_group, bootstrap, group, topic)
    result = await trio.to_thread.run_sync(admin, bootstrap, group, topic)
    assert result["listed"]
    assert str(result["state"]).upper() == "EMPTY"
    assert result["committed"] == {0: 7}
    if result["after"] is None:
        return
    assert result["after"] is False
    with pytest.raises(NoNodeError):  # the offsets went with the group
        await trio.to_thread.run_sync(offsets_in_zookeeper, zookeeper.connect, chroot, group, topic)


@pytest.mark.parametrize("extra", [
    pytest.param({"partition.assignment.strategy": "range", "topic.metadata.refresh.interval.ms": 500},
                 id="classic"),
    pytest.param({"group.protocol": "consumer"}, id="kip848"),
])
async def test_a_new_topic_matching_the_subscription_rebalances_the_group_and_is_consumed(
    start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer, extra: dict[str, Any],
) -> None:
    """The subscription is a regex; a topic created later that matches it is assigned and read
    (for KIP-848 the sidecar notices it in its metadata refresh and rebalances the group).

    Tansu 0.6 has no CreatePartitions, so a partition-count change cannot be made here; the
    core's handling of one is tested in tests/coordinator, and it takes the same path.
    """
    chroot = f"/grow-{uuid.uuid4().hex[:8]}"
    sidecar = await embedded(start_sidecar, tansu, zookeeper, chroot)
    bootstrap = f"127.0.0.1:{sidecar.bound['PLAINTEXT'].port}"
    prefix, group = f"grow{uuid.uuid4().hex[:8]}", f"grow-{uuid.uuid4().hex[:6]}"
    await trio.to_thread.run_sync(produce_more, bootstrap, f"{prefix}-a", 60)
    seen: Counter[tuple[int, int]] = Counter()
    lock = threading.Lock()
    members = [ConfluentMember(bootstrap, group, f"^{prefix}-.*", seen, lock, extra) for _ in range(2)]
    for member in members:
        member.start()
    await wait_for(lambda: len(seen) >= 60, 60)
    await trio.to_thread.run_sync(produce_more, bootstrap, f"{prefix}-b", 60)
    await wait_for(lambda: len(seen) >= 120, 60)
    for member in members:
        member.stop.set()
    for member in members:
        await trio.to_thread.run_sync(member.join, 30)
        assert member.error is None, member.error
    assert max(seen.values()) == 1
