"""The ZooKeeper store against a real ZooKeeper, each test under its own chroot path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from kazoo.client import KazooClient

from coordinator.batching import CommitBatcher, flatten
from coordinator.core import GroupCoordinator
from coordinator.messages import CommitPartition, CommitTopic, OffsetCommitRequest
from coordinator.outcome import GroupWrite, OffsetValue, OffsetWrite, WriteSet
from coordinator.store import GroupStore, StoreError

from .support import CLIENT, join, make, sync

if TYPE_CHECKING:
    from proxy.tools.rig.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.integration


@pytest.fixture
def zk(zookeeper: ZooKeeperServer, zk_path: str) -> Iterator[KazooClient]:
    """A started client chrooted at this test's own path."""
    setup = KazooClient(hosts=zookeeper.connect, timeout=10.0)
    setup.start(timeout=10.0)
    setup.ensure_path(zk_path)
    setup.stop()
    setup.close()
    client = KazooClient(hosts=zookeeper.connect_string(zk_path), timeout=10.0)
    client.start(timeout=10.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def value(offset: int) -> OffsetValue:
    return OffsetValue(offset=offset, metadata="m", commit_timestamp=1_000)


def put(group: str, topic: str, partition: int, offset: int | None) -> OffsetWrite:
    return OffsetWrite(group_id=group, topic=topic, partition=partition,
                       value=None if offset is None else value(offset))


def test_offsets_round_trip_at_the_documented_paths(zk: KazooClient) -> None:
    store = GroupStore(zk)
    store.apply([put("g", "t", 0, 5), put("g", "t", 1, 6), put("g", "u", 0, 7)])
    data, _ = zk.get("/consumers/g/offsets/t/1")
    assert data.startswith(b'{"version":1,"offset":6,')
    store.apply([put("g", "t", 0, 8), put("g", "t", 1, None)])
    assert store.transactions == 2
    (loaded,) = GroupStore(zk).load()
    assert loaded.group_id == "g" and loaded.record is None
    assert dict(loaded.offsets) == {("t", 0): value(8), ("u", 0): value(7)}


def test_any_characters_in_names(zk: KazooClient) -> None:
    store = GroupStore(zk)
    names = ["a/b", "..", ".", "", "grüße 100%", "\x01ctl"]
    store.apply([put(n, n or "t", 0, i) for i, n in enumerate(names)])
    store.apply([GroupWrite(group_id=n, record={"version": 1, "type": "classic", "generation": 0})
                 for n in names])
    loaded = {g.group_id: g for g in GroupStore(zk).load()}
    assert set(loaded) == set(names)
    for i, n in enumerate(names):
        assert loaded[n].offsets[(n or "t", 0)].offset == i
        assert loaded[n].record == {"version": 1, "type": "classic", "generation": 0}


def test_group_delete_removes_the_tree(zk: KazooClient) -> None:
    store = GroupStore(zk)
    store.apply([put("g", "t", 0, 1), GroupWrite(group_id="g", record={"version": 1}), put("h", "t", 0, 1)])
    store.apply([GroupWrite(group_id="g", record=None)])
    assert zk.exists("/consumers/g") is None
    assert [g.group_id for g in GroupStore(zk).load()] == ["h"]
    # Deleted and recreated in one batch.
    store.apply(flatten([WriteSet(writes=(GroupWrite(group_id="h", record=None), put("h", "t", 3, 3)))]))
    (h,) = GroupStore(zk).load()
    assert dict(h.offsets) == {("t", 3): value(3)}


def test_a_failed_guard_writes_nothing(zk: KazooClient) -> None:
    zk.create("/claim", b"me")
    store = GroupStore(zk, guard=("/claim", 0))
    store.apply([put("g", "t", 0, 1)])
    zk.set("/claim", b"someone else")  # version 1 now: our claim is gone
    with pytest.raises(StoreError):
        store.apply([put("g", "t", 0, 2), put("g", "t", 1, 2)])
    (g,) = GroupStore(zk).load()
    assert dict(g.offsets) == {("t", 0): value(1)}


def test_old_consumer_format_is_read(zk: KazooClient) -> None:
    zk.create("/consumers/old/offsets/t/0", b"123", makepath=True)
    (g,) = GroupStore(zk).load()
    assert g.offsets[("t", 0)].offset == 123


def test_core_batcher_store_and_resumption(zk: KazooClient) -> None:
    core = make(initial_rebalance_delay_ms=0)
    store, batcher = GroupStore(zk), CommitBatcher()
    core.join_group(join(version=3), CLIENT, 0)
    core.on_timer(0)
    step = core.sync_group(sync("g", "c-1", 1, {"c-1": b"A"}), 0)
    for ws in step.writes:
        batcher.add(ws)
    tickets = []
    for offset in (10, 11, 12):  # three commits while one write would be in flight
        commit = core.offset_commit(OffsetCommitRequest(
            version=8, group_id="g", generation_id_or_member_epoch=1, member_id="c-1",
            topics=(CommitTopic(name="t", partitions=(CommitPartition(partition=0, offset=offset),)),)), 1)
        assert commit.ticket is not None
        tickets.append(commit.ticket)
        for ws in commit.writes:
            batcher.add(ws)
    batch = batcher.take()
    assert batch is not None and len(batch) == 4
    store.apply(flatten(batch))
    batcher.done()
    answered = []
    for ws in batch:
        if ws.ticket is not None:
            answered += [a.ticket for a in core.writes_done(ws.ticket, 2).answers]
    assert answered == tickets and store.transactions == 1
    resumed = GroupCoordinator(now=100)
    resumed.load(GroupStore(zk).load(), now=100)
    group = resumed.ctx.groups["g"]
    assert group.state.value == "Stable" and list(group.members) == ["c-1"]
    assert resumed.offsets.committed["g"][("t", 0)].offset == 12
