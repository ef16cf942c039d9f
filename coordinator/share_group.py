"""KIP-932 share groups' membership, sans-IO: Kafka 4.3's ShareGroupHeartbeat and ShareGroupDescribe.

**Theory of operation** (Kafka's ``GroupMetadataManager``, share half; ``ShareGroup``,
``ShareGroupMember``, ``ShareGroupAssignmentBuilder``):

* A member joins with epoch 0 and the member id it chose (the client generates it in 4.x)
  and the topic names it subscribes to; it then heartbeats with its epoch, and leaves with
  epoch -1. Unknown members get UNKNOWN_MEMBER_ID; an epoch ahead of the member's, or behind
  it and not its previous one, gets FENCED_MEMBER_EPOCH.
* The **group epoch** (1 for a new group, as Kafka 4.3 starts it) is bumped by one for each
  change that needs a new assignment: a member's subscription changes (a join included), a
  member leaves or is fenced, the subscribed topics change (created, deleted, partitions
  added), or share-partitions become initialized that the target does not cover yet.
* A heartbeat that finds the group epoch ahead of the **assignment epoch** computes the
  target assignment with the ``simple`` assignor (:mod:`coordinator.share_assignor`) if
  ``share.assignment.interval.ms`` has passed since the last one; the assignment epoch then
  catches up. Only *initialized* share-partitions are assigned: a heartbeat asks the shell to
  initialize the subscribed ones that are not (:class:`InitializeRequest`), and the shell
  says when that is durable (:meth:`ShareGroupCoordinator.initialized`).
* A member takes its target at once (share groups revoke nothing first): its **member
  epoch** becomes the assignment epoch at its next heartbeat, its assignment the target
  less the topics it no longer subscribes to.
* A member that does not heartbeat for ``share.session.timeout.ms`` is fenced; a fenced or
  departed member is reported (:class:`MemberDeparted`) so the shell releases the records it
  holds in every share-partition of the group.

Time is integer milliseconds since the epoch, passed in (the assignment timestamp is kept
durably, as Kafka keeps it); :meth:`ShareGroupCoordinator.next_deadline` says when to call
:meth:`~ShareGroupCoordinator.on_timer`. What Kafka writes to ``__consumer_offsets`` for a
share group is :class:`~coordinator.share_group_record.ShareGroupRecord`, and
:mod:`coordinator.share_group_record` its ZooKeeper form.

What the shell does (``KafkaApis.handleShareGroupHeartbeat`` / ``handleShareGroupDescribe``
around the coordinator): answer UNSUPPORTED_VERSION while ``share.version`` is off; check
group READ (GROUP_AUTHORIZATION_FAILED), then :meth:`ShareGroupCoordinator.refuse_member_id`,
then DESCRIBE on every subscribed topic (TOPIC_AUTHORIZATION_FAILED, no message); call
:meth:`~ShareGroupCoordinator.heartbeat`; write each of the step's ``writes``, carry out its
``initialize`` (and report back), release each ``departed`` member's records; keep the topic
metadata current (:meth:`~ShareGroupCoordinator.update_topics`) and the groups' ``share.*``
configs (:meth:`~ShareGroupCoordinator.set_group_config`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any
from uuid import UUID

from coordinator.errors import Code, GroupError
from coordinator.messages.admin import AUTHORIZED_OPERATIONS_OMITTED
from coordinator.messages.common import Client, TopicPartitions, Wire
from coordinator.messages.consumer import ConsumerGroupHeartbeatResponse
from coordinator.share_assignor import (
    SIMPLE_ASSIGNOR_NAME,
    AssignorError,
    AssignorMember,
    JavaHashMap,
    MemberTable,
    Target,
    java_string_hash,
    simple_assign,
)
from coordinator.share_group_record import DurableMember, InitTopic, ShareGroupRecord
from coordinator.timers import Deadlines
from coordinator.topics import TopicsSnapshot

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
#: Kafka 4.3 starts a group's epoch and its assignment epoch at 1 (KAFKA-20268).
INITIAL_EPOCH = 1
SESSION = "share.session"


class ShareGroupState(Enum):
    """``ShareGroup.ShareGroupState``, as ShareGroupDescribe and ListGroups name it."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, kw_only=True, slots=True)
