"""Offsets and group administration through the core, expectations worked out by hand."""

from __future__ import annotations

from uuid import UUID

from coordinator.core import GroupCoordinator, LoadedGroup
from coordinator.errors import Code
from coordinator.messages import (
    CommitPartition,
    CommitTopic,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FetchGroup,
    FetchTopic,
    FindCoordinatorRequest,
    HeartbeatRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    TxnOffsetCommitRequest,
)
from coordinator.outcome import OffsetValue, OffsetWrite
from coordinator.topics import TopicInfo, TopicsSnapshot

from .support import CLIENT, answers, join, make, sync


def commit(core: GroupCoordinator, *, group: str = "g", gen: int = -1, member: str = "",
           version: int = 8, offset: int = 42, now: int = 1_000, ok: bool = True) -> OffsetCommitResponse:
    req = OffsetCommitRequest(version=version, group_id=group, generation_id_or_member_epoch=gen,
                              member_id=member, topics=(CommitTopic(name="t", partitions=(
                                  CommitPartition(partition=0, offset=offset, metadata="m"),)),))
    step = core.offset_commit(req, now)
    if step.response is not None:
        return step.response
    assert step.ticket is not None and len(step.writes) == 1 and step.writes[0].ticket == step.ticket
    done = core.writes_done(step.ticket, now, ok=ok)
    got = answers(done)[step.ticket]
    assert isinstance(got, OffsetCommitResponse)
    return got


def fetch(core: GroupCoordinator, topics: tuple[FetchTopic, ...] | None, version: int = 8,
          group: str = "g") -> OffsetFetchResponse:
    resp = core.offset_fetch(OffsetFetchRequest(version=version, groups=(
        FetchGroup(group_id=group, topics=topics),))).response
    assert resp is not None
    return resp


def first_error(resp: OffsetCommitResponse) -> Code:
    return resp.topics[0].partitions[0].error


def test_simple_commit_is_answered_after_the_write_and_fetched() -> None:
    core = make()
    step = core.offset_commit(OffsetCommitRequest(version=8, group_id="g", topics=(
        CommitTopic(name="t", partitions=(CommitPartition(partition=0, offset=42),)),)), 1_000)
    assert step.response is None
    (ws,) = step.writes
    assert ws.writes == (OffsetWrite(group_id="g", topic="t", partition=0, value=OffsetValue(
        offset=42, metadata="", commit_timestamp=1_000)),)
    # Not visible before it is durable.
    before = fetch(core, (FetchTopic(name="t", partitions=(0,)),))
    assert before.groups[0].topics[0].partitions[0].offset == -1
    assert ws.ticket is not None
    core.writes_done(ws.ticket, 1_001)
    after = fetch(core, None)
    assert after.groups[0].topics[0].partitions[0].offset == 42
    assert after.to_wire(1)["Topics"][0]["Partitions"][0]["CommittedOffset"] == 42


def test_failed_write_is_answered_with_a_retriable_error() -> None:
    core = make()
    assert first_error(commit(core, ok=False)) is Code.COORDINATOR_NOT_AVAILABLE
    assert fetch(core, None).groups[0].topics == ()


def test_generation_checks() -> None:
    core = make(initial_rebalance_delay_ms=0)
    assert first_error(commit(core, gen=1, member="x", version=8)) is Code.ILLEGAL_GENERATION
    assert first_error(commit(core, gen=1, member="x", version=9)) is Code.GROUP_ID_NOT_FOUND
    core.join_group(join(group="c", version=3), CLIENT, 0)
    core.on_timer(0)
    assert first_error(commit(core, group="c", gen=1, member="c-1")) is Code.REBALANCE_IN_PROGRESS
    core.sync_group(sync("c", "c-1", 1, {"c-1": b""}), 0)
    assert first_error(commit(core, group="c", gen=1, member="c-1")) is Code.NONE
    assert first_error(commit(core, group="c", gen=0, member="c-1")) is Code.ILLEGAL_GENERATION
    assert first_error(commit(core, group="c", gen=1, member="zz")) is Code.UNKNOWN_MEMBER_ID
    assert first_error(commit(core, group="c")) is Code.UNKNOWN_MEMBER_ID  # v0-style into a live group


def test_fetch_unknown_group_and_ids() -> None:
    core = make()
    t = UUID(int=7)
    core.update_topics(TopicsSnapshot.of([TopicInfo(name="t", topic_id=t, partitions=1)]), 0)
    commit(core)
    empty = fetch(core, (FetchTopic(name="t", partitions=(0,)),), group="other")
    assert empty.groups[0].error is Code.NONE and empty.groups[0].topics[0].partitions[0].offset == -1
    by_id = fetch(core, (FetchTopic(topic_id=t, partitions=(0,)), FetchTopic(topic_id=UUID(int=9), partitions=(0,))),
                  version=10)
    assert by_id.groups[0].topics[0].partitions[0].offset == 42
    assert by_id.groups[0].topics[1].partitions[0].error is Code.UNKNOWN_TOPIC_ID


