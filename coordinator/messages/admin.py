"""Group administration: FindCoordinator (10), ListGroups (16), DescribeGroups (15), DeleteGroups (42)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from coordinator.errors import Code
from coordinator.messages.common import Wire, opt

#: FindCoordinator KeyType values (``FindCoordinatorRequest.CoordinatorType``).
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
#: DescribeGroups/ConsumerGroupDescribe/ShareGroupDescribe: "authorized operations not
#: requested" (Int.MinValue, the schemas' default).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


@dataclass(frozen=True, kw_only=True, slots=True)
class FindCoordinatorRequest:
    """FindCoordinator v0-v6; v0-3 carry one key, v4+ a batch."""

    keys: tuple[str, ...]
    key_type: int = KEY_TYPE_GROUP

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> FindCoordinatorRequest:
        """From a decoded FindCoordinator request body."""
        keys = (body["Key"],) if version < 4 else tuple(body["CoordinatorKeys"])
        return cls(keys=keys, key_type=opt(body, "KeyType", KEY_TYPE_GROUP))


@dataclass(frozen=True, kw_only=True, slots=True)
class Coordinator:
    """The coordinator of one key, or the error for it."""

    key: str
    node_id: int = -1
    host: str = ""
    port: int = -1
    error: Code = Code.NONE
    error_message: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class FindCoordinatorResponse:
    """FindCoordinator answer: one entry per key."""

    coordinators: tuple[Coordinator, ...]

    def to_wire(self, version: int) -> Wire:
        """To a FindCoordinator response body (flattened to its one key before v4)."""
        if version < 4:
            c = self.coordinators[0]
            return {"ErrorCode": int(c.error), "ErrorMessage": c.error_message,
                    "NodeId": c.node_id, "Host": c.host, "Port": c.port}
        return {"Coordinators": [
            {"Key": c.key, "NodeId": c.node_id, "Host": c.host, "Port": c.port,
             "ErrorCode": int(c.error), "ErrorMessage": c.error_message}
            for c in self.coordinators]}


@dataclass(frozen=True, kw_only=True, slots=True)
class ListGroupsRequest:
    """ListGroups v0-v5; empty filters match everything (compared case-insensitively)."""

    states_filter: tuple[str, ...] = ()
    types_filter: tuple[str, ...] = ()

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> ListGroupsRequest:
        """From a decoded ListGroups request body."""
        return cls(states_filter=tuple(opt(body, "StatesFilter", ())),
                   types_filter=tuple(opt(body, "TypesFilter", ())))


@dataclass(frozen=True, kw_only=True, slots=True)
class ListedGroup:
    """One group as ListGroups lists it."""

    group_id: str
    protocol_type: str
    group_state: str
    group_type: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ListGroupsResponse:
    """ListGroups answer."""

    error: Code = Code.NONE
    groups: tuple[ListedGroup, ...] = ()

    def to_wire(self, version: int) -> Wire:
        """To a ListGroups response body (state from v4, type from v5)."""
        return {"ErrorCode": int(self.error), "Groups": [
            {"GroupId": g.group_id, "ProtocolType": g.protocol_type,
             "GroupState": g.group_state, "GroupType": g.group_type} for g in self.groups]}


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribeGroupsRequest:
    """DescribeGroups v0-v6."""

    groups: tuple[str, ...]
    include_authorized_operations: bool = False

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> DescribeGroupsRequest:
        """From a decoded DescribeGroups request body."""
        return cls(groups=tuple(body["Groups"]),
                   include_authorized_operations=opt(body, "IncludeAuthorizedOperations", False))


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribedMember:
    """One member of a described classic group."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes = b""
    assignment: bytes = b""


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribedGroup:
    """One described classic group, or the error for a group id."""

    group_id: str
    error: Code = Code.NONE
    error_message: str | None = None
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedMember, ...] = ()
    #: The ``AuthorizedOperations`` bitfield, filled by the shell from the ACLs when asked.
    authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED


def _answered_ok(group: DescribedGroup, version: int) -> bool:
    """True when ``group`` goes on the wire without an error at ``version``: before v6
    (KIP-1043) an unknown group is described as ``Dead`` without an error."""
    return group.error is Code.NONE or (version < 6 and group.error is Code.GROUP_ID_NOT_FOUND)


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribeGroupsResponse:
    """DescribeGroups answer."""

    groups: tuple[DescribedGroup, ...]

    def with_authorized_operations(self, version: int, operations: Callable[[str], int]) -> DescribeGroupsResponse:
        """This answer with ``operations(group_id)`` as the AuthorizedOperations of every
        group answered without an error at ``version`` (Kafka's ``handleDescribeGroupsRequest``
        fills those only, the ``Dead`` of an unknown group before v6 included)."""
        return replace(self, groups=tuple(
            replace(g, authorized_operations=operations(g.group_id)) if _answered_ok(g, version) else g
            for g in self.groups))

    def to_wire(self, version: int) -> Wire:
        """To a DescribeGroups response body. Before v6 (KIP-1043) an unknown group is
        described as ``Dead`` without an error."""
        out = []
        for g in self.groups:
            if version < 6 and g.error is Code.GROUP_ID_NOT_FOUND:
                g = DescribedGroup(group_id=g.group_id, group_state="Dead",
                                   authorized_operations=g.authorized_operations)
            out.append({
                "ErrorCode": int(g.error), "ErrorMessage": g.error_message, "GroupId": g.group_id,
                "GroupState": g.group_state, "ProtocolType": g.protocol_type,
                "ProtocolData": g.protocol_data,
                "Members": [{"MemberId": m.member_id, "GroupInstanceId": m.group_instance_id,
                             "ClientId": m.client_id, "ClientHost": m.client_host,
                             "MemberMetadata": m.metadata, "MemberAssignment": m.assignment}
                            for m in g.members],
                "AuthorizedOperations": g.authorized_operations,
            })
        return {"Groups": out}


@dataclass(frozen=True, kw_only=True, slots=True)
class DeleteGroupsRequest:
    """DeleteGroups v0-v2."""

    groups: tuple[str, ...]

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> DeleteGroupsRequest:
        """From a decoded DeleteGroups request body."""
        return cls(groups=tuple(body["GroupsNames"]))


@dataclass(frozen=True, kw_only=True, slots=True)
class DeleteGroupsResponse:
    """DeleteGroups answer: an error per group."""

    results: tuple[tuple[str, Code], ...]

    def to_wire(self, version: int) -> Wire:
        """To a DeleteGroups response body."""
        return {"Results": [{"GroupId": g, "ErrorCode": int(e)} for g, e in self.results]}
