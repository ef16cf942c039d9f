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
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import trio
from kazoo.client import KazooClient

from proxy.control.server import Sidecar
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.proxy.conftest import StartSidecar, sidecar_keys

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 6
RECORDS = 20_000


async def embedded(start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer,
                   chroot: str) -> Sidecar:
    return await start_sidecar(sidecar_keys(
        tansu.bootstrap,
        zookeeper_connect=f"{zookeeper.connect}{chroot}",
        sidecar_coordinator="embedded",
        group_initial_rebalance_delay_ms="200",
        group_min_session_timeout_ms="1000",
        sidecar_coordinator_metadata_refresh_ms="500",
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


class ConfluentMember(threading.Thread):
    """One confluent-kafka consumer: reads in batches and commits each batch synchronously."""

    def __init__(self, bootstrap: str, group: str, topic: str, seen: Counter[tuple[int, int]],
                 lock: threading.Lock, extra: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest", **extra}
        self.topic, self.seen, self.lock = topic, seen, lock
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.assignments: list[list[int]] = []

    def run(self) -> None:
        from confluent_kafka import Consumer

        try:
            consumer = Consumer(self.config)
            consumer.subscribe([self.topic], on_assign=lambda c, parts: self.assignments.append(
                sorted(p.partition for p in parts)))
            try:
                while not self.stop.is_set():
                    batch = consumer.consume(500, 0.2)
                    good = [m for m in batch if m.error() is None]
                    if good:
                        with self.lock:
                            for m in good:
                                self.seen[(m.partition(), m.offset())] += 1
                        consumer.commit(asynchronous=False)
            finally:
                consumer.close()
        except BaseException as exc:  # reported by the test
            self.error = exc


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


@pytest.mark.parametrize("extra", [
    pytest.param({"partition.assignment.strategy": "range"}, id="classic-range"),
    pytest.param({"partition.assignment.strategy": "cooperative-sticky"}, id="classic-cooperative"),
    pytest.param({"group.protocol": "consumer"}, id="kip848"),
])
async def test_confluent_group_reads_every_record_once(
    start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer, extra: dict[str, Any]
) -> None:
    chroot = f"/groups-{uuid.uuid4().hex[:8]}"
    sidecar = await embedded(start_sidecar, tansu, zookeeper, chroot)
    bootstrap = f"127.0.0.1:{sidecar.bound['PLAINTEXT'].port}"
    topic, group = f"g-{uuid.uuid4().hex[:8]}", f"grp-{uuid.uuid4().hex[:6]}"
    await trio.to_thread.run_sync(produce, bootstrap, topic)
    seen: Counter[tuple[int, int]] = Counter()
    lock = threading.Lock()
    members = [ConfluentMember(bootstrap, group, topic, seen, lock, extra) for _ in range(3)]
    for member in members[:2]:
        member.start()
    await wait_for(lambda: len(seen) >= RECORDS // 3, 60)
    members[2].start()  # a join mid-way: a rebalance
    await wait_for(lambda: len(seen) >= 2 * RECORDS // 3, 60)
    members[0].stop.set()  # a leave mid-way: another
    await wait_for(lambda: len(seen) >= RECORDS, 90)
    for member in members:
        member.stop.set()
    for member in members:
        await trio.to_thread.run_sync(member.join, 30)
        assert member.error is None, member.error
    assert len(seen) == RECORDS
    assert max(seen.values()) == 1, f"{sum(1 for v in seen.values() if v > 1)} record(s) read twice"
    stored = await trio.to_thread.run_sync(offsets_in_zookeeper, zookeeper.connect, chroot, group, topic)
    assert stored == {p: len(range(p, RECORDS, PARTITIONS)) for p in range(PARTITIONS)}
