"""Issue 32 with a real ``ksidecar run`` of two workers, real ZooKeeper, Tansu and
confluent-kafka: connections spread over the workers, one consumer group served by the
supervisor whichever worker its members' connections are on, and a worker killed under
load, replaced within a second, without touching the other worker's clients."""

from __future__ import annotations

import os
import re
import signal
import struct
import time
import uuid
from collections.abc import Iterator

import pytest
import trio
from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

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
            "sidecar.coordinator": "embedded", "group.initial.rebalance.delay.ms": "0"}
    with start_sidecar(work, tansu.bootstrap, name="workers", keys=keys) as server:
        yield server


def metric(server: SidecarServer, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(server.scrape()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"{name}{labels} not on the page")


def worker_pids(server: SidecarServer) -> dict[int, int]:
    """Each worker's latest pid, from the supervisor's log."""
    pids: dict[int, int] = {}
    for index, pid in re.findall(r"worker (\d+) started \(pid (\d+)\)", server.log_path.read_text()):
        pids[int(index)] = int(pid)
    return pids


async def api_versions(wire: Wire, correlation_id: int) -> None:
    frame = await wire.call(API_VERSIONS, API_VERSIONS_V3, correlation_id,
                            {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})
    assert struct.unpack_from(">h", frame, 4)[0] == 0


async def test_connections_go_to_the_least_loaded_worker_and_the_page_sums_them(sidecar: SidecarServer) -> None:
    wires = [await Wire.connect(sidecar.host, sidecar.port) for _ in range(4)]
    try:
        for n, wire in enumerate(wires):
            await api_versions(wire, n)
        assert [metric(sidecar, "ksidecar_worker_connections", worker=w) for w in "01"] == [2.0, 2.0]
        # The data-path gauge lives in the workers; the page adds them up.
        assert metric(sidecar, "ksidecar_connections_active", listener="PLAINTEXT") == 4.0
        assert metric(sidecar, "ksidecar_worker_up", worker="0") == 1.0
    finally:
        for wire in wires:
            await wire.aclose()


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
    assert all(metric(sidecar, "ksidecar_worker_connections", worker=w) >= 0 for w in "01")


def test_a_killed_worker_is_replaced_within_a_second_and_the_other_workers_clients_go_on(
        sidecar: SidecarServer) -> None:
    trio.run(_kill_under_load, sidecar)


async def _kill_under_load(sidecar: SidecarServer) -> None:
    before = {w: metric(sidecar, "ksidecar_worker_restarts_total", worker=w) for w in "01"}
    # Both workers idle (the last test's clients gone): the first connection goes to
    # worker 0, the second to worker 1.
    with trio.fail_after(10):
        while [metric(sidecar, "ksidecar_worker_connections", worker=w) for w in "01"] != [0.0, 0.0]:
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
            while worker_pids(sidecar).get(1) == victim or metric(sidecar, "ksidecar_worker_up", worker="1") != 1.0:
                await trio.sleep(0.02)
        replaced_in = time.monotonic() - killed_at
    assert answered == 400  # the other worker's client saw no error
    assert replaced_in < 1.0, f"replaced after {replaced_in:.2f} s"
    assert metric(sidecar, "ksidecar_worker_restarts_total", worker="1") == before["1"] + 1
    assert f"worker 1 (pid {victim}) exited with code -9" in sidecar.log_path.read_text()
    fresh = await Wire.connect(sidecar.host, sidecar.port)  # new clients are served again
    await api_versions(fresh, 3)
    for wire in (kept, doomed, fresh):
        await wire.aclose()


async def _create(sidecar: SidecarServer, topic: str, partitions: int) -> None:
    wire = await Wire.connect(sidecar.host, sidecar.port)
    try:
        await create_topic(wire, topic, partitions)
    finally:
        await wire.aclose()