class ShareGroupSettings:
    """The broker-level keys (``GroupCoordinatorConfig``), Kafka's defaults."""

    #: ``group.share.max.size`` (1-1000).
    max_size: int = 200
    #: ``group.share.session.timeout.ms``.
    session_timeout_ms: int = 45_000
    #: ``group.share.heartbeat.interval.ms``.
    heartbeat_interval_ms: int = 5_000
    #: ``group.share.assignment.interval.ms`` (KIP-1263): the least time between two
    #: target assignments of a group.
    assignment_interval_ms: int = 1_000
    #: ``group.share.initialize.retry.interval.ms``: an initialization not done by then is
    #: asked for again.
    initialize_retry_interval_ms: int = 30_000

    def __post_init__(self) -> None:
        if not 1 <= self.max_size <= 1000:
            raise ValueError("group.share.max.size must be between 1 and 1000")
        if min(self.session_timeout_ms, self.heartbeat_interval_ms, self.initialize_retry_interval_ms) < 1:
            raise ValueError("share session timeout, heartbeat and initialize retry intervals must be at least 1")
        if self.assignment_interval_ms < 0:
            raise ValueError("group.share.assignment.interval.ms must be at least 0")


@dataclass(frozen=True, kw_only=True, slots=True)
class ShareGroupConfig:
    """One group's effective ``share.*`` group configs (``None``: the broker's value)."""

    session_timeout_ms: int | None = None
    heartbeat_interval_ms: int | None = None
    assignment_interval_ms: int | None = None


# -- messages --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ShareGroupHeartbeatRequest:
    """ShareGroupHeartbeat v1 (``None``: unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> ShareGroupHeartbeatRequest:
        """From a decoded request body."""
        names = body["SubscribedTopicNames"]
        return cls(group_id=body["GroupId"], member_id=body["MemberId"], member_epoch=body["MemberEpoch"],
                   rack_id=body["RackId"], subscribed_topic_names=None if names is None else tuple(names))


@dataclass(frozen=True, kw_only=True, slots=True)
class ShareGroupHeartbeatResponse(ConsumerGroupHeartbeatResponse):
    """ShareGroupHeartbeat's answer; ``assignment`` ``None`` when Kafka leaves it out. Its
    fields and their wire form are ConsumerGroupHeartbeat's answer's."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribedSharePartitions:
    """A described member's partitions of one topic."""

    topic_id: UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribedShareMember:
    """One member in ShareGroupDescribe."""

    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[DescribedSharePartitions, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribedShareGroup:
    """One group in ShareGroupDescribe, or the error for a group id."""

    group_id: str
    error: Code = Code.NONE
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedShareMember, ...] = ()
    #: The ``AuthorizedOperations`` bitfield, filled by the shell from the ACLs when asked
    #: (IncludeAuthorizedOperations), for a group described without an error.
    authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED

    def to_wire(self) -> Wire:
        """To a ``DescribedGroup`` struct."""
        return {"ErrorCode": int(self.error), "ErrorMessage": self.error_message, "GroupId": self.group_id,
                "GroupState": self.group_state, "GroupEpoch": self.group_epoch,
                "AssignmentEpoch": self.assignment_epoch, "AssignorName": self.assignor_name,
                "Members": [{"MemberId": m.member_id, "RackId": m.rack_id, "MemberEpoch": m.member_epoch,
                             "ClientId": m.client_id, "ClientHost": m.client_host,
                             "SubscribedTopicNames": list(m.subscribed_topic_names),
                             "Assignment": {"TopicPartitions": [
                                 {"TopicId": t.topic_id, "TopicName": t.topic_name, "Partitions": list(t.partitions)}
                                 for t in m.assignment]}}
                            for m in self.members],
                "AuthorizedOperations": self.authorized_operations}


# -- what a call hands back ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class InitializeRequest:
    """Share-partitions whose state the shell must create (Kafka's persister
    ``initializeState``: state epoch = ``group_epoch``, start offset -1, that is, taken from
    ``share.auto.offset.reset`` at the first fetch), then report with
    :meth:`ShareGroupCoordinator.initialized` or :meth:`~ShareGroupCoordinator.initialize_failed`."""

    group_id: str
    group_epoch: int
    partitions: Mapping[UUID, frozenset[int]]


