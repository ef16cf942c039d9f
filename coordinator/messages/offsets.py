"""Offsets: OffsetCommit (8), OffsetFetch (9), OffsetDelete (47), TxnOffsetCommit (28).

OffsetCommit and OffsetFetch name topics up to v9 and identify them by topic id from v10;
the typed messages carry both (one of them empty) and the core resolves ids against its
topic metadata snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from coordinator.errors import Code
from coordinator.messages.common import ZERO_UUID, Wire, opt


@dataclass(frozen=True, kw_only=True, slots=True)
class CommitPartition:
    """One partition's offset to commit."""

    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    #: v1 only: the client's commit timestamp (-1: now).
    commit_timestamp: int = -1


@dataclass(frozen=True, kw_only=True, slots=True)
class CommitTopic:
    """One topic's offsets to commit: by ``name`` (v0-9) or ``topic_id`` (v10+)."""

    name: str = ""
    topic_id: UUID = ZERO_UUID
    partitions: tuple[CommitPartition, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class OffsetCommitRequest:
    """OffsetCommit v0-v10. ``generation_id_or_member_epoch`` is -1 for simple (non-group)
    commits and for v0, which has no generation."""

    version: int
    group_id: str
    generation_id_or_member_epoch: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    #: v2-4: how long to keep these offsets (-1: the broker's retention).
    retention_time_ms: int = -1
    topics: tuple[CommitTopic, ...] = ()

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> OffsetCommitRequest:
        """From a decoded OffsetCommit request body."""
        return cls(
            version=version,
            group_id=body["GroupId"],
            generation_id_or_member_epoch=opt(body, "GenerationIdOrMemberEpoch", -1),
            member_id=opt(body, "MemberId", ""),
            group_instance_id=opt(body, "GroupInstanceId"),
            retention_time_ms=opt(body, "RetentionTimeMs", -1),
            topics=tuple(
                CommitTopic(
                    name=opt(t, "Name", ""),
                    topic_id=opt(t, "TopicId", ZERO_UUID),
                    partitions=tuple(
                        CommitPartition(
                            partition=p["PartitionIndex"],
                            offset=p["CommittedOffset"],
                            leader_epoch=opt(p, "CommittedLeaderEpoch", -1),
                            metadata=p["CommittedMetadata"],
                            commit_timestamp=opt(p, "CommitTimestamp", -1),
                        )
                        for p in t["Partitions"]
                    ),
                )
                for t in body["Topics"]
            ),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionError:
    """A partition and the error it was answered with."""

    partition: int
    error: Code = Code.NONE


@dataclass(frozen=True, kw_only=True, slots=True)
class TopicErrors:
    """Per-partition errors of one topic, named as the request named it."""

    name: str = ""
    topic_id: UUID = ZERO_UUID
    partitions: tuple[PartitionError, ...] = ()

    def to_wire(self) -> Wire:
        """To an OffsetCommit/OffsetDelete/TxnOffsetCommit response topic."""
        return {"Name": self.name, "TopicId": self.topic_id,
                "Partitions": [{"PartitionIndex": p.partition, "ErrorCode": int(p.error)}
                               for p in self.partitions]}


@dataclass(frozen=True, kw_only=True, slots=True)
class OffsetCommitResponse:
    """OffsetCommit answer: an error per partition."""

    topics: tuple[TopicErrors, ...] = ()

    def to_wire(self, version: int) -> Wire:
        """To an OffsetCommit response body."""
        return {"Topics": [t.to_wire() for t in self.topics]}

    def with_error(self, error: Code) -> OffsetCommitResponse:
        """The same partitions, every one answered with ``error`` (a failed write)."""
        return OffsetCommitResponse(topics=tuple(
            TopicErrors(name=t.name, topic_id=t.topic_id,
                        partitions=tuple(PartitionError(partition=p.partition,
                                                        error=error if p.error is Code.NONE else p.error)
                                         for p in t.partitions))
            for t in self.topics))


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchTopic:
    """Partitions to fetch of one topic (by name up to v9, by id from v10)."""

    name: str = ""
    topic_id: UUID = ZERO_UUID
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchGroup:
    """One group's part of an OffsetFetch; ``topics=None`` asks for all its offsets."""

    group_id: str
    member_id: str | None = None
    member_epoch: int = -1
    topics: tuple[FetchTopic, ...] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class OffsetFetchRequest:
    """OffsetFetch v0-v10; v0-7 carry one group, v8+ a batch."""

    version: int
    groups: tuple[FetchGroup, ...]
    require_stable: bool = False

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> OffsetFetchRequest:
        """From a decoded OffsetFetch request body."""
        def topics(raw: Any) -> tuple[FetchTopic, ...] | None:
            if raw is None:
                return None
            return tuple(FetchTopic(name=opt(t, "Name", ""), topic_id=opt(t, "TopicId", ZERO_UUID),
                                    partitions=tuple(t["PartitionIndexes"])) for t in raw)

        groups: tuple[FetchGroup, ...]
        if version < 8:
            groups = (FetchGroup(group_id=body["GroupId"], topics=topics(body["Topics"])),)
        else:
            groups = tuple(FetchGroup(group_id=g["GroupId"], member_id=opt(g, "MemberId"),
                                      member_epoch=opt(g, "MemberEpoch", -1), topics=topics(g["Topics"]))
                           for g in body["Groups"])
        return cls(version=version, groups=groups, require_stable=opt(body, "RequireStable", False))


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchedPartition:
    """A committed offset (-1 and empty metadata when none)."""

    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str | None = ""
    error: Code = Code.NONE


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchedTopic:
    """The committed offsets of one topic."""

    name: str = ""
    topic_id: UUID = ZERO_UUID
    partitions: tuple[FetchedPartition, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchGroupResult:
    """One group's answer to an OffsetFetch."""

    group_id: str
    error: Code = Code.NONE
    topics: tuple[FetchedTopic, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class OffsetFetchResponse:
    """OffsetFetch answer: one result per requested group."""

    groups: tuple[FetchGroupResult, ...]

    def to_wire(self, version: int) -> Wire:
        """To an OffsetFetch response body. Before v8 there is one group; before v2 it has
        no group-level error, so that error is put on every partition."""
        def partitions(parts: tuple[FetchedPartition, ...], group_error: Code | None) -> list[Wire]:
            return [{"PartitionIndex": p.partition, "CommittedOffset": p.offset,
                     "CommittedLeaderEpoch": p.leader_epoch, "Metadata": p.metadata,
                     "ErrorCode": int(group_error if group_error is not None else p.error)}
                    for p in parts]

        if version >= 8:
            return {"Groups": [
                {"GroupId": g.group_id, "ErrorCode": int(g.error),
                 "Topics": [{"Name": t.name, "TopicId": t.topic_id,
                             "Partitions": partitions(t.partitions, None)} for t in g.topics]}
                for g in self.groups
            ]}
        group = self.groups[0]
        carry = group.error if version < 2 and group.error is not Code.NONE else None
        return {
            "ErrorCode": int(group.error),
            "Topics": [{"Name": t.name, "Partitions": partitions(t.partitions, carry)}
                       for t in group.topics],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class OffsetDeleteRequest:
    """OffsetDelete v0."""

    group_id: str
    topics: tuple[FetchTopic, ...]

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> OffsetDeleteRequest:
        """From a decoded OffsetDelete request body."""
        return cls(group_id=body["GroupId"], topics=tuple(
            FetchTopic(name=t["Name"], partitions=tuple(p["PartitionIndex"] for p in t["Partitions"]))
            for t in body["Topics"]))


@dataclass(frozen=True, kw_only=True, slots=True)
class OffsetDeleteResponse:
    """OffsetDelete answer: a group error, or per-partition errors."""

    error: Code = Code.NONE
    topics: tuple[TopicErrors, ...] = ()

    def to_wire(self, version: int) -> Wire:
        """To an OffsetDelete response body."""
        return {"ErrorCode": int(self.error),
                "Topics": [{"Name": t.name,
                            "Partitions": [{"PartitionIndex": p.partition, "ErrorCode": int(p.error)}
                                           for p in t.partitions]} for t in self.topics]}


@dataclass(frozen=True, kw_only=True, slots=True)
class TxnOffsetCommitRequest:
    """TxnOffsetCommit v0-v5: only what the refusal needs (the partitions to echo)."""

    group_id: str
    transactional_id: str
    topics: tuple[FetchTopic, ...]

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> TxnOffsetCommitRequest:
        """From a decoded TxnOffsetCommit request body."""
        return cls(group_id=body["GroupId"], transactional_id=body["TransactionalId"], topics=tuple(
            FetchTopic(name=t["Name"], partitions=tuple(p["PartitionIndex"] for p in t["Partitions"]))
            for t in body["Topics"]))


@dataclass(frozen=True, kw_only=True, slots=True)
class TxnOffsetCommitResponse:
    """TxnOffsetCommit answer: an error per partition."""

    topics: tuple[TopicErrors, ...]

    def to_wire(self, version: int) -> Wire:
        """To a TxnOffsetCommit response body."""
        return {"Topics": [{"Name": t.name,
                            "Partitions": [{"PartitionIndex": p.partition, "ErrorCode": int(p.error)}
                                           for p in t.partitions]} for t in self.topics]}
