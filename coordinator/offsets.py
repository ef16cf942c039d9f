"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, TxnOffsetCommit, retention.

Decisions only. A commit is checked here (Kafka's ``OffsetMetadataManager`` rules: group
existence, generation or member epoch, metadata size) and turned into
:class:`~coordinator.outcome.OffsetWrite` s; the in-memory view (:attr:`Offsets.committed`)
changes only when the shell reports those writes durable (:meth:`Offsets.apply`), so an
OffsetFetch never sees an offset ZooKeeper does not hold.

TxnOffsetCommit is refused: transactional offsets would have to become visible when the
producer's transaction commits, which only the broker's transaction coordinator knows.
Exactly-once consume-transform-produce therefore needs ``sidecar.coordinator=passthrough``;
every partition is answered UNSUPPORTED_VERSION, which Kafka's producer treats as fatal
for ``sendOffsetsToTransaction`` (rather than retrying forever).
"""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

from coordinator.classic_group import ClassicGroup, ClassicState
from coordinator.consumer_group import ConsumerGroup
from coordinator.context import Context
from coordinator.errors import Code, GroupError
from coordinator.messages.common import ZERO_UUID
from coordinator.messages.offsets import (
    FetchedPartition,
    FetchedTopic,
    FetchGroup,
    FetchGroupResult,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    PartitionError,
    TopicErrors,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from coordinator.outcome import GroupWrite, OffsetValue, OffsetWrite, Write
from coordinator.topics import TopicsSnapshot

#: From this OffsetCommit version a missing group is GROUP_ID_NOT_FOUND (not ILLEGAL_GENERATION).
GROUP_NOT_FOUND_COMMIT_VERSION = 9
#: The error TxnOffsetCommit is answered with (see the module docstring).
TXN_OFFSET_COMMIT_ERROR = Code.UNSUPPORTED_VERSION

TopicPartition = tuple[str, int]


class Offsets:
    """The committed offsets of every group this core owns, and the rules about them."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        #: group id -> (topic, partition) -> the durable committed offset.
        self.committed: dict[str, dict[TopicPartition, OffsetValue]] = {}

    # -- OffsetCommit --------------------------------------------------------------------

    def commit(self, req: OffsetCommitRequest, topics: TopicsSnapshot,
               now: int) -> tuple[OffsetCommitResponse, list[OffsetWrite]]:
        """Check a commit; return the answer to give once the writes are durable."""
        try:
            self._validate_commit(req, now)
            error = Code.NONE
        except GroupError as exc:
            error = exc.code
        writes: list[OffsetWrite] = []
        out: list[TopicErrors] = []
        limit = self.ctx.settings.offset_metadata_max_bytes
        for t in req.topics:
            name = t.name if req.version < 10 else topics.name_of(t.topic_id)
            results = []
            for p in t.partitions:
                code = error
                if code is Code.NONE and name is None:
                    code = Code.UNKNOWN_TOPIC_ID
                elif code is Code.NONE and p.metadata is not None and len(p.metadata.encode()) > limit:
                    code = Code.OFFSET_METADATA_TOO_LARGE
                if code is Code.NONE and name is not None:
                    writes.append(OffsetWrite(group_id=req.group_id, topic=name, partition=p.partition,
                                              value=OffsetValue(
                                                  offset=p.offset, leader_epoch=p.leader_epoch,
                                                  metadata=p.metadata or "",
                                                  commit_timestamp=p.commit_timestamp if p.commit_timestamp >= 0 else now,
                                                  expire_timestamp=now + req.retention_time_ms
                                                  if req.retention_time_ms >= 0 else None)))
                results.append(PartitionError(partition=p.partition, error=code))
            out.append(TopicErrors(name=t.name, topic_id=t.topic_id, partitions=tuple(results)))
        return OffsetCommitResponse(topics=tuple(out)), writes

    def _validate_commit(self, req: OffsetCommitRequest, now: int) -> None:
        group = self.ctx.groups.get(req.group_id)
        generation = req.generation_id_or_member_epoch
        if group is None:
            if generation < 0:
                # A "simple" group: an admin client, or a consumer without group management.
                self.ctx.groups[req.group_id] = ClassicGroup(group_id=req.group_id, state_timestamp=now)
                return
            if req.version >= GROUP_NOT_FOUND_COMMIT_VERSION:
                raise GroupError(Code.GROUP_ID_NOT_FOUND)
            raise GroupError(Code.ILLEGAL_GENERATION)
        if isinstance(group, ClassicGroup):
            group.validate_offset_commit(req.member_id, req.group_instance_id, generation)
        else:
            group.validate_offset_commit(req.member_id, req.group_instance_id, generation, req.version)

    def apply(self, writes: Iterable[Write]) -> None:
        """Make durable writes visible (called when ZooKeeper holds them)."""
        for w in writes:
            if isinstance(w, OffsetWrite):
                offsets = self.committed.setdefault(w.group_id, {})
                if w.value is None:
                    offsets.pop((w.topic, w.partition), None)
                else:
                    offsets[(w.topic, w.partition)] = w.value
            elif w.deletes:
                self.committed.pop(w.group_id, None)

    # -- OffsetFetch ---------------------------------------------------------------------

    def fetch(self, g: FetchGroup, version: int, topics: TopicsSnapshot) -> FetchGroupResult:
        """One group's part of an OffsetFetch."""
        group = self.ctx.groups.get(g.group_id)
        try:
            if isinstance(group, ConsumerGroup) or group is not None:
                group.validate_offset_fetch(g.member_id, g.member_epoch)
        except GroupError as exc:
            if exc.code is not Code.GROUP_ID_NOT_FOUND:
                return FetchGroupResult(group_id=g.group_id, error=exc.code)
            group = None
        committed = self.committed.get(g.group_id, {}) if group is not None else {}
        if g.topics is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(committed):
                by_topic.setdefault(topic, []).append(partition)
            wanted: list[tuple[str, UUID, str | None, list[int]]] = [
                (t, _id_of(topics, t) if version >= 10 else ZERO_UUID, t, ps) for t, ps in by_topic.items()]
        else:
            wanted = [(t.name, t.topic_id, t.name if version < 10 else topics.name_of(t.topic_id),
                       list(t.partitions)) for t in g.topics]
        out = []
        for shown, topic_id, name, partitions in wanted:
            parts = []
            for p in partitions:
                value = committed.get((name, p)) if name is not None else None
                if name is None:
                    parts.append(FetchedPartition(partition=p, error=Code.UNKNOWN_TOPIC_ID))
                elif value is None:
                    parts.append(FetchedPartition(partition=p))
                else:
                    parts.append(FetchedPartition(partition=p, offset=value.offset,
                                                  leader_epoch=value.leader_epoch, metadata=value.metadata))
            out.append(FetchedTopic(name=shown if version < 10 else "", topic_id=topic_id,
                                    partitions=tuple(parts)))
        return FetchGroupResult(group_id=g.group_id, topics=tuple(out))

    # -- OffsetDelete --------------------------------------------------------------------

    def delete(self, req: OffsetDeleteRequest) -> tuple[OffsetDeleteResponse, list[OffsetWrite]]:
        """Check an OffsetDelete; return the answer and the deletions to make durable first."""
        group = self.ctx.groups.get(req.group_id)
        if group is None or (isinstance(group, ClassicGroup) and group.is_(ClassicState.DEAD)):
            return OffsetDeleteResponse(error=Code.GROUP_ID_NOT_FOUND), []
        if isinstance(group, ClassicGroup) and not group.is_(ClassicState.EMPTY) \
                and not group.uses_consumer_protocol():
            return OffsetDeleteResponse(error=Code.NON_EMPTY_GROUP), []
        committed = self.committed.get(req.group_id, {})
        writes: list[OffsetWrite] = []
        out = []
        for t in req.topics:
            subscribed = group.is_subscribed_to(t.name)
            results = []
            for p in t.partitions:
                if subscribed:
                    results.append(PartitionError(partition=p, error=Code.GROUP_SUBSCRIBED_TO_TOPIC))
                    continue
                if (t.name, p) in committed:
                    writes.append(OffsetWrite(group_id=req.group_id, topic=t.name, partition=p, value=None))
                results.append(PartitionError(partition=p))
            out.append(TopicErrors(name=t.name, partitions=tuple(results)))
        return OffsetDeleteResponse(topics=tuple(out)), writes

    # -- TxnOffsetCommit -----------------------------------------------------------------

    @staticmethod
    def txn_commit(req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
        """Refuse a transactional commit (see the module docstring)."""
        return TxnOffsetCommitResponse(topics=tuple(
            TopicErrors(name=t.name, partitions=tuple(
                PartitionError(partition=p, error=TXN_OFFSET_COMMIT_ERROR) for p in t.partitions))
            for t in req.topics))

    # -- retention -----------------------------------------------------------------------

    def expired(self, now: int) -> list[Write]:
        """Offsets past ``offsets.retention.minutes`` (Kafka's ``cleanupGroupMetadata``), and
        the empty groups that have no offsets left (they are deleted with them)."""
        retention = self.ctx.settings.offsets_retention_ms
        writes: list[Write] = []
        for group_id, group in list(self.ctx.groups.items()):
            committed = self.committed.get(group_id, {})
            base = _expiry_base(group)
            if base is None:
                continue
            gone = []
            for (topic, partition), value in committed.items():
                if group.is_subscribed_to(topic):
                    continue
                start = base if base >= 0 else value.commit_timestamp
                expired = now >= value.expire_timestamp if value.expire_timestamp is not None \
                    else now - start >= retention
                if expired:
                    gone.append((topic, partition))
            writes += [OffsetWrite(group_id=group_id, topic=t, partition=p, value=None) for t, p in gone]
            if group.is_empty() and len(gone) == len(committed):
                writes.append(GroupWrite(group_id=group_id, record=None))
        return writes


def _expiry_base(group: ClassicGroup | ConsumerGroup) -> int | None:
    """``offsetExpirationCondition``: -1 to count from each commit, a time to count from
    it, or ``None`` when this group's offsets do not expire now."""
    if isinstance(group, ConsumerGroup):
        return -1
    if group.protocol_type is None:
        return -1
    if group.is_(ClassicState.EMPTY):
        return group.state_timestamp
    if group.uses_consumer_protocol() and group.is_(ClassicState.STABLE) and group.subscribed_topics() is not None:
        return -1
    return None


def _id_of(topics: TopicsSnapshot, name: str) -> UUID:
    info = topics.by_name.get(name)
    return ZERO_UUID if info is None else info.topic_id
