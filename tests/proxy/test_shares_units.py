"""The share-group shell (proxy/control/shares.py) with plain objects for ZooKeeper and the
broker, on trio's virtual clock: which fetched batches are aborted transactions
(read_committed), a heartbeat for a group the fleet gives another sidecar, a lock expiring
and a session timing out in milliseconds of real time, DescribeShareGroupOffsets' lag asked
of each partition's leader once per leader. Expected values are worked out by hand."""

from __future__ import annotations

import logging
import struct
import uuid
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry

from coordinator.messages.common import Client
from coordinator.paths import unescape
from coordinator.share_group import ShareGroupHeartbeatRequest, ShareGroupSettings
from coordinator.share_group_record import InitTopic, ShareGroupRecord, decode_group, encode_group
from coordinator.share_records import ShareSettings
from coordinator.share_state import RecordState, ShareState, StateBatch, decode_state, encode_state
from coordinator.share_store import share_partition_path, share_registry_path
from coordinator.topics import TopicInfo
from protocol.errors import ErrorCode
from proxy.control.share_reader import FetchedPartition, PartitionLeaders
from proxy.control.shares import ShareService, _aborted_ranges
from proxy.datapath.errors import UpstreamError
from proxy.local.ports import BrokerAddress
from tests.bench.kafka import record_batch


@dataclass(frozen=True)
class Batch:
    base_offset: int
    last_offset: int
    producer_id: int = -1
    transactional: bool = False
    control: bool = False


def test_aborted_ranges_run_from_the_first_offset_to_the_abort_marker() -> None:
    batches = [
        Batch(0, 9, 7, True),          # producer 7, before its aborted transaction began
        Batch(10, 14, 7, True),        # aborted
        Batch(15, 19, 8, True),        # producer 8: no aborted transaction
        Batch(20, 24, 7, True),        # still producer 7's aborted transaction
        Batch(25, 25, 7, True, True),  # its abort marker
        Batch(26, 30, 7, True),        # a later transaction of producer 7: not aborted
        Batch(31, 35),                 # not transactional
    ]
    assert _aborted_ranges(batches, [(7, 10)]) == [(10, 14), (20, 24)]
    assert _aborted_ranges(batches, []) == []
    # Two producers' aborted transactions, listed in any order.
    assert _aborted_ranges(batches, [(8, 15), (7, 10)]) == [(10, 14), (15, 19), (20, 24)]


def service(**keys: Any) -> ShareService:
    zk = SimpleNamespace(client=None)
    return ShareService(zk, None, None, CollectorRegistry(), **keys)  # type: ignore[arg-type]


async def test_a_group_another_sidecar_coordinates_is_not_coordinator_here() -> None:
    shares = service(coordinates=lambda group_id: group_id != "elsewhere")
    answer = await shares.heartbeat(ShareGroupHeartbeatRequest(
        group_id="elsewhere", member_id="m1", member_epoch=0, subscribed_topic_names=("t",)), Client())
    assert answer.error == ErrorCode.NOT_COORDINATOR
    assert "elsewhere" not in shares.core.groups


async def test_an_invalid_heartbeat_is_answered_before_any_io() -> None:
    shares = service()
    with trio.fail_after(1):
        answer = await shares.heartbeat(ShareGroupHeartbeatRequest(
            group_id="", member_id="m1", member_epoch=0, subscribed_topic_names=("t",)), Client())
    assert answer.error == ErrorCode.INVALID_REQUEST and answer.error_message == "GroupId can't be empty."


# -- the service on trio's virtual clock: lock expiry and session timeout ------------------------

TOPIC = uuid.UUID(int=42)
LOG = 10  # records 0..9 in the fake log, one batch each


def batch_at(offset: int) -> bytes:
    """A one-record v2 batch at ``offset`` (kafka-python's builder; the base offset is not
    covered by the CRC, so it is set afterwards)."""
    raw = bytearray(record_batch(1, 10))
    struct.pack_into(">q", raw, 0, offset)
    return bytes(raw)


class FakeZooKeeper:
    """``ZooKeeper.call`` without a thread: the store below does no I/O."""

    client = None

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)


