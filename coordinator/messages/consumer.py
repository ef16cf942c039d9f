"""KIP-848: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID

from coordinator.errors import Code
from coordinator.messages.admin import AUTHORIZED_OPERATIONS_OMITTED
from coordinator.messages.common import TopicPartitions, Wire, opt


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsumerGroupHeartbeatRequest:
    """ConsumerGroupHeartbeat v0-v1. ``None`` means "unchanged since the last heartbeat"
    for every nullable field, as in Kafka."""

    version: int
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: tuple[TopicPartitions, ...] | None = None

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> ConsumerGroupHeartbeatRequest:
        """From a decoded ConsumerGroupHeartbeat request body."""
        names = body["SubscribedTopicNames"]
        owned = body["TopicPartitions"]
        return cls(
            version=version,
            group_id=body["GroupId"],
            member_id=body["MemberId"],
            member_epoch=body["MemberEpoch"],
            instance_id=body["InstanceId"],
            rack_id=body["RackId"],
            rebalance_timeout_ms=body["RebalanceTimeoutMs"],
            subscribed_topic_names=None if names is None else tuple(names),
            subscribed_topic_regex=opt(body, "SubscribedTopicRegex"),
            server_assignor=body["ServerAssignor"],
            topic_partitions=None if owned is None else tuple(TopicPartitions.from_wire(t) for t in owned),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsumerGroupHeartbeatResponse:
    """ConsumerGroupHeartbeat answer; ``assignment`` is ``None`` when unchanged."""

    error: Code = Code.NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: tuple[TopicPartitions, ...] | None = None

    def to_wire(self, version: int) -> Wire:
        """To a ConsumerGroupHeartbeat response body."""
        return {
            "ErrorCode": int(self.error),
            "ErrorMessage": self.error_message,
            "MemberId": self.member_id,
            "MemberEpoch": self.member_epoch,
            "HeartbeatIntervalMs": self.heartbeat_interval_ms,
            "Assignment": None if self.assignment is None
            else {"TopicPartitions": [tp.to_wire() for tp in self.assignment]},
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsumerGroupDescribeRequest:
    """ConsumerGroupDescribe v0-v1."""

    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> ConsumerGroupDescribeRequest:
        """From a decoded ConsumerGroupDescribe request body."""
        return cls(group_ids=tuple(body["GroupIds"]),
                   include_authorized_operations=body["IncludeAuthorizedOperations"])


@dataclass(frozen=True, kw_only=True, slots=True)
class NamedTopicPartitions:
    """Partitions of one topic by id and name (ConsumerGroupDescribe's shape)."""

    topic_id: UUID
    topic_name: str
    partitions: tuple[int, ...]

    def to_wire(self) -> Wire:
        """To a described ``TopicPartitions`` struct."""
        return {"TopicId": self.topic_id, "TopicName": self.topic_name,
                "Partitions": list(self.partitions)}


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribedConsumerMember:
    """One member of a described KIP-848 group."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[NamedTopicPartitions, ...]
    target_assignment: tuple[NamedTopicPartitions, ...]
    #: 1: the member speaks KIP-848 (0 would be a classic member of a consumer group).
    member_type: int = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribedConsumerGroup:
    """One described KIP-848 group, or the error for a group id."""

    group_id: str
    error: Code = Code.NONE
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()
    #: The ``AuthorizedOperations`` bitfield, filled by the shell from the ACLs when asked.
    authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsumerGroupDescribeResponse:
    """ConsumerGroupDescribe answer."""

    groups: tuple[DescribedConsumerGroup, ...]

    def with_authorized_operations(self, operations: Callable[[str], int]) -> ConsumerGroupDescribeResponse:
        """This answer with ``operations(group_id)`` as the AuthorizedOperations of every
        group described without an error (Kafka's ``handleConsumerGroupDescribe`` fills those
        only)."""
        return replace(self, groups=tuple(
            replace(g, authorized_operations=operations(g.group_id)) if g.error is Code.NONE else g
            for g in self.groups))

    def to_wire(self, version: int) -> Wire:
        """To a ConsumerGroupDescribe response body (MemberType exists from v1)."""
        return {"Groups": [
            {
                "ErrorCode": int(g.error),
                "ErrorMessage": g.error_message,
                "GroupId": g.group_id,
                "GroupState": g.group_state,
                "GroupEpoch": g.group_epoch,
                "AssignmentEpoch": g.assignment_epoch,
                "AssignorName": g.assignor_name,
                "Members": [
                    {
                        "MemberId": m.member_id,
                        "InstanceId": m.instance_id,
                        "RackId": m.rack_id,
                        "MemberEpoch": m.member_epoch,
                        "ClientId": m.client_id,
                        "ClientHost": m.client_host,
                        "SubscribedTopicNames": list(m.subscribed_topic_names),
                        "SubscribedTopicRegex": m.subscribed_topic_regex,
                        "Assignment": {"TopicPartitions": [t.to_wire() for t in m.assignment]},
                        "TargetAssignment": {"TopicPartitions": [t.to_wire() for t in m.target_assignment]},
                        "MemberType": m.member_type,
                    }
                    for m in g.members
                ],
                "AuthorizedOperations": g.authorized_operations,
            }
            for g in self.groups
        ]}
