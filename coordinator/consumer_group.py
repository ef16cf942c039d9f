"""The KIP-848 group's data: members, epochs, target assignment, the registry record.

:mod:`coordinator.consumer` holds the ConsumerGroupHeartbeat rules; this module holds what
a consumer group *is* and what follows from its data alone: its state, who holds which
partition at which epoch, the subscribed topics, offset-request validation.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any
from uuid import UUID

from coordinator.assignors import Assignment
from coordinator.errors import Code, GroupError
from coordinator.messages.common import Client, TopicAccess
from coordinator.reconcile import MemberState, Reconciled
from coordinator.topics import TopicsSnapshot

#: ConsumerGroupHeartbeat MemberEpoch values with a meaning of their own.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2


class ConsumerState(Enum):
    """A consumer group's state as ListGroups and ConsumerGroupDescribe show it."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


RegexKey = tuple[str, str, str]
"""A regex subscription as it resolves: (regex, principal, host)."""


def resolve_regex(key: RegexKey, topics: TopicsSnapshot, access: TopicAccess | None) -> set[str]:
    """The topic names a regex subscription resolves to for its principal and host."""
    regex, principal, host = key
    # Validated on the way in; a stored bad one matches nothing.
    with contextlib.suppress(re.error):
        matched = topics.matching(re.compile(regex))
        if access is not None and matched:
            matched = access(principal, host, matched)
        return matched
    return set()


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsumerMember:
    """One member of a consumer group (``ConsumerGroupMember``); replaced, never mutated."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client: Client = field(default_factory=Client)
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assignment: Reconciled = field(default_factory=lambda: Reconciled(
        state=MemberState.STABLE, member_epoch=0, previous_member_epoch=0))

    @property
    def member_epoch(self) -> int:
        """The member's current epoch."""
        return self.assignment.member_epoch

    def subscribed_topics(self, topics: TopicsSnapshot, access: TopicAccess | None = None) -> set[str]:
        """Names this member subscribes to: its names plus the topics its regex matches
        (with ``access``: only those its principal may Describe, as Kafka 4.0 resolves
        regexes; names it subscribes by name are checked on the request itself)."""
        names = set(self.subscribed_topic_names)
        if self.subscribed_topic_regex:
            names |= resolve_regex(self.regex_key(), topics, access)
        return names

    def regex_key(self) -> RegexKey:
        """What its regex resolves from: the regex, its principal and its host."""
        return (self.subscribed_topic_regex or "", self.client.principal, self.client.client_host.lstrip("/"))

    def with_assignment(self, assignment: Reconciled) -> ConsumerMember:
        """This member with a new reconciliation state."""
        return replace(self, assignment=assignment)


