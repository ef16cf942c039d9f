"""Share groups (KIP-932) through ``ksidecar`` in front of Tansu, with confluent-kafka's ShareConsumer.

Tansu serves no share-group API: every one of them is the sidecar's own (the embedded
coordinator, ZooKeeper for state, the sidecar's own Fetch for records). Each test turns
``share.version`` on over the wire, sets the group's ``share.auto.offset.reset`` to
``earliest`` with confluent-kafka's admin client, and checks what the consumers read
against what was produced.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

from coordinator.group_configs import AlterOp, ConfigOp
from proxy.control.server import Sidecar
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.proxy.conftest import StartSidecar, sidecar_keys
from tests.proxy.test_features import UPDATE, update

# One worker runs these one after another (docs/testing.md), apart from the consumer groups'.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("share-groups")]

PARTITIONS = 3
RECORDS = 300


async def share_sidecar(start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer,
                        zk_path: str, *, enable: bool = True, **keys: str) -> tuple[Sidecar, str]:
    sidecar = await start_sidecar(sidecar_keys(
        tansu.bootstrap, zookeeper_connect=zookeeper.connect_string(zk_path), sidecar_coordinator="embedded",
        sidecar_coordinator_metadata_refresh_ms="500", super_users="User:ANONYMOUS",
        group_share_heartbeat_interval_ms="500", **keys))
    if enable:
        answer = await trio.to_thread.run_sync(update, sidecar, 2, ("share.version", 1, UPDATE))
        assert answer.ErrorCode == 0, answer
    return sidecar, f"127.0.0.1:{sidecar.bound['PLAINTEXT'].port}"


def prepare(bootstrap: str, topic: str, group: str, records: int = RECORDS, partitions: int = PARTITIONS,
            **group_configs: str) -> None:
    """The topic, its records (values ``0..records-1``, round robin), and the group's configs."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    entries = [ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)]
    entries += [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
                for k, v in group_configs.items()]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(records):
        producer.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert producer.flush(30) == 0


class Reader(threading.Thread):
    """One ShareConsumer: polls until told to stop, noting each record's value and delivery count."""

    def __init__(self, bootstrap: str, group: str, topic: str, *, explicit: bool = False,
                 decide: Any = None) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.group, self.topic, self.explicit, self.decide = bootstrap, group, topic, explicit, decide
        self.stop = threading.Event()
        self.seen: list[tuple[int, int, int]] = []  # (value, partition, delivery count)
        #: Explicit mode: values whose acknowledgement the commit answered with success.
        self.accepted: list[int] = []
        self.error: BaseException | None = None
        self.errors: list[str] = []

    def run(self) -> None:
        from confluent_kafka import AcknowledgeType, ShareConsumer

        try:
            consumer = ShareConsumer({
                "bootstrap.servers": self.bootstrap, "group.id": self.group,
                "share.acknowledgement.mode": "explicit" if self.explicit else "implicit",
                "error_cb": lambda e: self.errors.append(str(e))})
            consumer.subscribe([self.topic])
            try:
                while not self.stop.is_set():
                    kinds: list[tuple[int, int, str]] = []  # (value, partition, acknowledgement)
                    for message in consumer.poll(0.5):
                        if message.error():
                            self.errors.append(str(message.error()))
                            continue
                        raw = message.value() or b""
                        value: Any = int(raw) if raw.isdigit() else raw.decode()
                        self.seen.append((value, message.partition(), message.delivery_count()))
                        if self.explicit:
                            kind = self.decide(value, message.delivery_count()) if self.decide else "accept"
                            consumer.acknowledge(message, {"accept": AcknowledgeType.ACCEPT,
                                                           "release": AcknowledgeType.RELEASE,
                                                           "reject": AcknowledgeType.REJECT}[kind])
                            kinds.append((value, message.partition(), kind))
                    if self.explicit and kinds:
                        results = consumer.commit_sync(10)
                        failed = {tp.partition for tp, error in results.items() if error is not None}
                        self.accepted += [v for v, p, k in kinds if k == "accept" and p not in failed]
            finally:
                consumer.close()
        except BaseException as exc:  # reported by the test
            self.error = exc


