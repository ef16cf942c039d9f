"""Issue 32 with a real ``ksidecar run`` of two workers, real ZooKeeper, Tansu and
confluent-kafka: connections spread over the workers, one consumer group served by the
supervisor whichever worker its members' connections are on, and a worker killed under
load, replaced within a second, without touching the other worker's clients."""

from __future__ import annotations

import os
import re
import signal
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition

from protocol.apis import METADATA
from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.proxy.wire import Wire, create_topic

pytestmark = pytest.mark.integration

API_VERSIONS, API_VERSIONS_V3 = 18, 3


@pytest.fixture(scope="module")
def sidecar(tansu: TansuServer, zookeeper: ZooKeeperServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[SidecarServer]:
    work = tmp_path_factory.mktemp("workers")
    chroot = f"/ksidecar-tests/workers-{uuid.uuid4().hex[:8]}"
    keys = {"sidecar.workers": "2", "zookeeper.connect": f"{zookeeper.connect}{chroot}",
            "sidecar.coordinator": "embedded", "group.initial.rebalance.delay.ms": "0",
            "super.users": "User:ANONYMOUS"}  # turns share.version on (a share group's test)
    with start_sidecar(work, tansu.bootstrap, name="workers", keys=keys) as server:
        yield server


def worker_pids(server: SidecarServer) -> dict[int, int]:
    """Each worker's latest pid, from the supervisor's log."""
    pids: dict[int, int] = {}
    for index, pid in re.findall(r"worker (\d+) started \(pid (\d+)\)", server.log_path.read_text()):
        pids[int(index)] = int(pid)
    return pids


def children(pid: int) -> dict[int, str]:
    """The live child processes of ``pid``, by pid: their names (``/proc/<pid>/comm``)."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found[int(entry.name)] = (entry / "comm").read_text().strip()
            except (OSError, ValueError):
                continue  # exited meanwhile
    return found


async def api_versions(wire: Wire, correlation_id: int) -> None:
    frame = await wire.call(API_VERSIONS, API_VERSIONS_V3, correlation_id,
                            {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})
    assert struct.unpack_from(">h", frame, 4)[0] == 0


async def test_connections_go_to_the_least_loaded_worker_and_the_page_sums_them(sidecar: SidecarServer) -> None:
    wires = [await Wire.connect(sidecar.host, sidecar.port) for _ in range(4)]
    try:
        for n, wire in enumerate(wires):
            await api_versions(wire, n)
        assert [sidecar.sample("ksidecar_worker_connections", worker=w) for w in "01"] == [2.0, 2.0]
        # The data-path gauge lives in the workers; the page adds them up.
        assert sidecar.sample("ksidecar_connections_active", listener="PLAINTEXT") == 4.0
        assert sidecar.sample("ksidecar_worker_up", worker="0") == 1.0
    finally:
        for wire in wires:
            await wire.aclose()


def test_the_workers_are_forked_by_one_fork_server_under_the_supervisor(sidecar: SidecarServer) -> None:
    """supervisor → ksidecar-forks → ksidecar-w0, ksidecar-w1, and nothing else: no second
    interpreter that imports the sidecar, no resource tracker (proxy/control/forks.py)."""
    assert sidecar.process.pid is not None
    (server, name), = children(sidecar.process.pid).items()
    assert name == "ksidecar-forks"
    pids = worker_pids(sidecar)
    assert children(server) == {pids[0]: "ksidecar-w0", pids[1]: "ksidecar-w1"}


def test_one_group_across_both_workers_is_served_by_one_coordinator(sidecar: SidecarServer) -> None:
    topic, group = f"w-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    trio.run(_create, sidecar, topic, 4)
    config = {"bootstrap.servers": sidecar.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": 10000}
    consumers = [Consumer(config), Consumer(config)]  # four connections each at least: both workers
    got: list[set[int]] = [set(), set()]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while sum(len(c.assignment()) for c in consumers) < 4 or not all(c.assignment() for c in consumers):
            assert time.monotonic() < deadline, "the group never settled"
            for consumer in consumers:
                consumer.poll(0.1)
        producer = Producer({"bootstrap.servers": sidecar.bootstrap})
        for i in range(40):  # after the group settled: no rebalance hands a partition over mid-way
            producer.produce(topic, f"{i}".encode(), partition=i % 4)
        assert producer.flush(20) == 0
        while sum(map(len, got)) < 40 and time.monotonic() < deadline:
            for n, consumer in enumerate(consumers):
                message = consumer.poll(0.2)
                if message is not None and not message.error():
                    got[n].add(int(message.value() or b""))
        assignments = [{p.partition for p in c.assignment()} for c in consumers]
        for consumer in consumers:
            consumer.commit(asynchronous=False)
    finally:
        for consumer in consumers:
            consumer.close()
    # One coordinator split the four partitions between the members, each consumed once.
    assert sorted(map(len, assignments)) == [2, 2] and assignments[0] | assignments[1] == {0, 1, 2, 3}
    assert got[0] | got[1] == set(range(40)) and not got[0] & got[1]
    assert all(sidecar.sample("ksidecar_worker_connections", worker=w) >= 0 for w in "01")


@pytest.mark.serial  # it times the replacement: 0.11-0.14 s alone, 1.22 s once beside the whole suite
def test_a_killed_worker_is_replaced_within_a_second_and_the_other_workers_clients_go_on(
        sidecar: SidecarServer) -> None:
    trio.run(_kill_under_load, sidecar)


async def _kill_under_load(sidecar: SidecarServer) -> None:
    before = {w: sidecar.sample("ksidecar_worker_restarts_total", worker=w) for w in "01"}
    # Both workers idle (the last test's clients gone): the first connection goes to
    # worker 0, the second to worker 1.
    with trio.fail_after(10):
        while [sidecar.sample("ksidecar_worker_connections", worker=w) for w in "01"] != [0.0, 0.0]:
            await trio.sleep(0.1)
    kept, doomed = await Wire.connect(sidecar.host, sidecar.port), await Wire.connect(sidecar.host, sidecar.port)
    await api_versions(kept, 1)
    await api_versions(doomed, 2)
    victim = worker_pids(sidecar)[1]
    answered = 0
    async with trio.open_nursery() as nursery:

        async def steady_load() -> None:
            nonlocal answered
            for n in range(400):  # Metadata on the survivor's connection throughout
                frame = await kept.call(METADATA, 12, 100 + n, {"Topics": [], "AllowAutoTopicCreation": False,
                                                                "IncludeTopicAuthorizedOperations": False})
                assert frame is not None
                answered += 1
                await trio.sleep(0.005)

        nursery.start_soon(steady_load)
        await trio.sleep(0.3)
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        assert await doomed.wait_closed() == b""  # its own connections are lost
        with trio.fail_after(5):
            while worker_pids(sidecar).get(1) == victim or sidecar.sample("ksidecar_worker_up", worker="1") != 1.0:
                await trio.sleep(0.02)
        replaced_in = time.monotonic() - killed_at
    assert answered == 400  # the other worker's client saw no error
    assert replaced_in < 1.0, f"replaced after {replaced_in:.2f} s"
    assert sidecar.sample("ksidecar_worker_restarts_total", worker="1") == before["1"] + 1
    assert f"worker 1 (pid {victim}) exited with code -9" in sidecar.log_path.read_text()
    fresh = await Wire.connect(sidecar.host, sidecar.port)  # new clients are served again
    await api_versions(fresh, 3)
    for wire in (kept, doomed, fresh):
        await wire.aclose()


def test_a_killed_fork_server_stops_the_sidecar_with_exit_code_1_and_its_workers_with_it(
        tansu: TansuServer, zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """Without its fork server the supervisor could not replace a worker: it says so and
    exits 1 (its orchestrator restarts it), and no worker outlives it."""
    keys = {"sidecar.workers": "2",
            "zookeeper.connect": f"{zookeeper.connect}/ksidecar-tests/forks-{uuid.uuid4().hex[:8]}"}
    with start_sidecar(tmp_path, tansu.bootstrap, name="forks", keys=keys) as server:
        assert server.process.pid is not None
        (fork_server, _), = children(server.process.pid).items()
        workers = set(children(fork_server))
        assert len(workers) == 2
        os.kill(fork_server, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while server.process.running:
            assert time.monotonic() < deadline, "the sidecar outlived its fork server"
            time.sleep(0.05)
        assert server.process.returncode == 1
        assert (f"the worker fork server (pid {fork_server}) exited (killed by SIGKILL): no worker can be "
                "started again") in server.log_path.read_text()
        while any(Path(f"/proc/{pid}").exists() for pid in workers):
            assert time.monotonic() < deadline, "a worker outlived its supervisor"
            time.sleep(0.05)


async def _create(sidecar: SidecarServer, topic: str, partitions: int) -> None:
    wire = await Wire.connect(sidecar.host, sidecar.port)
    try:
        await create_topic(wire, topic, partitions)
    finally:
        await wire.aclose()


def test_a_worker_killed_under_producers_and_a_group_loses_no_acknowledged_record_or_offset(
        sidecar: SidecarServer) -> None:
    """Three idempotent producers and a two-member group through the sidecar; worker 1 is
    SIGKILLed in the middle. Its clients reconnect (librdkafka retries on its own); every
    record acknowledged is in the broker, and the group ends with every record consumed and
    committed, as the coordinator acknowledged."""
    topic, group = f"k-{uuid.uuid4().hex[:8]}", f"kg-{uuid.uuid4().hex[:8]}"
    trio.run(_create, sidecar, topic, 6)
    acked: list[bytes] = []
    failed: list[str] = []

    def produce(n: int) -> None:
        producer = Producer({"bootstrap.servers": sidecar.bootstrap, "enable.idempotence": True,
                             "linger.ms": 5, "client.id": f"p{n}"})

        def delivered(err: object, message: object) -> None:
            if err is not None:
                failed.append(str(err))
            else:
                acked.append(message.value())  # type: ignore[attr-defined]

        for i in range(300):
            producer.produce(topic, f"{n}-{i}".encode(), on_delivery=delivered)
            producer.poll(0)
            time.sleep(0.01)
        assert producer.flush(30) == 0

    config = {"bootstrap.servers": sidecar.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": 10000}
    consumers = [Consumer({**config, "client.id": f"c{n}"}) for n in range(2)]
    seen: set[bytes] = set()
    last_commit: dict[int, int] = {}  # the last commit acknowledged, by partition
    producers = [threading.Thread(target=produce, args=(n,)) for n in range(3)]
    victim = worker_pids(sidecar)[1]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        for thread in producers:
            thread.start()
        killed_at = time.monotonic() + 1.5
        killed = False
        deadline = time.monotonic() + 60
        while (len(seen) < 900 or any(t.is_alive() for t in producers)) and time.monotonic() < deadline:
            if not killed and time.monotonic() >= killed_at:
                os.kill(victim, signal.SIGKILL)
                killed = True
            for consumer in consumers:
                message = consumer.poll(0.05)
                if message is not None and not message.error():
                    seen.add(message.value() or b"")
                    for tp in consumer.commit(message=message, asynchronous=False) or []:
                        last_commit[tp.partition] = tp.offset
        for thread in producers:
            thread.join(30)
    finally:
        for consumer in consumers:
            consumer.close()
    assert killed and worker_pids(sidecar).get(1) != victim  # a new worker took its slot
    assert not failed, failed[:5]
    assert sorted(acked) == sorted({f"{n}-{i}".encode() for n in range(3) for i in range(300)})
    assert seen == set(acked)  # every acknowledged record consumed
    # The coordinator holds, for every partition, the last commit it acknowledged (a member
    # that took a partition over may commit a lower offset than its last owner: Kafka keeps
    # the last): no acknowledged offset lost.
    check = Consumer({**config, "group.id": group})
    try:
        committed = check.committed([TopicPartition(topic, p) for p in range(6)], timeout=10)
    finally:
        check.close()
    assert len(last_commit) == 6
    assert {tp.partition: tp.offset for tp in committed} == last_commit


def test_a_share_consumer_connection_closed_on_a_worker_lets_go_of_its_records_at_once(
        sidecar: SidecarServer) -> None:
    """As in one process (test_share_groups.py), and as Kafka's share-session cache does:
    the records a member acquired on a connection go back when that connection closes, long
    before their 30 s lock. The connection lives on a worker and the share state in the
    owner: the worker tells the owner the connection ended."""
    from tests.proxy.test_share_groups import _enable, prepare, share_fetch

    suffix = uuid.uuid4().hex[:8]
    topic, group = f"closed-w-{suffix}", f"sg-w-{suffix}"
    _enable(sidecar.bootstrap)
    prepare(sidecar.bootstrap, topic, group, 10, partitions=1)

    def fetch(member: str) -> list[tuple[int, int, int]]:
        return share_fetch(sidecar.bootstrap, topic, group, member)

    deadline = time.monotonic() + 10  # far below the 30 s lock
    first: list[tuple[int, int, int]] = []
    while not first and time.monotonic() < deadline:  # the topic's first fetch may find it not yet read
        first = fetch("m1")
    assert first == [(0, 9, 1)]
    again: list[tuple[int, int, int]] = []
    while not again and time.monotonic() < deadline:  # the owner hears of m1's end a moment after it
        again = fetch("m2")
        time.sleep(0.05)
    assert again == [(0, 9, 2)]
