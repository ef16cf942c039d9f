"""The sidecar's one topic directory (proxy/control/topic_directory.py): learned from
Metadata answers, asked of the broker on demand, reached from observer threads."""

from __future__ import annotations

import threading
import time
import uuid

import trio
import trio.testing

from coordinator.topics import TopicInfo
from proxy.control.topic_directory import TopicDirectory

ORDERS = uuid.UUID(int=1)
GONE = uuid.UUID(int=2)


class Broker:
    """Answers "every topic" with what it holds, counting the requests."""

    def __init__(self) -> None:
        self.topics = [TopicInfo(name="orders", topic_id=ORDERS, partitions=3)]
        self.asked = 0

    async def ask(self, names: set[str] | None) -> list[TopicInfo]:
        assert names is None  # the directory always asks for every topic
        self.asked += 1
        await trio.sleep(0.01)
        return list(self.topics)


async def test_an_observer_thread_gets_a_name_the_sidecar_had_not_learned(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = Broker()
    directory = TopicDirectory(broker.ask, interval=0.5)
    assert directory.lookup_blocking(ORDERS) is None  # not serving yet: nobody to ask
    directory.serving()
    assert await trio.to_thread.run_sync(directory.lookup_blocking, ORDERS) == "orders"
    assert (broker.asked, dict(directory.names)) == (1, {ORDERS: "orders"})
    assert await trio.to_thread.run_sync(directory.lookup_blocking, ORDERS) == "orders"
    assert broker.asked == 1  # known now: no second request


async def test_an_id_the_broker_does_not_name_is_asked_again_only_after_an_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = Broker()
    directory = TopicDirectory(broker.ask, interval=5.0)
    directory.serving()
    assert await trio.to_thread.run_sync(directory.lookup_blocking, GONE) is None
    assert await trio.to_thread.run_sync(directory.lookup_blocking, GONE) is None
    assert broker.asked == 1
    await trio.sleep(5)  # virtual seconds
    broker.topics.append(TopicInfo(name="late", topic_id=GONE, partitions=1))
    assert await trio.to_thread.run_sync(directory.lookup_blocking, GONE) == "late"
    assert broker.asked == 2


async def test_concurrent_askers_share_one_request_and_a_failure_leaves_ids_unknown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = Broker()
    directory = TopicDirectory(broker.ask)
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(directory.refresh)
    assert broker.asked == 1 and directory.names == {ORDERS: "orders"}

    async def broken(_names: set[str] | None) -> list[TopicInfo]:
        raise OSError("broker link broke")

    failing = TopicDirectory(broken)
    await failing.refresh()  # logged, not raised
    assert failing.names == {}
    failing.learn([(uuid.UUID(int=0), "no-id"), (ORDERS, "orders")])  # zero ids are no ids
    assert failing.names == {ORDERS: "orders"}


async def test_an_observer_thread_waits_no_longer_than_its_timeout_for_a_busy_loop() -> None:
    """The loop does not run while a caller blocks it (a sync client inside a test, a long
    computation): the observer's thread gives up after its timeout instead of waiting for
    the loop, and the lookup it started finishes once the loop runs again."""
    broker = Broker()
    directory = TopicDirectory(broker.ask)
    directory.serving()
    got: list[str | None] = []
    thread = threading.Thread(target=lambda: got.append(directory.lookup_blocking(ORDERS, timeout=0.1)))
    thread.start()
    time.sleep(0.3)  # the loop is blocked here, as a synchronous call inside it would block it
    thread.join(5)
    assert got == [None]
    await trio.sleep(0.05)  # the loop runs: the lookup it was handed asks the broker
    assert broker.asked == 1 and directory.names == {ORDERS: "orders"}
