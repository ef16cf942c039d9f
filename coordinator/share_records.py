"""What goes in and out of a share-partition (KIP-932): its settings, the ranges a member
acquires, acknowledgements and their types, the errors they are answered with.

:class:`coordinator.share_partition.SharePartition` takes and returns these; the shell
builds them from ShareFetch and ShareAcknowledge requests and turns them into answers. Names
and ids are Kafka's (``AcknowledgeType``, ``ShareAcquireMode``, ``ShareFetchResponse``'s
``AcquiredRecords``), and so are the settings' keys (``GroupConfig``, ``ShareGroupConfig``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.share_state import RecordState
from protocol.errors import ErrorCode

#: Kafka's ``EMPTY_MEMBER_ID``: the member of a record nobody holds.
NO_MEMBER = ""
#: The fewest records a throttled acquisition still delivers (Kafka's
#: ``MINIMUM_THROTTLE_RECORDS_DELIVERY_LIMIT``).
MINIMUM_THROTTLE_LIMIT = 2


class AcknowledgeType(enum.IntEnum):
    """An acknowledgement's type, by Kafka's ids (``AcknowledgeType.java``; 0 is a gap)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    #: KIP-1222: keep the record and extend its lock (``share.renew.acknowledge.enable``).
    RENEW = 4


#: What each acknowledgement makes of an acquired record (Kafka's ``ACK_TYPE_TO_RECORD_STATE``).
ACK_STATE = {
    AcknowledgeType.GAP: RecordState.ARCHIVED,
    AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED,
    AcknowledgeType.RELEASE: RecordState.AVAILABLE,
    AcknowledgeType.REJECT: RecordState.ARCHIVED,
}


class AcquireMode(enum.IntEnum):
    """ShareFetch v2's ``ShareAcquireMode`` (the consumer's ``share.acquire.mode``)."""

    #: Whole fetched batches; ``max_records`` is a soft limit.
    BATCH_OPTIMIZED = 0
    #: At most ``max_records`` records, splitting a batch if need be.
    RECORD_LIMIT = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class ShareSettings:
    """The limits of one share-partition, by Kafka's names (group config, else broker's)."""

    #: ``share.record.lock.duration.ms`` (broker: ``group.share.record.lock.duration.ms``).
    record_lock_duration_ms: int = 30_000
    #: ``share.delivery.count.limit`` (broker: ``group.share.delivery.count.limit``): a record
    #: delivered this many times is archived instead of made available again.
    delivery_count_limit: int = 5
    #: ``share.partition.max.record.locks`` (broker: ``group.share.partition.max.record.locks``):
    #: the most records in flight.
    max_record_locks: int = 2_000
    #: ``share.renew.acknowledge.enable``: RENEW acknowledgements are honoured.
    renew_acknowledge_enabled: bool = True

    def __post_init__(self) -> None:
        for name in ("record_lock_duration_ms", "delivery_count_limit", "max_record_locks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")

    @property
    def throttle_limit(self) -> int:
        """The delivery count from which acquisitions shrink (half the limit, rounded up)."""
        return max(MINIMUM_THROTTLE_LIMIT, math.ceil(self.delivery_count_limit / 2))


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    """Offsets ``first_offset..last_offset`` now held by the member (ShareFetch's
    ``AcquiredRecords``), delivered for the ``delivery_count``-th time."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Acquisition:
    """What one :meth:`SharePartition.acquire` gave the member."""

    records: tuple[AcquiredRecords, ...] = ()
    #: How many records (Kafka counts every offset of each range).
    count: int = 0


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    """One acknowledgement (ShareFetch's and ShareAcknowledge's ``AcknowledgementBatch``):
    one type for the whole range, or one per offset."""

    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ShareError:
    """Why a partition's acknowledgement was refused: the partition's error code and message."""

    code: ErrorCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class RecordView:
    """One in-flight record as the partition sees it."""

    state: RecordState
    delivery_count: int
    #: The member holding it (``""`` unless ACQUIRED).
    member_id: str
    #: When its lock expires (ms), while ACQUIRED.
    deadline: int | None


@dataclass(frozen=True, slots=True)
class Released:
    """Records let go by a lock expiry or a member leaving: made available again, or
    archived (the delivery count reached the limit, or the record fell below the start)."""

    available: int = 0
    archived: int = 0

    def __add__(self, other: Released) -> Released:
        return Released(self.available + other.available, self.archived + other.archived)


def check_acknowledgements(batches: Sequence[AcknowledgementBatch], *, is_renew_ack: bool,
                           renew_supported: bool = True) -> ShareError | None:
    """Kafka's checks of a partition's acknowledgements before the share-partition sees them
    (``KafkaApis.validateAcknowledgementBatches``): INVALID_REQUEST, no message, for a range
    that ends before it starts or starts before the previous one ends, no types, a number of
    types that is neither one nor one per offset, an unknown type (RENEW only from v2:
    ``renew_supported``), or RENEW in a request that is not a renewal (``IsRenewAck``)."""
    previous_end = -1
    highest = AcknowledgeType.RENEW if renew_supported else AcknowledgeType.REJECT
    for batch in batches:
        types = batch.acknowledge_types
        if (batch.first_offset > batch.last_offset or batch.first_offset < previous_end or not types
                or (len(types) > 1 and batch.last_offset - batch.first_offset != len(types) - 1)
                or any(t < 0 or t > highest for t in types)
                or (AcknowledgeType.RENEW in types and not is_renew_ack)):
            return ShareError(ErrorCode.INVALID_REQUEST)
        previous_end = batch.last_offset
    return None


def initial_start_offset(reset: str, *, log_start_offset: int, high_watermark: int,
                         offset_for_duration: int | None = None) -> int:
    """Where a share-partition with no state starts (``share.auto.offset.reset``): the log's
    start (``earliest``), its high watermark (``latest``, Kafka's default: ListOffsets LATEST
    read_uncommitted), or, for ``by_duration:<ISO-8601 duration>``, the offset the shell found
    for that timestamp (ListOffsets)."""
    if reset == "earliest":
        return log_start_offset
    if reset == "latest":
        return high_watermark
    if reset.startswith("by_duration:"):
        if offset_for_duration is None:
            raise ValueError("share.auto.offset.reset by_duration needs the offset for the timestamp")
        return offset_for_duration
    raise ValueError(f"share.auto.offset.reset: {reset!r} is not earliest, latest or by_duration:<duration>")
