"""Record batches: how many records and bytes a ``records`` field carries (sans-IO).

Theory of operation. A Produce request or Fetch response carries, per topic-partition, a
``records`` value: batches laid end to end. Every format starts with the same twelve
bytes, an int64 offset and an int32 length of what follows, and keeps its magic byte at
offset 16 (v2: after the partition leader epoch; v0/v1: after the CRC), so
:func:`iter_batches` delimits each batch from its first seventeen bytes alone and
dispatches on the magic (``ByteBufferLogInputStream.nextBatchSize`` in Kafka does the
same)::

    v2      0 baseOffset  8 batchLength 12 partitionLeaderEpoch 16 magic 17 crc 21 attributes ...
    v0/v1   0 offset      8 messageSize 12 crc                  16 magic 17 attributes ...

* **v2** (``DefaultRecordBatch.java``): the 61-byte header holds ``recordsCount``, so a
  batch is counted without looking at its records, compressed or not. The CRC-32C covers
  bytes 21 to the end of the batch.
* **v0/v1** (``LegacyRecord.java``): there is no count. An uncompressed "batch" is one
  message. A compressed one is a *wrapper* message whose value is a compressed message
  set; its inner messages are counted by inflating it when the codec is gzip (stdlib
  ``zlib``). Snappy and LZ4 wrappers, and gzip wrappers that inflate past
  ``max_inflated_size``, are reported as one record with ``inner_count_known=False``:
  the count is then a lower bound, not a fact. The CRC-32 (zlib) covers the magic byte
  to the end of the message.

Truncation. A Fetch response may end in the middle of its last batch (the broker stops
at the partition's max bytes), so by default a partial trailing batch ends the walk
without an error; :attr:`RecordsSummary.partial_tail_bytes` says how many bytes were
left over. A Produce request never legitimately holds one: pass
``allow_partial_tail=False`` to get :class:`~protocol.errors.Truncated` instead, or check
the summary. Anything impossible (a negative or absurd length, an unknown magic, a
negative count, a length that overruns its batch) raises
:class:`~protocol.errors.InvalidValue`, even in the tail. Every error names the byte
position within the buffer and carries ``CORRUPT_MESSAGE``.

Speed. The construct schemas below are the declaration; the walk reads headers with a
:class:`struct.Struct` derived from them (one ``unpack_from`` per batch, memoryview
slices, no copies). The tests check on arbitrary bytes that both readings agree.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

import construct as c
import crc32c

from protocol.errors import ErrorCode, InvalidValue, Truncated

CompressionName = Literal["none", "gzip", "snappy", "lz4", "zstd"]
"""Kafka's ``CompressionType`` names, by codec id (attribute bits 0-2)."""

TimestampTypeName = Literal["NoTimestampType", "CreateTime", "LogAppendTime"]
"""Kafka's ``TimestampType`` names; ``NoTimestampType`` is magic 0's only type."""

#: Codec names by id. Ids 5-7 are unassigned; zstd (4) needs magic 2 (KIP-110).
CODECS: Final[tuple[CompressionName, ...]] = ("none", "gzip", "snappy", "lz4", "zstd")

#: Offset (int64) and length (int32) in front of every batch of every magic (``Records.java``).
LOG_OVERHEAD: Final = 12
#: Where the magic byte sits in every format.
MAGIC_OFFSET: Final = 16
#: Bytes of a v2 batch header, i.e. of an empty v2 batch (``RECORD_BATCH_OVERHEAD``).
RECORD_BATCH_OVERHEAD: Final = 61
#: Where the v2 CRC-32C coverage starts (the attributes field).
V2_CRC_START: Final = 21
#: The smallest message size (after ``LOG_OVERHEAD``) per legacy magic (``LegacyRecord.java``).
RECORD_OVERHEAD_V0: Final = 14
RECORD_OVERHEAD_V1: Final = 22
#: The fewest bytes a v2 record takes: length, attributes, timestamp delta, offset delta,
#: key length, value length and header count, one byte each (``DefaultRecord.java``).
MIN_V2_RECORD_SIZE: Final = 7

