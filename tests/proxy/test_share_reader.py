"""The share groups' reader of the brokers (proxy/control/share_reader.py) asking a broker
other than the sidecar's own, on real sockets: a leader that refuses the connection, and a
real broker (Tansu) asked as another broker of the cluster, whose connection is kept idle
and closed once unused for ``peer_idle`` seconds of trio's clock (moved by hand: the real
I/O runs, the virtual time only passes when the test says)."""

from __future__ import annotations

import uuid

import pytest
import trio
import trio.testing

from proxy.config import HostPort
from proxy.control.share_reader import LATEST_TIMESTAMP, BrokerReader
from proxy.control.upstream import Upstream
from proxy.datapath.errors import UpstreamError
from proxy.local.ports import BrokerAddress
from proxy.tools.rig.ports import free_port
from proxy.tools.rig.tansu import TansuServer


async def test_a_leader_that_refuses_the_connection_is_an_upstream_error_and_leaves_nothing_open() -> None:
    closed = free_port()  # nothing listens there
    reader = BrokerReader(Upstream(HostPort("127.0.0.1", free_port()), connect_timeout=2.0))
    with trio.fail_after(5), pytest.raises(UpstreamError, match=f"broker 127.0.0.1:{closed} unreachable"):
        await reader.list_offsets_at(BrokerAddress(2, "127.0.0.1", closed), {("t", 0): LATEST_TIMESTAMP},
                                     read_committed=False)
    assert reader.statistics().peers_idle == {f"127.0.0.1:{closed}": 0}


@pytest.mark.integration
async def test_a_real_broker_asked_as_another_leader_answers_and_its_idle_connection_closes(
        tansu: TansuServer, mock_clock: trio.testing.MockClock) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"lag-{uuid.uuid4().hex[:8]}"

    def produce() -> None:
        admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(10)
        producer = Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 0})
        for partition, count in ((0, 3), (1, 5)):
            for i in range(count):
                producer.produce(topic, str(i).encode(), partition=partition)
                # One record per batch: Tansu 0.6 (memory) answers ListOffsets LATEST with the
                # last batch's base offset + 1, which is the log's end only for such batches.
                assert producer.flush(10) == 0

    await trio.to_thread.run_sync(produce)
    upstream = Upstream(HostPort(tansu.host, tansu.port))
    await upstream.learn()
    reader = BrokerReader(upstream, peer_idle=30.0)
    found = await reader.leaders({topic, "no-such-topic"})
    (node,) = found.brokers
    assert found.own == node and found.leaders == {(topic, 0): node, (topic, 1): node}
    leader = found.brokers[node]
    wanted = {(topic, 0): LATEST_TIMESTAMP, (topic, 1): LATEST_TIMESTAMP}
    # Through the path for another broker: a connection of its own, its ApiVersions asked.
    assert await reader.list_offsets_at(leader, wanted, read_committed=False) == {(topic, 0): (0, 3), (topic, 1): (0, 5)}
    assert await reader.list_offsets_at(leader, wanted, read_committed=False) == {(topic, 0): (0, 3), (topic, 1): (0, 5)}
    address = f"{leader.host}:{leader.port}"
    assert reader.statistics().peers_idle == {address: 1}  # one kept for the next, however many asked
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader.close_idle_forever)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(15.0)  # a first look: unused for 15 s only
        await trio.testing.wait_all_tasks_blocked()
        assert reader.statistics().peers_idle == {address: 1}
        mock_clock.jump(15.001)  # the next look: unused for 30 s, closed
        await trio.testing.wait_all_tasks_blocked()
        assert reader.statistics().peers_idle == {address: 0}
        nursery.cancel_scope.cancel()
    await reader.aclose()
