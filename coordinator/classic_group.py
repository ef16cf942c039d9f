"""The classic group's data: members, states, protocol selection, the registry record.

:mod:`coordinator.classic` holds the protocol's rules (what each request does in each
state); this module holds what a group *is*, and the questions whose answers follow from
its data alone (does it support these protocols, which protocol wins the vote, is a member
who it claims to be, which topics does it consume).
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from coordinator.errors import Code, GroupError
from coordinator.messages.classic import JoinMember, Protocol
from coordinator.messages.common import Client

#: The protocol type of Kafka consumers (``ConsumerProtocol.PROTOCOL_TYPE``).
CONSUMER_PROTOCOL_TYPE = "consumer"


class ClassicState(Enum):
    """The five states of a classic group, named as DescribeGroups and ListGroups show them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(kw_only=True, slots=True)
class ClassicMember:
    """One member of a classic group (``ClassicGroupMember``)."""

    member_id: str
    group_instance_id: str | None
    client: Client
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    #: The parked JoinGroup of this member, if it is awaiting a join response.
    join_ticket: int | None = None
    #: The parked SyncGroup of this member, if it is awaiting its assignment.
    sync_ticket: int | None = None
    #: Joined but never completed a join phase: may expire even while awaiting join.
    is_new: bool = False

    def metadata(self, protocol: str) -> bytes:
        """This member's metadata for ``protocol``."""
        for p in self.protocols:
            if p.name == protocol:
                return p.metadata
        raise KeyError(protocol)

    def matches(self, protocols: tuple[Protocol, ...]) -> bool:
        """True when a rejoin brings exactly the protocols this member already has."""
        return protocols == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The first of this member's protocols that every member supports."""
        for p in self.protocols:
            if p.name in candidates:
                return p.name
        raise ValueError("member supports none of the candidate protocols")

    def has_satisfied_heartbeat(self) -> bool:
        """Whether an expired heartbeat deadline spares this member (Kafka's rule: members
        awaiting a rebalance are alive, new members are not)."""
        if self.is_new:
            return False
        return self.join_ticket is not None or self.sync_ticket is not None


