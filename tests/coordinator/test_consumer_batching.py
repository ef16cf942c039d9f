"""KIP-848 formation cost, counted rather than timed: target assignments computed and
registry records written for N joins, in batched and immediate mode (expected counts
worked out by hand in each test)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from coordinator.batching import flatten
from coordinator.consumer_group import ConsumerGroup, ConsumerState
from coordinator.core import GroupCoordinator, LoadedGroup
from coordinator.errors import Code
from coordinator.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from coordinator.outcome import GroupWrite, Step, WriteSet
from coordinator.topics import TopicInfo, TopicsSnapshot

from .support import CLIENT, answers, make

T = UUID(int=7)
NAMES = ("A", "B", "C", "D", "E", "F")


def core(**settings: Any) -> GroupCoordinator:
    c = make(**settings)
    c.update_topics(TopicsSnapshot.of([TopicInfo(name="t", topic_id=T, partitions=12)]), 0)
    return c


def join(c: GroupCoordinator, member: str, now: int = 0) -> Step[ConsumerGroupHeartbeatResponse]:
    return c.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
        version=1, group_id="g", member_id=member, member_epoch=0, rebalance_timeout_ms=30_000,
        subscribed_topic_names=("t",), topic_partitions=()), CLIENT, now)


def beat(c: GroupCoordinator, member: str, epoch: int, owned: list[int]) -> Step[ConsumerGroupHeartbeatResponse]:
    return c.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
        version=1, group_id="g", member_id=member, member_epoch=epoch,
        topic_partitions=(TopicPartitions(topic_id=T, partitions=tuple(owned)),)), CLIENT, 0)


def group(c: GroupCoordinator) -> ConsumerGroup:
    g = c.ctx.groups["g"]
    assert isinstance(g, ConsumerGroup)
    return g


def registry_writes(steps: list[Step[Any]]) -> list[GroupWrite]:
    """What the writer would store if it took every write set of ``steps`` as one batch."""
    batch: list[WriteSet] = [ws for s in steps for ws in s.writes]
    return [w for w in flatten(batch) if isinstance(w, GroupWrite)]


def parts_of(r: ConsumerGroupHeartbeatResponse | None) -> list[int] | None:
    """The partitions an answer assigns (``None``: the answer says nothing changed)."""
    assert r is not None and r.error is Code.NONE, r
    if r.assignment is None:
        return None
    return sorted(p for tp in r.assignment for p in tp.partitions)


def test_joins_between_two_ticks_share_one_target_and_are_answered_at_once() -> None:
    c = core(consumer_assignment_batching=True)
    steps: list[Step[Any]] = [join(c, "A")]
    # A group's first target is computed at once: its first member gets epoch 1 and all 12.
    first = steps[0].response
    assert first is not None and first.member_epoch == 1 and parts_of(first) == list(range(12))
    for m in NAMES[1:]:
        steps.append(join(c, m))
        r = steps[-1].response
        # Answered now, against the current target (epoch 1), in which B..F have nothing.
        assert r is not None and (r.member_id, r.member_epoch, parts_of(r)) == (m, 1, [])
    assert (group(c).group_epoch, group(c).assignment_epoch, c.consumer.target_computations) == (6, 1, 1)
    assert group(c).state is ConsumerState.ASSIGNING
    assert c.next_deadline() == 0  # the tick, due at once
    tick = c.on_timer(0)
    steps.append(tick)
    assert answers(tick) == {}  # nobody waited for it
    assert (group(c).assignment_epoch, c.consumer.target_computations) == (6, 2)
    # The new target: 12 partitions over six members, two each; A keeps two of its own.
    target = {m: sorted(group(c).target[m][T]) for m in NAMES}
    assert all(len(ps) == 2 for ps in target.values())
    assert sorted(p for ps in target.values() for p in ps) == list(range(12))
    # A learns at its next heartbeat what it keeps (still epoch 1: 10 partitions to revoke);
    # once it owns only those, it moves to epoch 6.
    revoke = beat(c, "A", 1, list(range(12))).response
    assert revoke is not None and (revoke.member_epoch, parts_of(revoke)) == (1, target["A"])
    done = beat(c, "A", 1, target["A"]).response
    assert done is not None and done.member_epoch == 6
    # The others then get their two each at their next heartbeat, at epoch 6.
    for m in NAMES[1:]:
        r = beat(c, m, 1, []).response
        assert r is not None and (r.member_epoch, parts_of(r)) == (6, target[m])
    assert group(c).state is ConsumerState.STABLE
    assert c.consumer.target_computations == 2
    # Every step queued a registry write; one ZooKeeper batch stores one record, the group
    # as it is when the writer takes it.
    (written,) = registry_writes(steps)
    assert written.record is not None
    assert (written.record["group_epoch"], written.record["assignment_epoch"]) == (6, 6)
    assert sorted(m["member_id"] for m in written.record["members"]) == list(NAMES)


def test_immediate_mode_computes_one_target_per_group_epoch() -> None:
    c = core()
    steps: list[Step[Any]] = [join(c, m) for m in NAMES]
    # Answered at once, one target per join (group epochs 1..6), none for heartbeats that
    # find the target current.
    assert all(s.response is not None for s in steps)
    assert c.consumer.target_computations == 6
    epochs = {m: s.response.member_epoch for m, s in zip(NAMES, steps, strict=True) if s.response is not None}
    assert epochs == {"A": 1, "B": 2, "C": 3, "D": 4, "E": 5, "F": 6}
    # A (epoch 1) holds all 12; with six members its target is {0, 1}: it must revoke first.
    a = beat(c, "A", 1, list(range(12))).response
    assert a is not None and (a.member_epoch, [list(tp.partitions) for tp in a.assignment or ()]) == (1, [[0, 1]])
    assert c.consumer.target_computations == 6
    # Taken as one batch, the writes of these steps store one record.
    assert len(registry_writes(steps)) == 1


def test_a_written_behind_record_is_the_group_when_the_writer_takes_it() -> None:
    c = core(consumer_assignment_batching=True)
    first, second = join(c, "A"), join(c, "B")
    # Queued before the tick, rendered after it: the record has the tick's target (epoch 2,
    # six partitions each).
    tick = c.on_timer(0)
    (early,) = registry_writes([first, second])
    assert early.record is not None and early.record["assignment_epoch"] == 2
    assert sorted(len(m["target"][str(T)]) for m in early.record["members"]) == [6, 6]
    assert len(registry_writes([first, second, tick])) == 1


def test_a_released_groups_tick_goes_with_it() -> None:
    c = core(consumer_assignment_batching=True)
    join(c, "A")
    join(c, "B")
    assert c.next_deadline() == 0
    assert answers(c.release("g")) == {}
    # Nothing is due any more but the retention sweep, and no target is computed.
    assert c.next_deadline() == c.settings.offsets_retention_check_interval_ms
    c.on_timer(0)
    assert c.consumer.target_computations == 1


def test_a_leave_before_the_tick_counts_in_the_target() -> None:
    c = core(consumer_assignment_batching=True)
    join(c, "A")
    b = join(c, "B").response
    assert b is not None and (b.member_epoch, parts_of(b)) == (1, [])
    # A leaves before the tick: the target is computed for the group as it is then.
    left = c.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
        version=1, group_id="g", member_id="A", member_epoch=-1), CLIENT, 0).response
    assert left is not None and left.error is Code.NONE
    c.on_timer(0)
    assert c.consumer.target_computations == 2
    # Group epochs: A's join 1, B's join 2, A's leave 3; B alone takes all 12 at epoch 3.
    r = beat(c, "B", 1, []).response
    assert r is not None and (r.member_epoch, parts_of(r)) == (3, list(range(12)))


def test_the_assignment_interval_holds_the_next_tick_back() -> None:
    c = core(consumer_assignment_batching=True, consumer_assignment_interval_ms=100)
    join(c, "A", now=0)  # the group's first target, at once (at 0)
    assert c.consumer.target_computations == 1
    join(c, "B", now=10)
    join(c, "D", now=60)
    # The last assignment was at 0: the next waits until 0 + 100, for both joins.
    assert c.next_deadline() == 100
    c.on_timer(99)
    assert c.consumer.target_computations == 1
    c.on_timer(100)
    assert c.consumer.target_computations == 2
    # Past the interval a new join's tick is due at once again.
    join(c, "E", now=250)
    assert c.next_deadline() == 250


def test_a_group_taken_over_before_its_tick_gets_its_target_on_the_new_owner() -> None:
    old = core(consumer_assignment_batching=True)
    join(old, "A")
    join(old, "B")  # epoch 2, its tick not run yet: the owner moves on now
    record = group(old).to_record()
    assert (record["group_epoch"], record["assignment_epoch"]) == (2, 1)
    new = core(consumer_assignment_batching=True)
    new.load([LoadedGroup(group_id="g", record=record, offsets={})], 1_000)
    # The tick is armed at load, not left to the first heartbeat.
    assert new.next_deadline() == 1_000
    new.on_timer(1_000)
    assert (group(new).assignment_epoch, new.consumer.target_computations) == (2, 1)
    assert sorted(len(ps[T]) for ps in group(new).target.values()) == [6, 6]