class MemoryStore:
    """:class:`coordinator.share_store.ShareStore`'s interface over a dict of znodes."""

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.transactions = 0

    def group_ids(self) -> list[str]:
        return sorted({unescape(p.split("/")[2]) for p in self.nodes})

    def load_group(self, group_id: str) -> Any:
        data = self.nodes.get(share_registry_path(group_id))
        return None if data is None else decode_group(data)

    def load_partitions(self, group_id: str) -> dict[tuple[uuid.UUID, int], ShareState]:
        return {}

    def load_partition(self, group_id: str, topic_id: uuid.UUID, partition: int) -> ShareState | None:
        data = self.nodes.get(share_partition_path(group_id, topic_id, partition))
        return None if data is None else decode_state(data)

    def write(self, nodes: dict[str, bytes | None]) -> None:
        for path, data in nodes.items():
            if data is None:
                self.nodes = {p: d for p, d in self.nodes.items() if p != path and not p.startswith(path + "/")}
            else:
                self.nodes[path] = data
        self.transactions += 1


class FakeReader:
    """The broker: ``LOG`` records on partition 0 of topic ``t``; a fetch past them waits."""

    async def fetch(self, positions: Any, *, max_wait_ms: int, max_bytes: int, read_committed: bool) -> Any:
        (position,) = positions
        if position.offset >= LOG:
            await trio.sleep(max_wait_ms / 1000)
        records = b"".join(batch_at(o) for o in range(position.offset, LOG))
        return {("t", 0): FetchedPartition(error_code=0, high_watermark=LOG, last_stable_offset=LOG,
                                           log_start_offset=0, aborted=(), records=records)}

    async def list_offsets(self, wanted: Any, *, read_committed: bool) -> Any:
        return {key: (0, 0 if timestamp == -2 else LOG) for key, timestamp in wanted.items()}

    async def close_idle_forever(self) -> None:
        await trio.sleep_forever()


class FakeTopics:
    async def topics(self, names: set[str] | None) -> list[TopicInfo]:
        return [TopicInfo(name="t", topic_id=TOPIC, partitions=1)]


class EarliestConfigs:
    def __init__(self, lock_ms: int | None = None) -> None:
        self.lock_ms = LOCK_MS if lock_ms is None else lock_ms

    def effective(self, group_id: str) -> Any:
        return SimpleNamespace(share_record_lock_duration_ms=self.lock_ms, share_auto_offset_reset="earliest",
                               share_isolation_level="read_uncommitted", share_session_timeout_ms=SESSION_MS,
                               share_heartbeat_interval_ms=1000)


LOCK_MS, SESSION_MS = 1_000, 5_000


def fetch_body(member: str, epoch: int, acks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"GroupId": "g", "MemberId": member, "ShareSessionEpoch": epoch, "MaxWaitMs": 100, "MinBytes": 1,
            "MaxBytes": 1 << 20, "MaxRecords": 500, "BatchSize": 500, "Topics": [
                {"TopicId": TOPIC, "Partitions": [{"PartitionIndex": 0, "AcknowledgementBatches": acks or []}]}],
            "ForgottenTopicsData": []}


def acquired(answer: dict[str, Any]) -> list[tuple[int, int, int]]:
    return [(r["FirstOffset"], r["LastOffset"], r["DeliveryCount"])
            for t in answer["Responses"] for p in t["Partitions"] for r in p["AcquiredRecords"]]


def virtual_service(store: MemoryStore) -> ShareService:
    return ShareService(FakeZooKeeper(), FakeReader(), FakeTopics(), CollectorRegistry(),  # type: ignore[arg-type]
                        group_settings=ShareGroupSettings(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1000,
                                                          assignment_interval_ms=0),
                        share_settings=ShareSettings(record_lock_duration_ms=LOCK_MS), group_configs=EarliestConfigs(),
                        clock=lambda: int(trio.current_time() * 1000), store=store)  # type: ignore[arg-type]