@dataclass(frozen=True, kw_only=True, slots=True)
class MemberDeparted:
    """A member left (epoch -1) or was fenced (session timeout): the shell releases what it
    holds in every share-partition of the group (``SharePartition.release_member``)."""

    group_id: str
    member_id: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ShareStep:
    """The result of one call: the answer, the groups to write (``writes``, their whole
    durable state), share-partitions to initialize, members gone."""

    response: ShareGroupHeartbeatResponse | None = None
    writes: tuple[tuple[str, ShareGroupRecord], ...] = ()
    initialize: tuple[InitializeRequest, ...] = ()
    departed: tuple[MemberDeparted, ...] = ()


# -- the group -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ShareMember:
    """One member (``ShareGroupMember``); replaced, never mutated."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    assigned: Target = field(default_factory=dict)

    def same(self, other: ShareMember) -> bool:
        """``ShareGroupMember.equals`` (assignments compared as Java maps of sets)."""
        return (self.member_epoch, self.previous_member_epoch, self.rack_id, self.client_id, self.client_host,
                self.subscribed_topic_names) == (other.member_epoch, other.previous_member_epoch, other.rack_id,
                                                 other.client_id, other.client_host, other.subscribed_topic_names
                                                 ) and same_target(self.assigned, other.assigned)


def same_target(a: Mapping[UUID, Sequence[int]], b: Mapping[UUID, Sequence[int]]) -> bool:
    """Java's ``Map<Uuid, Set<Integer>>.equals``: order does not count, empty topics do."""
    return a.keys() == b.keys() and all(set(a[t]) == set(b[t]) for t in a)


@dataclass(kw_only=True, slots=True)
class ShareGroup:
    """One share group (``ShareGroup``). ``members`` keeps the order they joined in."""

    group_id: str
    group_epoch: int = INITIAL_EPOCH
    assignment_epoch: int = INITIAL_EPOCH
    #: When the target was last computed (0: never, or not known).
    assignment_timestamp: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    targets: dict[str, Target] = field(default_factory=dict)
    #: Subscribed topics that exist: name -> (id, partitions) (Kafka keeps their hash).
    subscribed_topics: dict[str, tuple[UUID, int]] = field(default_factory=dict)
    initializing: dict[UUID, InitTopic] = field(default_factory=dict)
    initialized: dict[UUID, InitTopic] = field(default_factory=dict)
    table: MemberTable = field(default_factory=MemberTable)
    #: Kafka's metadata refresh deadline: the next heartbeat looks at the topics again.
    metadata_stale: bool = True

    @property
    def state(self) -> ShareGroupState:
        """``maybeUpdateGroupState``: Empty without members, else Stable."""
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_names(self) -> set[str]:
        """Every name a member subscribes to."""
        return {n for m in self.members.values() for n in m.subscribed_topic_names}

    def to_record(self) -> ShareGroupRecord:
        """The durable state."""
        def pairs(t: Target) -> tuple[tuple[UUID, tuple[int, ...]], ...]:
            return tuple(t.items())

        return ShareGroupRecord(
            group_epoch=self.group_epoch, assignment_epoch=self.assignment_epoch,
            assignment_timestamp=self.assignment_timestamp,
            subscribed_topics=tuple((n, i, c) for n, (i, c) in sorted(self.subscribed_topics.items())),
            members=tuple(DurableMember(
                member_id=m.member_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=tuple(sorted(m.subscribed_topic_names)), member_epoch=m.member_epoch,
                previous_member_epoch=m.previous_member_epoch, assigned=pairs(m.assigned),
                target=pairs(self.targets.get(m.member_id, {}))) for m in self.members.values()),
            initializing=tuple(self.initializing.values()), initialized=tuple(self.initialized.values()))

    @classmethod
    def from_record(cls, group_id: str, record: ShareGroupRecord) -> ShareGroup:
        """A group back from its durable state (its metadata looked at again, as Kafka does
        after loading). Its members' table is rebuilt in their join order, as Kafka's replay of
        a compacted log rebuilds it: sized for the members there are now."""
        members = {m.member_id: ShareMember(
            member_id=m.member_id, member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch,
            rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=frozenset(m.subscribed_topic_names), assigned=dict(m.assigned))
            for m in record.members}
        return cls(group_id=group_id, group_epoch=record.group_epoch, assignment_epoch=record.assignment_epoch,
                   assignment_timestamp=record.assignment_timestamp, members=members,
                   targets={m.member_id: dict(m.target) for m in record.members},
                   subscribed_topics={n: (i, c) for n, i, c in record.subscribed_topics},
                   initializing={t.topic_id: t for t in record.initializing},
                   initialized={t.topic_id: t for t in record.initialized}, table=MemberTable(list(members)))


