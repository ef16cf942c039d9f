"""The classic protocol, request by request, with expectations worked out by hand."""

from __future__ import annotations

from coordinator.classic_group import ClassicGroup, ClassicState, consumer_subscription_topics
from coordinator.core import GroupCoordinator
from coordinator.errors import Code
from coordinator.messages import (
    HeartbeatRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveMember,
    SyncGroupResponse,
)
from coordinator.outcome import GroupWrite

from .support import CLIENT, answers, join, make, sync


def classic(core: GroupCoordinator, group: str = "g") -> ClassicGroup:
    found = core.ctx.groups[group]
    assert isinstance(found, ClassicGroup)
    return found


def state(core: GroupCoordinator, group: str = "g") -> ClassicState:
    return classic(core, group).state


def test_member_id_required_from_v4_only() -> None:
    core = make()
    step = core.join_group(join(version=4), CLIENT, 0)
    assert step.response == JoinGroupResponse(error=Code.MEMBER_ID_REQUIRED, member_id="c-1")
    # v3 joins at once (parked until the join phase completes).
    step = core.join_group(join(group="h", version=3), CLIENT, 0)
    assert step.response is None and step.ticket is not None


def test_invalid_session_timeout_and_group_id() -> None:
    core = make()
    assert core.join_group(join(session=5_999), CLIENT, 0).response == JoinGroupResponse(
        error=Code.INVALID_SESSION_TIMEOUT)
    assert core.join_group(join(session=1_800_001), CLIENT, 0).response == JoinGroupResponse(
        error=Code.INVALID_SESSION_TIMEOUT)
    assert core.join_group(join(group=""), CLIENT, 0).response == JoinGroupResponse(error=Code.INVALID_GROUP_ID)
    assert core.join_group(join(member="x"), CLIENT, 0).response == JoinGroupResponse(
        error=Code.UNKNOWN_MEMBER_ID, member_id="x")


def test_initial_delay_extends_while_members_arrive() -> None:
    # delay 3000, rebalance timeout 10000: the first timer at 3000 sees a new member and
    # re-arms for min(3000, 7000) = 3000 more; at 6000 nobody new came: complete.
    core = make()
    a = core.join_group(join(version=4), CLIENT, 0).response
    assert a is not None
    t1 = core.join_group(join(member=a.member_id, version=4), CLIENT, 0).ticket
    assert state(core) is ClassicState.PREPARING_REBALANCE and core.next_deadline() == 3_000
    b = core.join_group(join(version=4), CLIENT, 100).response
    assert b is not None
    t2 = core.join_group(join(member=b.member_id, version=4), CLIENT, 100).ticket
    assert core.on_timer(3_000).answers == ()
    assert core.next_deadline() == 6_000
    done = answers(core.on_timer(6_000))
    leader, follower = done[t1 or 0], done[t2 or 0]
    assert isinstance(leader, JoinGroupResponse) and isinstance(follower, JoinGroupResponse)
    assert leader.generation_id == follower.generation_id == 1
    assert leader.leader == "c-1" and leader.protocol_name == "range"
    assert [m.member_id for m in leader.members] == ["c-1", "c-2"]
    assert follower.members == ()
    assert state(core) is ClassicState.COMPLETING_REBALANCE


def stable_pair(c: GroupCoordinator) -> tuple[str, str]:
    """Two members c-1 (leader) and c-2, generation 1, Stable; initial delay 0."""
    t1 = c.join_group(join(version=3), CLIENT, 0).ticket
    t2 = c.join_group(join(version=3), CLIENT, 0).ticket
    done = answers(c.on_timer(0))
    assert set(done) == {t1, t2}
    f = c.sync_group(sync("g", "c-2", 1), 0)
    assert f.ticket is not None
    lead = c.sync_group(sync("g", "c-1", 1, {"c-1": b"A", "c-2": b"B"}), 0)
    got = answers(lead)
    assert lead.ticket is not None
    assert got[f.ticket] == SyncGroupResponse(assignment=b"B", protocol_type="consumer", protocol_name="range")
    assert got[lead.ticket] == SyncGroupResponse(assignment=b"A", protocol_type="consumer", protocol_name="range")
    assert any(isinstance(w, GroupWrite) for ws in lead.writes for w in ws.writes)
    return "c-1", "c-2"


def test_join_sync_heartbeat_cycle() -> None:
    core = make(initial_rebalance_delay_ms=0)
    a, b = stable_pair(core)
    assert state(core) is ClassicState.STABLE
    ok = core.heartbeat(HeartbeatRequest(group_id="g", generation_id=1, member_id=a), 10).response
    assert ok is not None and ok.error is Code.NONE
    bad = core.heartbeat(HeartbeatRequest(group_id="g", generation_id=0, member_id=a), 10).response
    assert bad is not None and bad.error is Code.ILLEGAL_GENERATION
    unknown = core.heartbeat(HeartbeatRequest(group_id="g", generation_id=1, member_id="z"), 10).response
    assert unknown is not None and unknown.error is Code.UNKNOWN_MEMBER_ID
    # A follower's repeated SyncGroup in Stable is answered at once.
    again = core.sync_group(sync("g", b, 1), 20).response
    assert again is not None and again.assignment == b"B"