async def test_a_lock_expires_on_the_virtual_clock_and_the_records_go_to_the_next_member(
        autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore()
    shares = virtual_service(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(shares.serve)
        first = await shares.share_fetch(2, fetch_body("m1", 0), connection="c1")
        assert acquired(first) == [(0, LOG - 1, 1)]  # new records: one in-flight batch (BatchSize 500)
        # m2 finds nothing to acquire while m1 holds everything (it waits out its MaxWaitMs).
        began = trio.current_time()
        assert acquired(await shares.share_fetch(2, fetch_body("m2", 0), connection="c2")) == []
        assert trio.current_time() - began >= 0.1
        await trio.sleep(LOCK_MS / 1000 + 0.01 - (trio.current_time() - began))  # m1's lock expires
        second = await shares.share_fetch(2, fetch_body("m2", 1), connection="c2")
        assert acquired(second) == [(0, LOG - 1, 2)]
        # m2 accepts 0-4: answered once durable, the start offset moved to 5.
        acks = [{"FirstOffset": 0, "LastOffset": 4, "AcknowledgeTypes": [1]}]
        third = await shares.share_fetch(2, fetch_body("m2", 2, acks), connection="c2")
        assert [p["AcknowledgeErrorCode"] for t in third["Responses"] for p in t["Partitions"]] == [0]
        state = decode_state(store.nodes[share_partition_path("g", TOPIC, 0)])
        assert state.start_offset == 5
        nursery.cancel_scope.cancel()


async def test_a_member_fenced_by_its_session_timeout_lets_go_of_its_records(
        autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore()
    shares = ShareService(FakeZooKeeper(), FakeReader(), FakeTopics(), CollectorRegistry(),  # type: ignore[arg-type]
                          group_settings=ShareGroupSettings(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1000,
                                                            assignment_interval_ms=0),
                          share_settings=ShareSettings(record_lock_duration_ms=60_000),
                          group_configs=EarliestConfigs(lock_ms=60_000),
                          clock=lambda: int(trio.current_time() * 1000), store=store)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(shares.serve)
        joined = await shares.heartbeat(ShareGroupHeartbeatRequest(
            group_id="g", member_id="m1", member_epoch=0, subscribed_topic_names=("t",)), Client())
        assert joined.error == ErrorCode.NONE and joined.member_epoch >= 1
        assert acquired(await shares.share_fetch(2, fetch_body("m1", 0), connection="c1")) == [(0, LOG - 1, 1)]
        await trio.sleep(SESSION_MS / 1000 + 0.1)  # m1 never heartbeats again: fenced
        assert "m1" not in shares.core.groups["g"].members
        # Its records went back at once, not after their 60 s lock: m2 gets them, second delivery.
        assert acquired(await shares.share_fetch(2, fetch_body("m2", 0), connection="c2")) == [(0, LOG - 1, 2)]
        assert trio.current_time() < 10
        nursery.cancel_scope.cancel()


async def test_share_version_turned_off_fences_every_member_at_once(autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore()
    switch = {"on": True}
    shares = ShareService(FakeZooKeeper(), FakeReader(), FakeTopics(), CollectorRegistry(),  # type: ignore[arg-type]
                          group_settings=ShareGroupSettings(session_timeout_ms=60_000, heartbeat_interval_ms=1000,
                                                            assignment_interval_ms=0),
                          share_settings=ShareSettings(record_lock_duration_ms=60_000),
                          group_configs=EarliestConfigs(lock_ms=60_000), clock=lambda: int(trio.current_time() * 1000),
                          store=store, enabled=lambda: switch["on"])  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(shares.serve)
        await shares.heartbeat(ShareGroupHeartbeatRequest(
            group_id="g", member_id="m1", member_epoch=0, subscribed_topic_names=("t",)), Client())
        assert acquired(await shares.share_fetch(2, fetch_body("m1", 0), connection="c1")) == [(0, LOG - 1, 1)]
        switch["on"] = False
        await trio.sleep(1.5)  # the next look at the feature, well within a second and a half
        assert not shares.core.groups["g"].members and len(shares.sessions) == 0
        assert decode_group(store.nodes[share_registry_path("g")]).members == ()
        # What m1 held is available again at once (its 60 s lock did not have to pass).
        assert acquired(await shares.share_fetch(2, fetch_body("m2", 0), connection="c2")) == [(0, LOG - 1, 2)]
        nursery.cancel_scope.cancel()


async def test_a_waiting_fetch_reads_a_share_partition_dropped_meanwhile_again(
        autojump_clock: trio.testing.MockClock) -> None:
    """m2's ShareFetch waits (m1 holds every record for 60 s, and the in-flight limit is
    reached: nothing to fetch either); meanwhile another sidecar
    writes the share-partition with the records available again, and this one drops its copy
    (as its znode watch does). The waiting fetch reads the state again and acquires them,
    instead of waiting out its MaxWaitMs on the copy that was dropped."""
    store = MemoryStore()
    shares = ShareService(FakeZooKeeper(), FakeReader(), FakeTopics(), CollectorRegistry(),  # type: ignore[arg-type]
                          share_settings=ShareSettings(record_lock_duration_ms=60_000, max_record_locks=LOG),
                          group_configs=EarliestConfigs(lock_ms=60_000), clock=lambda: int(trio.current_time() * 1000),
                          store=store)  # type: ignore[arg-type]
    got: list[list[tuple[int, int, int]]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(shares.serve)
        assert acquired(await shares.share_fetch(2, fetch_body("m1", 0), connection="c1")) == [(0, LOG - 1, 1)]
        body = dict(fetch_body("m2", 0), MaxWaitMs=5_000)

        async def second() -> None:
            got.append(acquired(await shares.share_fetch(2, body, connection="c2")))

        nursery.start_soon(second)
        await trio.sleep(1)
        assert got == []  # waiting
        store.nodes[share_partition_path("g", TOPIC, 0)] = encode_state(ShareState(
            state_epoch=0, start_offset=0, batches=(StateBatch(0, LOG - 1, RecordState.AVAILABLE, 1),)))
        shares.partitions.pop(("g", TOPIC, 0))
        shares._let_go()
        with trio.fail_after(1):
            while not got:
                await trio.sleep(0.01)
        assert got == [[(0, LOG - 1, 2)]]
        nursery.cancel_scope.cancel()


async def test_listing_reads_groups_served_elsewhere_without_taking_them_in(
        autojump_clock: trio.testing.MockClock) -> None:
    """ListGroups on a sidecar that does not coordinate a share group reports the group's
    state from ZooKeeper and leaves it out of this sidecar's core (a copy there would go
    stale)."""
    store = MemoryStore()
    elsewhere = virtual_service(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(elsewhere.serve)
        await elsewhere.heartbeat(ShareGroupHeartbeatRequest(
            group_id="g", member_id="m1", member_epoch=0, subscribed_topic_names=("t",)), Client())
        nursery.cancel_scope.cancel()
    here = virtual_service(store)
    assert await here.group_ids() == [("g", "Stable")]
    assert "g" not in here.core.groups


async def test_describe_of_a_group_coordinated_elsewhere_is_not_coordinator_and_loads_nothing(
        autojump_clock: trio.testing.MockClock) -> None:
    shares = service(coordinates=lambda group_id: group_id != "elsewhere")
    await shares.load_groups(["elsewhere"])  # no I/O: the fake ZooKeeper here has no client
    described = shares.describe(["", "elsewhere", "unknown"])
    assert [(d.group_id, d.error) for d in described] == [
        ("", ErrorCode.INVALID_GROUP_ID), ("elsewhere", ErrorCode.NOT_COORDINATOR),
        ("unknown", ErrorCode.GROUP_ID_NOT_FOUND)]
    assert "elsewhere" not in shares.core.groups


async def test_offsets_and_deletion_of_a_group_coordinated_elsewhere_are_not_coordinator_and_touch_nothing(
        autojump_clock: trio.testing.MockClock) -> None:
    """Kafka sends these to the group's coordinator; a copy loaded on another sidecar would
    go stale (a group created later would stay "not found" there). No I/O: the fake
    ZooKeeper here has no client, so reading the group would fail the test."""
    shares = service(coordinates=lambda group_id: group_id != "elsewhere")
    described = await shares.describe_offsets(1, {"Groups": [{"GroupId": "elsewhere", "Topics": None}]})
    assert [(g["GroupId"], g["ErrorCode"], g["Topics"]) for g in described["Groups"]] == [
        ("elsewhere", ErrorCode.NOT_COORDINATOR, [])]
    topics = [{"TopicName": "t", "Partitions": [{"PartitionIndex": 0, "StartOffset": 5}]}]
    altered = await shares.alter_offsets(0, {"GroupId": "elsewhere", "Topics": topics})
    assert altered["ErrorCode"] == ErrorCode.NOT_COORDINATOR and altered["Responses"] == []
    deleted = await shares.delete_offsets(0, {"GroupId": "elsewhere", "Topics": [{"TopicName": "t"}]})
    assert deleted["ErrorCode"] == ErrorCode.NOT_COORDINATOR and deleted["Responses"] == []
    assert await shares.delete_group("elsewhere") == (ErrorCode.NOT_COORDINATOR,
                                                       "This sidecar does not coordinate the group.")
    assert "elsewhere" not in shares.core.groups


# -- DescribeShareGroupOffsets' lag: each leader asked once, a leader out of reach is -1 ----------

T, U = uuid.UUID(int=7), uuid.UUID(int=8)


class LeaderTopics:
    async def topics(self, names: set[str] | None) -> list[TopicInfo]:
        return [TopicInfo(name="t", topic_id=T, partitions=6), TopicInfo(name="u", topic_id=U, partitions=1)]


class LeaderReader:
    """The cluster as the sidecar of broker 1 sees it: t-0 led by broker 1 (its own), t-1
    and u-0 by broker 2, t-2 by broker 3 (which cannot be reached), t-3 by broker 4 (the
    Metadata gives no address for it: down), t-4 by none. Every call is noted."""

    def __init__(self, *, metadata_fails: bool = False) -> None:
        self.metadata_fails = metadata_fails
        self.calls: list[tuple[str, Any]] = []

    async def leaders(self, topics: set[str]) -> PartitionLeaders:
        self.calls.append(("leaders", sorted(topics)))
        if self.metadata_fails:
            raise UpstreamError("broker 10.0.0.1:9092 did not answer Metadata in time")
        return PartitionLeaders(
            leaders={("t", 0): 1, ("t", 1): 2, ("t", 2): 3, ("t", 3): 4, ("t", 4): -1, ("t", 5): 1, ("u", 0): 2},
            brokers={n: BrokerAddress(n, f"10.0.0.{n}", 9092) for n in (1, 2, 3)}, own=1)

    async def list_offsets(self, wanted: dict[tuple[str, int], int], *, read_committed: bool) -> Any:
        self.calls.append(("own", dict(wanted)))
        return {("t", 0): (0, 40)}

    async def list_offsets_at(self, broker: BrokerAddress, wanted: dict[tuple[str, int], int], *,
                              read_committed: bool) -> Any:
        self.calls.append((f"{broker.host}:{broker.port}", dict(wanted)))
        if broker.node_id == 3:
            raise UpstreamError("broker 10.0.0.3:9092 unreachable: [Errno 111] Connection refused")
        return {("t", 1): (0, 75), ("u", 0): (0, 12)}


def lag_service(reader: LeaderReader) -> tuple[ShareService, MemoryStore]:
    store = MemoryStore()
    store.nodes[share_registry_path("g")] = encode_group(ShareGroupRecord(
        group_epoch=1, assignment_epoch=1, assignment_timestamp=0, subscribed_topics=(), members=(),
        initialized=(InitTopic(topic_id=T, name="t", partitions=frozenset(range(6)), timestamp=0),
                     InitTopic(topic_id=U, name="u", partitions=frozenset({0}), timestamp=0))))
    states = {
        # 10-14 released, 15-19 accepted, 20 rejected: of 10..39, 30 records, 6 done with.
        (T, 0): ShareState(state_epoch=0, start_offset=10, batches=(
            StateBatch(10, 14, RecordState.AVAILABLE, 1), StateBatch(15, 19, RecordState.ACKNOWLEDGED, 1),
            StateBatch(20, 20, RecordState.ARCHIVED, 1))),
        (T, 1): ShareState(state_epoch=0, start_offset=70),
        (T, 2): ShareState(state_epoch=0, start_offset=5),
        (T, 3): ShareState(state_epoch=0, start_offset=7),
        (T, 4): ShareState(state_epoch=0, start_offset=9),
        (T, 5): ShareState(state_epoch=0, start_offset=-1),  # initialized, not placed yet
        # 0 released twice, 1-11 accepted: of 0..11, 1 still to deliver.
        (U, 0): ShareState(state_epoch=2, start_offset=0, batches=(
            StateBatch(0, 0, RecordState.AVAILABLE, 2), StateBatch(1, 11, RecordState.ACKNOWLEDGED, 1))),
    }
    for (topic, index), state in states.items():
        store.nodes[share_partition_path("g", topic, index)] = encode_state(state)
    shares = ShareService(FakeZooKeeper(), reader, LeaderTopics(), CollectorRegistry(),  # type: ignore[arg-type]
                          store=store)  # type: ignore[arg-type]
    return shares, store


def described(answer: dict[str, Any]) -> dict[str, tuple[int, int, int]]:
    """``{"t-0": (start offset, lag, error code)}``."""
    return {f"{t['TopicName']}-{p['PartitionIndex']}": (p["StartOffset"], p["Lag"], p["ErrorCode"])
            for g in answer["Groups"] for t in g["Topics"] for p in t["Partitions"]}


DESCRIBE = {"Groups": [{"GroupId": "g", "Topics": [{"TopicName": "t", "Partitions": [0, 1, 2, 3, 4, 5, 6]},
                                                   {"TopicName": "u", "Partitions": [0]}]}]}


async def test_each_leader_is_asked_once_and_a_leader_out_of_reach_leaves_its_lag_unknown(
        caplog: pytest.LogCaptureFixture) -> None:
    reader = LeaderReader()
    shares, _ = lag_service(reader)
    with caplog.at_level(logging.WARNING, logger="proxy.control.shares"):
        answer = await shares.describe_offsets(1, DESCRIBE)
    assert described(answer) == {
        "t-0": (10, 40 - 10 - 6, 0),  # the sidecar's own broker: 24
        "t-1": (70, 75 - 70, 0),      # broker 2, asked directly: 5
        "t-2": (5, -1, 0),            # broker 3 cannot be reached
        "t-3": (7, -1, 0),            # broker 4 has no address
        "t-4": (9, -1, 0),            # no leader
        "t-5": (-1, -1, 0),           # no start offset yet: nothing asked for it
        "t-6": (-1, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        "u-0": (0, 12 - 0 - 11, 0),   # broker 2, in the same request as t-1: 1
    }
    # One Metadata request, then one ListOffsets per leader with every partition it leads.
    assert reader.calls[0] == ("leaders", ["t", "u"])
    asked = {who: wanted for who, wanted in reader.calls[1:]}
    assert len(reader.calls) == 4 and asked == {
        "own": {("t", 0): -1},
        "10.0.0.2:9092": {("t", 1): -1, ("u", 0): -1},
        "10.0.0.3:9092": {("t", 2): -1}}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3, warnings
    assert [w for w in warnings if "broker 3 " in w] == [
        "share groups: broker 3 could not be asked for the latest offsets of t-2 (broker 10.0.0.3:9092 "
        "unreachable: [Errno 111] Connection refused); their lag is unknown (-1)"]
    assert [w for w in warnings if "broker 4 " in w] == [
        "share groups: broker 4 leads t-3 but the broker's Metadata gives no address for it (down?); "
        "their lag is unknown (-1)"]
    assert [w for w in warnings if "no leader" in w] == ["share groups: no leader for t-4; their lag is unknown (-1)"]


async def test_version_0_has_no_lag_and_asks_no_broker() -> None:
    reader = LeaderReader()
    shares, _ = lag_service(reader)
    answer = await shares.describe_offsets(0, DESCRIBE)
    assert reader.calls == []
    assert {k: start for k, (start, _, _) in described(answer).items()} == {
        "t-0": 10, "t-1": 70, "t-2": 5, "t-3": 7, "t-4": 9, "t-5": -1, "t-6": -1, "u-0": 0}


async def test_leaders_that_cannot_be_read_leave_every_lag_unknown_and_the_answer_whole(
        caplog: pytest.LogCaptureFixture) -> None:
    reader = LeaderReader(metadata_fails=True)
    shares, _ = lag_service(reader)
    with caplog.at_level(logging.WARNING, logger="proxy.control.shares"):
        answer = await shares.describe_offsets(1, DESCRIBE)
    assert {k: lag for k, (_, lag, _) in described(answer).items()} == dict.fromkeys(
        ["t-0", "t-1", "t-2", "t-3", "t-4", "t-5", "t-6", "u-0"], -1)
    assert reader.calls == [("leaders", ["t", "u"])]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "share groups: the partitions' leaders could not be read (broker 10.0.0.1:9092 did not answer Metadata "
        "in time); their lag is unknown (-1)"]
