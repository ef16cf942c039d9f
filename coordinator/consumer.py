"""KIP-848: ConsumerGroupHeartbeat, the coordinator-side assignment, fencing and timeouts.

Theory of operation (Kafka's ``GroupMetadataManager``, consumer half):

* The **group epoch** counts changes that need a new assignment: a member joins, leaves or
  is fenced, a member's subscription changes, or the subscribed topics change (created,
  deleted, partitions added; regex matches included). Each change bumps it by one.
* When a heartbeat finds the group epoch ahead of the **assignment epoch**, the assignor
  (``uniform``/``range``, chosen by the members or ``group.consumer.assignors``) computes a
  new target assignment for everyone and the assignment epoch catches up.
* Each member then moves to its target through :func:`coordinator.reconcile.reconcile`, one
  heartbeat at a time: first revoking what it must give up, then receiving what others
  have released. Its **member epoch** reaches the assignment epoch when it is done.
* Fencing: a heartbeat whose epoch is ahead of the member's, or behind it and not the
  previous epoch with a subset of the assignment (a lost response), gets
  FENCED_MEMBER_EPOCH; unknown members get UNKNOWN_MEMBER_ID. A member that does not
  heartbeat for ``group.consumer.session.timeout.ms``, or does not revoke within its
  rebalance timeout, is removed (and the group epoch bumped).
* Static members leaving with epoch -2 keep their place and assignment until their session
  times out; rejoining in time under a new member id takes the place over without a new
  group epoch.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import replace
from uuid import UUID

from coordinator.assignors import ASSIGNORS, Assignment, MemberSpec
from coordinator.consumer_group import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    ConsumerState,
    RegexKey,
    resolve_regex,
)
from coordinator.context import Context
from coordinator.errors import Code, GroupError
from coordinator.messages.common import Client, TopicPartitions
from coordinator.messages.consumer import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordinator.outcome import GroupWrite
from coordinator.reconcile import MemberState, is_subset, reconcile
from coordinator.topics import TopicsSnapshot, compile_regex

#: From this version the client generates its member id (KIP-1082).
CLIENT_MEMBER_ID_VERSION = 1

SESSION = "consumer.session"
REBALANCE = "consumer.rebalance"
#: Batched mode: compute a group's next target (due at once, or at the assignment interval).
ASSIGN = "consumer.assign"


class ConsumerProtocol:
    """The KIP-848 handlers over the groups of one :class:`Context`."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.topics = TopicsSnapshot()
        #: The epoch a member in UNREVOKED_PARTITIONS must leave before its rebalance timeout.
        self._rebalance_epoch: dict[tuple[str, str], int] = {}
        #: Target assignments computed so far (one per group epoch that a heartbeat needed).
        self.target_computations = 0

    # -- validation ----------------------------------------------------------------------

    def _validate(self, req: ConsumerGroupHeartbeatRequest) -> None:
        def invalid(message: str) -> GroupError:
            return GroupError(Code.INVALID_REQUEST, message)

        if not req.group_id:
            raise invalid("GroupId can't be empty.")
        if req.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if req.rack_id == "":
            raise invalid("RackId can't be empty.")
        if req.version >= CLIENT_MEMBER_ID_VERSION and not req.member_id:
            raise invalid("MemberId can't be empty.")
        if req.member_epoch > 0 or req.member_epoch == LEAVE_EPOCH:
            if not req.member_id:
                raise invalid("MemberId can't be empty.")
        elif req.member_epoch == JOIN_EPOCH:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.topic_partitions is None or req.topic_partitions:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be "
                              "non-null when (re-)joining.")
        elif req.member_epoch == LEAVE_STATIC_EPOCH:
            if not req.member_id:
                raise invalid("MemberId can't be empty.")
            if req.instance_id is None:
                raise invalid("InstanceId can't be null.")
        else:
            raise invalid("MemberEpoch is invalid.")
        if req.subscribed_topic_regex:
            compile_regex(req.subscribed_topic_regex)
        assignors = self.ctx.settings.consumer_assignors
        if req.server_assignor is not None and req.server_assignor not in assignors:
            raise GroupError(Code.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not "
                             f"supported. Supported assignors: {', '.join(assignors)}.")

    # -- ConsumerGroupHeartbeat ----------------------------------------------------------

    def heartbeat(self, req: ConsumerGroupHeartbeatRequest, client: Client,
                  now: int) -> ConsumerGroupHeartbeatResponse:
        """Handle a ConsumerGroupHeartbeat (join, heartbeat, leave): its answer, always at
        once (batched mode answers against the current target; the next one is computed
        on the tick and reaches the member at a later heartbeat)."""
        try:
            self._validate(req)
            if req.member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
                return self._leave(req, now)
            return self._heartbeat(req, client, now)
        except GroupError as exc:
            return ConsumerGroupHeartbeatResponse(error=exc.code, error_message=exc.message)

    def _group(self, group_id: str, create: bool, now: int) -> ConsumerGroup:
        group = self.ctx.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return group
        if group is None and not create:
            raise GroupError(Code.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        if group is not None and not (create and group.is_empty()):
            raise GroupError(Code.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        fresh = ConsumerGroup(group_id=group_id, state_timestamp=now)
        self.ctx.groups[group_id] = fresh
        return fresh

    def _heartbeat(self, req: ConsumerGroupHeartbeatRequest, client: Client,
                   now: int) -> ConsumerGroupHeartbeatResponse:
        joining = req.member_epoch == JOIN_EPOCH
        group = self._group(req.group_id, joining, now)
        limit = self.ctx.settings.consumer_max_size
        if len(group.members) >= limit and (not req.member_id or req.member_id not in group.members):
            raise GroupError(Code.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its "
                             f"maximum capacity of {limit} members.")
        member_id = req.member_id or self.ctx.new_id()
        member = self._member(group, req, member_id, joining)
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=req.subscribed_topic_names if req.subscribed_topic_names is not None
            else member.subscribed_topic_names,
            subscribed_topic_regex=(req.subscribed_topic_regex or None) if req.subscribed_topic_regex is not None
            else member.subscribed_topic_regex,
            client=client,
        )
        # A heartbeat that changes nothing keeps the member's object (the new one dies young):
        # thousands of members heartbeating would otherwise each leave one for the garbage
        # collector's oldest generation every interval, and drive it into full collections.
        if updated == member and group.members.get(member_id) is member:
            updated = member
        else:
            group.put(updated)
        bump = (updated.subscribed_topic_names != member.subscribed_topic_names
                or updated.subscribed_topic_regex != member.subscribed_topic_regex)
        if bump:
            self._maybe_bump(group, force=True, now=now)
        session_ms, heartbeat_ms = self.ctx.consumer_timeouts(group.group_id)
        self.ctx.timers.set((SESSION, group.group_id, member_id), now + session_ms)
        full = joining or (req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None
                           and req.topic_partitions is not None)
        # Batched mode: the next target is the tick's (armed by the epoch bump, or at load),
        # and this member is answered against the current one. At once: in immediate mode,
        # and for a group's first target (its first member must be answered with an epoch
        # above 0: a member at epoch 0 would be joining again).
        if not (self.ctx.settings.consumer_assignment_batching and group.assignment_epoch > 0):
            self._refresh_target(group, now)
        final = self._reconcile(group, updated, req.topic_partitions, now)
        changed = final.assignment.assigned != member.assignment.assigned
        if bump or changed or final != member:
            self._persist(group, now)
        return ConsumerGroupHeartbeatResponse(
            member_id=member_id, member_epoch=final.member_epoch,
            heartbeat_interval_ms=heartbeat_ms,
            assignment=_as_wire(final.assignment.assigned) if full or changed else None)

    def _member(self, group: ConsumerGroup, req: ConsumerGroupHeartbeatRequest, member_id: str,
                joining: bool) -> ConsumerMember:
        if req.instance_id is None:
            existing = group.members.get(member_id)
            if existing is None:
                if not joining:
                    group.member(member_id)  # raises UNKNOWN_MEMBER_ID
                return ConsumerMember(member_id=member_id)
            _check_epoch(existing, req.member_epoch, req.topic_partitions)
            return existing
        static = group.static_member(req.instance_id)
        if joining:
            if static is None:
                existing = group.members.get(member_id)
                if existing is not None:
                    _check_epoch(existing, req.member_epoch, req.topic_partitions)
                    return existing
                return ConsumerMember(member_id=member_id)
            if static.member_id == member_id:
                _check_epoch(static, req.member_epoch, req.topic_partitions)
                return static
            if static.member_epoch != LEAVE_STATIC_EPOCH:
                raise GroupError(Code.UNRELEASED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                 f"{req.instance_id} cannot join the group because the instance id is "
                                 f"owned by {static.member_id} member.")
            # Take the old place over under the new id: same assignment, epoch 0.
            target = group.target.get(static.member_id, {})
            group.remove(static.member_id)
            self.ctx.timers.cancel((SESSION, group.group_id, static.member_id))
            self.ctx.timers.cancel((REBALANCE, group.group_id, static.member_id))
            group.target[member_id] = target
            taken = replace(static, member_id=member_id, assignment=replace(
                static.assignment, member_epoch=0, previous_member_epoch=0))
            group.static_members[req.instance_id] = member_id
            return taken
        if static is None:
            raise GroupError(Code.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if static.member_id != member_id:
            raise GroupError(Code.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                             f"{req.instance_id} was fenced by member {static.member_id}.")
        _check_epoch(static, req.member_epoch, req.topic_partitions)
        return static

    # -- epochs and assignment -----------------------------------------------------------

    def _maybe_bump(self, group: ConsumerGroup, *, force: bool, now: int) -> bool:
        metadata = group.compute_subscription_metadata(self.topics, self.ctx.topic_access)
        if force or metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            group.group_epoch += 1
            group.state_timestamp = now
            if group.rebalance_started is None:
                group.rebalance_started = now
            if self.ctx.settings.consumer_assignment_batching:
                self._schedule_assignment(group, now)
            return True
        return False

    def _schedule_assignment(self, group: ConsumerGroup, now: int) -> None:
        """Batched mode: arm the tick that computes the group's next target, if its epoch
        moved on and none is armed: at once, or one assignment interval after the last."""
        key = (ASSIGN, group.group_id)
        if group.group_epoch <= group.assignment_epoch or key in self.ctx.timers:
            return
        last = group.assigned_at
        interval = self.ctx.settings.consumer_assignment_interval_ms
        self.ctx.timers.set(key, now if last is None else max(now, last + interval))

    def _refresh_target(self, group: ConsumerGroup, now: int) -> bool:
        """A new target assignment, once per group epoch; whether one was computed."""
        if group.group_epoch <= group.assignment_epoch:
            return False
        self.target_computations += 1
        names = group.subscription_metadata
        counts = {tid: count for tid, count in names.values()}
        resolved: dict[RegexKey, frozenset[UUID]] = {}
        by_name: dict[tuple[str, ...], frozenset[UUID]] = {}

        def subscribed(m: ConsumerMember) -> frozenset[UUID]:
            # Members mostly share their subscription: each distinct one is resolved once.
            ids = by_name.get(m.subscribed_topic_names)
            if ids is None:
                ids = by_name[m.subscribed_topic_names] = frozenset(
                    names[n][0] for n in m.subscribed_topic_names if n in names)
            if not m.subscribed_topic_regex:
                return ids
            key = m.regex_key()
            matched = resolved.get(key)
            if matched is None:
                matched = resolved[key] = frozenset(
                    names[n][0] for n in resolve_regex(key, self.topics, self.ctx.topic_access) if n in names)
            return ids | matched

        specs = {m.member_id: MemberSpec(subscribed=subscribed(m), current=group.target.get(m.member_id, {}))
                 for m in group.members.values()}
        group.target = ASSIGNORS[self.assignor_of(group)](specs, counts)
        group.assignment_epoch = group.group_epoch
        group.assigned_at = now
        self.ctx.timers.cancel((ASSIGN, group.group_id))  # a tick armed for this epoch is moot
        return True

    def assignor_of(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for (ties: the configured order), else the default."""
        allowed = self.ctx.settings.consumer_assignors
        wanted = [m.server_assignor for m in group.members.values()
                  if m.server_assignor is not None and m.server_assignor in allowed]
        if not wanted:
            return self.ctx.settings.default_assignor
        return min(set(wanted), key=lambda a: (-wanted.count(a), allowed.index(a)))

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember,
                   owned: tuple[TopicPartitions, ...] | None, now: int) -> ConsumerMember:
        epoch = group.assignment_epoch
        current = member.assignment
        if current.state is MemberState.STABLE and current.member_epoch == epoch:
            return member
        # Its own partitions pending revocation count as held (``currentPartitionEpoch``):
        # one given back to it waits until its revocation is recorded.
        step = reconcile(current, target_epoch=epoch, target=group.target.get(member.member_id, {}),
                         partition_epoch=group.partition_epoch, owned=owned)
        if step == current:
            return member
        updated = member.with_assignment(step)
        group.put(updated)
        key = (REBALANCE, group.group_id, member.member_id)
        if step.state is MemberState.UNREVOKED_PARTITIONS:
            self.ctx.timers.set(key, now + max(member.rebalance_timeout_ms, 0))
            self._rebalance_epoch[member.member_id, group.group_id] = step.member_epoch
        else:
            self.ctx.timers.cancel(key)
        return updated

    # -- leaving and fencing -------------------------------------------------------------

    def _leave(self, req: ConsumerGroupHeartbeatRequest, now: int) -> ConsumerGroupHeartbeatResponse:
        group = self._group(req.group_id, False, now)
        if req.instance_id is None:
            member = group.member(req.member_id)
        else:
            static = group.static_member(req.instance_id)
            if static is None:
                raise GroupError(Code.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if static.member_id != req.member_id:
                raise GroupError(Code.FENCED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                                 f"{req.instance_id} was fenced by member {static.member_id}.")
            member = static
            if req.member_epoch == LEAVE_STATIC_EPOCH:
                # Temporarily gone: keeps its place and assignment until its session ends.
                group.put(member.with_assignment(replace(
                    member.assignment, member_epoch=LEAVE_STATIC_EPOCH, pending_revocation={})))
                self._persist(group, now)
                return ConsumerGroupHeartbeatResponse(member_id=member.member_id, member_epoch=LEAVE_STATIC_EPOCH)
        self.fence(group, member.member_id, now)
        return ConsumerGroupHeartbeatResponse(member_id=req.member_id, member_epoch=req.member_epoch)

    def fence(self, group: ConsumerGroup, member_id: str, now: int) -> None:
        """Remove a member and bump the group epoch (leave, session expiry, revocation timeout)."""
        if group.remove(member_id) is None:
            return
        self.ctx.timers.cancel((SESSION, group.group_id, member_id))
        self.ctx.timers.cancel((REBALANCE, group.group_id, member_id))
        self._rebalance_epoch.pop((member_id, group.group_id), None)
        self._maybe_bump(group, force=True, now=now)
        if not group.members:
            group.state_timestamp = now
        self._persist(group, now)

    # -- topics, timers, resumption ------------------------------------------------------

    def update_topics(self, topics: TopicsSnapshot, now: int) -> None:
        """New topic metadata: bump the epoch of every group whose subscribed topics changed."""
        self.recheck_topics(self.install_topics(topics), now)

    def install_topics(self, topics: TopicsSnapshot) -> list[str]:
        """New topic metadata, not yet applied: the groups :meth:`recheck_topics` must see
        (groups that join or change their subscription meanwhile see it at once)."""
        topics.inherit(self.topics)
        self.topics = topics
        return [g.group_id for g in self.ctx.groups.values() if isinstance(g, ConsumerGroup) and g.members]

    def recheck_topics(self, group_ids: Iterable[str], now: int) -> None:
        """Bump the epoch of each of these groups whose subscribed topics changed in the
        installed metadata (a group gone meanwhile is skipped)."""
        for group_id in group_ids:
            group = self.ctx.groups.get(group_id)
            if isinstance(group, ConsumerGroup) and group.members and self._maybe_bump(group, force=False, now=now):
                self._persist(group, now)

    def _assign(self, group_id: str, now: int) -> None:
        """The tick of batched mode: the group's next target, once for every change since
        the last one. Members reconcile towards it at their next heartbeats."""
        group = self.ctx.groups.get(group_id)
        if isinstance(group, ConsumerGroup) and self._refresh_target(group, now):
            self._persist(group, now)

    def on_timer(self, key: tuple[Hashable, ...], now: int) -> None:
        """Handle one due timer of this protocol."""
        if key[0] == ASSIGN:
            self._assign(str(key[1]), now)
            return
        kind, group_id, member_id = key[0], str(key[1]), str(key[2])
        group = self.ctx.groups.get(group_id)
        if not isinstance(group, ConsumerGroup) or member_id not in group.members:
            return
        if kind == SESSION:
            self.fence(group, member_id, now)
        elif kind == REBALANCE:
            epoch = self._rebalance_epoch.pop((member_id, group_id), None)
            if group.members[member_id].member_epoch == epoch:
                self.fence(group, member_id, now)

    def resume(self, group: ConsumerGroup, now: int) -> None:
        """Arm the session deadlines of a group loaded from the store, and (batched mode)
        the tick of a target its previous owner had not computed yet."""
        session_ms, _ = self.ctx.consumer_timeouts(group.group_id)
        for member_id in group.members:
            self.ctx.timers.set((SESSION, group.group_id, member_id), now + session_ms)
        if self.ctx.settings.consumer_assignment_batching:
            self._schedule_assignment(group, now)

    def abandon(self, group_id: str) -> None:
        """This sidecar stops serving ``group_id`` (hand-over): forget its bookkeeping."""
        for key in [k for k in self._rebalance_epoch if k[1] == group_id]:
            del self._rebalance_epoch[key]

    def delete(self, group: ConsumerGroup) -> None:
        """Forget a deleted group's timers."""
        group.dead = True
        for member_id in group.members:
            self.ctx.timers.cancel((SESSION, group.group_id, member_id))
            self.ctx.timers.cancel((REBALANCE, group.group_id, member_id))

    def _persist(self, group: ConsumerGroup, now: int) -> None:
        if group.rebalance_started is not None and group.state in (ConsumerState.STABLE, ConsumerState.EMPTY):
            self.ctx.outbox.rebalanced(group.group_id, "consumer", group.group_epoch, group.rebalance_started, now)
            group.rebalance_started = None
        # Write-behind: the record is rendered when the writer takes the batch, so a burst
        # of heartbeats costs one record per ZooKeeper transaction, not one each.
        self.ctx.outbox.write(GroupWrite(group_id=group.group_id, record=None, source=group.to_record))


def _check_epoch(member: ConsumerMember, received: int, owned: tuple[TopicPartitions, ...] | None) -> None:
    """``throwIfConsumerGroupMemberEpochIsInvalid``."""
    if received > member.member_epoch:
        raise GroupError(Code.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch "
                         f"({received}) than the one known by the group coordinator ({member.member_epoch}). "
                         "The member must abandon all its partitions and rejoin.")
    if received < member.member_epoch and (
            received != member.assignment.previous_member_epoch
            or not is_subset(owned, member.assignment.assigned)):
        raise GroupError(Code.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch "
                         f"({received}) than the one known by the group coordinator ({member.member_epoch}). "
                         "The member must abandon all its partitions and rejoin.")


def _as_wire(assigned: Assignment) -> tuple[TopicPartitions, ...]:
    return tuple(TopicPartitions(topic_id=t, partitions=tuple(sorted(ps)))
                 for t, ps in sorted(assigned.items(), key=lambda kv: str(kv[0])))