#: Largest batch accepted, prefix included: a batch must fit in a Produce frame, and
#: Kafka's default ``socket.request.max.bytes`` is 100 MiB.
DEFAULT_MAX_BATCH_SIZE: Final = 100 * 1024 * 1024
#: Most bytes a legacy gzip wrapper may inflate to before it is reported uncounted.
DEFAULT_MAX_INFLATED_SIZE: Final = 16 * 1024 * 1024

_CORRUPT: Final = ErrorCode.CORRUPT_MESSAGE
#: A batch size no int32 length can exceed: inside an inflated set, overruns are truncation.
_NO_LIMIT: Final = 2**31 + LOG_OVERHEAD

# --- schemas (the declaration) ------------------------------------------------------

#: v2 ``attributes`` (int16), most significant bit first (``DefaultRecordBatch.java``:
#: COMPRESSION_CODEC_MASK 0x07, TIMESTAMP_TYPE_MASK 0x08, TRANSACTIONAL_FLAG_MASK 0x10,
#: CONTROL_FLAG_MASK 0x20, DELETE_HORIZON_FLAG_MASK 0x40 from KIP-534).
V2_ATTRIBUTES: Final = c.BitStruct(
    "unused" / c.BitsInteger(9),
    "has_delete_horizon" / c.Flag,
    "is_control" / c.Flag,
    "is_transactional" / c.Flag,
    "timestamp_type" / c.Enum(c.Bit, CreateTime=0, LogAppendTime=1),
    "compression" / c.Enum(c.BitsInteger(3), none=0, gzip=1, snappy=2, lz4=3, zstd=4),
)

#: The 61-byte v2 record batch header; the records (or their compressed form) follow.
RECORD_BATCH_V2_HEADER: Final = c.Struct(
    "base_offset" / c.Int64sb,
    "batch_length" / c.Int32sb,  # bytes after this field
    "partition_leader_epoch" / c.Int32sb,
    "magic" / c.Const(2, c.Int8sb),
    "crc" / c.Int32ub,  # CRC-32C of bytes 21..end
    "attributes" / V2_ATTRIBUTES,
    "last_offset_delta" / c.Int32sb,
    "base_timestamp" / c.Int64sb,  # the delete horizon when has_delete_horizon (KIP-534)
    "max_timestamp" / c.Int64sb,
    "producer_id" / c.Int64sb,
    "producer_epoch" / c.Int16sb,
    "base_sequence" / c.Int32sb,
    "records_count" / c.Int32sb,
)

#: v0/v1 message ``attributes`` (int8); bit 3 means nothing at magic 0.
LEGACY_ATTRIBUTES: Final = c.BitStruct(
    "unused" / c.BitsInteger(4),
    "timestamp_type" / c.Enum(c.Bit, CreateTime=0, LogAppendTime=1),
    "compression" / c.Enum(c.BitsInteger(3), none=0, gzip=1, snappy=2, lz4=3),
)

#: A magic 0 message up to its key; then key and value, each int32 length (-1 = null) and bytes.
LEGACY_MESSAGE_V0_HEADER: Final = c.Struct(
    "offset" / c.Int64sb,
    "message_size" / c.Int32sb,  # bytes after this field
    "crc" / c.Int32ub,  # CRC-32 of magic..end
    "magic" / c.Const(0, c.Int8sb),
    "attributes" / LEGACY_ATTRIBUTES,
)

#: A magic 1 message up to its key (KIP-32 adds the timestamp).
LEGACY_MESSAGE_V1_HEADER: Final = c.Struct(
    "offset" / c.Int64sb,
    "message_size" / c.Int32sb,
    "crc" / c.Int32ub,
    "magic" / c.Const(1, c.Int8sb),
    "attributes" / LEGACY_ATTRIBUTES,
    "timestamp" / c.Int64sb,
)