def test_session_expiry_removes_member_and_rebalances() -> None:
    core = make(initial_rebalance_delay_ms=0)
    a, b = stable_pair(core)
    # a keeps heartbeating, b stops: b's deadline is 0 + 10000.
    core.heartbeat(HeartbeatRequest(group_id="g", generation_id=1, member_id=a), 9_000)
    core.on_timer(10_000)
    group = classic(core)
    assert b not in group.members
    assert state(core) is ClassicState.PREPARING_REBALANCE
    hb = core.heartbeat(HeartbeatRequest(group_id="g", generation_id=1, member_id=a), 10_001).response
    assert hb is not None and hb.error is Code.REBALANCE_IN_PROGRESS
    rejoin = core.join_group(join(member=a, version=3), CLIENT, 10_002)
    assert rejoin.ticket is not None
    answered = answers(rejoin)[rejoin.ticket]
    assert isinstance(answered, JoinGroupResponse) and answered.generation_id == 2
    assert state(core) is ClassicState.COMPLETING_REBALANCE  # all (one) joined: completed at once
    assert group.generation_id == 2


def test_static_member_rejoin_in_stable_causes_no_rebalance() -> None:
    core = make(initial_rebalance_delay_ms=0)
    t1 = core.join_group(join(version=5, instance="i1"), CLIENT, 0).ticket
    done = answers(core.on_timer(0))
    first = done[t1 or 0]
    assert isinstance(first, JoinGroupResponse) and first.member_id == "i1-1"
    core.sync_group(sync("g", "i1-1", 1, {"i1-1": b"A"}, instance="i1"), 0)
    assert state(core) is ClassicState.STABLE
    # Restarted with an unknown member id: takes the place over, same generation.
    again = core.join_group(join(version=5, instance="i1"), CLIENT, 500).response
    assert again is not None and again.error is Code.NONE
    assert again.member_id == "i1-2" and again.generation_id == 1
    assert state(core) is ClassicState.STABLE
    old = core.heartbeat(HeartbeatRequest(group_id="g", generation_id=1, member_id="i1-1",
                                          group_instance_id="i1"), 600).response
    assert old is not None and old.error is Code.FENCED_INSTANCE_ID
    s = core.sync_group(sync("g", "i1-2", 1, instance="i1"), 600).response
    assert s is not None and s.assignment == b"A"


def test_leave_group_batch() -> None:
    core = make(initial_rebalance_delay_ms=0)
    _, b = stable_pair(core)
    step = core.leave_group(LeaveGroupRequest(group_id="g", members=(
        LeaveMember(member_id=b), LeaveMember(member_id="nobody"),
        LeaveMember(member_id="", group_instance_id="ghost"))), 5)
    assert step.response is not None
    assert [m.error for m in step.response.members] == [Code.NONE, Code.UNKNOWN_MEMBER_ID,
                                                         Code.UNKNOWN_MEMBER_ID]
    assert state(core) is ClassicState.PREPARING_REBALANCE
    assert step.response.to_wire(2) == {"ErrorCode": 0}
    gone = core.leave_group(LeaveGroupRequest(group_id="nope", members=(LeaveMember(member_id="x"),)), 5)
    assert gone.response is not None and gone.response.to_wire(0) == {"ErrorCode": Code.UNKNOWN_MEMBER_ID}


def test_max_size() -> None:
    core = make(initial_rebalance_delay_ms=0, max_size=1)
    core.join_group(join(version=3), CLIENT, 0)
    core.on_timer(0)
    assert core.join_group(join(version=3), CLIENT, 1).response == JoinGroupResponse(
        error=Code.GROUP_MAX_SIZE_REACHED)


def test_inconsistent_protocol() -> None:
    core = make(initial_rebalance_delay_ms=0)
    stable_pair(core)
    r = core.join_group(join(version=3, protocols=(("roundrobin", b""),)), CLIENT, 1).response
    assert r is not None and r.error is Code.INCONSISTENT_GROUP_PROTOCOL


def test_unsynced_member_dropped_after_rebalance_timeout() -> None:
    core = make(initial_rebalance_delay_ms=0)
    core.join_group(join(version=3), CLIENT, 0)
    core.join_group(join(version=3), CLIENT, 0)
    core.on_timer(0)
    core.sync_group(sync("g", "c-1", 1, {"c-1": b"A", "c-2": b"B"}), 0)  # c-2 never syncs
    core.heartbeat(HeartbeatRequest(group_id="g", generation_id=1, member_id="c-1"), 9_000)
    core.on_timer(10_000)
    assert "c-2" not in core.ctx.groups["g"].members


def test_consumer_subscription_topics() -> None:
    # ConsumerProtocolSubscription v0: version 0, topics ["a", "bc"], user data null.
    raw = b"\x00\x00" + b"\x00\x00\x00\x02" + b"\x00\x01a" + b"\x00\x02bc" + b"\xff\xff\xff\xff"
    assert consumer_subscription_topics(raw) == {"a", "bc"}
    assert consumer_subscription_topics(b"\x00") is None


def test_rebalance_reported_for_metrics() -> None:
    core = make(initial_rebalance_delay_ms=0)
    core.join_group(join(version=3), CLIENT, 100)
    core.on_timer(100)
    step = core.sync_group(sync("g", "c-1", 1, {"c-1": b"A"}), 350)
    (r,) = step.rebalances
    assert (r.group_id, r.protocol, r.generation, r.duration_ms) == ("g", "classic", 1, 250)
