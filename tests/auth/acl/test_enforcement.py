"""ACLs enforced on the data path (``sidecar.authorizer=acls``), with real clients, a real
Tansu and real ZooKeeper.

alice may Write and Read topics prefixed ``orders-`` and Read her group (each test's own
``billing-…``); bob has no ACL at all. confluent-kafka, kafka-python and aiokafka as alice
produce and consume in the group; as bob they get Kafka's authorization errors from their own
client library, and bob's topic listing does not show alice's topic. A DENY for alice's host
wins over her ALLOW. Shadow mode refuses nothing and counts what it would have refused.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
import trio

from proxy.auth.acl.model import (
    AclBinding,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from proxy.tools.rig.tansu import TansuServer
from tests.auth.conftest import USERS, SaslRig, StartSasl, new_topic
from tests.auth.test_clients import confluent_config, python_client_config
from tests.proxy.wire import sample

pytestmark = pytest.mark.integration

MECHANISM = "SCRAM-SHA-256"
GROUP = "billing"
SESSION_MS = 6000
"""The consumers' group session: Tansu holds a first JoinGroup for half of it (kafka-python's
and aiokafka's default of 10 s would hold it 5 s)."""
RECORDS = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(3)]
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30


def acl(rtype: ResourceType, name: str, op: Operation, *, principal: str = "User:alice", host: str = "*",
        prefixed: bool = False, deny: bool = False) -> AclBinding:
    pattern = ResourcePattern(rtype, name, PatternType.PREFIXED if prefixed else PatternType.LITERAL)
    return AclBinding(pattern, AclEntry(principal, host, op, Permission.DENY if deny else Permission.ALLOW))


def new_group() -> str:
    """A group of the test's own: ``billing-<random>``. A member that never left (aiokafka sends
    no LeaveGroup in Tansu's generation 0) stays in its group for its session, and a later
    join of the same group on the session's broker would wait it out."""
    return f"{GROUP}-{uuid.uuid4().hex[:8]}"


def alice_acls(group: str) -> list[AclBinding]:
    return [
        acl(ResourceType.TOPIC, "orders-", Operation.WRITE, prefixed=True),
        acl(ResourceType.TOPIC, "orders-", Operation.READ, prefixed=True),
        acl(ResourceType.GROUP, group, Operation.READ),
    ]


async def orders_topic(tansu: TansuServer) -> str:
    return await new_topic(tansu, "orders-")


# -- the three clients, as one user: produce, then consume in the group with a commit ---------


def confluent_flow(bootstrap: str, user: str, topic: str, group: str) -> dict[str, Any]:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

    common = confluent_config(bootstrap, MECHANISM, user, USERS[user])
    out: dict[str, Any] = {"delivery": []}
    producer = Producer({**common, "linger.ms": 1, "message.timeout.ms": 8000})

    def delivered(err: Any, _msg: Any) -> None:
        out["delivery"].append(None if err is None else err.code())

    for key, value in RECORDS:
        producer.produce(topic, value=value, key=key, partition=0, on_delivery=delivered)
    producer.flush(20)
    listed = producer.list_topics(timeout=10)
    out["listed"] = topic in listed.topics and listed.topics[topic].error is None
    # The end of the partition is an event (enable.partition.eof): a consumer that has read
    # all there is stops there rather than polling out its 20 s.
    consumer = Consumer({**common, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
                         "enable.partition.eof": True})
    got: list[tuple[bytes, bytes]] = []
    try:
        consumer.subscribe([topic])
        for _ in range(40):
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:  # else all there is was read
                    out["consume_error"] = error.code()
                break
            got.append((message.key(), message.value()))
            if len(got) == len(RECORDS):
                consumer.commit(asynchronous=False)
                break
    except KafkaException as exc:
        out["consume_error"] = exc.args[0].code()
    finally:
        consumer.close()
    out["got"] = got
    return out


def kafka_python_flow(bootstrap: str, user: str, topic: str, group: str) -> dict[str, Any]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError

    common = python_client_config(bootstrap, MECHANISM, user, USERS[user])
    out: dict[str, Any] = {"delivery": []}
    producer = KafkaProducer(**common, max_block_ms=8000, request_timeout_ms=8000, retries=0)
    try:
        for key, value in RECORDS:
            try:
                producer.send(topic, value=value, key=key, partition=0).get(timeout=10)
                out["delivery"].append(None)
            except KafkaError as exc:
                out["delivery"].append(type(exc).__name__)
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(**common, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=SESSION_MS)
    got: list[tuple[bytes, bytes]] = []
    try:
        out["listed"] = topic in consumer.topics()
        consumer.subscribe([topic])
        # Polls until every record came or 60 s passed: joining the group waits on the
        # broker's rebalance, which a busy machine can stretch past any idle timeout.
        deadline = time.monotonic() + 60
        while len(got) < len(RECORDS) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((message.key, message.value) for message in records)
        if len(got) == len(RECORDS):
            consumer.commit()
    except KafkaError as exc:
        out["consume_error"] = type(exc).__name__
    finally:
        consumer.close()
    out["got"] = got
    return out