def _fixed_format(schema: Any) -> struct.Struct:
    """The :class:`struct.Struct` reading ``schema``, a Struct of fixed-size fields.

    Format fields keep their own code (constants included); a bit struct becomes the
    unsigned integer of its width, whose bits the walk then masks.
    """
    codes = []
    for field in schema.subcons:
        sub = field.subcon
        if isinstance(sub, c.Const):
            sub = sub.subcon
        if isinstance(sub, c.FormatField):
            codes.append(sub.fmtstr[1:])
        elif sub.sizeof() in _UNSIGNED:
            codes.append(_UNSIGNED[sub.sizeof()])
        else:
            raise TypeError(f"no struct code for field {field.name!r}")
    return struct.Struct(">" + "".join(codes))


_UNSIGNED: Final = {1: "B", 2: "H"}
_V2_HEADER: Final = _fixed_format(RECORD_BATCH_V2_HEADER)
_V0_HEADER: Final = _fixed_format(LEGACY_MESSAGE_V0_HEADER)
_V1_HEADER: Final = _fixed_format(LEGACY_MESSAGE_V1_HEADER)
_INT32: Final = struct.Struct(">i")
_UINT16: Final = struct.Struct(">H")
#: Where a v2 header's attributes (the first byte the CRC covers) and record count lie.
_V2_ATTRIBUTES_OFFSET: Final = V2_CRC_START
_V2_COUNT_OFFSET: Final = RECORD_BATCH_OVERHEAD - 4
_KEY_OFFSET: Final = {0: _V0_HEADER.size, 1: _V1_HEADER.size}
_MIN_LENGTH: Final = {
    0: RECORD_OVERHEAD_V0,
    1: RECORD_OVERHEAD_V1,
    2: RECORD_BATCH_OVERHEAD - LOG_OVERHEAD,
}

# Attribute masks, as the bit structs above declare them.
_CODEC_MASK: Final = 0x07
_TIMESTAMP_TYPE_MASK: Final = 0x08
_TRANSACTIONAL_MASK: Final = 0x10
_CONTROL_MASK: Final = 0x20
_DELETE_HORIZON_MASK: Final = 0x40
_GZIP: Final = 1
_ZSTD: Final = 4
_TIMESTAMP_TYPES: Final[tuple[TimestampTypeName, TimestampTypeName]] = (
    "CreateTime",
    "LogAppendTime",
)


