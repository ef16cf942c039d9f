"""KIP-848 ConsumerGroupHeartbeat, step by step, with expectations worked out by hand."""

from __future__ import annotations

from uuid import UUID

from coordinator.consumer_group import ConsumerGroup, ConsumerState
from coordinator.core import GroupCoordinator
from coordinator.errors import Code
from coordinator.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from coordinator.topics import TopicInfo, TopicsSnapshot

from .support import CLIENT, make

T1 = UUID(int=1)
T2 = UUID(int=2)


def core_with_topics(**settings: object) -> GroupCoordinator:
    core = make(**settings)  # type: ignore[arg-type]
    core.update_topics(TopicsSnapshot.of([TopicInfo(name="t1", topic_id=T1, partitions=6),
                                          TopicInfo(name="t2", topic_id=T2, partitions=2)]), 0)
    return core


def hb(core: GroupCoordinator, member: str, epoch: int, owned: dict[UUID, list[int]] | None = None,
       *, topics: tuple[str, ...] | None = None, regex: str | None = None, assignor: str | None = None,
       instance: str | None = None, now: int = 0, version: int = 1) -> ConsumerGroupHeartbeatResponse:
    joining = epoch == 0
    req = ConsumerGroupHeartbeatRequest(
        version=version, group_id="g", member_id=member, member_epoch=epoch, instance_id=instance,
        rebalance_timeout_ms=30_000 if joining else -1,
        subscribed_topic_names=topics if topics is not None else (("t1",) if joining and regex is None else None),
        subscribed_topic_regex=regex, server_assignor=assignor,
        topic_partitions=() if joining else (None if owned is None else tuple(
            TopicPartitions(topic_id=t, partitions=tuple(ps)) for t, ps in owned.items())))
    step = core.consumer_group_heartbeat(req, CLIENT, now)
    assert step.response is not None
    return step.response


def parts(resp: ConsumerGroupHeartbeatResponse) -> dict[UUID, list[int]] | None:
    if resp.assignment is None:
        return None
    return {tp.topic_id: list(tp.partitions) for tp in resp.assignment}


def group(core: GroupCoordinator) -> ConsumerGroup:
    g = core.ctx.groups["g"]
    assert isinstance(g, ConsumerGroup)
    return g


def test_two_members_reconcile_without_double_ownership() -> None:
    core = core_with_topics()
    a = hb(core, "A", 0)
    assert (a.error, a.member_epoch, parts(a)) == (Code.NONE, 1, {T1: [0, 1, 2, 3, 4, 5]})
    assert a.heartbeat_interval_ms == 5_000
    b = hb(core, "B", 0)
    # Group epoch 2; B's target {3,4,5} is still A's: B waits at epoch 2 with nothing.
    assert (b.member_epoch, parts(b)) == (2, {})
    assert group(core).state is ConsumerState.RECONCILING
    a = hb(core, "A", 1, {T1: [0, 1, 2, 3, 4, 5]})
    # A must first revoke 3,4,5: it stays at epoch 1 and is told to keep only 0,1,2.
    assert (a.member_epoch, parts(a)) == (1, {T1: [0, 1, 2]})
    b = hb(core, "B", 2, {})
    assert (b.member_epoch, parts(b)) == (2, None)  # nothing released yet
    a = hb(core, "A", 1, {T1: [0, 1, 2]})
    assert (a.member_epoch, parts(a)) == (2, None)
    b = hb(core, "B", 2, {})
    assert (b.member_epoch, parts(b)) == (2, {T1: [3, 4, 5]})
    assert group(core).state is ConsumerState.STABLE


def test_epoch_errors() -> None:
    core = core_with_topics()
    hb(core, "A", 0)
    assert hb(core, "A", 5, {}).error is Code.FENCED_MEMBER_EPOCH
    assert hb(core, "Z", 1, {}).error is Code.UNKNOWN_MEMBER_ID
    other = ConsumerGroupHeartbeatRequest(version=1, group_id="nope", member_id="A", member_epoch=1)
    resp = core.consumer_group_heartbeat(other, CLIENT, 0).response
    assert resp is not None and resp.error is Code.GROUP_ID_NOT_FOUND
    # The previous epoch with a subset of the assignment is accepted (a lost response).
    hb(core, "B", 0)
    a = hb(core, "A", 1, {T1: [0, 1, 2, 3, 4, 5]})
    assert a.error is Code.NONE and a.member_epoch == 1
    a = hb(core, "A", 1, {T1: [0, 1, 2]})
    assert a.member_epoch == 2
    assert hb(core, "A", 1, {T1: [0]}).error is Code.NONE
    assert hb(core, "A", 1, {T1: [5]}).error is Code.FENCED_MEMBER_EPOCH


def test_invalid_requests() -> None:
    core = core_with_topics()
    assert hb(core, "", 0).error is Code.INVALID_REQUEST  # v1: the client makes the id
    assert hb(core, "A", 0, assignor="sticky").error is Code.UNSUPPORTED_ASSIGNOR
    assert hb(core, "A", 0, regex="(").error is Code.INVALID_REGULAR_EXPRESSION
    assert hb(core, "A", -3, {}).error is Code.INVALID_REQUEST
    v0 = hb(core, "", 0, version=0)
    assert v0.error is Code.NONE and v0.member_id == "1"