def aiokafka_flow(bootstrap: str, user: str, topic: str, group: str) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async def main() -> dict[str, Any]:
        common = python_client_config(bootstrap, MECHANISM, user, USERS[user])
        out: dict[str, Any] = {"delivery": []}
        producer = AIOKafkaProducer(**common, request_timeout_ms=8000)
        await producer.start()
        try:
            for key, value in RECORDS:
                try:
                    async with asyncio.timeout(10):
                        await producer.send_and_wait(topic, value=value, key=key, partition=0)
                    out["delivery"].append(None)
                except (KafkaError, TimeoutError) as exc:
                    out["delivery"].append(type(exc).__name__)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**common, group_id=group, auto_offset_reset="earliest",
                                    enable_auto_commit=False, session_timeout_ms=SESSION_MS)
        got: list[tuple[bytes, bytes]] = []
        await consumer.start()
        try:
            out["listed"] = topic in await consumer.topics()
            consumer.subscribe([topic])
            async with asyncio.timeout(15):
                while len(got) < len(RECORDS):
                    message = await consumer.getone()
                    assert message.key is not None and message.value is not None
                    got.append((message.key, message.value))
            await consumer.commit()
        except (KafkaError, TimeoutError) as exc:
            out["consume_error"] = type(exc).__name__
        finally:
            await consumer.stop()
        out["got"] = got
        return out

    return asyncio.run(main())


FLOWS = {"confluent-kafka": confluent_flow, "kafka-python": kafka_python_flow, "aiokafka": aiokafka_flow}


async def started(sasl_sidecar: StartSasl, group: str, *, mode: str = "enforce") -> SaslRig:
    rig = await sasl_sidecar(sidecar_authorizer="acls", sidecar_authorizer_mode=mode)
    assert rig.sidecar.acls is not None
    await rig.sidecar.acls.create(alice_acls(group))
    return rig


@pytest.mark.parametrize("client", sorted(FLOWS))
async def test_alice_is_served_and_bob_refused(client: str, sasl_sidecar: StartSasl, tansu: TansuServer) -> None:
    group = new_group()
    rig = await started(sasl_sidecar, group)
    topic = await orders_topic(tansu)
    flow = FLOWS[client]
    with trio.fail_after(120):
        alice = await trio.to_thread.run_sync(flow, rig.bootstrap, "alice", topic, group)
        bob = await trio.to_thread.run_sync(flow, rig.bootstrap, "bob", topic, group)
    assert alice["delivery"] == [None] * len(RECORDS)
    assert alice["got"] == RECORDS and "consume_error" not in alice
    assert alice["listed"] is True
    # bob: every send refused with the library's own authorization error, nothing read, and
    # the topic not in his listing.
    refused = {"confluent-kafka": TOPIC_AUTHORIZATION_FAILED, "kafka-python": "TopicAuthorizationFailedError",
               "aiokafka": "TopicAuthorizationFailedError"}[client]
    assert bob["delivery"] == [refused] * len(RECORDS)
    assert bob["got"] == []
    assert bob["listed"] is False
    # A client learns the refusal from Metadata (Describe) before it would produce.
    assert sample(rig.sidecar, "ksidecar_authorization_denials_total",
                  operation="Describe", resource_type="Topic", mode="enforce") >= 1


async def test_bob_group_refused(sasl_sidecar: StartSasl, tansu: TansuServer) -> None:
    """With Read on the topic but not on the group, bob's group membership is refused."""
    group = new_group()
    rig = await started(sasl_sidecar, group)
    topic = await orders_topic(tansu)
    assert rig.sidecar.acls is not None
    await rig.sidecar.acls.create([acl(ResourceType.TOPIC, topic, Operation.READ, principal="User:bob")])
    with trio.fail_after(60):
        bob = await trio.to_thread.run_sync(confluent_flow, rig.bootstrap, "bob", topic, group)
    assert bob["got"] == []
    assert bob["consume_error"] == GROUP_AUTHORIZATION_FAILED
    # FindCoordinator (Group Describe) is the first refusal a consumer meets, as with Kafka.
    assert sample(rig.sidecar, "ksidecar_authorization_denials_total",
                  operation="Describe", resource_type="Group", mode="enforce") >= 1


