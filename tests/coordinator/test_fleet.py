"""The core in a fleet (coordinator/fleet.py): who answers, who is named, hand-over.

Sidecars 1, 2 and 3 are live. From the table in test_placement.py (sha256 by hand):
``orders`` belongs to 2, ``payments`` to 1, ``g-0`` to 3. This core is sidecar 1.
"""

from __future__ import annotations

from coordinator.core import GroupCoordinator, LoadedGroup
from coordinator.errors import Code
from coordinator.fleet import Fleet
from coordinator.messages import (
    CommitPartition,
    CommitTopic,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    SyncGroupResponse,
)
from coordinator.messages.admin import DescribeGroupsRequest
from coordinator.messages.offsets import FetchGroup, OffsetFetchRequest
from coordinator.outcome import OffsetValue

from .support import CLIENT, answers, join, make, sync

LIVE = {
    1: {"PLAINTEXT": ("side-1", 9001)},
    2: {"PLAINTEXT": ("side-2", 9002)},
    3: {"PLAINTEXT": ("side-3", 9003), "INTERNAL": ("in-3", 19003)},
}


def fleet_core(now: int = 0, **settings: int) -> GroupCoordinator:
    core = make(now, **settings)
    core.fleet = Fleet()
    core.fleet.set_live(LIVE, me=1)
    return core


def commit(group: str, offset: int, generation: int = -1, member: str = "") -> OffsetCommitRequest:
    return OffsetCommitRequest(version=8, group_id=group, generation_id_or_member_epoch=generation,
                               member_id=member,
                               topics=(CommitTopic(name="t", partitions=(CommitPartition(partition=0, offset=offset),)),))


def test_find_coordinator_names_the_owner_of_each_key() -> None:
    core = fleet_core()
    step = core.find_coordinator(FindCoordinatorRequest(keys=("orders", "payments", "g-0")),
                                 node_id=1, host="side-1", port=9001, listener="PLAINTEXT")
    assert step.response is not None
    found = [(c.key, c.node_id, c.host, c.port, c.error) for c in step.response.coordinators]
    assert found == [("orders", 2, "side-2", 9002, Code.NONE),
                     ("payments", 1, "side-1", 9001, Code.NONE),
                     ("g-0", 3, "side-3", 9003, Code.NONE)]
    # v0-3 carry one key; on another listener the owner's address on that listener.
    step = core.find_coordinator(FindCoordinatorRequest(keys=("g-0",)), node_id=1, host="x", port=1,
                                 listener="INTERNAL")
    assert step.response is not None
    assert step.response.to_wire(3) == {"ErrorCode": 0, "ErrorMessage": None, "NodeId": 3,
                                        "Host": "in-3", "Port": 19003}


def test_find_coordinator_for_an_own_group_starts_its_claim() -> None:
    core = fleet_core()
    assert core.fleet is not None
    core.find_coordinator(FindCoordinatorRequest(keys=("payments", "orders")), node_id=1, host="side-1",
                          port=9001, listener="PLAINTEXT")
    assert core.fleet.take_wanted() == {"payments"}
    assert core.fleet.take_wanted() == set()


def test_requests_for_other_sidecars_groups_get_not_coordinator() -> None:
    core = fleet_core()
    step = core.join_group(join("orders"), CLIENT, 0)
    assert step.response == JoinGroupResponse(error=Code.NOT_COORDINATOR)
    assert core.heartbeat(HeartbeatRequest(group_id="orders", generation_id=1, member_id="m"), 0).response \
        is not None
    commit_step = core.offset_commit(commit("orders", 5), 0)
    assert commit_step.response is not None and not commit_step.writes
    assert commit_step.response.to_wire(8) == {"Topics": [
        {"Name": "t", "TopicId": commit_step.response.topics[0].topic_id,
         "Partitions": [{"PartitionIndex": 0, "ErrorCode": int(Code.NOT_COORDINATOR)}]}]}
    assert "orders" not in core.ctx.groups


def test_own_group_not_claimed_yet_is_loading() -> None:
    core = fleet_core()
    assert core.fleet is not None
    step = core.join_group(join("payments"), CLIENT, 0)
    assert step.response is not None and step.response.error is Code.COORDINATOR_LOAD_IN_PROGRESS
    assert core.fleet.take_wanted() == {"payments"}


def test_batched_apis_answer_per_group() -> None:
    core = fleet_core()
    assert core.fleet is not None
    core.fleet.claimed("payments", 0)
    core.adopt(LoadedGroup(group_id="payments", record=None,
                           offsets={("t", 0): OffsetValue(offset=7, commit_timestamp=1)}), "payments", 0)
    fetched = core.offset_fetch(OffsetFetchRequest(version=8, groups=(
        FetchGroup(group_id="payments"), FetchGroup(group_id="orders"))))
    assert fetched.response is not None
    (mine, theirs) = fetched.response.groups
    assert mine.error is Code.NONE and mine.topics[0].partitions[0].offset == 7
    assert theirs.error is Code.NOT_COORDINATOR and theirs.topics == ()
    described = core.describe_groups(DescribeGroupsRequest(groups=("payments", "g-0")))
    assert described.response is not None
    assert [g.error for g in described.response.groups] == [Code.NONE, Code.NOT_COORDINATOR]


