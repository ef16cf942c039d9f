"""The classic group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers.

Theory of operation (Kafka's ``GroupMetadataManager``, classic half)::

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                 ▲          │                                   │ leader's SyncGroup
      │                 │          └──no member left──▶ Empty          ▼
      └─last member─────┴──join, leave, expiry, protocol change──── Stable

* A JoinGroup is *parked* until the join phase completes: when every member has rejoined
  (and nobody told MEMBER_ID_REQUIRED is still to come), or when the rebalance timeout
  (the largest of the members') runs out, after which members that did not rejoin are
  dropped (static members stay). The first rebalance of an empty group instead waits
  ``group.initial.rebalance.delay.ms``, again while new members keep arriving, up to the
  rebalance timeout.
* Completing the join phase bumps the generation, selects the protocol by vote, answers
  every parked JoinGroup (the leader gets the member list) and starts a pending-sync
  timeout: members that do not SyncGroup within the rebalance timeout are dropped.
* A SyncGroup is parked in CompletingRebalance until the leader's SyncGroup brings the
  assignments; then all parked SyncGroups are answered and the group is Stable.
* Each member has a heartbeat deadline (its session timeout after its last heartbeat, join
  or sync; five minutes for a new member until its first join phase completes). When it
  passes, the member is removed, unless it is awaiting a rebalance (``hasSatisfiedHeartbeat``).
* A static member (``group.instance.id``) that rejoins with an unknown member id takes over
  its old place under a new member id; in Stable, with the same protocol, that causes no
  rebalance. The old id is then fenced (FENCED_INSTANCE_ID).

Everything is answered through the :class:`~coordinator.outcome.Outbox` of the shared
:class:`~coordinator.context.Context`; timers are keys in its :class:`~coordinator.timers.Deadlines`.
"""

from __future__ import annotations

from collections.abc import Hashable

from coordinator.classic_group import ClassicGroup, ClassicMember, ClassicState
from coordinator.context import Context
from coordinator.errors import Code, GroupError
from coordinator.messages.classic import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMemberResult,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator.messages.common import Client
from coordinator.outcome import GroupWrite

#: JoinGroup from this version must carry a member id (KIP-394).
MEMBER_ID_REQUIRED_VERSION = 4
#: JoinGroup from this version may tell a rejoining static leader to skip assignment (KIP-814).
SKIP_ASSIGNMENT_VERSION = 9

EMPTY = ClassicState.EMPTY
PREPARING = ClassicState.PREPARING_REBALANCE
COMPLETING = ClassicState.COMPLETING_REBALANCE
STABLE = ClassicState.STABLE
DEAD = ClassicState.DEAD

HEARTBEAT = "classic.heartbeat"
JOIN = "classic.join"
SYNC = "classic.sync"