async def test_deny_for_her_host_wins(sasl_sidecar: StartSasl, tansu: TansuServer) -> None:
    group = new_group()
    rig = await started(sasl_sidecar, group)
    topic = await orders_topic(tansu)
    assert rig.sidecar.acls is not None
    await rig.sidecar.acls.create([acl(ResourceType.TOPIC, topic, Operation.WRITE, host="127.0.0.1", deny=True)])
    with trio.fail_after(60):
        alice = await trio.to_thread.run_sync(confluent_flow, rig.bootstrap, "alice", topic, group)
    assert alice["delivery"] == [TOPIC_AUTHORIZATION_FAILED] * len(RECORDS)


async def test_shadow_mode_refuses_nothing_and_counts(sasl_sidecar: StartSasl, tansu: TansuServer) -> None:
    rig = await started(sasl_sidecar, new_group(), mode="shadow")
    topic = await orders_topic(tansu)
    with trio.fail_after(60):
        bob = await trio.to_thread.run_sync(confluent_flow, rig.bootstrap, "bob", topic, f"g-{topic}")
    assert bob["delivery"] == [None] * len(RECORDS)
    assert bob["got"] == RECORDS
    assert sample(rig.sidecar, "ksidecar_authorization_denials_total",
                  operation="Write", resource_type="Topic", mode="shadow") >= 1
    assert sample(rig.sidecar, "ksidecar_authorization_denials_total",
                  operation="Describe", resource_type="Group", mode="shadow") >= 1


def regex_consume(bootstrap: str, user: str, regex: str, group: str, want: int,
                  peek: Any = None) -> dict[str, int]:
    """Consume with group.protocol=consumer and a regex subscription; records per topic
    (and ``peek()``'s answer while the member is still in the group, under ``"peek"``)."""
    from confluent_kafka import Consumer

    common = confluent_config(bootstrap, MECHANISM, user, USERS[user])
    consumer = Consumer({**common, "group.id": group, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    seen: dict[str, int] = {}
    try:
        consumer.subscribe([regex])
        for _ in range(60):
            for message in consumer.consume(100, 0.5):
                if message.error() is None:
                    seen[message.topic()] = seen.get(message.topic(), 0) + 1
            if sum(seen.values()) >= want:
                # Read on a little: a topic outside her rights must stay unassigned.
                for message in consumer.consume(100, 1.0):
                    if message.error() is None:
                        seen[message.topic()] = seen.get(message.topic(), 0) + 1
                break
        if peek is not None:
            seen["peek"] = peek()
    finally:
        consumer.close()
    return seen


async def test_kip848_regex_resolves_to_what_the_member_may_describe(
        sasl_sidecar: StartSasl, tansu: TansuServer) -> None:
    """With the embedded coordinator, a regex matching a topic alice may not Describe assigns
    her only the others (Kafka 4.0's rule), instead of refusing regexes altogether."""
    group = new_group()
    # Members heartbeat every 500 ms (the default is 5 s), so the assignment of the resolved
    # regex reaches alice at once.
    rig = await sasl_sidecar(sidecar_authorizer="acls", sidecar_coordinator="embedded",
                             group_consumer_heartbeat_interval_ms="500")
    assert rig.sidecar.acls is not None
    await rig.sidecar.acls.create(alice_acls(group))
    visible = await orders_topic(tansu)
    hidden = await orders_topic(tansu)
    prefix = "orders-"
    await rig.sidecar.acls.create([acl(ResourceType.TOPIC, hidden, Operation.DESCRIBE, deny=True)])
    with trio.fail_after(90):
        for topic in (visible, hidden):
            # Produce as a super user would not be refused; alice may not write the hidden one.
            await trio.to_thread.run_sync(produce_as_broker, tansu, topic)
        groups = rig.sidecar.groups
        assert groups is not None

        def subscribed() -> list[str]:
            # What the coordinator resolved the regex to (read from the test's thread: a peek).
            return sorted(groups.core.ctx.groups[group].subscription_metadata)  # type: ignore[union-attr]

        seen = await trio.to_thread.run_sync(
            regex_consume, rig.bootstrap, "alice", f"^{prefix}({visible[len(prefix):]}|{hidden[len(prefix):]})$",
            group, len(RECORDS), subscribed)
    assert seen == {visible: len(RECORDS), "peek": [visible]}


def produce_as_broker(tansu: TansuServer, topic: str) -> None:
    """Write RECORDS to ``topic`` on the broker directly (no sidecar, no ACLs)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 1})
    for key, value in RECORDS:
        producer.produce(topic, value=value, key=key, partition=0)
    assert producer.flush(20) == 0