@dataclass(kw_only=True, slots=True)
class ClassicGroup:
    """A classic group: its state, generation, protocol and members."""

    group_id: str
    state: ClassicState = ClassicState.EMPTY
    previous_state: ClassicState = ClassicState.EMPTY
    #: When the group entered its current state (ms since the epoch): offsets retention.
    state_timestamp: int = 0
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    #: Members told MEMBER_ID_REQUIRED who have not joined with their id yet.
    pending_members: set[str] = field(default_factory=set)
    #: Members of this generation that have not sent their SyncGroup yet.
    pending_sync: set[str] = field(default_factory=set)
    #: A member joined during the initial (delayed) rebalance: extend the delay.
    new_member_added: bool = False
    #: When the current rebalance started (metrics), or ``None``.
    rebalance_started: int | None = None

    # -- state ---------------------------------------------------------------------------

    def transition(self, state: ClassicState, now: int) -> None:
        """Enter ``state``."""
        self.previous_state = self.state
        self.state = state
        self.state_timestamp = now

    def is_(self, *states: ClassicState) -> bool:
        """True when the group is in one of ``states``."""
        return self.state in states

    def is_empty(self) -> bool:
        """True when the group has no members (Empty or Dead)."""
        return self.is_(ClassicState.EMPTY, ClassicState.DEAD)

    def can_rebalance(self) -> bool:
        """A rebalance can start from Stable, CompletingRebalance and Empty."""
        return self.is_(ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE, ClassicState.EMPTY)

    # -- members -------------------------------------------------------------------------

    def add(self, member: ClassicMember) -> None:
        """Add ``member``; the first member fixes the protocol type and leads."""
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> ClassicMember | None:
        """Remove a member (a new leader is the oldest remaining member)."""
        member = self.members.pop(member_id, None)
        instance = member.group_instance_id if member is not None else None
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync.discard(member_id)
        return member

    def replace_static(self, instance_id: str, old_id: str, new_id: str) -> ClassicMember:
        """Give a static member's place (assignment included) to a new member id."""
        old = self.members.pop(old_id)
        old.member_id = new_id
        self.members[new_id] = old
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return old

    def validate_member(self, member_id: str, instance_id: str | None) -> None:
        """Raise UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID unless the member is who it says."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                raise GroupError(Code.UNKNOWN_MEMBER_ID, f"instance id {instance_id} is unknown")
            if existing != member_id:
                raise GroupError(Code.FENCED_INSTANCE_ID,
                                 f"static member {member_id} with instance id {instance_id} "
                                 f"was fenced by member {existing}")
        elif member_id not in self.members:
            raise GroupError(Code.UNKNOWN_MEMBER_ID, f"member {member_id} is unknown")

    def awaiting_join(self) -> int:
        """How many members have a parked JoinGroup."""
        return sum(1 for m in self.members.values() if m.join_ticket is not None)

    def all_joined(self) -> bool:
        """Every member has rejoined and nobody is still to come with a new id."""
        return self.awaiting_join() == len(self.members) and not self.pending_members

    @property
    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of the members (the join phase's limit)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -----------------------------------------------------------------------

    def supports(self, protocol_type: str, protocols: tuple[Protocol, ...]) -> bool:
        """Whether a member with these protocols may join (``supportsProtocols``)."""
        if self.is_(ClassicState.EMPTY):
            return bool(protocol_type) and bool(protocols)
        counts = self._protocol_counts()
        return protocol_type == (self.protocol_type or "") and any(
            counts.get(p.name, 0) == len(self.members) for p in protocols)

    def _protocol_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for m in self.members.values():
            for name in {p.name for p in m.protocols}:
                counts[name] = counts.get(name, 0) + 1
        return counts

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (``selectProtocol``);
        ties go to the protocol that comes first in the leader's list."""
        counts = self._protocol_counts()
        candidates = {name for name, n in counts.items() if n == len(self.members)}
        if not candidates:
            raise ValueError(f"group {self.group_id} has no protocol in common")
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        order = {p.name: i for i, p in enumerate(leader.protocols)}
        return min(votes, key=lambda name: (-votes[name], order.get(name, len(order)), name))

    def join_members(self) -> tuple[JoinMember, ...]:
        """The member list the leader receives, with metadata for the selected protocol."""
        protocol = self.protocol_name or ""
        return tuple(JoinMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                metadata=m.metadata(protocol)) for m in self.members.values())

    def uses_consumer_protocol(self) -> bool:
        """The members are Kafka consumers (their metadata can be parsed)."""
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def subscribed_topics(self) -> set[str] | None:
        """Topics the consumer members subscribe to, or ``None`` when not knowable."""
        if not self.uses_consumer_protocol():
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = consumer_subscription_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        """``isSubscribedToTopic``: unknown subscriptions of consumers count as subscribed."""
        topics = self.subscribed_topics()
        if topics is None:
            return self.uses_consumer_protocol()
        return topic in topics

    # -- offsets -------------------------------------------------------------------------

    def validate_offset_commit(self, member_id: str, instance_id: str | None, generation_id: int) -> None:
        """Raise the error an OffsetCommit of this member and generation gets, if any
        (``ClassicGroup.validateOffsetCommit``)."""
        if self.is_(ClassicState.DEAD):
            raise GroupError(Code.COORDINATOR_NOT_AVAILABLE)
        if generation_id < 0 and self.is_(ClassicState.EMPTY):
            return  # an admin client or a consumer without group management
        if generation_id >= 0 or member_id or instance_id is not None:
            self.validate_member(member_id, instance_id)
            if generation_id != self.generation_id:
                raise GroupError(Code.ILLEGAL_GENERATION)
        elif not self.is_(ClassicState.EMPTY):
            # v0-style commits without member and generation only go to empty groups.
            raise GroupError(Code.UNKNOWN_MEMBER_ID)
        if self.is_(ClassicState.COMPLETING_REBALANCE):
            raise GroupError(Code.REBALANCE_IN_PROGRESS)

    def validate_offset_fetch(self, member_id: str | None, generation: int) -> None:
        """Classic groups accept every OffsetFetch (member checks are KIP-848's)."""
        if self.is_(ClassicState.DEAD):
            raise GroupError(Code.GROUP_ID_NOT_FOUND)

    # -- persistence ---------------------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        """The registry record (docs/coordinator.md, "group registry")."""
        return {
            "version": 1,
            "type": "classic",
            "state": self.state.value,
            "state_timestamp": self.state_timestamp,
            "generation": self.generation_id,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol_name,
            "leader": self.leader_id,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client.client_id,
                    "client_host": m.client.client_host,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "session_timeout_ms": m.session_timeout_ms,
                    "protocols": [{"name": p.name, "metadata": _b64(p.metadata)} for p in m.protocols],
                    "assignment": _b64(m.assignment),
                }
                for m in self.members.values()
            ],
        }

    @classmethod
    def from_record(cls, group_id: str, record: dict[str, Any]) -> ClassicGroup:
        """A group back from its registry record. Groups between generations come back
        Empty or Stable: a rebalance in progress is not resumable and is restarted by the
        members' next heartbeat (which sees the same generation until it fails)."""
        group = cls(group_id=group_id, generation_id=int(record["generation"]),
                    protocol_type=record.get("protocol_type"), protocol_name=record.get("protocol"),
                    state_timestamp=int(record.get("state_timestamp", 0)))
        for raw in record.get("members", []):
            group.add(ClassicMember(
                member_id=raw["member_id"], group_instance_id=raw.get("group_instance_id"),
                client=Client(client_id=raw.get("client_id", ""), client_host=raw.get("client_host", "")),
                rebalance_timeout_ms=int(raw["rebalance_timeout_ms"]),
                session_timeout_ms=int(raw["session_timeout_ms"]),
                protocol_type=record.get("protocol_type") or "",
                protocols=tuple(Protocol(name=p["name"], metadata=base64.b64decode(p["metadata"]))
                                for p in raw["protocols"]),
                assignment=base64.b64decode(raw.get("assignment", "")),
            ))
        if record.get("leader") in group.members:
            group.leader_id = record["leader"]
        group.state = ClassicState.STABLE if group.members and group.protocol_name else ClassicState.EMPTY
        group.previous_state = group.state
        return group


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def consumer_subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ``ConsumerProtocolSubscription`` (any version: they all start with
    int16 version, then an array of int16-length strings), or ``None`` if unreadable."""
    try:
        (version, count) = struct.unpack_from(">hi", metadata, 0)
        if version < 0 or count < 0:
            return None
        pos = 6
        topics: set[str] = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.add(metadata[pos:pos + length].decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