def wait_for(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def metric(sidecar: Sidecar, name: str, group: str) -> float | None:
    return sidecar.metrics.registry.get_sample_value(name, {"group": group})


async def test_three_members_read_every_record_exactly_once(
        start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str) -> None:
    sidecar, bootstrap = await share_sidecar(start_sidecar, tansu, zookeeper, zk_path)
    topic, group = f"queue-{zk_path[-8:]}", f"sg-{zk_path[-8:]}"
    await trio.to_thread.run_sync(prepare, bootstrap, topic, group)
    readers = [Reader(bootstrap, group, topic) for _ in range(3)]

    members: list[float | None] = []

    def run() -> None:
        for reader in readers:
            reader.start()
        try:
            wait_for(lambda: sum(len(r.seen) for r in readers) >= RECORDS, 60)
            time.sleep(1.0)  # anything read twice would show now
            members.append(trio.from_thread.run_sync(metric, sidecar, "ksidecar_share_group_members", group))
        finally:
            for reader in readers:
                reader.stop.set()
            for reader in readers:
                reader.join(30)

    await trio.to_thread.run_sync(run)
    for reader in readers:
        assert reader.error is None, reader.error
    values = Counter(v for r in readers for v, _, _ in r.seen)
    assert sorted(values) == list(range(RECORDS)), f"missing: {sorted(set(range(RECORDS)) - set(values))[:10]}"
    assert max(values.values()) == 1, f"read twice: {[v for v, n in values.items() if n > 1][:10]}"
    assert all(r.seen for r in readers), [len(r.seen) for r in readers]
    # The metrics: three members while they read, none once they closed (each left the group);
    # nothing delivered twice, nothing held.
    assert members == [3.0]
    assert metric(sidecar, "ksidecar_share_group_members", group) == 0
    assert metric(sidecar, "ksidecar_share_records_redelivered_total", group) == 0
    assert metric(sidecar, "ksidecar_share_records_acquired", group) == 0
    # The group APIs every group type shares: listed as a share group, not a classic one.
    from proxy.tools.admin_client import AdminClient

    def ask() -> tuple[Any, Any, Any]:
        with AdminClient(bootstrap) as admin:
            listed = admin.call(16, 5, {"StatesFilter": [], "TypesFilter": ["share"]})
            v6 = admin.call(15, 6, {"Groups": [group], "IncludeAuthorizedOperations": False})
            v5 = admin.call(15, 5, {"Groups": [group], "IncludeAuthorizedOperations": False})
        return listed, v6, v5

    listed, v6, v5 = await trio.to_thread.run_sync(ask)
    assert [(g.GroupId, g.GroupState, g.GroupType, g.ProtocolType) for g in listed.Groups] == [
        (group, "Empty", "share", "share")]
    assert [(g.ErrorCode, g.ErrorMessage) for g in v6.Groups] == [(69, f"Group {group} is not a classic group.")]
    assert [(g.ErrorCode, g.GroupState) for g in v5.Groups] == [(0, "Dead")]


async def test_explicit_release_comes_back_and_reject_never_does(
        start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str) -> None:
    sidecar, bootstrap = await share_sidecar(start_sidecar, tansu, zookeeper, zk_path)
    topic, group = f"explicit-{zk_path[-8:]}", f"sg-{zk_path[-8:]}"
    records = 60
    await trio.to_thread.run_sync(lambda: prepare(bootstrap, topic, group, records))

    def decide(value: int, delivery: int) -> str:
        if value % 3 == 0 and delivery == 1:
            return "release"
        return "reject" if value % 3 == 1 else "accept"

    reader = Reader(bootstrap, group, topic, explicit=True, decide=decide)

    def run() -> None:
        reader.start()
        try:
            # Every record once, then the released third again: 60 + 20 deliveries.
            wait_for(lambda: len(reader.seen) >= records + records // 3, 60)
            time.sleep(1.0)  # a rejected or accepted record delivered again would show now
        finally:
            reader.stop.set()
            reader.join(30)

    await trio.to_thread.run_sync(run)
    assert reader.error is None, reader.error
    deliveries: dict[int, list[int]] = {}
    for value, _, count in reader.seen:
        deliveries.setdefault(value, []).append(count)
    assert sorted(deliveries) == list(range(records))
    for value, counts in deliveries.items():
        assert counts == ([1, 2] if value % 3 == 0 else [1]), (value, counts)
    assert metric(sidecar, "ksidecar_share_records_redelivered_total", group) == records // 3


def _member(bootstrap: str, group: str, topic: str, count: int, mode: str) -> tuple[subprocess.Popen[str], Any]:
    process = subprocess.Popen([sys.executable, "-m", "tests.proxy.share_member", bootstrap, group, topic,
                                str(count), mode], stdout=subprocess.PIPE, text=True,
                               cwd=Path(__file__).resolve().parents[2])
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, f"the member exited ({process.wait(10)}) without printing what it holds"
    return process, json.loads(line)


async def test_records_of_a_killed_member_come_back_after_the_lock(
        start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str) -> None:
    _, bootstrap = await share_sidecar(start_sidecar, tansu, zookeeper, zk_path,
                                       group_share_record_lock_duration_ms="2000")
    topic, group = f"killed-{zk_path[-8:]}", f"sg-{zk_path[-8:]}"
    records = 30

    def run() -> tuple[list[int], Reader]:
        prepare(bootstrap, topic, group, records, partitions=1)
        process, held = _member(bootstrap, group, topic, 1, "hold")
        process.kill()
        process.wait(10)
        reader = Reader(bootstrap, group, topic)
        reader.start()
        try:
            wait_for(lambda: {v for v, _, _ in reader.seen} >= set(range(records)), 30)
        finally:
            reader.stop.set()
            reader.join(30)
        return held["held"], reader

    held, reader = await trio.to_thread.run_sync(run)
    assert reader.error is None, reader.error
    assert held, "the killed member held nothing"
    counts = {v: c for v, _, c in reader.seen}
    assert sorted(counts) == list(range(records))
    # What the killed member held came back once its lock expired, as a second delivery.
    assert all(counts[v] == 2 for v in held), {v: counts[v] for v in held}
    assert all(c == 1 for v, c in counts.items() if v not in held)


def _enable(bootstrap: str) -> None:
    from proxy.tools.admin_client import AdminClient

    with AdminClient(bootstrap) as client:
        answer = client.call(57, 1, {"timeoutMs": 10000, "ValidateOnly": False, "FeatureUpdates": [
            {"Feature": "share.version", "MaxVersionLevel": 1, "UpgradeType": UPDATE}]})
    assert answer.ErrorCode == 0, answer


def test_acknowledged_records_survive_a_killed_sidecar(
        tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str, tmp_path: Path) -> None:
    """Records a member accepted (the commit answered) are never delivered again after the
    sidecar is SIGKILLed and started again; every other record is delivered."""
    from kazoo.client import KazooClient

    from proxy.tools.rig.sidecar import start_sidecar as start_process

    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    client.ensure_path(zk_path)
    client.stop()
    client.close()
    keys = {"zookeeper.connect": zookeeper.connect_string(zk_path), "sidecar.coordinator": "embedded",
            "super.users": "User:ANONYMOUS", "zookeeper.session.timeout.ms": "4000",
            "group.share.heartbeat.interval.ms": "500"}
    first = start_process(tmp_path, tansu.bootstrap, name="sidecar-share-1", keys=keys)
    topic, group = f"durable-{zk_path[-8:]}", f"sg-{zk_path[-8:]}"
    records = 60
    try:
        _enable(first.bootstrap)
        prepare(first.bootstrap, topic, group, records)
        member, got = _member(first.bootstrap, group, topic, 25, "accept")
        accepted = set(got["accepted"])
        assert accepted, got
        assert first.process.pid is not None
        os.kill(first.process.pid, signal.SIGKILL)
        member.kill()
        member.wait(10)
    finally:
        first.stop()
    second = start_process(tmp_path, tansu.bootstrap, name="sidecar-share-2", keys=keys)
    try:
        reader = Reader(second.bootstrap, group, topic)
        reader.start()
        try:
            wait_for(lambda: {v for v, _, _ in reader.seen} | accepted >= set(range(records)), 60)
            time.sleep(1.0)
        finally:
            reader.stop.set()
            reader.join(30)
    finally:
        second.stop()
    assert reader.error is None, reader.error
    again = {v for v, _, _ in reader.seen}
    assert not again & accepted, f"delivered again after acknowledged: {sorted(again & accepted)[:10]}"
    assert again | accepted == set(range(records)), f"lost: {sorted(set(range(records)) - again - accepted)[:10]}"


async def test_a_share_partition_written_by_another_sidecar_is_read_again_not_served_stale(
        start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str) -> None:
    """Two sidecars in front of one broker serve the same share-partition in turn (a fleet
    sharing a broker, or a leader that moved away and back): what one acknowledged, the other
    never hands out again, because it watches the share-partition's znode and reads the
    state again once another sidecar wrote it. Raw requests, built by our encoder from values
    written here."""
    from proxy.tools.admin_client import AdminClient

    # Sidecars 1 and 2 in front of Tansu (whose own id, 111, neither maps: clients here send
    # raw requests, and the topic and its records go to Tansu directly). Sidecar 2 names the
    # broker by another name: to the fleet they front two brokers, so neither passes share
    # requests to the other, and both serve the share-partition, as two leaders' sidecars
    # do in turn when a leader moves away and back.
    one, first = await share_sidecar(start_sidecar, tansu, zookeeper, zk_path, broker_id="1")
    _, second = await share_sidecar(start_sidecar, tansu, zookeeper, zk_path, enable=False, broker_id="2",
                                    sidecar_upstream=f"localhost:{tansu.port}")
    topic, group = f"twice-{zk_path[-8:]}", f"sg-{zk_path[-8:]}"
    assert one.group_configs is not None
    result = await one.group_configs.alter(
        group, [ConfigOp(name="share.auto.offset.reset", operation=AlterOp.SET, value="earliest")], validate_only=False)
    assert result.error_code == 0, result

    await trio.to_thread.run_sync(ten_records, tansu.bootstrap, topic)

    def call(address: str, key: int, version: int, body: dict[str, Any]) -> Any:
        with AdminClient(address) as admin:
            return admin.call(key, version, body)

    metadata = await trio.to_thread.run_sync(call, tansu.bootstrap, 3, 12, {
        "Topics": [{"TopicId": uuid.UUID(int=0), "Name": topic}], "AllowAutoTopicCreation": False,
        "IncludeTopicAuthorizedOperations": False})
    topic_id = metadata.Topics[0].TopicId

    def fetch(address: str, member: str, kind: int | None = None) -> tuple[list[tuple[int, int, int]], int]:
        """A ShareFetch, then (``kind``) the acknowledgement of all ten records with a final
        ShareAcknowledge on the same connection (the session ends with its connection)."""
        with AdminClient(address) as admin:
            answer = admin.call(78, 1, {
                "GroupId": group, "MemberId": member, "ShareSessionEpoch": 0, "MaxWaitMs": 200, "MinBytes": 1,
                "MaxBytes": 1 << 20, "MaxRecords": 100, "BatchSize": 100, "ForgottenTopicsData": [],
                "Topics": [{"TopicId": topic_id, "Partitions": [{"PartitionIndex": 0, "AcknowledgementBatches": []}]}]})
            assert answer.ErrorCode == 0, answer
            got = [(r.FirstOffset, r.LastOffset, r.DeliveryCount) for t in answer.Responses for p in t.Partitions
                   for r in p.AcquiredRecords]
            if kind is None:
                return got, 0
            acked = admin.call(79, 1, {
                "GroupId": group, "MemberId": member, "ShareSessionEpoch": -1, "Topics": [
                    {"TopicId": topic_id, "Partitions": [{"PartitionIndex": 0, "AcknowledgementBatches": [
                        {"FirstOffset": 0, "LastOffset": 9, "AcknowledgeTypes": [kind]}]}]}]})
        return got, int(acked.ErrorCode) or int(acked.Responses[0].Partitions[0].ErrorCode)

    assert await trio.to_thread.run_sync(fetch, first, "m1", 2) == ([(0, 9, 1)], 0)  # RELEASE: available again
    # ACCEPT, through the other sidecar, which reads the state the first one wrote.
    assert await trio.to_thread.run_sync(fetch, second, "m2", 1) == ([(0, 9, 2)], 0)
    shares = one.shares
    assert shares is not None
    # The watch tells the first sidecar its copy is stale: within milliseconds, unless the
    # ZooKeeper connection is lost meanwhile (a loaded test machine), when kazoo reads the
    # znode again on reconnecting.
    with trio.fail_after(30):
        while any(key[0] == group for key in shares.partitions):
            await trio.sleep(0.02)
    assert await trio.to_thread.run_sync(fetch, first, "m3") == ([], 0)


def ten_records(bootstrap: str, topic: str) -> None:
    """A one-partition ``topic`` with the values ``0``-``9``, written to ``bootstrap`` directly."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient as ConfluentAdmin
    from confluent_kafka.admin import NewTopic

    admin = ConfluentAdmin({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, str(i).encode(), partition=0)
    assert producer.flush(10) == 0


def share_fetch(bootstrap: str, topic: str, group: str, member: str) -> list[tuple[int, int, int]]:
    """A raw ShareFetch v1 of partition 0 of ``topic`` on a connection of its own, closed on
    return: ``(first offset, last offset, delivery count)`` of each range acquired."""
    from proxy.tools.admin_client import AdminClient

    with AdminClient(bootstrap) as admin:
        metadata = admin.call(3, 12, {"Topics": [{"TopicId": uuid.UUID(int=0), "Name": topic}],
                                      "AllowAutoTopicCreation": False, "IncludeTopicAuthorizedOperations": False})
        answer = admin.call(78, 1, {
            "GroupId": group, "MemberId": member, "ShareSessionEpoch": 0, "MaxWaitMs": 200, "MinBytes": 1,
            "MaxBytes": 1 << 20, "MaxRecords": 100, "BatchSize": 100, "ForgottenTopicsData": [],
            "Topics": [{"TopicId": metadata.Topics[0].TopicId,
                        "Partitions": [{"PartitionIndex": 0, "AcknowledgementBatches": []}]}]})
    return [(r.FirstOffset, r.LastOffset, r.DeliveryCount) for t in answer.Responses for p in t.Partitions
            for r in p.AcquiredRecords]


async def test_a_closed_connection_ends_its_share_session_and_lets_go_of_its_records(
        start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str) -> None:
    """As Kafka's share-session cache does on a disconnect: the records a member acquired on
    a connection go back to the group when that connection closes, long before their lock
    (30 s here) would have expired."""

    sidecar, bootstrap = await share_sidecar(start_sidecar, tansu, zookeeper, zk_path)
    topic, group = f"closed-{zk_path[-8:]}", f"sg-{zk_path[-8:]}"
    await trio.to_thread.run_sync(lambda: prepare(bootstrap, topic, group, 10, partitions=1))

    def fetch(member: str) -> list[tuple[int, int, int]]:
        return share_fetch(bootstrap, topic, group, member)

    with trio.fail_after(10):  # far below the 30 s lock
        while True:  # the share-partition's first fetch may come before it is read (a loaded machine)
            first = await trio.to_thread.run_sync(fetch, "m1")
            if first:
                break
        assert first == [(0, 9, 1)]
        while True:  # the sidecar sees m1's connection end a moment after it closed
            again = await trio.to_thread.run_sync(fetch, "m2")
            if again:
                break
            await trio.sleep(0.05)
    assert again == [(0, 9, 2)]
    shares = sidecar.shares
    assert shares is not None
    with trio.fail_after(5):
        while len(shares.sessions):  # m2's connection closed too: no session is left behind
            await trio.sleep(0.02)


async def test_in_a_fleet_sharing_one_broker_a_share_request_is_passed_to_the_groups_sidecar(
        start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str) -> None:
    """Two sidecars in front of one broker: the placement gives the group to one of them, and
    a ShareFetch reaching the other is passed to it whole (its answer passed back): only the
    group's sidecar holds the share-partition; when the client's connection ends, so does the
    passed one, and the records go back at once."""
    from coordinator.placement import owner
    from proxy.tools.admin_client import AdminClient

    sidecars = {1: await share_sidecar(start_sidecar, tansu, zookeeper, zk_path, broker_id="1"),
                2: await share_sidecar(start_sidecar, tansu, zookeeper, zk_path, enable=False, broker_id="2")}
    with trio.fail_after(10):
        while not all(s.groups is not None and s.groups.fleet is not None and len(s.groups.fleet.live) == 2
                      for s, _ in sidecars.values()):
            await trio.sleep(0.05)
    group = next(f"sg-{i}-{zk_path[-8:]}" for i in range(100) if owner(f"sg-{i}-{zk_path[-8:]}", [1, 2]) == 1)
    topic = f"passed-{zk_path[-8:]}"
    (serving, _), (other, other_address) = sidecars[1], sidecars[2]
    assert serving.group_configs is not None
    result = await serving.group_configs.alter(
        group, [ConfigOp(name="share.auto.offset.reset", operation=AlterOp.SET, value="earliest")], validate_only=False)
    assert result.error_code == 0, result

    def produce_direct() -> uuid.UUID:
        ten_records(tansu.bootstrap, topic)
        with AdminClient(tansu.bootstrap) as client:
            metadata = client.call(3, 12, {"Topics": [{"TopicId": uuid.UUID(int=0), "Name": topic}],
                                           "AllowAutoTopicCreation": False, "IncludeTopicAuthorizedOperations": False})
        topic_id: uuid.UUID = metadata.Topics[0].TopicId
        return topic_id

    topic_id = await trio.to_thread.run_sync(produce_direct)

    def fetch(address: str, member: str) -> list[tuple[int, int, int]]:
        with AdminClient(address) as admin:
            answer = admin.call(78, 1, {
                "GroupId": group, "MemberId": member, "ShareSessionEpoch": 0, "MaxWaitMs": 200, "MinBytes": 1,
                "MaxBytes": 1 << 20, "MaxRecords": 100, "BatchSize": 100, "ForgottenTopicsData": [],
                "Topics": [{"TopicId": topic_id, "Partitions": [{"PartitionIndex": 0, "AcknowledgementBatches": []}]}]})
        assert answer.ErrorCode == 0, answer
        return [(r.FirstOffset, r.LastOffset, r.DeliveryCount) for t in answer.Responses for p in t.Partitions
                for r in p.AcquiredRecords]

    assert await trio.to_thread.run_sync(fetch, other_address, "m1") == [(0, 9, 1)]
    assert serving.shares is not None and other.shares is not None
    assert [k for k in serving.shares.partitions if k[0] == group] == [(group, topic_id, 0)]
    assert not [k for k in other.shares.partitions if k[0] == group]
    with trio.fail_after(10):  # m1's connection ended: the passed one too, and its records went back
        while not (again := await trio.to_thread.run_sync(fetch, other_address, "m2")):
            await trio.sleep(0.05)
    assert again == [(0, 9, 2)]
