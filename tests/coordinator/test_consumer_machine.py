"""KIP-848 as a state machine: members heartbeating on a virtual clock, topics growing.

Invariants: no partition is held (assigned or pending revocation) by two members at once,
and no two current members believe they own the same partition; in Stable every
partition of every subscribed topic is assigned exactly once, to a member subscribed to
it; a commit is accepted only at the member's current epoch (a fenced member's is
rejected); session expiry removes a silent member; a static member that leaves with epoch
-2 and rejoins in time causes no new group epoch and gets its partitions back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coordinator.consumer_group import ConsumerGroup, ConsumerState
from coordinator.errors import Code
from coordinator.messages import (
    CommitPartition,
    CommitTopic,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    OffsetCommitRequest,
    TopicPartitions,
)
from coordinator.reconcile import MemberState
from coordinator.topics import TopicInfo, TopicsSnapshot

from .support import CLIENT, make

T1, T2 = UUID(int=1), UUID(int=2)
SESSION = 45_000
#: What every member asks for when it joins (``request``).
REBALANCE_TIMEOUT = 30_000
NAMES = ("m0", "m1", "m2", "s3")


@dataclass
class Member:
    name: str
    instance: str | None
    incarnation: int = 0
    epoch: int = 0
    joined: bool = False
    topics: tuple[str, ...] = ("t1",)
    owned: dict[UUID, set[int]] = field(default_factory=dict)
    #: When the core last answered this member without error (its session counts from it).
    seen: int = 0

    @property
    def member_id(self) -> str:
        return f"{self.name}-{self.incarnation}"


class ConsumerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.core = make()
        self.counts = {"t1": 4, "t2": 3}
        self.publish()
        self.members = {n: Member(n, "i3" if n.startswith("s") else None) for n in NAMES}

    def publish(self) -> None:
        self.core.update_topics(TopicsSnapshot.of([
            TopicInfo(name="t1", topic_id=T1, partitions=self.counts["t1"]),
            TopicInfo(name="t2", topic_id=T2, partitions=self.counts["t2"])]), self.now)

    def group(self) -> ConsumerGroup | None:
        g = self.core.ctx.groups.get("g")
        assert g is None or isinstance(g, ConsumerGroup)
        return g

    def send(self, m: Member, epoch: int, **kw: object) -> ConsumerGroupHeartbeatResponse:
        step = self.core.consumer_group_heartbeat(self.request(m, epoch, **kw), CLIENT, self.now)
        assert step.response is not None
        return step.response

    def request(self, m: Member, epoch: int, **kw: object) -> ConsumerGroupHeartbeatRequest:
        joining = epoch == 0
        return ConsumerGroupHeartbeatRequest(
            version=1, group_id="g", member_id=m.member_id, member_epoch=epoch, instance_id=m.instance,
            rebalance_timeout_ms=REBALANCE_TIMEOUT if joining else -1,
            subscribed_topic_names=m.topics if joining else None,
            topic_partitions=() if joining else tuple(
                TopicPartitions(topic_id=t, partitions=tuple(sorted(ps))) for t, ps in m.owned.items()),
            **kw)  # type: ignore[arg-type]

    def tick_to(self, now: int) -> None:
        while True:
            deadline = self.core.next_deadline()
            if deadline is None or deadline > now:
                break
            self.now = max(self.now, deadline)
            self.core.on_timer(self.now)
        self.now = now

    # -- rules ---------------------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES), both=st.booleans())
    def join(self, name: str, both: bool) -> None:
        m = self.members[name]
        if m.joined:
            return
        m.topics = ("t1", "t2") if both else ("t1",)
        m.owned = {}
        self.joined(m, self.send(m, 0))

    def joined(self, m: Member, resp: ConsumerGroupHeartbeatResponse) -> None:
        if resp.error is Code.NONE:
            m.joined, m.epoch, m.seen = True, resp.member_epoch, self.now
            m.owned = {tp.topic_id: set(tp.partitions) for tp in resp.assignment or ()}

    @rule(name=st.sampled_from(NAMES))
    def heartbeat(self, name: str) -> None:
        m = self.members[name]
        if not m.joined:
            return
        resp = self.send(m, m.epoch)
        if resp.error is Code.NONE:
            m.epoch, m.seen = resp.member_epoch, self.now
            if resp.assignment is not None:
                m.owned = {tp.topic_id: set(tp.partitions) for tp in resp.assignment}
        else:
            assert resp.error in (Code.FENCED_MEMBER_EPOCH, Code.UNKNOWN_MEMBER_ID, Code.GROUP_ID_NOT_FOUND)
            m.joined, m.owned, m.epoch = False, {}, 0
            m.incarnation += 1

    @rule(name=st.sampled_from(NAMES))
    def leave(self, name: str) -> None:
        m = self.members[name]
        if not m.joined:
            return
        resp = self.send(m, -1)
        if self.now - m.seen >= REBALANCE_TIMEOUT:
            # Silent for a whole session, or for its rebalance timeout while it had
            # partitions to give back: the core may have fenced it already (correctly).
            assert resp.error in (Code.NONE, Code.UNKNOWN_MEMBER_ID)
        else:
            # Heard from within both timeouts: never removed behind its back.
            assert resp.error is Code.NONE
        m.joined, m.owned, m.epoch = False, {}, 0
        m.incarnation += 1

    @rule(dt=st.integers(0, 20_000))
    def tick(self, dt: int) -> None:
        self.tick_to(self.now + dt)

    @rule(rounds=st.integers(1, 6))
    def settle(self, rounds: int) -> None:
        for _ in range(rounds):
            for name in NAMES:
                self.heartbeat(name)
            self.tick_to(self.now + 1_000)

    @precondition(lambda self: self.counts["t1"] < 8)
    @rule()
    def add_partitions(self) -> None:
        self.counts["t1"] += 1
        self.publish()

    @rule(name=st.sampled_from(NAMES))
    def commit(self, name: str) -> None:
        m = self.members[name]
        group = self.group()
        step = self.core.offset_commit(OffsetCommitRequest(
            version=9, group_id="g", generation_id_or_member_epoch=m.epoch, member_id=m.member_id,
            topics=(CommitTopic(name="t1", partitions=(CommitPartition(partition=0, offset=1),)),)), self.now)
        accepted = step.response is None
        current = group is not None and m.member_id in group.members \
            and group.members[m.member_id].member_epoch == m.epoch
        event(f"commit accepted={accepted}")
        # Invariant: a commit is accepted exactly at the member's current epoch.
        assert accepted == current or (group is not None and not group.members and m.epoch < 0)
        for ws in step.writes:
            if ws.ticket is not None:
                self.core.writes_done(ws.ticket, self.now)

    @precondition(lambda self: self.members["s3"].joined and self.members["s3"].epoch > 0)
    @rule(gap=st.integers(0, SESSION - 1))
    def bounce_static(self, gap: int) -> None:
        m = self.members["s3"]
        self.heartbeat("s3")  # the session counts from the last heartbeat, not from the leave
        group = self.group()
        if not m.joined or group is None:
            return
        left = self.send(m, -2)
        assert (left.error, left.member_epoch) == (Code.NONE, -2)
        old_id = m.member_id
        epoch_before = group.group_epoch
        held = group.members[old_id].assignment.assigned
        # Within everyone's session and revocation deadline: another member's expiry would
        # be a rebalance of its own.
        deadlines = [self.core.ctx.timers.get((kind, "g", mid)) for mid in group.members
                     for kind in ("consumer.session", "consumer.rebalance")]
        gap = min([gap] + [d - self.now - 1 for d in deadlines if d is not None])
        self.tick_to(self.now + max(gap, 0))
        # The target it rejoins to (batched mode may compute a new one meanwhile, for an
        # epoch that moved on before the leave).
        target = group.target.get(old_id, {})
        m.incarnation += 1
        m.owned = {}
        resp = self.send(m, 0)
        event("static bounce")
        # Invariant: rejoining in time under a new id causes no rebalance...
        assert resp.error is Code.NONE and group.group_epoch == epoch_before
        # ...and the member keeps what it held of its target at once.
        got = {tp.topic_id: set(tp.partitions) for tp in resp.assignment or ()}
        for t, ps in held.items():
            assert ps & target.get(t, frozenset()) <= got.get(t, set())
        for t, got_ps in got.items():
            assert got_ps <= target.get(t, frozenset())
        m.epoch = resp.member_epoch
        m.owned = got

    @precondition(lambda self: any(m.joined for m in self.members.values()))
    @rule(data=st.data())
    def go_silent(self, data: st.DataObject) -> None:
        victim = self.members[data.draw(st.sampled_from(sorted(n for n, m in self.members.items() if m.joined)))]
        for _ in range(SESSION // 5_000 + 2):
            self.tick_to(self.now + 5_000)
            for name in NAMES:
                if name != victim.name:
                    self.heartbeat(name)
        group = self.group()
        event("silent member expired")
        # Invariant: session expiry removes a silent member...
        assert group is None or victim.member_id not in group.members
        # ...and its commit is then rejected.
        late = self.core.offset_commit(OffsetCommitRequest(
            version=9, group_id="g", generation_id_or_member_epoch=victim.epoch, member_id=victim.member_id,
            topics=(CommitTopic(name="t1", partitions=(CommitPartition(partition=0, offset=1),)),)),
            self.now).response
        # (GROUP_ID_NOT_FOUND: the empty group was cleaned up by the retention sweep.)
        assert late is not None and late.topics[0].partitions[0].error in (
            Code.UNKNOWN_MEMBER_ID, Code.STALE_MEMBER_EPOCH, Code.GROUP_ID_NOT_FOUND)
        victim.joined, victim.owned, victim.epoch = False, {}, 0
        victim.incarnation += 1

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def one_holder_per_partition(self) -> None:
        group = self.group()
        if group is None:
            return
        held: dict[tuple[UUID, int], str] = {}
        for member in group.members.values():
            for a in (member.assignment.assigned, member.assignment.pending_revocation):
                for t, ps in a.items():
                    for p in ps:
                        assert held.setdefault((t, p), member.member_id) == member.member_id, (t, p, held)
        believed: dict[tuple[UUID, int], str] = {}
        for m in self.members.values():
            if m.joined and m.member_id in group.members:
                for t, mine in m.owned.items():
                    for p in mine:
                        assert believed.setdefault((t, p), m.name) == m.name, (t, p, believed)

    @invariant()
    def indexes_agree_with_the_members(self) -> None:
        group = self.group()
        if group is None:
            return
        # What the group keeps indexed, recomputed from its members the slow way.
        holders = {(t, p): m.member_epoch for m in group.members.values()
                   for a in (m.assignment.assigned, m.assignment.pending_revocation) for t, ps in a.items() for p in ps}
        assert group.partition_epochs() == holders
        settled = all(m.assignment.state is MemberState.STABLE and m.member_epoch == group.assignment_epoch
                      for m in group.members.values())
        if group.members and group.group_epoch <= group.assignment_epoch and not group.dead:
            assert (group.state is ConsumerState.STABLE) == settled
        names = {n for m in group.members.values() for n in m.subscribed_topic_names}
        assert all(group.is_subscribed_to(n) for n in names)

    @invariant()
    def stable_assigns_every_subscribed_partition(self) -> None:
        group = self.group()
        if group is None or group.state is not ConsumerState.STABLE:
            return
        event(f"stable with {len(group.members)} members")
        ids = {"t1": T1, "t2": T2}
        subscribed = {n for m in group.members.values() for n in m.subscribed_topic_names}
        expected = sorted((ids[n], p) for n in subscribed for p in range(self.counts[n]))
        got = sorted((t, p) for m in group.members.values() for t, ps in m.assignment.assigned.items() for p in ps)
        assert got == expected
        for m in group.members.values():
            assert {t for t in m.assignment.assigned} <= {ids[n] for n in m.subscribed_topic_names}


TestConsumerMachine = ConsumerMachine.TestCase
TestConsumerMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)


class BatchedConsumerMachine(ConsumerMachine):
    """The same group with batched assignment (what the shell runs): heartbeats are
    answered at once against the current target, and the next target is computed on a
    tick; ``burst`` joins every absent member before one tick, so one target serves them
    all."""

    def __init__(self) -> None:
        super().__init__()
        self.core = make(consumer_assignment_batching=True)
        self.publish()

    @rule()
    def burst(self) -> None:
        group = self.group()
        first = group is None or group.assignment_epoch == 0
        before = self.core.consumer.target_computations
        joined = 0
        for m in self.members.values():
            if m.joined:
                continue
            m.topics, m.owned = ("t1",), {}
            self.joined(m, self.send(m, 0))
            joined += 1
        during = self.core.consumer.target_computations - before
        # Invariant: joins compute no target, but a group's very first (its first member
        # must get an epoch above 0).
        assert during == (1 if first and joined else 0)
        group = self.group()
        ahead = group is not None and group.group_epoch > group.assignment_epoch
        self.core.on_timer(self.now)
        event(f"burst of {joined}")
        # Invariant: one target on the tick for everything since the last (none if current).
        assert self.core.consumer.target_computations - before - during == (1 if ahead else 0)
        group = self.group()
        assert group is None or group.group_epoch == group.assignment_epoch


    @invariant()
    def a_group_behind_its_epoch_has_its_tick_armed(self) -> None:
        # Heartbeats never compute a target in batched mode (but a group's first): a group
        # whose epoch moved on must have its tick armed, or its members would wait forever.
        group = self.group()
        if group is not None and not group.dead and group.group_epoch > group.assignment_epoch:
            assert ("consumer.assign", "g") in self.core.ctx.timers


TestBatchedConsumerMachine = BatchedConsumerMachine.TestCase
TestBatchedConsumerMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)