@dataclass(kw_only=True, slots=True)
class ConsumerGroup:
    """A KIP-848 consumer group.

    ``members`` is read freely but changed only through :meth:`put` and :meth:`remove`:
    they keep the indexes that answer the questions every heartbeat asks (who holds a
    partition, is the group Stable, which topics are subscribed) without a pass over
    every member, which would make a group's formation quadratic in its size.
    """

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    #: Subscribed topic name -> (id, partition count) as of the last epoch bump.
    subscription_metadata: dict[str, tuple[UUID, int]] = field(default_factory=dict)
    #: When the group became empty, or last changed (ms since the epoch).
    state_timestamp: int = 0
    dead: bool = False
    #: When the current rebalance started (metrics), or ``None``.
    rebalance_started: int | None = None
    #: When the target was last computed (ms; batched mode spaces ticks by it), or ``None``.
    assigned_at: int | None = None
    #: (topic, partition) -> the member holding it, assigned or pending revocation
    #: (Kafka's ``currentPartitionEpoch`` keeps the same map, by epoch).
    _holders: dict[tuple[UUID, int], str] = field(default_factory=dict, init=False, repr=False)
    #: member epoch -> how many members are STABLE at that epoch.
    _stable_at: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    #: Topic name -> how many members subscribe to it by name.
    _names: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    #: Regex subscription -> how many members have it.
    _regexes: dict[RegexKey, int] = field(default_factory=dict, init=False, repr=False)

    @property
    def state(self) -> ConsumerState:
        """``ConsumerGroup.maybeUpdateGroupState``."""
        if self.dead:
            return ConsumerState.DEAD
        if not self.members:
            return ConsumerState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerState.ASSIGNING
        # Stable: every member STABLE at the assignment epoch.
        if self._stable_at.get(self.assignment_epoch, 0) != len(self.members):
            return ConsumerState.RECONCILING
        return ConsumerState.STABLE

    def is_empty(self) -> bool:
        """True when the group has no members."""
        return not self.members

    def put(self, member: ConsumerMember) -> None:
        """Add or replace a member."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._unindex(old)
        self.members[member.member_id] = member
        self._index(member)
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> ConsumerMember | None:
        """Remove a member and its target assignment."""
        member = self.members.pop(member_id, None)
        self.target.pop(member_id, None)
        if member is not None:
            self._unindex(member)
            if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
                del self.static_members[member.instance_id]
        return member

    def _index(self, m: ConsumerMember) -> None:
        for held in (m.assignment.assigned, m.assignment.pending_revocation):
            for topic, parts in held.items():
                for p in parts:
                    self._holders[(topic, p)] = m.member_id
        if m.assignment.state is MemberState.STABLE:
            self._stable_at[m.member_epoch] = self._stable_at.get(m.member_epoch, 0) + 1
        for name in m.subscribed_topic_names:
            self._names[name] = self._names.get(name, 0) + 1
        if m.subscribed_topic_regex:
            key = m.regex_key()
            self._regexes[key] = self._regexes.get(key, 0) + 1

    def _unindex(self, m: ConsumerMember) -> None:
        for held in (m.assignment.assigned, m.assignment.pending_revocation):
            for topic, parts in held.items():
                for p in parts:
                    if self._holders.get((topic, p)) == m.member_id:
                        del self._holders[(topic, p)]
        if m.assignment.state is MemberState.STABLE:
            _decrement(self._stable_at, m.member_epoch)
        for name in m.subscribed_topic_names:
            _decrement(self._names, name)
        if m.subscribed_topic_regex:
            _decrement(self._regexes, m.regex_key())

    def member(self, member_id: str) -> ConsumerMember:
        """A member, or UNKNOWN_MEMBER_ID."""
        found = self.members.get(member_id)
        if found is None:
            raise GroupError(Code.UNKNOWN_MEMBER_ID,
                             f"Member {member_id} is not a member of group {self.group_id}.")
        return found

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        """The member holding ``instance_id``, if any."""
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def partition_epoch(self, topic: UUID, partition: int) -> int:
        """The epoch of the member holding a partition, assigned or pending revocation
        (``currentPartitionEpoch``), or -1 when nobody holds it."""
        holder = self._holders.get((topic, partition))
        return -1 if holder is None else self.members[holder].member_epoch

    def partition_epochs(self, exclude: str | None = None) -> dict[tuple[UUID, int], int]:
        """Who holds what: (topic, partition) -> the holder's epoch (``currentPartitionEpoch``),
        counting assigned and pending-revocation partitions."""
        return {tp: self.members[m].member_epoch for tp, m in self._holders.items() if m != exclude}

    def subscribed_topics(self, topics: TopicsSnapshot, access: TopicAccess | None = None) -> set[str]:
        """Every topic name some member subscribes to (each distinct regex resolved once)."""
        names = set(self._names)
        for key in self._regexes:
            names |= resolve_regex(key, topics, access)
        return names

    def compute_subscription_metadata(self, topics: TopicsSnapshot,
                                      access: TopicAccess | None = None) -> dict[str, tuple[UUID, int]]:
        """Subscribed topics that exist, with their ids and partition counts."""
        return {n: (topics.by_name[n].topic_id, topics.by_name[n].partitions)
                for n in sorted(self.subscribed_topics(topics, access)) if n in topics.by_name}

    def is_subscribed_to(self, topic: str) -> bool:
        """Whether a member subscribes to ``topic`` (by name or through the last metadata)."""
        return topic in self.subscription_metadata or topic in self._names

    # -- offsets -------------------------------------------------------------------------

    def validate_offset_commit(self, member_id: str, instance_id: str | None, member_epoch: int,
                               version: int) -> None:
        """``ConsumerGroup.validateOffsetCommit``."""
        if member_epoch < 0 and not self.members:
            return  # an admin client, or a consumer without group management
        member = self.member(member_id)
        if version < 9:
            raise GroupError(Code.UNSUPPORTED_VERSION, "OffsetCommit version 9 or above must be "
                             "used by members using the consumer group protocol")
        if member_epoch != member.member_epoch:
            raise GroupError(Code.STALE_MEMBER_EPOCH, f"received member epoch {member_epoch}, "
                             f"expected {member.member_epoch}")

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        """``ConsumerGroup.validateOffsetFetch``."""
        if member_id is None and member_epoch < 0:
            return
        member = self.member(member_id or "")
        if member_epoch != member.member_epoch:
            raise GroupError(Code.STALE_MEMBER_EPOCH, f"received member epoch {member_epoch}, "
                             f"expected {member.member_epoch}")

    # -- persistence ---------------------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        """The registry record (docs/coordinator.md, "group registry")."""
        names: dict[UUID, str] = {}

        def parts(a: Assignment) -> dict[str, list[int]]:
            # str(UUID) is slow and the same few topics recur in every member.
            out: dict[str, list[int]] = {}
            for t, ps in a.items():
                name = names.get(t)
                if name is None:
                    name = names[t] = str(t)
                out[name] = sorted(ps)
            return out

        return {
            "version": 1,
            "type": "consumer",
            "group_epoch": self.group_epoch,
            "assignment_epoch": self.assignment_epoch,
            "state_timestamp": self.state_timestamp,
            "subscription_metadata": {n: [str(i), c] for n, (i, c) in self.subscription_metadata.items()},
            "members": [
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "rack_id": m.rack_id,
                    "client_id": m.client.client_id,
                    "client_host": m.client.client_host,
                    "principal": m.client.principal,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "subscribed_topic_names": list(m.subscribed_topic_names),
                    "subscribed_topic_regex": m.subscribed_topic_regex,
                    "server_assignor": m.server_assignor,
                    "state": m.assignment.state.value,
                    "member_epoch": m.member_epoch,
                    "previous_member_epoch": m.assignment.previous_member_epoch,
                    "assigned": parts(m.assignment.assigned),
                    "pending_revocation": parts(m.assignment.pending_revocation),
                    "target": parts(self.target.get(m.member_id, {})),
                }
                for m in self.members.values()
            ],
        }

    @classmethod
    def from_record(cls, group_id: str, record: dict[str, Any]) -> ConsumerGroup:
        """A group back from its registry record."""
        def parts(raw: dict[str, list[int]]) -> Assignment:
            return {UUID(t): frozenset(ps) for t, ps in raw.items()}

        group = cls(group_id=group_id, group_epoch=int(record["group_epoch"]),
                    assignment_epoch=int(record["assignment_epoch"]),
                    state_timestamp=int(record.get("state_timestamp", 0)),
                    subscription_metadata={n: (UUID(v[0]), int(v[1]))
                                           for n, v in record.get("subscription_metadata", {}).items()})
        for raw in record.get("members", []):
            group.put(ConsumerMember(
                member_id=raw["member_id"], instance_id=raw.get("instance_id"), rack_id=raw.get("rack_id"),
                client=Client(client_id=raw.get("client_id", ""), client_host=raw.get("client_host", ""),
                              principal=raw.get("principal", "")),
                rebalance_timeout_ms=int(raw.get("rebalance_timeout_ms", -1)),
                subscribed_topic_names=tuple(raw.get("subscribed_topic_names", ())),
                subscribed_topic_regex=raw.get("subscribed_topic_regex"),
                server_assignor=raw.get("server_assignor"),
                assignment=Reconciled(
                    state=MemberState(raw["state"]), member_epoch=int(raw["member_epoch"]),
                    previous_member_epoch=int(raw["previous_member_epoch"]),
                    assigned=parts(raw.get("assigned", {})),
                    pending_revocation=parts(raw.get("pending_revocation", {}))),
            ))
            group.target[raw["member_id"]] = parts(raw.get("target", {}))
        return group


def _decrement(counts: dict[Any, int], key: Any) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
