"""A share-partition's durable state (KIP-932): what ZooKeeper keeps of it, and its format.

Kafka's share coordinator keeps, per share-partition, a ``ShareSnapshotValue``: the state
epoch, the share-partition start offset (SPSO) and the *state batches*, each a range of
offsets with one delivery state (0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED) and one delivery
count. :class:`ShareState` is that value; :func:`encode_state` and :func:`decode_state`
are its ZooKeeper format, JSON like the coordinator's other znodes::

    {"version":1,"state_epoch":0,"start_offset":100,"batches":[[100,104,2,1],[105,105,0,2]]}

Each batch is ``[first_offset, last_offset, delivery_state, delivery_count]``, in offset
order, none overlapping, none below the start offset. Offsets between batches are not in
flight (never fetched, or not in the log: compaction). The ``version`` field is the format's
(:data:`FORMAT_VERSION`); a reader refuses a version it does not know rather than guess.

A record held by a member (ACQUIRED) is never written as such, as Kafka never persists an
acquisition: a state taken while it is held shows it AVAILABLE, with the delivery count it
had before that delivery (:meth:`coordinator.share_partition.SharePartition.snapshot`).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

#: The ZooKeeper format's version (the ``version`` field).
FORMAT_VERSION = 1


class RecordState(enum.IntEnum):
    """A record's state in a share-partition, by Kafka's ids (``RecordState.java``)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4

    @property
    def terminal(self) -> bool:
        """Acknowledged or archived: the record is never delivered again."""
        return self in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


#: The delivery states a state batch may hold (an acquisition is never written).
DURABLE_STATES = (RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(frozen=True, slots=True)
class StateBatch:
    """Offsets ``first_offset..last_offset`` (inclusive) in one delivery state and count."""

    first_offset: int
    last_offset: int
    delivery_state: RecordState
    delivery_count: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ShareState:
    """What ZooKeeper keeps of one share-partition (Kafka's ``ShareSnapshotValue``)."""

    #: Bumped when the partition's state is reset (offsets altered or deleted): a writer
    #: holding an older epoch is fenced (Kafka's FENCED_STATE_EPOCH).
    state_epoch: int
    #: The share-partition start offset: every offset below it is done with.
    start_offset: int
    batches: tuple[StateBatch, ...] = ()

    def __post_init__(self) -> None:
        previous = self.start_offset - 1
        for batch in self.batches:
            if batch.first_offset <= previous:
                raise MalformedShareState(
                    f"state batch {batch.first_offset}-{batch.last_offset} starts at or before offset {previous} "
                    f"(below the start offset {self.start_offset}, or overlapping the batch before)")
            if batch.last_offset < batch.first_offset:
                raise MalformedShareState(f"state batch {batch.first_offset}-{batch.last_offset} ends before it starts")
            if batch.delivery_state not in DURABLE_STATES:
                raise MalformedShareState(f"state batch {batch.first_offset}-{batch.last_offset}: delivery state "
                                          f"{int(batch.delivery_state)} is not 0, 2 or 4")
            if batch.delivery_count < 0:
                raise MalformedShareState(f"state batch {batch.first_offset}-{batch.last_offset}: negative "
                                          "delivery count")
            previous = batch.last_offset


class MalformedShareState(ValueError):
    """A share-partition's state that is not in :data:`FORMAT_VERSION`'s format, or breaks
    its rules (batches in order, none below the start offset)."""


def encode_state(state: ShareState) -> bytes:
    """The znode's bytes (compact JSON, :data:`FORMAT_VERSION`)."""
    return json.dumps({
        "version": FORMAT_VERSION, "state_epoch": state.state_epoch, "start_offset": state.start_offset,
        "batches": [[b.first_offset, b.last_offset, int(b.delivery_state), b.delivery_count] for b in state.batches],
    }, separators=(",", ":")).encode()


def decode_state(raw: bytes) -> ShareState:
    """A znode's share-partition state; :class:`MalformedShareState` when it is not one."""
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedShareState(f"share-partition state: not JSON ({exc}): {raw[:80]!r}") from None
    if not isinstance(body, dict):
        raise MalformedShareState(f"share-partition state: not a JSON object: {raw[:80]!r}")
    version = body.get("version")
    if version != FORMAT_VERSION:
        raise MalformedShareState(f"share-partition state: format version {version!r}, this release reads "
                                  f"{FORMAT_VERSION}")
    epoch, start, batches = body.get("state_epoch"), body.get("start_offset"), body.get("batches")
    if not isinstance(epoch, int) or not isinstance(start, int) or not isinstance(batches, list) or not (
            _is_int(epoch) and _is_int(start)):
        raise MalformedShareState(f"share-partition state: state_epoch, start_offset or batches missing: "
                                  f"{raw[:80]!r}")
    parsed = []
    for entry in batches:
        if not isinstance(entry, list) or len(entry) != 4 or not all(_is_int(v) for v in entry):
            raise MalformedShareState(f"share-partition state: a batch is not [first, last, state, count]: {entry!r}")
        first, last, state, count = entry
        if state not in {int(s) for s in DURABLE_STATES}:
            raise MalformedShareState(f"share-partition state: delivery state {state} is not 0, 2 or 4")
        parsed.append(StateBatch(first, last, RecordState(state), count))
    return ShareState(state_epoch=epoch, start_offset=start, batches=tuple(parsed))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