def test_release_answers_parked_requests_and_forgets_the_group() -> None:
    core = fleet_core(initial_rebalance_delay_ms=0)
    assert core.fleet is not None
    core.fleet.claimed("payments", 3)
    first = core.join_group(join("payments", version=3), CLIENT, 0)
    core.on_timer(0)  # c-1 joined alone: generation 1, it leads
    second = core.join_group(join("payments", version=3), CLIENT, 1)  # c-2: a rebalance, parked
    assert first.ticket is not None and second.ticket is not None and second.response is None
    parked_sync = core.sync_group(sync("payments", "c-1", 1), 2)
    assert parked_sync.response is not None  # generation 1 is rebalancing: answered now
    assert core.next_deadline() is not None

    core.fleet.released("payments")
    step = core.release("payments")
    assert answers(step) == {second.ticket: JoinGroupResponse(error=Code.NOT_COORDINATOR, member_id="c-2")}
    assert "payments" not in core.ctx.groups
    # Its heartbeat, join and rebalance deadlines are gone; only offset retention is left.
    assert core.next_deadline() == core.settings.offsets_retention_check_interval_ms
    assert core.heartbeat(HeartbeatRequest(group_id="payments", generation_id=1, member_id="c-1"), 3) \
        .response is not None


def test_adopted_group_resumes_and_its_members_heartbeat_without_a_rebalance() -> None:
    old = fleet_core(initial_rebalance_delay_ms=0)
    assert old.fleet is not None
    old.fleet.claimed("payments", 0)
    old.join_group(join("payments", version=3), CLIENT, 0)
    old.on_timer(0)
    step = old.sync_group(sync("payments", "c-1", 1, {"c-1": b"A"}), 0)
    assert answers(step) == {step.ticket: SyncGroupResponse(error=Code.NONE, protocol_type="consumer",
                                                            protocol_name="range", assignment=b"A")}
    (written,) = [w for ws in step.writes for w in ws.writes]
    record = getattr(written, "record", None)
    assert record is not None

    new = fleet_core(now=1_000)
    assert new.fleet is not None
    new.fleet.claimed("payments", 1)
    new.adopt(LoadedGroup(group_id="payments", record=record, offsets={}), "payments", 1_000)
    beat = new.heartbeat(HeartbeatRequest(group_id="payments", generation_id=1, member_id="c-1"), 1_500)
    assert beat.response is not None and beat.response.error is Code.NONE
    # A member that does not come back within its session (10 s) is removed.
    new.on_timer(1_000 + 10_001 + 500)
    group = new.ctx.groups["payments"]
    assert list(group.members) == []


def test_suspended_session_refuses_commits_but_not_heartbeats() -> None:
    core = fleet_core(initial_rebalance_delay_ms=0)
    assert core.fleet is not None
    core.fleet.claimed("payments", 0)
    core.join_group(join("payments", version=3), CLIENT, 0)
    core.on_timer(0)
    core.sync_group(sync("payments", "c-1", 1, {"c-1": b"A"}), 0)
    core.fleet.suspended = True
    refused = core.offset_commit(commit("payments", 9, 1, "c-1"), 1)
    assert refused.response is not None and not refused.writes
    assert refused.response.topics[0].partitions[0].error is Code.COORDINATOR_NOT_AVAILABLE
    beat = core.heartbeat(HeartbeatRequest(group_id="payments", generation_id=1, member_id="c-1"), 1)
    assert beat.response is not None and beat.response.error is Code.NONE
    core.fleet.suspended = False
    accepted = core.offset_commit(commit("payments", 9, 1, "c-1"), 2)
    assert accepted.response is None and accepted.writes


def test_misplaced_and_mine_follow_the_live_set() -> None:
    fleet = Fleet()
    fleet.set_live(LIVE, me=1)
    fleet.claimed("payments", 0)
    assert fleet.misplaced() == []
    assert fleet.mine(["orders", "payments", "g-0"]) == []  # payments is held already
    fleet.set_live({2: LIVE[2], 3: LIVE[3], 4: {}}, me=1)  # 1 no longer registered... nor owner
    # payments on {2, 3, 4}: node 4 (d443...) wins.
    assert fleet.misplaced() == ["payments"]
    fleet.set_live({1: LIVE[1], 3: LIVE[3]}, me=1)  # 2 gone: orders goes to 3 (b8a5 > 708a)
    assert fleet.mine(["orders", "payments", "g-0"]) == []
    fleet.released("payments")
    assert fleet.mine(["orders", "payments", "g-0"]) == ["payments"]