def _java_trim_empty(value: str | None) -> bool:
    """``Utils.throwIfEmptyString``'s test: non-null and blank after ``String.trim``."""
    return value is not None and not value.strip("".join(chr(c) for c in range(33)))


def _java_set_order(names: Iterable[str]) -> tuple[str, ...]:
    """A ``HashSet`` built from the sorted names (as Kafka's replay builds it), iterated."""
    return tuple(JavaHashMap.copy_of(java_string_hash, sorted(names)).ordered())


# -- the coordinator ---------------------------------------------------------------------------------


class ShareGroupCoordinator:
    """Every share group of this sidecar: ShareGroupHeartbeat, ShareGroupDescribe, session
    timeouts, share-partition initialization, topic changes."""

    def __init__(self, settings: ShareGroupSettings | None = None, *,
                 foreign_group: Callable[[str], bool] = lambda _group_id: False) -> None:
        self.settings = settings or ShareGroupSettings()
        #: ``group_id -> True`` when a group of another type holds the id.
        self.foreign_group = foreign_group
        self.groups: dict[str, ShareGroup] = {}
        self.timers = Deadlines()
        self.topics = TopicsSnapshot()
        self._configs: dict[str, ShareGroupConfig] = {}

    # -- configuration and time --------------------------------------------------------------

    def set_group_config(self, group_id: str, config: ShareGroupConfig | None) -> None:
        """A group's effective ``share.*`` configs changed (``None``: the broker's). Read at
        each use, as Kafka does: the next heartbeat sees them."""
        if config is None:
            self._configs.pop(group_id, None)
        else:
            self._configs[group_id] = config

    def _config(self, group_id: str, name: str) -> int:
        config = self._configs.get(group_id)
        value = None if config is None else getattr(config, name)
        return int(getattr(self.settings, name) if value is None else value)

    def next_deadline(self) -> int | None:
        """When :meth:`on_timer` must run next (ms), or ``None``."""
        return self.timers.next_deadline()

    def on_timer(self, now: int) -> ShareStep:
        """Fence every member whose session expired by ``now``."""
        writes: dict[str, ShareGroupRecord] = {}
        departed: list[MemberDeparted] = []
        while (key := self.timers.pop_next(now)) is not None:
            assert isinstance(key, tuple)
            group = self.groups.get(str(key[1]))
            if group is not None and key[2] in group.members:
                self._fence(group, str(key[2]))
                writes[group.group_id] = group.to_record()
                departed.append(MemberDeparted(group_id=group.group_id, member_id=str(key[2]),
                                               reason="session timeout"))
        return ShareStep(writes=tuple(writes.items()), departed=tuple(departed))

    # -- ShareGroupHeartbeat -------------------------------------------------------------------

    def heartbeat(self, req: ShareGroupHeartbeatRequest, client: Client, now: int) -> ShareStep:
        """Join, heartbeat or leave; always answered at once (``GroupCoordinatorService`` and
        ``GroupMetadataManager.shareGroupHeartbeat``)."""
        refused = self.refuse_member_id(req)
        if refused is not None:
            return ShareStep(response=refused)
        try:
            self._validate(req)
            if req.member_epoch == LEAVE_EPOCH:
                return self._leave(req)
            return self._heartbeat(req, client, now)
        except GroupError as exc:
            return ShareStep(response=ShareGroupHeartbeatResponse(error=exc.code, error_message=exc.message))

    @staticmethod
    def refuse_member_id(req: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse | None:
        """The broker's own check (``KafkaApis.isMemberIdValid``, after the group READ and
        before the topics' DESCRIBE authorization): a member id empty or longer than 36
        UTF-16 units is INVALID_REQUEST without a message. :meth:`heartbeat` applies it too."""
        units = len(req.member_id.encode("utf-16-le")) // 2
        if units == 0 or units > 36:
            return ShareGroupHeartbeatResponse(error=Code.INVALID_REQUEST)
        return None

    @staticmethod
    def _validate(req: ShareGroupHeartbeatRequest) -> None:
        """``throwIfShareGroupHeartbeatRequestIsInvalid``."""
        for value, message in ((req.member_id, "MemberId can't be empty."), (req.group_id, "GroupId can't be empty."),
                               (req.rack_id, "RackId can't be empty.")):
            if _java_trim_empty(value):
                raise GroupError(Code.INVALID_REQUEST, message)
        if req.member_epoch == JOIN_EPOCH:
            if not req.subscribed_topic_names:
                raise GroupError(Code.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        elif req.member_epoch < LEAVE_EPOCH:
            raise GroupError(Code.INVALID_REQUEST, "MemberEpoch is invalid.")

    def _group(self, group_id: str, *, create: bool, missing: str) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if self.foreign_group(group_id):
            raise GroupError(Code.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        if not create:
            raise GroupError(Code.GROUP_ID_NOT_FOUND, missing.format(group_id))
        return ShareGroup(group_id=group_id)  # materialized once the heartbeat succeeds

    def _heartbeat(self, req: ShareGroupHeartbeatRequest, client: Client, now: int) -> ShareStep:
        joining = req.member_epoch == JOIN_EPOCH
        group = self._group(req.group_id, create=joining, missing="Share group {} not found.")
        limit = self.settings.max_size
        if len(group.members) >= limit and (not req.member_id or req.member_id not in group.members):
            raise GroupError(Code.GROUP_MAX_SIZE_REACHED,
                             f"The share group has reached its maximum capacity of {limit} members.")
        member = group.members.get(req.member_id)
        if member is None:
            if not joining:
                raise GroupError(Code.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {group.group_id}.")
            member = ShareMember(member_id=req.member_id)
        else:
            _check_epoch(member, req.member_epoch)
        names = req.subscribed_topic_names
        updated = replace(member, rack_id=member.rack_id if req.rack_id is None else req.rack_id,
                          subscribed_topic_names=member.subscribed_topic_names if names is None else frozenset(names),
                          client_id=client.client_id, client_host=client.client_host)
        durable = not updated.same(member) or req.member_id not in group.members
        bump = updated.subscribed_topic_names != member.subscribed_topic_names
        members = dict(group.members)
        members[updated.member_id] = updated
        group_epoch = group.group_epoch
        if group.assignment_epoch >= group_epoch:
            bump |= self._initialized_assignment_pending(group, members)
        subscribed = {n for m in members.values() for n in m.subscribed_topic_names}
        metadata = group.subscribed_topics
        refreshed = bump or group.metadata_stale
        if refreshed:
            metadata = self._metadata(subscribed)
            bump |= metadata != group.subscribed_topics
            if bump:
                group_epoch += 1
        # The assignor sees the heartbeating member's names in its request's order.
        order = list(names) if names is not None else sorted(updated.subscribed_topic_names)
        # Kafka puts a joining member in the group's table before assigning.
        new_member = req.member_id not in group.members
        if new_member:
            group.table.add(updated.member_id)
        try:
            targets, assigned_epoch = self._target(group, members, group_epoch, updated.member_id, order, now)
        except AssignorError:
            if new_member:
                group.table.remove(updated.member_id)
            raise GroupError(Code.UNKNOWN_SERVER_ERROR, None) from None
        # Committed from here on: nothing below can fail.
        self.groups.setdefault(group.group_id, group)
        if refreshed:
            group.subscribed_topics = metadata
            group.metadata_stale = False
        if group_epoch != group.group_epoch:
            group.group_epoch = group_epoch
            durable = True
        if assigned_epoch != group.assignment_epoch or targets is not None:
            durable = True
            group.assignment_epoch, group.assignment_timestamp = assigned_epoch, now
            for member_id, target in (targets or {}).items():
                if member_id not in group.targets or not same_target(group.targets[member_id], target):
                    group.targets[member_id] = target
        final = self._reconcile(updated, group.assignment_epoch, group.targets.get(updated.member_id, {}), bump)
        durable |= not final.same(updated)
        group.members[final.member_id] = final
        self.timers.set((SESSION, group.group_id, final.member_id), now + self._config(group.group_id,
                                                                                          "session_timeout_ms"))
        full = joining or names is not None
        response = ShareGroupHeartbeatResponse(
            member_id=final.member_id, member_epoch=final.member_epoch,
            heartbeat_interval_ms=self._config(group.group_id, "heartbeat_interval_ms"),
            assignment=_as_wire(final.assigned) if full or not same_target(final.assigned, member.assigned) else None)
        initialize = self._maybe_initialize(group, subscribed, now)
        durable |= initialize is not None
        return ShareStep(response=response, writes=((group.group_id, group.to_record()),) if durable else (),
                         initialize=() if initialize is None else (initialize,))

    def _metadata(self, names: Iterable[str]) -> dict[str, tuple[UUID, int]]:
        """The subscribed topics that exist, with id and partition count (Kafka hashes them)."""
        known = self.topics.by_name
        return {n: (known[n].topic_id, known[n].partitions) for n in sorted(names) if n in known}

    @staticmethod
    def _initialized_assignment_pending(group: ShareGroup, members: Mapping[str, ShareMember]) -> bool:
        """``initializedAssignmentPending``: some subscribed topic's initialized partitions are
        not what the target assigns of it. Kafka asks the group's subscriptions as they were
        before this heartbeat (a joining member counts with none yet)."""
        if not members or not group.initialized:
            return False
        names = group.subscribed_names()
        if not names:
            return False
        assigned: dict[UUID, set[int]] = {}
        for target in group.targets.values():
            for topic, parts in target.items():
                assigned.setdefault(topic, set()).update(parts)
        return any(init.name in names and assigned.get(topic) != set(init.partitions)
                   for topic, init in group.initialized.items())

    def _target(self, group: ShareGroup, members: Mapping[str, ShareMember], group_epoch: int, member_id: str,
                order: list[str], now: int) -> tuple[dict[str, Target] | None, int]:
        """``maybeUpdateTargetAssignment``: the new targets (``None``: kept) and their epoch."""
        if group.assignment_epoch >= group_epoch:
            return None, group.assignment_epoch
        interval = self._config(group.group_id, "assignment_interval_ms")
        last = group.assignment_timestamp
        if last != 0 and interval != 0 and now < last + interval:
            return None, group.assignment_epoch
        counts: dict[str, int] = {}
        for m in members.values():
            for n in m.subscribed_topic_names:
                counts[n] = counts.get(n, 0) + 1
        homogeneous = all(c == len(members) for c in counts.values())
        specs = [AssignorMember(member_id=m, target=group.targets.get(m, {}),
                                subscribed_topic_names=tuple(order) if m == member_id
                                else tuple(sorted(members[m].subscribed_topic_names)))
                 for m in group.table.order()]
        topics = {n: (t.topic_id, t.partitions) for n in counts if (t := self.topics.by_name.get(n)) is not None}
        assignable = {t: i.partitions for t, i in group.initialized.items()}
        return simple_assign(specs, homogeneous=homogeneous, topics=topics, assignable=assignable), group_epoch

    def _reconcile(self, member: ShareMember, epoch: int, target: Target, changed: bool) -> ShareMember:
        """``maybeReconcile`` and ``ShareGroupAssignmentBuilder``: the member takes its target
        (less the topics it does not subscribe to) when the assignment epoch moved on, or its
        subscription changed."""
        if not changed and member.member_epoch == epoch:
            return member
        known = self.topics.by_name
        subscribed = {known[n].topic_id for n in member.subscribed_topic_names if n in known}
        assigned = target if all(t in subscribed for t in target) else {
            t: ps for t, ps in target.items() if t in subscribed}
        if epoch != member.member_epoch:
            return replace(member, assigned=assigned, previous_member_epoch=member.member_epoch, member_epoch=epoch)
        return replace(member, assigned=assigned)

    def _maybe_initialize(self, group: ShareGroup, names: set[str], now: int) -> InitializeRequest | None:
        """``maybeCreateInitializeShareGroupStateRequest``: the subscribed share-partitions
        neither initialized nor being initialized (an initialization older than
        ``group.share.initialize.retry.interval.ms`` is asked for again)."""
        if not names or not self.topics.by_name:
            return None
        retry = self.settings.initialize_retry_interval_ms
        fresh = {t: i for t, i in group.initializing.items() if now - i.timestamp < retry}
        wanted: dict[UUID, InitTopic] = {}
        for name in sorted(names):
            info = self.topics.by_name.get(name)
            if info is None:
                continue
            done = set(group.initialized[info.topic_id].partitions) if info.topic_id in group.initialized else set()
            if info.topic_id in fresh:
                done |= fresh[info.topic_id].partitions
            if not done or len(done) < info.partitions:
                wanted[info.topic_id] = InitTopic(topic_id=info.topic_id, name=name, timestamp=now,
                                                  partitions=frozenset(range(info.partitions)) - done)
        if not wanted:
            return None
        for topic, init in wanted.items():
            old = group.initializing.get(topic)
            group.initializing[topic] = (init if old is None
                                         else replace(init, partitions=old.partitions | init.partitions))
        return InitializeRequest(group_id=group.group_id, group_epoch=group.group_epoch,
                                 partitions={t: i.partitions for t, i in wanted.items()})

    # -- leaving and fencing -----------------------------------------------------------------

    def _leave(self, req: ShareGroupHeartbeatRequest) -> ShareStep:
        """``shareGroupLeave``: answered with the request's member id and epoch -1."""
        group = self._group(req.group_id, create=False, missing="Group {} not found.")
        if req.member_id not in group.members:
            raise GroupError(Code.UNKNOWN_MEMBER_ID,
                             f"Member {req.member_id} is not a member of group {group.group_id}.")
        self._fence(group, req.member_id)
        return ShareStep(response=ShareGroupHeartbeatResponse(member_id=req.member_id, member_epoch=LEAVE_EPOCH),
                         writes=((group.group_id, group.to_record()),),
                         departed=(MemberDeparted(group_id=group.group_id, member_id=req.member_id, reason="left"),))

    def fence_all(self, reason: str) -> ShareStep:
        """Fence every member of every group (``share.version`` turned off): each group's
        record is written without them and each member is reported departed, so the shell
        lets go of their records; a member that comes back joins anew (epoch 0)."""
        writes: list[tuple[str, ShareGroupRecord]] = []
        departed: list[MemberDeparted] = []
        for group in self.groups.values():
            if not group.members:
                continue
            for member_id in list(group.members):
                self._fence(group, member_id)
                departed.append(MemberDeparted(group_id=group.group_id, member_id=member_id, reason=reason))
            writes.append((group.group_id, group.to_record()))
        return ShareStep(writes=tuple(writes), departed=tuple(departed))

    def _fence(self, group: ShareGroup, member_id: str) -> None:
        """``shareGroupFenceMember``: the member and its target go, the group epoch is bumped
        (the metadata recomputed without the member); the next heartbeat assigns anew."""
        del group.members[member_id]
        group.targets.pop(member_id, None)
        group.table.remove(member_id)
        group.subscribed_topics = self._metadata(group.subscribed_names())
        group.group_epoch += 1
        self.timers.cancel((SESSION, group.group_id, member_id))

    # -- share-partition initialization ----------------------------------------------------------

    def initialized(self, group_id: str, partitions: Mapping[UUID, Iterable[int]], now: int) -> ShareStep:
        """The shell made these share-partitions' state durable (``initializeShareGroupState``):
        they become assignable; the next heartbeat bumps the group epoch and assigns them."""
        group = self.groups.get(group_id)
        if group is None or not partitions:
            return ShareStep()
        for topic, parts in partitions.items():
            info = self.topics.by_id.get(topic)
            old = group.initialized.get(topic)
            new = InitTopic(topic_id=topic, name=info.name if info is not None else "<UNKNOWN>",
                            partitions=frozenset(parts), timestamp=now)
            group.initialized[topic] = new if old is None else replace(new, partitions=old.partitions | new.partitions)
            pending = group.initializing.get(topic)
            if pending is not None:
                left = pending.partitions - new.partitions
                if left:
                    group.initializing[topic] = replace(pending, partitions=left)
                else:
                    del group.initializing[topic]
        return ShareStep(writes=((group_id, group.to_record()),))

    def initialize_failed(self, group_id: str, partitions: Mapping[UUID, Iterable[int]]) -> ShareStep:
        """The initialization failed (``uninitializeShareGroupState``): no longer pending, so
        the next heartbeat asks again."""
        group = self.groups.get(group_id)
        if group is None or not group.initializing or not partitions:
            return ShareStep()
        for topic, parts in partitions.items():
            pending = group.initializing.get(topic)
            if pending is not None:
                left = pending.partitions - frozenset(parts)
                if left:
                    group.initializing[topic] = replace(pending, partitions=left)
                else:
                    del group.initializing[topic]
        return ShareStep(writes=((group_id, group.to_record()),))

    # -- topics, loading -----------------------------------------------------------------------

    def update_topics(self, topics: TopicsSnapshot) -> ShareStep:
        """New topic metadata from the shell (``onMetadataUpdate``): groups subscribed to a
        created, changed or deleted topic look at it at their next heartbeat; deleted topics
        leave the initialization maps (``maybeCleanupShareGroupState``)."""
        old, self.topics = self.topics, topics
        changed = {n for n in set(old.by_name) | set(topics.by_name) if old.by_name.get(n) != topics.by_name.get(n)}
        deleted = set(old.by_id) - set(topics.by_id)
        writes = []
        for group in self.groups.values():
            if changed & group.subscribed_names():
                group.metadata_stale = True
            gone = deleted & (set(group.initializing) | set(group.initialized))
            if gone:
                for topic in gone:
                    group.initializing.pop(topic, None)
                    group.initialized.pop(topic, None)
                writes.append((group.group_id, group.to_record()))
        return ShareStep(writes=tuple(writes))

    def load(self, group_id: str, record: ShareGroupRecord, now: int) -> None:
        """A group back from the store (this sidecar now owns it): its members' sessions run
        from ``now``, as Kafka reschedules them when it loads a group."""
        group = ShareGroup.from_record(group_id, record)
        self.groups[group_id] = group
        for member_id in group.members:
            self.timers.set((SESSION, group_id, member_id), now + self._config(group_id, "session_timeout_ms"))

    def unload(self, group_id: str) -> None:
        """This sidecar no longer owns the group: forget it and its timers."""
        self.groups.pop(group_id, None)
        self.timers.cancel_group(group_id)

    # -- ShareGroupDescribe ------------------------------------------------------------------

    def describe(self, group_ids: Sequence[str]) -> tuple[DescribedShareGroup, ...]:
        """``GroupCoordinatorService.shareGroupDescribe``: empty ids first, as INVALID_GROUP_ID."""
        invalid = tuple(DescribedShareGroup(group_id="", error=Code.INVALID_GROUP_ID) for g in group_ids if not g)
        return invalid + tuple(self._describe(g) for g in group_ids if g)

    def _describe(self, group_id: str) -> DescribedShareGroup:
        group = self.groups.get(group_id)
        if group is None:
            message = (f"Group {group_id} is not a share group." if self.foreign_group(group_id)
                       else f"Group {group_id} not found.")
            return DescribedShareGroup(group_id=group_id, error=Code.GROUP_ID_NOT_FOUND, error_message=message)
        members = []
        for member_id in group.table.order():
            m = group.members[member_id]
            parts = tuple(DescribedSharePartitions(topic_id=t, topic_name=info.name, partitions=ps)
                          for t, ps in m.assigned.items() if (info := self.topics.by_id.get(t)) is not None)
            members.append(DescribedShareMember(
                member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=_java_set_order(m.subscribed_topic_names),
                assignment=parts))
        return DescribedShareGroup(group_id=group_id, group_state=group.state.value, group_epoch=group.group_epoch,
                                   assignment_epoch=group.assignment_epoch, assignor_name=SIMPLE_ASSIGNOR_NAME,
                                   members=tuple(members))


def _check_epoch(member: ShareMember, received: int) -> None:
    """``throwIfShareGroupMemberEpochIsInvalid``."""
    if received == JOIN_EPOCH:
        return
    if received > member.member_epoch:
        raise GroupError(Code.FENCED_MEMBER_EPOCH, f"The share group member has a greater member epoch ({received}) "
                         f"than the one known by the group coordinator ({member.member_epoch}). The member must "
                         "abandon all its partitions and rejoin.")
    if received < member.member_epoch and received != member.previous_member_epoch:
        raise GroupError(Code.FENCED_MEMBER_EPOCH, f"The share group member has a smaller member epoch ({received}) "
                         f"than the one known by the group coordinator ({member.member_epoch}), and it does not match "
                         f"the previous member epoch ({member.previous_member_epoch}). The member must abandon all "
                         "its partitions and rejoin.")


def _as_wire(assigned: Target) -> tuple[TopicPartitions, ...]:
    return tuple(TopicPartitions(topic_id=t, partitions=ps) for t, ps in assigned.items())
