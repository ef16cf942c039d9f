"""The classic protocol as a state machine: clients, a leader that assigns, a virtual clock.

Invariants: no partition is handed to two members in one generation; in Stable every
partition is owned exactly once; a commit is accepted only from a current member of the
current generation (so an expired or fenced member's commit is rejected); session expiry
removes a silent member; a static member that restarts in Stable causes no rebalance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coordinator.classic_group import ClassicGroup, ClassicState
from coordinator.errors import Code
from coordinator.messages import (
    CommitPartition,
    CommitTopic,
    HeartbeatRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveMember,
    OffsetCommitRequest,
    SyncGroupResponse,
)
from coordinator.outcome import Response, Step

from .support import CLIENT, join, make, sync

PARTITIONS = 6
SESSION = 10_000
NAMES = ("c0", "c1", "s0", "s1")


def encode(parts: list[int]) -> bytes:
    return ",".join(map(str, parts)).encode()


def decode(data: bytes) -> set[int]:
    return {int(x) for x in data.decode().split(",") if x}


@dataclass
class Client:
    name: str
    instance: str | None
    member_id: str = ""
    generation: int = -1
    leader_members: tuple[str, ...] = ()
    is_leader: bool = False
    needs_sync: bool = False
    rejoin: bool = False
    tickets: set[int] = field(default_factory=set)


class ClassicMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.core = make(initial_rebalance_delay_ms=1_000)
        self.clients = {n: Client(n, f"i{n[1]}" if n.startswith("s") else None) for n in NAMES}
        self.ticket_owner: dict[int, tuple[str, str]] = {}
        #: generation -> partition -> member it was handed to
        self.handed: dict[int, dict[int, str]] = {}

    # -- plumbing ------------------------------------------------------------------------

    def group(self) -> ClassicGroup | None:
        g = self.core.ctx.groups.get("g")
        assert g is None or isinstance(g, ClassicGroup)
        return g

    def absorb(self, step: Step[Response], client: Client | None = None, kind: str = "") -> Response | None:
        if step.ticket is not None and client is not None:
            self.ticket_owner[step.ticket] = (client.name, kind)
            client.tickets.add(step.ticket)
        for ws in step.writes:
            if ws.ticket is not None:
                self.absorb(self.core.writes_done(ws.ticket, self.now))
        for answer in step.answers:
            owner = self.ticket_owner.pop(answer.ticket, None)
            if owner is not None and answer.ticket in self.clients[owner[0]].tickets:
                self.clients[owner[0]].tickets.discard(answer.ticket)
                self.apply(self.clients[owner[0]], owner[1], answer.response)
        if step.response is not None and client is not None:
            self.apply(client, kind, step.response)
        return step.response

    def apply(self, c: Client, kind: str, resp: Response) -> None:
        if isinstance(resp, JoinGroupResponse):
            if resp.error is Code.NONE:
                c.member_id, c.generation = resp.member_id, resp.generation_id
                c.is_leader = resp.leader == resp.member_id
                c.leader_members = tuple(m.member_id for m in resp.members)
                c.needs_sync, c.rejoin = True, False
            elif resp.error is Code.MEMBER_ID_REQUIRED:
                c.member_id = resp.member_id
            elif resp.error in (Code.UNKNOWN_MEMBER_ID, Code.FENCED_INSTANCE_ID):
                c.member_id, c.generation = "", -1
        elif isinstance(resp, SyncGroupResponse):
            if resp.error is Code.NONE:
                c.needs_sync = False
                handed = self.handed.setdefault(c.generation, {})
                owner = c.instance or c.member_id  # a static member's place outlives its member id
                for p in decode(resp.assignment):
                    # Invariant: one owner per partition per generation.
                    assert handed.setdefault(p, owner) == owner, (p, handed, c)
            elif resp.error is Code.UNKNOWN_MEMBER_ID:
                c.member_id, c.generation = "", -1

    def tick_to(self, now: int) -> None:
        while True:
            deadline = self.core.next_deadline()
            if deadline is None or deadline > now:
                break
            self.now = max(self.now, deadline)
            self.absorb(self.core.on_timer(self.now))
        self.now = now

    # -- rules ---------------------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES))
    def join(self, name: str) -> None:
        c = self.clients[name]
        if c.tickets:
            return
        self.absorb(self.core.join_group(join(member=c.member_id, instance=c.instance, session=SESSION,
                                              rebalance=SESSION), CLIENT, self.now), c, "join")
        if c.member_id and not c.tickets and c.generation < 0 and c.instance is None:
            # MEMBER_ID_REQUIRED: join again with the id, as clients do.
            self.absorb(self.core.join_group(join(member=c.member_id, session=SESSION, rebalance=SESSION),
                                             CLIENT, self.now), c, "join")

    @rule(name=st.sampled_from(NAMES))
    def sync(self, name: str) -> None:
        c = self.clients[name]
        if not c.needs_sync or c.tickets:
            return
        assignments: dict[str, bytes] = {}
        if c.is_leader:
            members = sorted(c.leader_members)
            for i, m in enumerate(members):
                assignments[m] = encode([p for p in range(PARTITIONS) if p % len(members) == i])
        self.absorb(self.core.sync_group(sync("g", c.member_id, c.generation, assignments, c.instance),
                                         self.now), c, "sync")

    @rule(name=st.sampled_from(NAMES))
    def heartbeat(self, name: str) -> None:
        c = self.clients[name]
        if not c.member_id or c.generation < 0:
            return
        resp = self.absorb(self.core.heartbeat(HeartbeatRequest(
            group_id="g", generation_id=c.generation, member_id=c.member_id, group_instance_id=c.instance),
            self.now), c, "heartbeat")
        assert resp is not None
        error = resp.to_wire(4)["ErrorCode"]
        if error in (Code.UNKNOWN_MEMBER_ID, Code.FENCED_INSTANCE_ID):
            c.member_id, c.generation = "", -1
        elif error in (Code.REBALANCE_IN_PROGRESS, Code.ILLEGAL_GENERATION):
            c.rejoin = True

    @rule(names=st.sets(st.sampled_from(NAMES), min_size=1))
    def settle(self, names: set[str]) -> None:
        """Well-behaved clients for a few rounds: the group usually ends up Stable."""
        for _ in range(6):
            for name in sorted(names):
                c = self.clients[name]
                if c.tickets:
                    continue
                if c.needs_sync:
                    self.sync(name)
                elif c.rejoin or c.generation < 0:
                    self.join(name)
                else:
                    self.heartbeat(name)
            self.tick_to(self.now + 1_500)

    @rule(name=st.sampled_from(NAMES))
    def leave(self, name: str) -> None:
        c = self.clients[name]
        if not c.member_id:
            return
        self.absorb(self.core.leave_group(LeaveGroupRequest(group_id="g", members=(
            LeaveMember(member_id=c.member_id, group_instance_id=c.instance),)), self.now), c, "leave")
        c.member_id, c.generation, c.needs_sync = "", -1, False
        c.tickets.clear()

    @rule(dt=st.integers(0, 6_000))
    def tick(self, dt: int) -> None:
        self.tick_to(self.now + dt)

    @rule(name=st.sampled_from(NAMES))
    def commit(self, name: str) -> None:
        c = self.clients[name]
        if not c.member_id or c.generation < 0:
            return
        group = self.group()
        step = self.core.offset_commit(OffsetCommitRequest(
            version=8, group_id="g", generation_id_or_member_epoch=c.generation, member_id=c.member_id,
            group_instance_id=c.instance,
            topics=(CommitTopic(name="t", partitions=(CommitPartition(partition=0, offset=self.now),)),)),
            self.now)
        accepted = step.response is None
        current = group is not None and c.member_id in group.members and group.generation_id == c.generation \
            and not group.is_(ClassicState.COMPLETING_REBALANCE)
        event(f"commit accepted={accepted}")
        # Invariant: only a current member of the current generation may commit.
        assert accepted == current, (c, group)
        self.absorb(step)

    @precondition(lambda self: self.group() is not None and self.group().is_(ClassicState.STABLE))
    @rule(name=st.sampled_from(("s0", "s1")))
    def restart_static(self, name: str) -> None:
        c = self.clients[name]
        group = self.group()
        assert group is not None
        if c.instance not in group.static_members or c.tickets:
            return
        old_id, generation = group.static_members[c.instance], group.generation_id
        c.tickets.clear()
        resp = self.absorb(self.core.join_group(join(instance=c.instance, session=SESSION, rebalance=SESSION),
                                                CLIENT, self.now), c, "join")
        event("static restart in Stable")
        # Invariant: a static member that rejoins in Stable causes no rebalance.
        assert isinstance(resp, JoinGroupResponse) and resp.error is Code.NONE
        assert resp.generation_id == generation and group.is_(ClassicState.STABLE)
        c.needs_sync = True
        old = self.core.offset_commit(OffsetCommitRequest(
            version=8, group_id="g", generation_id_or_member_epoch=generation, member_id=old_id,
            group_instance_id=c.instance, topics=(CommitTopic(name="t", partitions=(
                CommitPartition(partition=0, offset=1),)),)), self.now).response
        assert old is not None and old.topics[0].partitions[0].error is Code.FENCED_INSTANCE_ID

    @precondition(lambda self: self.group() is not None and bool(self.group().members))
    @rule(data=st.data())
    def go_silent(self, data: st.DataObject) -> None:
        group = self.group()
        assert group is not None
        victim = data.draw(st.sampled_from(sorted(group.members)))
        generation = group.generation_id
        others = [c for c in self.clients.values() if c.member_id and c.member_id != victim]
        for _ in range(4 * SESSION // 2_000):
            self.tick_to(self.now + 2_000)
            for c in others:
                self.heartbeat(c.name)
        event("silent member expired")
        # Invariant: session expiry removes a silent member...
        assert victim not in group.members
        # ...and its commit is rejected.
        late = self.core.offset_commit(OffsetCommitRequest(
            version=8, group_id="g", generation_id_or_member_epoch=generation, member_id=victim,
            topics=(CommitTopic(name="t", partitions=(CommitPartition(partition=0, offset=1),)),)),
            self.now).response
        assert late is not None and late.topics[0].partitions[0].error is not Code.NONE
        for c in self.clients.values():
            if c.member_id == victim:
                c.member_id, c.generation, c.needs_sync = "", -1, False
                c.tickets.clear()

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def stable_group_owns_every_partition_once(self) -> None:
        group = self.group()
        if group is None or not group.is_(ClassicState.STABLE):
            return
        event(f"stable with {len(group.members)} members")
        seen: list[int] = []
        for m in group.members.values():
            seen += sorted(decode(m.assignment))
        assert sorted(seen) == list(range(PARTITIONS)), (seen, group.members)


TestClassicMachine = ClassicMachine.TestCase
TestClassicMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