def test_leave_and_session_expiry_bump_the_epoch() -> None:
    core = core_with_topics()
    hb(core, "A", 0)
    hb(core, "B", 0)
    assert group(core).group_epoch == 2
    left = hb(core, "B", -1, {})
    assert (left.error, left.member_epoch) == (Code.NONE, -1)
    assert group(core).group_epoch == 3 and "B" not in group(core).members
    hb(core, "C", 0, now=1_000)
    # A never heartbeats again: fenced at 0 + 45000; C keeps going.
    hb(core, "C", group(core).members["C"].member_epoch, {}, now=40_000)
    core.on_timer(45_000)
    assert "A" not in group(core).members
    assert group(core).group_epoch == 5


def test_static_member_rejoins_without_rebalance() -> None:
    core = core_with_topics()
    a = hb(core, "A", 0, instance="i")
    assert a.member_epoch == 1
    gone = hb(core, "A", -2, {}, instance="i")
    assert gone.member_epoch == -2
    epoch = group(core).group_epoch
    back = hb(core, "A2", 0, instance="i", now=10_000)
    assert back.error is Code.NONE and group(core).group_epoch == epoch
    assert parts(back) == {T1: [0, 1, 2, 3, 4, 5]}
    assert hb(core, "A", 1, {}, instance="i").error is Code.FENCED_INSTANCE_ID
    # While the instance is held by a live member, another one cannot take it.
    assert hb(core, "A3", 0, instance="i").error is Code.UNRELEASED_INSTANCE_ID


def test_partition_count_change_and_regex() -> None:
    core = core_with_topics()
    hb(core, "A", 0, regex="t.*")
    assert group(core).subscription_metadata == {"t1": (T1, 6), "t2": (T2, 2)}
    epoch = group(core).group_epoch
    core.update_topics(TopicsSnapshot.of([TopicInfo(name="t1", topic_id=T1, partitions=8),
                                          TopicInfo(name="t2", topic_id=T2, partitions=2)]), 5)
    assert group(core).group_epoch == epoch + 1
    a = hb(core, "A", epoch, {T1: list(range(6)), T2: [0, 1]})
    assert parts(a) == {T1: list(range(8)), T2: [0, 1]}


def test_describe() -> None:
    core = core_with_topics()
    hb(core, "A", 0, assignor="range")
    d = core.consumer_group_describe(ConsumerGroupDescribeRequest(group_ids=("g", "x"))).response
    assert d is not None
    g, x = d.groups
    assert (g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == ("Stable", 1, 1, "range")
    assert g.members[0].assignment[0].topic_name == "t1"
    assert x.error is Code.GROUP_ID_NOT_FOUND
    wire = d.to_wire(1)
    assert wire["Groups"][0]["Members"][0]["MemberType"] == 1


def test_rebalance_reported_for_metrics() -> None:
    core = core_with_topics()
    hb(core, "A", 0, now=0)
    hb(core, "B", 0, now=100)  # epoch 2 starts a rebalance at 100
    hb(core, "A", 1, {T1: [0, 1, 2, 3, 4, 5]}, now=200)
    hb(core, "A", 1, {T1: [0, 1, 2]}, now=300)
    last = core.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
        version=1, group_id="g", member_id="B", member_epoch=2, topic_partitions=()), CLIENT, 400)
    (r,) = last.rebalances
    assert (r.protocol, r.generation, r.duration_ms) == ("consumer", 2, 300)


def test_wanted_topics() -> None:
    core = core_with_topics()
    assert core.wanted_topics() == (set(), False)
    hb(core, "A", 0, topics=("t1", "later"))
    assert core.wanted_topics() == ({"t1", "later"}, False)
    hb(core, "B", 0, regex="t.*")
    assert core.wanted_topics() == ({"t1", "later"}, True)


def test_a_heartbeat_that_changes_nothing_keeps_the_members_object() -> None:
    core = core_with_topics()
    joined = hb(core, "m1", 0)
    first = hb(core, "m1", joined.member_epoch, parts(joined))
    member = group(core).members["m1"]
    assert first.error is Code.NONE
    assert hb(core, "m1", joined.member_epoch).error is Code.NONE  # nothing new: the same object
    assert group(core).members["m1"] is member
    hb(core, "m1", joined.member_epoch, topics=("t1", "t2"))  # a new subscription: a new object
    assert group(core).members["m1"] is not member
    assert group(core).members["m1"].subscribed_topic_names == ("t1", "t2")


def test_a_groups_own_configs_set_its_heartbeat_interval_and_session_timeout() -> None:
    # consumer.heartbeat.interval.ms / consumer.session.timeout.ms of group "g" (group configs,
    # looked up by the shell): 6,000 and 50,000 ms instead of the key table's 5,000 and 45,000.
    core = core_with_topics()
    core.ctx.group_timeouts = lambda group_id: (50_000, 6_000) if group_id == "g" else (45_000, 5_000)
    joined = hb(core, "m1", 0, now=1_000)
    assert joined.heartbeat_interval_ms == 6_000
    # The member's session ends 50 s after its heartbeat, not 45 s.
    assert core.ctx.timers.get(("consumer.session", "g", joined.member_id)) == 51_000
    core.ctx.group_timeouts = None  # no shell lookup: the key table's values
    assert hb(core, "m2", 0, now=2_000).heartbeat_interval_ms == 5_000