def test_offset_delete_and_delete_groups() -> None:
    core = make()
    commit(core)
    step = core.offset_delete(OffsetDeleteRequest(group_id="g", topics=(FetchTopic(name="t", partitions=(0,)),)))
    assert step.ticket is not None
    core.writes_done(step.ticket, 2)
    assert fetch(core, None).groups[0].topics == ()
    missing = core.offset_delete(OffsetDeleteRequest(group_id="nope", topics=())).response
    assert missing is not None and missing.error is Code.GROUP_ID_NOT_FOUND
    commit(core)
    d = core.delete_groups(DeleteGroupsRequest(groups=("g", "nope")), 3)
    assert d.ticket is not None
    resp = answers(core.writes_done(d.ticket, 4))[d.ticket]
    assert resp.to_wire(0) == {"Results": [{"GroupId": "g", "ErrorCode": 0},
                                           {"GroupId": "nope", "ErrorCode": Code.GROUP_ID_NOT_FOUND}]}
    assert "g" not in core.ctx.groups and "g" not in core.offsets.committed


def test_txn_offset_commit_refused() -> None:
    core = make()
    r = core.txn_offset_commit(TxnOffsetCommitRequest(group_id="g", transactional_id="tx", topics=(
        FetchTopic(name="t", partitions=(0, 1)),))).response
    assert r is not None
    assert [p.error for p in r.topics[0].partitions] == [Code.UNSUPPORTED_VERSION] * 2


def test_retention_after_the_group_empties() -> None:
    minute = 60_000
    core = make(offsets_retention_minutes=1, offsets_retention_check_interval_ms=minute)
    commit(core, now=0)  # a simple group: counted from the commit
    step = core.on_timer(minute)
    assert len(step.writes) == 1 and step.writes[0].ticket is not None
    core.writes_done(step.writes[0].ticket, minute)
    assert "g" not in core.offsets.committed and "g" not in core.ctx.groups


def test_list_describe_find() -> None:
    core = make(initial_rebalance_delay_ms=0)
    core.join_group(join(group="c", version=3), CLIENT, 0)
    core.on_timer(0)
    core.sync_group(sync("c", "c-1", 1, {"c-1": b"A"}), 0)
    commit(core)
    listed = core.list_groups(ListGroupsRequest(states_filter=("stable",))).response
    assert listed is not None and [g.group_id for g in listed.groups] == ["c"]
    typed = core.list_groups(ListGroupsRequest(types_filter=("Classic",))).response
    assert typed is not None and [g.group_id for g in typed.groups] == ["c", "g"]
    d = core.describe_groups(DescribeGroupsRequest(groups=("c", "zz"))).response
    assert d is not None
    c = d.groups[0]
    assert (c.group_state, c.protocol_data, c.members[0].assignment, c.members[0].client_host) == (
        "Stable", "range", b"A", "/127.0.0.1")
    assert d.to_wire(5)["Groups"][1]["GroupState"] == "Dead"
    assert d.to_wire(6)["Groups"][1]["ErrorCode"] == Code.GROUP_ID_NOT_FOUND
    f = core.find_coordinator(FindCoordinatorRequest(keys=("a", "b")), node_id=7, host="h", port=9).response
    assert f is not None
    assert f.to_wire(4)["Coordinators"][1] == {"Key": "b", "NodeId": 7, "Host": "h", "Port": 9,
                                               "ErrorCode": 0, "ErrorMessage": None}
    assert f.to_wire(0)["NodeId"] == 7


def test_load_resumes_a_stable_group() -> None:
    core = make(initial_rebalance_delay_ms=0)
    core.join_group(join(group="c", version=3), CLIENT, 0)
    core.on_timer(0)
    step = core.sync_group(sync("c", "c-1", 1, {"c-1": b"A"}), 0)
    record = [w for ws in step.writes for w in ws.writes][-1]
    assert not isinstance(record, OffsetWrite) and record.record is not None
    again = make()
    again.load([LoadedGroup(group_id="c", record=record.record,
                            offsets={("t", 0): OffsetValue(offset=5, commit_timestamp=1)})], now=100)
    hb = again.heartbeat(HeartbeatRequest(group_id="c", generation_id=1, member_id="c-1"), 200).response
    assert hb is not None and hb.error is Code.NONE
    assert fetch(again, None, group="c").groups[0].topics[0].partitions[0].offset == 5
    # Nobody comes back within the session timeout: the member is removed.
    again.on_timer(100 + 10_000 + 200)
    assert "c-1" not in again.ctx.groups["c"].members


def test_a_bad_record_does_not_stop_loading() -> None:
    core = make()
    core.load([LoadedGroup(group_id="bad", record={"type": "classic"}, offsets={
                   ("t", 0): OffsetValue(offset=3, commit_timestamp=0)}),
               LoadedGroup(group_id="ok", record=None, offsets={
                   ("t", 0): OffsetValue(offset=4, commit_timestamp=0)})], now=0)
    assert fetch(core, None, group="bad").groups[0].topics[0].partitions[0].offset == 3
    assert fetch(core, None, group="ok").groups[0].topics[0].partitions[0].offset == 4


def test_served_versions_match_the_schemas() -> None:
    from coordinator.core import SERVED_API_VERSIONS
    from protocol.apis import ApiRegistry

    registry = ApiRegistry()
    for key, (lo, hi) in SERVED_API_VERSIONS.items():
        versions = registry.api(key).versions
        assert lo in versions and hi in versions and hi + 1 not in versions, key
