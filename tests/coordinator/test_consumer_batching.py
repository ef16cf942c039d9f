"""KIP-848 formation cost, counted rather than timed: target assignments computed and
registry records written for N joins, in batched and immediate mode (expected counts
worked out by hand in each test)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from coordinator.batching import flatten
from coordinator.consumer_group import ConsumerGroup, ConsumerState
from coordinator.core import GroupCoordinator
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


def test_six_joins_in_one_tick_share_one_target_and_one_record() -> None:
    c = core(consumer_assignment_batching=True)
    steps: list[Step[Any]] = [join(c, m) for m in NAMES]
    # Each join bumps the group epoch and waits for the tick: no target yet.
    assert all(s.response is None and s.ticket is not None for s in steps)
    assert (group(c).group_epoch, group(c).assignment_epoch, c.consumer.target_computations) == (6, 0, 0)
    assert group(c).state is ConsumerState.ASSIGNING
    tick = c.on_timer(0)
    steps.append(tick)
    assert c.consumer.target_computations == 1
    # Uniform over 12 partitions, nobody holding any: the least loaded (count, id) takes the
    # next partition, so A gets 0 and 6, B 1 and 7, ... F 5 and 11; nothing is held by
    # anyone else, so every member gets its share at once, at epoch 6.
    got = answers(tick)
    expected = {m: [i, i + 6] for i, m in enumerate(NAMES)}
    for s, m in zip(steps, NAMES, strict=False):
        assert s.ticket is not None
        r = got[s.ticket]
        assert isinstance(r, ConsumerGroupHeartbeatResponse)
        assert (r.error, r.member_id, r.member_epoch) == (Code.NONE, m, 6)
        assert [list(tp.partitions) for tp in r.assignment or ()] == [expected[m]]
    assert group(c).state is ConsumerState.STABLE
    # Seven steps queued a registry write each; one ZooKeeper batch stores one record, the
    # group as it is when the writer takes it.
    assert sum(1 for s in steps for ws in s.writes for w in ws.writes if isinstance(w, GroupWrite)) == 7
    (written,) = registry_writes(steps)
    assert written.record is not None
    assert (written.record["group_epoch"], written.record["assignment_epoch"]) == (6, 6)
    assert sorted(m["member_id"] for m in written.record["members"]) == list(NAMES)
    assert {m["member_id"]: m["assigned"] for m in written.record["members"]} == {
        m: {str(T): ps} for m, ps in expected.items()}


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
    first = join(c, "A")
    # Queued before the tick, rendered after it: the record has A's assignment.
    tick = c.on_timer(0)
    (early,) = registry_writes([first])
    assert early.record is not None and early.record["assignment_epoch"] == 1
    assert early.record["members"][0]["assigned"] == {str(T): list(range(12))}
    assert len(registry_writes([first, tick])) == 1


def test_parked_heartbeats_of_a_released_group_are_answered_not_coordinator() -> None:
    c = core(consumer_assignment_batching=True)
    a, b = join(c, "A"), join(c, "B")
    step = c.release("g")
    got = answers(step)
    assert a.ticket is not None and b.ticket is not None
    assert got == {a.ticket: ConsumerGroupHeartbeatResponse(error=Code.NOT_COORDINATOR, member_id="A"),
                   b.ticket: ConsumerGroupHeartbeatResponse(error=Code.NOT_COORDINATOR, member_id="B")}
    # Its tick went with it: nothing is due any more but the retention sweep.
    assert c.next_deadline() == c.settings.offsets_retention_check_interval_ms
    assert answers(c.on_timer(0)) == {}


def test_a_leave_before_the_tick_counts_in_the_target() -> None:
    c = core(consumer_assignment_batching=True)
    a = join(c, "A")
    c.on_timer(0)
    b = join(c, "B")
    assert b.ticket is not None and a.response is None
    # A leaves while B waits: B still gets the target of the group as it is at the tick.
    left = c.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
        version=1, group_id="g", member_id="A", member_epoch=-1), CLIENT, 0).response
    assert left is not None and left.error is Code.NONE
    got = answers(c.on_timer(0))
    r = got[b.ticket]
    assert isinstance(r, ConsumerGroupHeartbeatResponse)
    # Group epochs: A's join 1, B's join 2, A's leave 3; B alone takes all 12 at epoch 3.
    assert (r.error, r.member_epoch, [len(tp.partitions) for tp in r.assignment or ()]) == (Code.NONE, 3, [12])


def test_the_assignment_interval_holds_the_next_tick_back() -> None:
    c = core(consumer_assignment_batching=True, consumer_assignment_interval_ms=100)
    a = join(c, "A", now=0)
    # No earlier assignment: the tick is due at once.
    assert c.next_deadline() == 0 and a.ticket is not None
    assert list(answers(c.on_timer(0))) == [a.ticket]
    b, d = join(c, "B", now=10), join(c, "D", now=60)
    # The last assignment was at 0: the next waits until 0 + 100, for both joins.
    assert c.next_deadline() == 100 and b.ticket is not None and d.ticket is not None
    assert answers(c.on_timer(99)) == {}
    assert sorted(answers(c.on_timer(100))) == sorted([b.ticket, d.ticket])
    assert c.consumer.target_computations == 2
    # Past the interval a new join's tick is due at once again.
    e = join(c, "E", now=250)
    assert c.next_deadline() == 250 and e.ticket is not None