# --- results ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """One batch as the walk saw it: where it is, what it holds, without its records.

    For v0/v1 a "batch" is one message (a compressed wrapper counts as one batch), and
    the v2-only fields hold Kafka's "none" values (-1, ``False``).
    """

    #: Byte position of the batch within the buffer given to :func:`iter_batches`.
    position: int
    #: Bytes of the whole batch, offset and length prefix included.
    size: int
    magic: int
    #: v2 ``baseOffset``; v0/v1 the offset of the first record (for a wrapper whose inner
    #: messages were not counted, the wrapper's own offset).
    base_offset: int
    #: v2 ``baseOffset + lastOffsetDelta``; v0/v1 the message's offset (a wrapper carries
    #: the offset of its last inner message).
    last_offset: int
    record_count: int
    #: ``False`` only for a legacy wrapper whose inner messages could not be counted
    #: (snappy, lz4, or gzip inflating past ``max_inflated_size``): ``record_count`` is 1.
    inner_count_known: bool
    compression: CompressionName
    timestamp_type: TimestampTypeName
    #: v2 ``baseTimestamp`` (the delete horizon if ``has_delete_horizon``); v1 the
    #: message timestamp; v0 -1.
    base_timestamp: int
    #: v2 ``maxTimestamp``; v1 the message timestamp; v0 -1.
    max_timestamp: int
    partition_leader_epoch: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    control: bool
    has_delete_horizon: bool
    #: Whether the CRC matched (for a gzip wrapper: its own and every inner message's);
    #: ``None`` when not checked.
    crc_ok: bool | None


@dataclass(frozen=True, slots=True)
class RecordsSummary:
    """What the audit keeps per topic-partition: counts and bytes of one ``records`` value."""

    batch_count: int
    #: Records in all complete batches, control records included.
    record_count: int
    #: Records in control batches (transaction markers), a subset of ``record_count``.
    control_record_count: int
    #: Length of the whole value, partial tail included.
    total_bytes: int
    #: Bytes after the last complete batch (a batch the buffer ends inside); 0 if none.
    partial_tail_bytes: int
    magics: frozenset[int]
    compressions: frozenset[CompressionName]
    #: ``False`` if some legacy wrapper could not be counted (see :class:`BatchInfo`).
    inner_counts_known: bool
    transactional: bool
    #: ``None`` when not checked (or no batch); else whether every batch's CRC matched.
    crc_ok: bool | None

    @property
    def complete_bytes(self) -> int:
        """Bytes in complete batches."""
        return self.total_bytes - self.partial_tail_bytes

    @property
    def complete(self) -> bool:
        """Whether the value ends on a batch boundary (required of a Produce request)."""
        return self.partial_tail_bytes == 0


# --- the walk -----------------------------------------------------------------------


def _view(data: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(data)
    return view if view.format == "B" else view.cast("B")


def _signed8(byte: int) -> int:
    return byte - 256 if byte > 127 else byte


def peek_magic(data: bytes | bytearray | memoryview, position: int = 0) -> int:
    """The magic byte of the batch starting at ``position`` (0, 1 or 2).

    Raises :class:`~protocol.errors.Truncated` when fewer than 17 bytes follow
    ``position`` and :class:`~protocol.errors.InvalidValue` for any other magic.
    """
    view = _view(data)
    if position < 0 or len(view) - position <= MAGIC_OFFSET:
        raise Truncated(
            f"no magic byte at byte {position + MAGIC_OFFSET}: records are {len(view)} bytes",
            error_code=_CORRUPT,
        )
    magic = _signed8(view[position + MAGIC_OFFSET])
    if magic not in _MIN_LENGTH:
        raise InvalidValue(f"batch at byte {position}: unknown magic {magic}", error_code=_CORRUPT)
    return magic


def _delimit(view: memoryview, pos: int, max_size: int, where: str) -> tuple[int, int] | None:
    """``(magic, size)`` of the batch at ``pos``, or ``None`` if the buffer ends inside it.

    The length is judged as soon as its four bytes are there and the magic as soon as
    its byte is, as in Kafka's ``ByteBufferLogInputStream.nextBatchSize``.
    """
    remaining = len(view) - pos
    if remaining < LOG_OVERHEAD:
        return None
    (length,) = _INT32.unpack_from(view, pos + 8)
    if length < RECORD_OVERHEAD_V0:
        raise InvalidValue(
            f"batch at byte {pos}{where}: length {length} is below the minimum of "
            f"{RECORD_OVERHEAD_V0}",
            error_code=_CORRUPT,
        )
    if length > max_size - LOG_OVERHEAD:
        raise InvalidValue(
            f"batch at byte {pos}{where}: length {length} exceeds the limit of "
            f"{max_size - LOG_OVERHEAD}",
            error_code=_CORRUPT,
        )
    if remaining <= MAGIC_OFFSET:
        return None
    magic = _signed8(view[pos + MAGIC_OFFSET])
    minimum = _MIN_LENGTH.get(magic)
    if minimum is None:
        raise InvalidValue(
            f"batch at byte {pos}{where}: unknown magic {magic}", error_code=_CORRUPT
        )
    if length < minimum:
        raise InvalidValue(
            f"batch at byte {pos}{where}: length {length} is below the magic {magic} "
            f"minimum of {minimum}",
            error_code=_CORRUPT,
        )
    size = LOG_OVERHEAD + length
    return (magic, size) if size <= remaining else None


def iter_batches(
    data: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = False,
    allow_partial_tail: bool = True,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    max_inflated_size: int = DEFAULT_MAX_INFLATED_SIZE,
) -> Iterator[BatchInfo]:
    """Walk the batches of a ``records`` value, v2 and legacy alike, in order.

    A batch the buffer ends inside stops the walk quietly (the Fetch case) unless
    ``allow_partial_tail`` is false, in which case it raises
    :class:`~protocol.errors.Truncated` (the Produce case). Batches longer than
    ``max_batch_size`` bytes are refused. With ``verify_crc`` each batch's CRC is
    checked and reported in :attr:`BatchInfo.crc_ok` (a mismatch is not an error).
    Raises only :class:`~protocol.errors.ProtocolError` subclasses on any input.
    """
    view = _view(data)
    total = len(view)
    pos = 0
    while pos < total:
        found = _delimit(view, pos, max_batch_size, "")
        if found is None:
            if allow_partial_tail:
                return
            raise Truncated(
                f"records end inside the batch at byte {pos} ({total - pos} byte(s) of it)",
                error_code=_CORRUPT,
            )
        magic, size = found
        if magic == 2:
            yield _v2_batch(view, pos, size, verify_crc)
        else:
            yield _legacy_batch(view, pos, size, magic, verify_crc, max_inflated_size)
        pos += size


def summarize(
    data: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = False,
    allow_partial_tail: bool = True,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    max_inflated_size: int = DEFAULT_MAX_INFLATED_SIZE,
) -> RecordsSummary:
    """Count the batches, records and bytes of a ``records`` value.

    Takes the keywords of :func:`iter_batches` and raises what it raises.
    """
    batches = records = control = consumed = 0
    magics: set[int] = set()
    codecs: set[CompressionName] = set()
    known = True
    transactional = False
    crc_ok: bool | None = None
    for batch in iter_batches(
        data,
        verify_crc=verify_crc,
        allow_partial_tail=allow_partial_tail,
        max_batch_size=max_batch_size,
        max_inflated_size=max_inflated_size,
    ):
        batches += 1
        records += batch.record_count
        if batch.control:
            control += batch.record_count
        consumed = batch.position + batch.size
        magics.add(batch.magic)
        codecs.add(batch.compression)
        known = known and batch.inner_count_known
        transactional = transactional or batch.transactional
        if batch.crc_ok is not None:
            crc_ok = batch.crc_ok and crc_ok is not False
    total = len(_view(data))
    return RecordsSummary(
        batch_count=batches,
        record_count=records,
        control_record_count=control,
        total_bytes=total,
        partial_tail_bytes=total - consumed,
        magics=frozenset(magics),
        compressions=frozenset(codecs),
        inner_counts_known=known,
        transactional=transactional,
        crc_ok=crc_ok,
    )


def count_records(data: bytes | bytearray | memoryview) -> int:
    """``summarize(data).record_count`` (default limits, a partial tail allowed), at less
    cost: of a v2 batch only the attributes and count are read. Raises what
    :func:`summarize` raises."""
    view = _view(data)
    total = len(view)
    pos = records = 0
    while pos < total:
        found = _delimit(view, pos, DEFAULT_MAX_BATCH_SIZE, "")
        if found is None:
            break
        magic, size = found
        if magic == 2:
            attributes = _UINT16.unpack_from(view, pos + _V2_ATTRIBUTES_OFFSET)[0]
            count: int = _INT32.unpack_from(view, pos + _V2_COUNT_OFFSET)[0]
            _v2_check(pos, size, attributes, count)
            records += count
        else:
            legacy = _legacy_batch(view, pos, size, magic, False, DEFAULT_MAX_INFLATED_SIZE)
            records += legacy.record_count
        pos += size
    return records


def _v2_check(pos: int, size: int, attributes: int, count: int) -> int:
    """Refuse a v2 batch header whose codec or count cannot be; return the codec."""
    codec = attributes & _CODEC_MASK
    if codec > _ZSTD:
        raise InvalidValue(
            f"batch at byte {pos}: unknown compression codec {codec}", error_code=_CORRUPT
        )
    if count < 0:
        raise InvalidValue(
            f"batch at byte {pos}: negative recordsCount {count}", error_code=_CORRUPT
        )
    payload = size - RECORD_BATCH_OVERHEAD
    if codec == 0 and count > payload // MIN_V2_RECORD_SIZE:
        # A bound, not Kafka's own check: it keeps a forged count out of the audit.
        raise InvalidValue(
            f"batch at byte {pos}: {count} records cannot fit in {payload} uncompressed bytes",
            error_code=_CORRUPT,
        )
    return codec


def _v2_batch(view: memoryview, pos: int, size: int, verify_crc: bool) -> BatchInfo:
    (
        base_offset,
        _length,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _V2_HEADER.unpack_from(view, pos)
    codec = _v2_check(pos, size, attributes, count)
    crc_ok: bool | None = None
    if verify_crc:
        crc_ok = crc32c.crc32c(view[pos + V2_CRC_START : pos + size]) == crc
    return BatchInfo(
        position=pos,
        size=size,
        magic=magic,
        base_offset=base_offset,
        last_offset=base_offset + last_offset_delta,
        record_count=count,
        inner_count_known=True,
        compression=CODECS[codec],
        timestamp_type=_TIMESTAMP_TYPES[(attributes & _TIMESTAMP_TYPE_MASK) >> 3],
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        partition_leader_epoch=leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=bool(attributes & _TRANSACTIONAL_MASK),
        control=bool(attributes & _CONTROL_MASK),
        has_delete_horizon=bool(attributes & _DELETE_HORIZON_MASK),
        crc_ok=crc_ok,
    )


def _legacy_message(
    view: memoryview, pos: int, size: int, magic: int, where: str
) -> tuple[int, int, int, int, int, int]:
    """``(offset, crc, attributes, timestamp, value_pos, value_len)`` of a delimited message.

    Key and value must fill the message exactly; a null value has length -1.
    """
    if magic == 0:
        offset, _size, crc, _magic, attributes = _V0_HEADER.unpack_from(view, pos)
        timestamp = -1
    else:
        offset, _size, crc, _magic, attributes, timestamp = _V1_HEADER.unpack_from(view, pos)
    end = pos + size
    key_pos = pos + _KEY_OFFSET[magic]
    (key_len,) = _INT32.unpack_from(view, key_pos)
    value_len_pos = key_pos + 4 + max(key_len, 0)
    # The minimum message size guarantees both length fields when the key is empty.
    if key_len < -1 or value_len_pos + 4 > end:
        raise InvalidValue(
            f"message at byte {pos}{where}: key length {key_len} overruns the message",
            error_code=_CORRUPT,
        )
    (value_len,) = _INT32.unpack_from(view, value_len_pos)
    value_pos = value_len_pos + 4
    if value_len < -1 or value_pos + max(value_len, 0) != end:
        raise InvalidValue(
            f"message at byte {pos}{where}: value length {value_len} does not end the "
            f"message (value at byte {value_pos}, message ends at byte {end})",
            error_code=_CORRUPT,
        )
    return offset, crc, attributes, timestamp, value_pos, value_len


def _legacy_batch(
    view: memoryview,
    pos: int,
    size: int,
    magic: int,
    verify_crc: bool,
    max_inflated_size: int,
) -> BatchInfo:
    offset, crc, attributes, timestamp, value_pos, value_len = _legacy_message(
        view, pos, size, magic, ""
    )
    codec = attributes & _CODEC_MASK
    if codec >= _ZSTD:
        raise InvalidValue(
            f"message at byte {pos}: compression codec {codec} is not valid at magic {magic}",
            error_code=_CORRUPT,
        )
    crc_ok: bool | None = None
    if verify_crc:
        crc_ok = zlib.crc32(view[pos + MAGIC_OFFSET : pos + size]) == crc
    count, base_offset, known = 1, offset, True
    if codec != 0:
        if value_len < 0:
            raise InvalidValue(
                f"message at byte {pos}: compressed wrapper with a null value",
                error_code=_CORRUPT,
            )
        known = False
        if codec == _GZIP:
            inner = _gunzip(view[value_pos : value_pos + value_len], max_inflated_size, pos)
            if inner is not None:
                count, base_offset, inner_crc_ok = _inner_messages(
                    inner, pos, offset, magic, verify_crc
                )
                known = True
                crc_ok = crc_ok and inner_crc_ok if verify_crc else None
    if magic == 0:
        timestamp_type: TimestampTypeName = "NoTimestampType"
    else:
        timestamp_type = _TIMESTAMP_TYPES[(attributes & _TIMESTAMP_TYPE_MASK) >> 3]
    return BatchInfo(
        position=pos,
        size=size,
        magic=magic,
        base_offset=base_offset,
        last_offset=offset,
        record_count=count,
        inner_count_known=known,
        compression=CODECS[codec],
        timestamp_type=timestamp_type,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        partition_leader_epoch=-1,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        transactional=False,
        control=False,
        has_delete_horizon=False,
        crc_ok=crc_ok,
    )


def _gunzip(data: memoryview, limit: int, pos: int) -> bytes | None:
    """Inflate a gzip stream (members may be concatenated, as ``GZIPInputStream`` allows);
    ``None`` once the output would exceed ``limit`` bytes, which bounds a gzip bomb."""
    out = bytearray()
    rest: bytes | memoryview = data
    while True:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip header and trailer
        try:
            out += inflater.decompress(rest, limit - len(out) + 1)
        except zlib.error as exc:
            raise InvalidValue(
                f"message at byte {pos}: gzip value does not inflate ({exc})",
                error_code=_CORRUPT,
            ) from None
        if len(out) > limit:
            return None
        if not inflater.eof:
            raise InvalidValue(
                f"message at byte {pos}: gzip value ends before its stream does",
                error_code=_CORRUPT,
            )
        rest = inflater.unused_data
        if not rest:
            return bytes(out)


def _inner_messages(
    inner: bytes, wrapper_pos: int, wrapper_offset: int, wrapper_magic: int, verify_crc: bool
) -> tuple[int, int, bool]:
    """``(count, base offset, all CRCs ok)`` of a wrapper's inflated message set.

    Kafka's ``DeepRecordsIterator`` rules: at least one message, none compressed, all of
    the wrapper's magic; a v1 wrapper's offset is its last inner message's absolute
    offset and inner offsets are relative to the first (KIP-31), unless it is 0.
    """
    view = memoryview(inner)
    where = f" of the gzip message set in the wrapper at byte {wrapper_pos}"
    pos = count = first = last = 0
    crc_ok = True
    while pos < len(view):
        found = _delimit(view, pos, _NO_LIMIT, where)
        if found is None:
            raise Truncated(
                f"message at byte {pos}{where}: the message set ends inside it",
                error_code=_CORRUPT,
            )
        magic, size = found
        if magic != wrapper_magic:
            raise InvalidValue(
                f"message at byte {pos}{where}: magic {magic} does not match the wrapper's "
                f"{wrapper_magic}",
                error_code=_CORRUPT,
            )
        offset, crc, attributes, _ts, _vpos, _vlen = _legacy_message(view, pos, size, magic, where)
        if attributes & _CODEC_MASK:
            raise InvalidValue(
                f"message at byte {pos}{where}: nested compression", error_code=_CORRUPT
            )
        if verify_crc:
            crc_ok = crc_ok and zlib.crc32(view[pos + MAGIC_OFFSET : pos + size]) == crc
        if count == 0:
            first = offset
        last = offset
        count += 1
        pos += size
    if count == 0:
        raise InvalidValue(
            f"message at byte {wrapper_pos}: compressed wrapper holds no messages",
            error_code=_CORRUPT,
        )
    if wrapper_magic == 0:
        return count, first, crc_ok
    if wrapper_offset == 0:  # librdkafka leaves produce wrappers at 0 (DeepRecordsIterator)
        return count, first, crc_ok
    if wrapper_offset < last:
        raise InvalidValue(
            f"message at byte {wrapper_pos}: wrapper offset {wrapper_offset} is below its last "
            f"inner offset {last}",
            error_code=_CORRUPT,
        )
    return count, wrapper_offset - last + first, crc_ok