class ClassicProtocol:
    """The classic protocol's handlers over the groups of one :class:`Context`."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        #: Initial-rebalance delay state per group: (this delay, remaining budget).
        self._initial: dict[str, tuple[int, int]] = {}

    # -- lookups -------------------------------------------------------------------------

    def _group(self, group_id: str) -> ClassicGroup | None:
        group = self.ctx.groups.get(group_id)
        return group if isinstance(group, ClassicGroup) else None

    def _is_other_protocol(self, group_id: str) -> bool:
        group = self.ctx.groups.get(group_id)
        return group is not None and not isinstance(group, ClassicGroup)

    # -- JoinGroup -----------------------------------------------------------------------

    def join(self, req: JoinGroupRequest, client: Client, now: int) -> JoinGroupResponse | int:
        """Handle a JoinGroup: a response now, or the ticket of the parked request."""
        s = self.ctx.settings
        if not req.group_id:
            return JoinGroupResponse(error=Code.INVALID_GROUP_ID, member_id=req.member_id)
        if not s.min_session_timeout_ms <= req.session_timeout_ms <= s.max_session_timeout_ms:
            return JoinGroupResponse(error=Code.INVALID_SESSION_TIMEOUT, member_id=req.member_id)
        unknown = req.member_id == ""
        if self._is_other_protocol(req.group_id):
            other = self.ctx.groups[req.group_id]
            if not other.is_empty():
                # No online migration between the protocols: see docs/coordinator.md.
                return JoinGroupResponse(error=Code.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id)
            del self.ctx.groups[req.group_id]
        group = self._group(req.group_id)
        if group is None:
            if not unknown:
                return JoinGroupResponse(error=Code.UNKNOWN_MEMBER_ID, member_id=req.member_id)
            group = ClassicGroup(group_id=req.group_id, state_timestamp=now)
            self.ctx.groups[req.group_id] = group
        if not self._accept_joining(group, req.member_id):
            removed = group.remove(req.member_id)
            if removed is not None:
                self._drop_member_parked(removed, Code.GROUP_MAX_SIZE_REACHED)
            return JoinGroupResponse(error=Code.GROUP_MAX_SIZE_REACHED)
        ticket = self.ctx.outbox.ticket()
        answer = self._join_new(group, req, client, ticket, now) if unknown \
            else self._join_existing(group, req, client, ticket, now)
        return ticket if answer is None else answer

    def _accept_joining(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self.ctx.settings.max_size
        if group.is_(EMPTY, DEAD):
            return True
        member = group.members.get(member_id)
        if group.is_(PREPARING):
            return (member is not None and member.join_ticket is not None) or group.awaiting_join() < limit
        return member is not None or len(group.members) < limit

    def _join_new(self, group: ClassicGroup, req: JoinGroupRequest, client: Client,
                  ticket: int, now: int) -> JoinGroupResponse | None:
        if group.is_(DEAD):
            return JoinGroupResponse(error=Code.COORDINATOR_NOT_AVAILABLE)
        if not group.supports(req.protocol_type, req.protocols):
            return JoinGroupResponse(error=Code.INCONSISTENT_GROUP_PROTOCOL)
        prefix = req.group_instance_id if req.group_instance_id is not None else client.client_id
        new_id = f"{prefix}-{self.ctx.new_id()}"
        if req.group_instance_id is not None:
            existing = group.static_members.get(req.group_instance_id)
            if existing is not None:
                return self._rejoin_static(group, req, existing, new_id, ticket, now)
            self._add_member(group, req, client, new_id, ticket, now)
            return None
        if req.version >= MEMBER_ID_REQUIRED_VERSION:
            group.pending_members.add(new_id)
            self.ctx.timers.set((HEARTBEAT, group.group_id, new_id), now + req.session_timeout_ms)
            return JoinGroupResponse(error=Code.MEMBER_ID_REQUIRED, member_id=new_id)
        self._add_member(group, req, client, new_id, ticket, now)
        return None

    def _join_existing(self, group: ClassicGroup, req: JoinGroupRequest, client: Client,
                       ticket: int, now: int) -> JoinGroupResponse | None:
        member_id = req.member_id
        if group.is_(DEAD):
            return JoinGroupResponse(error=Code.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not group.supports(req.protocol_type, req.protocols):
            return JoinGroupResponse(error=Code.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if member_id in group.pending_members:
            self._add_member(group, req, client, member_id, ticket, now)
            return None
        try:
            group.validate_member(member_id, req.group_instance_id)
        except GroupError as exc:
            return JoinGroupResponse(error=exc.code, member_id=member_id)
        member = group.members[member_id]
        if group.is_(PREPARING):
            self._update_member(group, member, req, ticket, now)
            return None
        if group.is_(COMPLETING):
            if member.matches(req.protocols):
                return self._current_join_response(group, member_id, leader_members=True)
            self._update_member(group, member, req, ticket, now)
            return None
        if group.is_(STABLE):
            if group.leader_id == member_id or not member.matches(req.protocols):
                self._update_member(group, member, req, ticket, now)
                return None
            return self._current_join_response(group, member_id, leader_members=False)
        return JoinGroupResponse(error=Code.UNKNOWN_MEMBER_ID, member_id=member_id)

    @staticmethod
    def _current_join_response(group: ClassicGroup, member_id: str, *, leader_members: bool,
                               skip_assignment: bool = False) -> JoinGroupResponse:
        is_leader = group.leader_id == member_id
        return JoinGroupResponse(
            generation_id=group.generation_id, protocol_type=group.protocol_type,
            protocol_name=group.protocol_name, leader=group.leader_id or "", member_id=member_id,
            members=group.join_members() if leader_members and is_leader else (),
            skip_assignment=skip_assignment)

    def _add_member(self, group: ClassicGroup, req: JoinGroupRequest, client: Client,
                    member_id: str, ticket: int, now: int) -> None:
        member = ClassicMember(
            member_id=member_id, group_instance_id=req.group_instance_id, client=client,
            rebalance_timeout_ms=req.rebalance_timeout_ms, session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type, protocols=req.protocols, join_ticket=ticket, is_new=True)
        if group.is_(PREPARING) and group.previous_state is EMPTY:
            group.new_member_added = True
        group.add(member)
        self.ctx.timers.set((HEARTBEAT, group.group_id, member_id),
                            now + self.ctx.settings.new_member_join_timeout_ms)
        self._rebalance_or_complete_join(group, now)

    def _update_member(self, group: ClassicGroup, member: ClassicMember, req: JoinGroupRequest,
                       ticket: int, now: int) -> None:
        self._supersede_join(member)
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.join_ticket = ticket
        self._rebalance_or_complete_join(group, now)

    def _supersede_join(self, member: ClassicMember) -> None:
        """A member that joins again while its last JoinGroup is parked: the old one is
        answered (Kafka drops it silently; the client has moved on either way)."""
        if member.join_ticket is not None:
            self.ctx.outbox.answer(member.join_ticket, JoinGroupResponse(
                error=Code.REBALANCE_IN_PROGRESS, member_id=member.member_id))
            member.join_ticket = None

    def _rejoin_static(self, group: ClassicGroup, req: JoinGroupRequest, old_id: str, new_id: str,
                       ticket: int, now: int) -> JoinGroupResponse | None:
        old = group.members[old_id]
        self._drop_member_parked(old, Code.FENCED_INSTANCE_ID)
        self.ctx.timers.cancel((HEARTBEAT, group.group_id, old_id))
        leader_before = group.leader_id
        member = group.replace_static(req.group_instance_id or "", old_id, new_id)
        self.ctx.timers.set((HEARTBEAT, group.group_id, new_id), now + req.session_timeout_ms)
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        if group.is_(STABLE):
            if group.select_protocol() == group.protocol_name:
                # Same protocol: the static member takes its old place, no rebalance.
                self._persist(group)
                if req.version >= SKIP_ASSIGNMENT_VERSION:
                    is_leader = group.leader_id == new_id
                    return self._current_join_response(group, new_id, leader_members=True,
                                                       skip_assignment=is_leader)
                return JoinGroupResponse(
                    generation_id=group.generation_id, protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name, leader=leader_before or "", member_id=new_id)
            member.join_ticket = ticket
            self._rebalance_or_complete_join(group, now)
            return None
        member.join_ticket = ticket
        if group.is_(COMPLETING):
            self._prepare_rebalance(group, now)
        else:
            self._maybe_complete_join_phase(group, now)
        return None

    # -- rebalance machinery -------------------------------------------------------------

    def _rebalance_or_complete_join(self, group: ClassicGroup, now: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now)
        else:
            self._maybe_complete_join_phase(group, now)

    def _prepare_rebalance(self, group: ClassicGroup, now: int) -> None:
        if group.is_(COMPLETING):
            for m in group.members.values():
                m.assignment = b""
            self._propagate_sync(group, Code.REBALANCE_IN_PROGRESS, now)
        group.pending_sync.clear()
        self.ctx.timers.cancel((SYNC, group.group_id))
        initial = group.is_(EMPTY)
        if group.rebalance_started is None:
            group.rebalance_started = now
        group.transition(PREPARING, now)
        if initial:
            delay = self.ctx.settings.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            self._initial[group.group_id] = (delay, remaining)
            self.ctx.timers.set((JOIN, group.group_id), now + delay)
            return
        if group.all_joined():
            self._complete_join(group, now)
        else:
            self.ctx.timers.set((JOIN, group.group_id), now + group.rebalance_timeout_ms)

    def _maybe_complete_join_phase(self, group: ClassicGroup, now: int) -> None:
        if not group.is_(PREPARING) or group.previous_state is EMPTY:
            return  # not rebalancing, or the initial delay decides
        if group.all_joined():
            self._complete_join(group, now)

    def _complete_join(self, group: ClassicGroup, now: int) -> None:
        gid = group.group_id
        self.ctx.timers.cancel((JOIN, gid))
        self._initial.pop(gid, None)
        for m in [m for m in group.members.values() if m.join_ticket is None and m.group_instance_id is None]:
            group.remove(m.member_id)
            self.ctx.timers.cancel((HEARTBEAT, gid, m.member_id))
            self._drop_member_parked(m, Code.UNKNOWN_MEMBER_ID)
        if group.is_(DEAD):
            return
        if group.members and not self._elect_joined_leader(group):
            # Only static members that did not rejoin: wait another rebalance timeout.
            self.ctx.timers.set((JOIN, gid), now + group.rebalance_timeout_ms)
            return
        group.generation_id += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            group.transition(EMPTY, now)
            self._finish_rebalance(group, now)
            self._persist(group)
            return
        group.protocol_name = group.select_protocol()
        group.transition(COMPLETING, now)
        for m in group.members.values():
            if m.join_ticket is not None:
                self.ctx.outbox.answer(m.join_ticket, self._current_join_response(group, m.member_id, leader_members=True))
                m.join_ticket = None
            self.ctx.timers.set((HEARTBEAT, gid, m.member_id), now + m.session_timeout_ms)
            m.is_new = False
            group.pending_sync.add(m.member_id)
        self.ctx.timers.set((SYNC, gid), now + group.rebalance_timeout_ms)

    @staticmethod
    def _elect_joined_leader(group: ClassicGroup) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.join_ticket is not None:
            return True
        for m in group.members.values():
            if m.join_ticket is not None:
                group.leader_id = m.member_id
                return True
        return False

    def _propagate_sync(self, group: ClassicGroup, error: Code, now: int) -> None:
        ok = error is Code.NONE
        for m in group.members.values():
            if m.sync_ticket is not None:
                self.ctx.outbox.answer(m.sync_ticket, SyncGroupResponse(
                    error=error, assignment=m.assignment if ok else b"",
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None))
                m.sync_ticket = None
                self.ctx.timers.set((HEARTBEAT, group.group_id, m.member_id), now + m.session_timeout_ms)

    def _drop_member_parked(self, member: ClassicMember, error: Code) -> None:
        if member.join_ticket is not None:
            self.ctx.outbox.answer(member.join_ticket, JoinGroupResponse(error=error, member_id=member.member_id))
            member.join_ticket = None
        if member.sync_ticket is not None:
            self.ctx.outbox.answer(member.sync_ticket, SyncGroupResponse(error=error))
            member.sync_ticket = None

    def _remove_and_update(self, group: ClassicGroup, member_ids: list[str], now: int) -> None:
        for member_id in member_ids:
            member = group.remove(member_id)
            self.ctx.timers.cancel((HEARTBEAT, group.group_id, member_id))
            if member is not None:
                self._drop_member_parked(member, Code.UNKNOWN_MEMBER_ID)
        if group.is_(STABLE, COMPLETING):
            self._rebalance_or_complete_join(group, now)
        elif group.is_(PREPARING):
            self._maybe_complete_join_phase(group, now)

    def _finish_rebalance(self, group: ClassicGroup, now: int) -> None:
        self.ctx.outbox.rebalanced(group.group_id, "classic", group.generation_id, group.rebalance_started, now)
        group.rebalance_started = None

    def _persist(self, group: ClassicGroup) -> None:
        self.ctx.outbox.write(GroupWrite(group_id=group.group_id, record=group.to_record()))

    # -- SyncGroup -----------------------------------------------------------------------

    def sync(self, req: SyncGroupRequest, now: int) -> SyncGroupResponse | int:
        """Handle a SyncGroup: a response now, or the ticket of the parked request."""
        group = self._group(req.group_id)
        if group is None:
            return SyncGroupResponse(error=Code.UNKNOWN_MEMBER_ID)
        if group.is_(DEAD):
            return SyncGroupResponse(error=Code.COORDINATOR_NOT_AVAILABLE)
        try:
            group.validate_member(req.member_id, req.group_instance_id)
        except GroupError as exc:
            return SyncGroupResponse(error=exc.code)
        if req.generation_id != group.generation_id:
            return SyncGroupResponse(error=Code.ILLEGAL_GENERATION)
        if (req.protocol_type is not None and group.protocol_type is not None
                and req.protocol_type != group.protocol_type) or (
                req.protocol_name is not None and group.protocol_name is not None
                and req.protocol_name != group.protocol_name):
            return SyncGroupResponse(error=Code.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_(COMPLETING, STABLE):
            group.pending_sync.discard(req.member_id)
            if not group.pending_sync:
                self.ctx.timers.cancel((SYNC, group.group_id))
        member = group.members[req.member_id]
        if group.is_(EMPTY):
            return SyncGroupResponse(error=Code.UNKNOWN_MEMBER_ID)
        if group.is_(PREPARING):
            return SyncGroupResponse(error=Code.REBALANCE_IN_PROGRESS)
        if group.is_(STABLE):
            self.ctx.timers.set((HEARTBEAT, group.group_id, member.member_id), now + member.session_timeout_ms)
            return SyncGroupResponse(assignment=member.assignment, protocol_type=group.protocol_type,
                                     protocol_name=group.protocol_name)
        # CompletingRebalance: park until the leader brings the assignment.
        if member.sync_ticket is not None:
            self.ctx.outbox.answer(member.sync_ticket, SyncGroupResponse(error=Code.REBALANCE_IN_PROGRESS))
        ticket = self.ctx.outbox.ticket()
        member.sync_ticket = ticket
        if req.member_id == group.leader_id:
            given = {a.member_id: a.assignment for a in req.assignments}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            group.transition(STABLE, now)
            self._finish_rebalance(group, now)
            self._propagate_sync(group, Code.NONE, now)
            self._persist(group)
        return ticket

    # -- Heartbeat -----------------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest, now: int) -> HeartbeatResponse:
        """Handle a Heartbeat."""
        group = self._group(req.group_id)
        if group is None:
            return HeartbeatResponse(error=Code.UNKNOWN_MEMBER_ID)
        if group.is_(DEAD):
            return HeartbeatResponse(error=Code.COORDINATOR_NOT_AVAILABLE)
        try:
            group.validate_member(req.member_id, req.group_instance_id)
        except GroupError as exc:
            return HeartbeatResponse(error=exc.code)
        if req.generation_id != group.generation_id:
            return HeartbeatResponse(error=Code.ILLEGAL_GENERATION)
        if group.is_(EMPTY):
            return HeartbeatResponse(error=Code.UNKNOWN_MEMBER_ID)
        member = group.members[req.member_id]
        self.ctx.timers.set((HEARTBEAT, group.group_id, member.member_id), now + member.session_timeout_ms)
        if group.is_(PREPARING):
            return HeartbeatResponse(error=Code.REBALANCE_IN_PROGRESS)
        return HeartbeatResponse()

    # -- LeaveGroup ----------------------------------------------------------------------

    def leave(self, req: LeaveGroupRequest, now: int) -> LeaveGroupResponse:
        """Handle a LeaveGroup (one member before v3, a batch from v3)."""
        group = self._group(req.group_id)
        if group is None:
            return LeaveGroupResponse(members=tuple(
                LeaveMemberResult(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                  error=Code.UNKNOWN_MEMBER_ID) for m in req.members))
        if group.is_(DEAD):
            return LeaveGroupResponse(error=Code.COORDINATOR_NOT_AVAILABLE)
        results: list[LeaveMemberResult] = []
        leaving: list[str] = []
        pending_left = False
        for m in req.members:
            member_id, error = m.member_id, Code.NONE
            if m.group_instance_id is None:
                if member_id in group.pending_members:
                    group.pending_members.discard(member_id)
                    self.ctx.timers.cancel((HEARTBEAT, group.group_id, member_id))
                    pending_left = True
                elif member_id not in group.members:
                    error = Code.UNKNOWN_MEMBER_ID
                else:
                    leaving.append(member_id)
            else:
                existing = group.static_members.get(m.group_instance_id)
                if existing is None:
                    error = Code.UNKNOWN_MEMBER_ID
                elif member_id and member_id != existing:
                    error = Code.FENCED_INSTANCE_ID
                else:
                    member_id = existing
                    leaving.append(existing)
            results.append(LeaveMemberResult(member_id=member_id, group_instance_id=m.group_instance_id,
                                             error=error))
        if leaving:
            self._remove_and_update(group, leaving, now)
        elif pending_left:
            self._maybe_complete_join_phase(group, now)
        return LeaveGroupResponse(members=tuple(results))

    # -- timers --------------------------------------------------------------------------

    def on_timer(self, key: tuple[Hashable, ...], now: int) -> None:
        """Handle one due timer of this protocol."""
        kind, group_id = key[0], str(key[1])
        group = self._group(group_id)
        if group is None:
            return
        if kind == HEARTBEAT:
            self._expire_heartbeat(group, str(key[2]), now)
        elif kind == JOIN:
            self._join_timer(group, now)
        elif kind == SYNC:
            self._expire_pending_sync(group, now)

    def _expire_heartbeat(self, group: ClassicGroup, member_id: str, now: int) -> None:
        if group.is_(DEAD):
            return
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._maybe_complete_join_phase(group, now)
            return
        member = group.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat():
            self._remove_and_update(group, [member_id], now)

    def _join_timer(self, group: ClassicGroup, now: int) -> None:
        if not group.is_(PREPARING):
            return
        initial = self._initial.get(group.group_id)
        if initial is None:
            self._complete_join(group, now)
            return
        delay, remaining = initial
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            next_delay = min(self.ctx.settings.initial_rebalance_delay_ms, remaining)
            self._initial[group.group_id] = (next_delay, max(remaining - delay, 0))
            self.ctx.timers.set((JOIN, group.group_id), now + next_delay)
        else:
            self._complete_join(group, now)

    def _expire_pending_sync(self, group: ClassicGroup, now: int) -> None:
        if group.is_(COMPLETING, STABLE) and group.pending_sync:
            late = sorted(group.pending_sync)
            for member_id in late:
                member = group.remove(member_id)
                self.ctx.timers.cancel((HEARTBEAT, group.group_id, member_id))
                if member is not None:
                    self._drop_member_parked(member, Code.UNKNOWN_MEMBER_ID)
            self._prepare_rebalance(group, now)

    # -- resumption ----------------------------------------------------------------------

    def resume(self, group: ClassicGroup, now: int) -> None:
        """Arm the heartbeat deadlines of a group loaded from the store: its members have
        one session timeout to come back (seed §5), else they are removed."""
        for m in group.members.values():
            self.ctx.timers.set((HEARTBEAT, group.group_id, m.member_id), now + m.session_timeout_ms)

    def abandon(self, group: ClassicGroup, error: Code) -> None:
        """This sidecar stops serving ``group`` (hand-over): answer its parked JoinGroup
        and SyncGroup requests with ``error`` and forget its initial-delay bookkeeping."""
        for member in group.members.values():
            self._drop_member_parked(member, error)
        self._initial.pop(group.group_id, None)

    def delete(self, group: ClassicGroup, now: int) -> None:
        """Mark a group Dead and forget its timers (DeleteGroups, retention)."""
        group.transition(DEAD, now)
        self.ctx.timers.cancel((JOIN, group.group_id))
        self.ctx.timers.cancel((SYNC, group.group_id))
        for member_id in list(group.members) + list(group.pending_members):
            self.ctx.timers.cancel((HEARTBEAT, group.group_id, member_id))
        self._initial.pop(group.group_id, None)
