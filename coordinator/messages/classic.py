"""The classic group protocol: JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.errors import Code
from coordinator.messages.common import Wire, opt


@dataclass(frozen=True, kw_only=True, slots=True)
class Protocol:
    """One (name, metadata) pair a joining member supports, in preference order."""

    name: str
    metadata: bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class JoinGroupRequest:
    """JoinGroup v0-v9. ``version`` matters: MEMBER_ID_REQUIRED from v4, SkipAssignment v9."""

    version: int
    group_id: str
    session_timeout_ms: int
    #: v0 has no rebalance timeout: Kafka uses the session timeout.
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str
    protocols: tuple[Protocol, ...]
    reason: str | None = None

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> JoinGroupRequest:
        """From a decoded JoinGroup request body."""
        session = body["SessionTimeoutMs"]
        rebalance = opt(body, "RebalanceTimeoutMs", -1)
        return cls(
            version=version,
            group_id=body["GroupId"],
            session_timeout_ms=session,
            rebalance_timeout_ms=session if version == 0 or rebalance < 0 else rebalance,
            member_id=body["MemberId"],
            group_instance_id=opt(body, "GroupInstanceId"),
            protocol_type=body["ProtocolType"],
            protocols=tuple(Protocol(name=p["Name"], metadata=bytes(p["Metadata"]))
                            for p in body["Protocols"]),
            reason=opt(body, "Reason"),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class JoinMember:
    """A member as the leader's JoinGroup response lists it."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class JoinGroupResponse:
    """JoinGroup answer; ``members`` is non-empty only for the leader."""

    error: Code = Code.NONE
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: tuple[JoinMember, ...] = ()

    def to_wire(self, version: int) -> Wire:
        """To a JoinGroup response body of ``version`` (ProtocolName is non-null before v7)."""
        return {
            "ErrorCode": int(self.error),
            "GenerationId": self.generation_id,
            "ProtocolType": self.protocol_type,
            "ProtocolName": self.protocol_name if version >= 7 else (self.protocol_name or ""),
            "Leader": self.leader,
            "SkipAssignment": self.skip_assignment,
            "MemberId": self.member_id,
            "Members": [
                {"MemberId": m.member_id, "GroupInstanceId": m.group_instance_id,
                 "Metadata": m.metadata}
                for m in self.members
            ],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class SyncAssignment:
    """One member's assignment, as the leader sends it."""

    member_id: str
    assignment: bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class SyncGroupRequest:
    """SyncGroup v0-v5 (v5 adds ProtocolType/ProtocolName, checked against the group)."""

    version: int
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[SyncAssignment, ...] = ()

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> SyncGroupRequest:
        """From a decoded SyncGroup request body."""
        return cls(
            version=version,
            group_id=body["GroupId"],
            generation_id=body["GenerationId"],
            member_id=body["MemberId"],
            group_instance_id=opt(body, "GroupInstanceId"),
            protocol_type=opt(body, "ProtocolType"),
            protocol_name=opt(body, "ProtocolName"),
            assignments=tuple(SyncAssignment(member_id=a["MemberId"], assignment=bytes(a["Assignment"]))
                              for a in body["Assignments"]),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class SyncGroupResponse:
    """SyncGroup answer: this member's assignment."""

    error: Code = Code.NONE
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""

    def to_wire(self, version: int) -> Wire:
        """To a SyncGroup response body (the protocol fields exist from v5)."""
        return {
            "ErrorCode": int(self.error),
            "ProtocolType": self.protocol_type,
            "ProtocolName": self.protocol_name,
            "Assignment": self.assignment,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class HeartbeatRequest:
    """Heartbeat v0-v4."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> HeartbeatRequest:
        """From a decoded Heartbeat request body."""
        return cls(group_id=body["GroupId"], generation_id=body["GenerationId"],
                   member_id=body["MemberId"], group_instance_id=opt(body, "GroupInstanceId"))


@dataclass(frozen=True, kw_only=True, slots=True)
class HeartbeatResponse:
    """Heartbeat answer: only an error code."""

    error: Code = Code.NONE

    def to_wire(self, version: int) -> Wire:
        """To a Heartbeat response body."""
        return {"ErrorCode": int(self.error)}


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaveMember:
    """One member leaving (v3+ batches them; v0-2 carry one dynamic member)."""

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaveGroupRequest:
    """LeaveGroup v0-v5."""

    group_id: str
    members: tuple[LeaveMember, ...]

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> LeaveGroupRequest:
        """From a decoded LeaveGroup request body (v0-2: the single MemberId)."""
        if version < 3:
            return cls(group_id=body["GroupId"], members=(LeaveMember(member_id=body["MemberId"]),))
        return cls(
            group_id=body["GroupId"],
            members=tuple(LeaveMember(member_id=m["MemberId"], group_instance_id=m["GroupInstanceId"],
                                      reason=opt(m, "Reason")) for m in body["Members"]),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaveMemberResult:
    """The outcome for one leaving member."""

    member_id: str
    group_instance_id: str | None
    error: Code = Code.NONE


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaveGroupResponse:
    """LeaveGroup answer: a group-level error and, from v3, one result per member."""

    error: Code = Code.NONE
    members: tuple[LeaveMemberResult, ...] = ()

    def to_wire(self, version: int) -> Wire:
        """To a LeaveGroup response body; before v3 the one member's error is the top-level error."""
        if version < 3:
            error = self.error
            if error is Code.NONE and self.members:
                error = self.members[0].error
            return {"ErrorCode": int(error)}
        return {
            "ErrorCode": int(self.error),
            "Members": [{"MemberId": m.member_id, "GroupInstanceId": m.group_instance_id,
                         "ErrorCode": int(m.error)} for m in self.members],
        }
