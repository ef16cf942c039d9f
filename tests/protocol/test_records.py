"""Tests for protocol.records.

Expected values come from how the input was built: kafka-python's own record builders
(an independent encoder), or bytes written out by hand from the spec with their CRCs
computed by ``crc32c``/``zlib`` and pinned. Nothing here derives an expectation from the
code under test.
"""

from __future__ import annotations

import contextlib
import gzip
import struct
import zlib
from collections.abc import Callable
from typing import Any

import construct as c
import crc32c
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from protocol import records
from protocol.errors import ErrorCode, InvalidValue, ProtocolError, Truncated
from protocol.records import (
    LEGACY_MESSAGE_V0_HEADER,
    LEGACY_MESSAGE_V1_HEADER,
    RECORD_BATCH_V2_HEADER,
    BatchInfo,
    RecordsSummary,
    count_records,
    iter_batches,
    peek_magic,
    summarize,
)

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)

# --- builders -----------------------------------------------------------------------


def kp_batch(
    magic: int,
    codec: int,
    values: list[bytes],
    *,
    offset: int = 0,
    timestamp: int = 1_600_000_000_000,
    **producer: Any,
) -> bytes:
    """One batch (v2) or message set (v0/v1) from kafka-python's MemoryRecordsBuilder.

    Record i gets timestamp ``timestamp + i`` and key ``b"k<i>"``.
    """
    builder = MemoryRecordsBuilder(magic, codec, 1 << 22, offset=offset, **producer)
    for i, value in enumerate(values):
        assert builder.append(timestamp + i, b"k%d" % i, value) is not None
    builder.close()
    return bytes(builder.buffer())


def legacy_message(
    magic: int,
    offset: int,
    value: bytes | None,
    *,
    key: bytes | None = None,
    attributes: int = 0,
    timestamp: int = 0,
    crc: int | None = None,
) -> bytes:
    """A v0/v1 message written from the spec (LegacyRecord.java), CRC-32 by zlib."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    checksum = zlib.crc32(body) if crc is None else crc
    return struct.pack(">qiI", offset, len(body) + 4, checksum) + body


def with_v2_attributes(batch: bytes, attributes: int) -> bytes:
    """A v2 batch with other attributes and a CRC-32C recomputed to match."""
    tail = struct.pack(">h", attributes) + batch[23:]
    return batch[:17] + struct.pack(">I", crc32c.crc32c(tail)) + tail


def with_v2_field(batch: bytes, at: int, fmt: str, value: int) -> bytes:
    """A v2 batch with one header field replaced and its CRC-32C recomputed."""
    patched = bytearray(batch)
    struct.pack_into(fmt, patched, at, value)
    struct.pack_into(">I", patched, 17, crc32c.crc32c(bytes(patched[21:])))
    return bytes(patched)


def with_length(batch: bytes, length: int) -> bytes:
    return batch[:8] + struct.pack(">i", length) + batch[12:]


def only(data: bytes, **kwargs: Any) -> BatchInfo:
    (batch,) = list(iter_batches(data, **kwargs))
    return batch


# --- hand-computed bytes ------------------------------------------------------------

# One v2 batch holding one record (key null, value b"hi"), per PROTOCOL_NOTES "Record batch v2".
HAND_V2 = bytes.fromhex(
    "0000000000000005"  # 0 baseOffset 5
    "0000003a"  # 8 batchLength 58 = 70 - 12
    "00000007"  # 12 partitionLeaderEpoch 7
    "02"  # 16 magic 2
    "d24f621a"  # 17 crc: CRC-32C of bytes 21..69
    "0010"  # 21 attributes: transactional, CreateTime, no compression
    "00000000"  # 23 lastOffsetDelta 0
    "0000018bcfe56800"  # 27 baseTimestamp 1_700_000_000_000
    "0000018bcfe56800"  # 35 maxTimestamp
    "0000000000001234"  # 43 producerId 0x1234
    "0003"  # 51 producerEpoch 3
    "00000009"  # 53 baseSequence 9
    "00000001"  # 57 recordsCount 1
    # 61 record: length 8, attributes 0, timestampDelta 0, offsetDelta 0,
    # key length -1 (zig-zag 1), value length 2 (zig-zag 4), "hi", 0 headers
    "10"
    "00"
    "00"
    "00"
    "01"
    "04"
    "6869"
    "00"
)

# A v0 message: offset 3, key null, value b"abc".
HAND_V0 = bytes.fromhex(
    "0000000000000003"  # offset 3
    "00000011"  # message size 17
    "43dc3faf"  # CRC-32 of magic..end
    "00"  # magic 0
    "00"  # attributes: no compression
    "ffffffff"  # key null
    "00000003"
    "616263"  # value "abc"
)

# A v1 message: offset 4, LogAppendTime 1_700_000_000_000, key b"k", value b"v".
HAND_V1 = bytes.fromhex(
    "0000000000000004"  # offset 4
    "00000018"  # message size 24
    "308791b6"  # CRC-32 of magic..end
    "01"  # magic 1
    "08"  # attributes: LogAppendTime, no compression
    "0000018bcfe56800"  # timestamp
    "00000001"
    "6b"  # key "k"
    "00000001"
    "76"  # value "v"
)


def test_hand_bytes_agree_with_kafka_python() -> None:
    # The pinned CRCs and layout are what an independent reader accepts.
    assert crc32c.crc32c(HAND_V2[21:]) == 0xD24F621A
    assert DefaultRecordBatch(HAND_V2).validate_crc()
    assert [(r.offset, r.key, r.value) for r in DefaultRecordBatch(HAND_V2)] == [(5, None, b"hi")]
    assert zlib.crc32(HAND_V0[16:]) == 0x43DC3FAF
    assert zlib.crc32(HAND_V1[16:]) == 0x308791B6
    legacy = [r for b in MemoryRecords(HAND_V0 + HAND_V1) for r in b]
    assert [(r.offset, r.key, r.value) for r in legacy] == [(3, None, b"abc"), (4, b"k", b"v")]


def test_hand_v2_batch() -> None:
    assert only(HAND_V2, verify_crc=True) == BatchInfo(
        position=0,
        size=70,
        magic=2,
        base_offset=5,
        last_offset=5,
        record_count=1,
        inner_count_known=True,
        compression="none",
        timestamp_type="CreateTime",
        base_timestamp=1_700_000_000_000,
        max_timestamp=1_700_000_000_000,
        partition_leader_epoch=7,
        producer_id=0x1234,
        producer_epoch=3,
        base_sequence=9,
        transactional=True,
        control=False,
        has_delete_horizon=False,
        crc_ok=True,
    )


def test_hand_legacy_messages() -> None:
    v0, v1 = iter_batches(HAND_V0 + HAND_V1, verify_crc=True)
    assert v0 == BatchInfo(
        position=0,
        size=29,
        magic=0,
        base_offset=3,
        last_offset=3,
        record_count=1,
        inner_count_known=True,
        compression="none",
        timestamp_type="NoTimestampType",
        base_timestamp=-1,
        max_timestamp=-1,
        partition_leader_epoch=-1,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        transactional=False,
        control=False,
        has_delete_horizon=False,
        crc_ok=True,
    )
    assert (v1.position, v1.size, v1.magic, v1.base_offset, v1.record_count) == (29, 36, 1, 4, 1)
    assert (v1.timestamp_type, v1.base_timestamp, v1.max_timestamp) == (
        "LogAppendTime",
        1_700_000_000_000,
        1_700_000_000_000,
    )
    assert v1.crc_ok is True


def test_summary_of_hand_bytes_with_a_partial_tail() -> None:
    data = HAND_V2 + HAND_V0 + HAND_V1 + HAND_V2[:40]
    assert summarize(data, verify_crc=True) == RecordsSummary(
        batch_count=3,
        record_count=3,
        control_record_count=0,
        total_bytes=70 + 29 + 36 + 40,
        partial_tail_bytes=40,
        magics=frozenset({0, 1, 2}),
        compressions=frozenset({"none"}),
        inner_counts_known=True,
        transactional=True,
        crc_ok=True,
    )
    summary = summarize(data)
    assert summary.crc_ok is None
    assert summary.complete_bytes == 135
    assert not summary.complete


def test_empty_records() -> None:
    assert list(iter_batches(b"")) == []
    summary = summarize(b"", verify_crc=True)
    assert (summary.batch_count, summary.total_bytes, summary.crc_ok) == (0, 0, None)
    assert summary.complete
    assert summary.magics == frozenset()


# --- kafka-python as oracle ---------------------------------------------------------

VALUES = [b"", b"x", b"hello" * 200, b"\x00" * 1000, b"last"]


def at_offset(batch: bytes, base_offset: int) -> bytes:
    """A v2 batch moved to another base offset, as the broker does (not CRC-covered)."""
    return struct.pack(">q", base_offset) + batch[8:]


@pytest.mark.parametrize("codec", [NONE, GZIP], ids=["none", "gzip"])
def test_v2_batches_from_kafka_python(codec: int) -> None:
    # kafka-python leaves baseOffset 0 for the broker to assign; we assign 10, 15, 18.
    plain = at_offset(kp_batch(2, codec, VALUES, timestamp=1_000), 10)
    idempotent = kp_batch(
        2, codec, VALUES[:3], timestamp=2_000, producer_id=42, producer_epoch=1, base_sequence=7
    )
    idempotent = at_offset(idempotent, 15)
    transactional = kp_batch(
        2, codec, VALUES[2:4], timestamp=3_000,
        transactional=True, producer_id=99, producer_epoch=5, base_sequence=0,
    )  # fmt: skip
    transactional = at_offset(transactional, 18)
    data = plain + idempotent + transactional
    name = "gzip" if codec == GZIP else "none"
    batches = list(iter_batches(data, verify_crc=True))
    expected = [
        (0, len(plain), 10, 14, 5, 1_000, 1_004, -1, -1, -1, False),
        (len(plain), len(idempotent), 15, 17, 3, 2_000, 2_002, 42, 1, 7, False),
        (len(plain) + len(idempotent), len(transactional), 18, 19, 2, 3_000, 3_001, 99, 5, 0, True),
    ]
    got = [
        (
            b.position, b.size, b.base_offset, b.last_offset, b.record_count,
            b.base_timestamp, b.max_timestamp, b.producer_id, b.producer_epoch,
            b.base_sequence, b.transactional,
        )
        for b in batches
    ]  # fmt: skip
    assert got == expected
    for batch in batches:
        assert (batch.magic, batch.compression, batch.timestamp_type) == (2, name, "CreateTime")
        assert (batch.crc_ok, batch.control, batch.inner_count_known) == (True, False, True)
        # kafka-python zeroes the leader epoch it leaves for the broker to set.
        assert batch.partition_leader_epoch == 0
    summary = summarize(data, verify_crc=True)
    assert (summary.batch_count, summary.record_count, summary.total_bytes) == (3, 10, len(data))
    assert summary.compressions == frozenset({name})
    assert summary.transactional
    assert summary.crc_ok is True
    # The independent reader agrees on boundaries, counts, offsets and compression.
    theirs = list(MemoryRecords(data))
    assert [len(list(b)) for b in theirs] == [5, 3, 2]
    assert [(b.base_offset, b.compression_type) for b in theirs] == [
        (10, codec), (15, codec), (18, codec)
    ]  # fmt: skip
    assert [r.offset for r in DefaultRecordBatch(transactional)] == [18, 19]


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_uncompressed_from_kafka_python(magic: int) -> None:
    data = kp_batch(magic, NONE, VALUES, offset=20, timestamp=5_000)
    batches = list(iter_batches(data, verify_crc=True))
    assert [b.base_offset for b in batches] == [20, 21, 22, 23, 24]
    assert [b.last_offset for b in batches] == [20, 21, 22, 23, 24]
    assert [b.record_count for b in batches] == [1] * 5
    # Message i: 12 (offset, size) + overhead + key b"k<i>" + value.
    overhead = 14 if magic == 0 else 22
    assert [b.size for b in batches] == [12 + overhead + 2 + len(v) for v in VALUES]
    assert sum(b.size for b in batches) == len(data)
    if magic == 0:
        assert {(b.timestamp_type, b.base_timestamp) for b in batches} == {("NoTimestampType", -1)}
    else:
        assert [b.base_timestamp for b in batches] == [5_000, 5_001, 5_002, 5_003, 5_004]
        assert {b.timestamp_type for b in batches} == {"CreateTime"}
    assert all(b.crc_ok for b in batches)
    summary = summarize(data)
    assert (summary.batch_count, summary.record_count, summary.magics) == (5, 5, frozenset({magic}))


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_gzip_wrapper_from_kafka_python(magic: int) -> None:
    first = kp_batch(magic, GZIP, VALUES, offset=0)
    second = kp_batch(magic, GZIP, VALUES[:2], offset=5)
    data = first + second
    one, two = iter_batches(data, verify_crc=True)
    assert (one.position, one.size, one.record_count, one.compression) == (0, len(first), 5, "gzip")
    assert (two.position, two.size, two.record_count) == (len(first), len(second), 2)
    assert one.inner_count_known and two.inner_count_known
    assert one.crc_ok and two.crc_ok
    # kafka-python writes the wrapper at offset 0 and the inner offsets from the
    # builder's (5, 6 for the second); a v1 wrapper at 0 means "inner offsets are
    # absolute" (librdkafka's produce case in Kafka's DeepRecordsIterator).
    assert (one.last_offset, two.last_offset) == (0, 0)
    assert (one.base_offset, two.base_offset) == (0, 5)
    assert summarize(data).record_count == 7
    # The independent reader agrees on the inner count.
    assert [len(list(b)) for b in MemoryRecords(data)] == [5, 2]


def test_legacy_v1_wrapper_offsets_follow_kip31() -> None:
    inner = b"".join(legacy_message(1, i, b"v%d" % i) for i in range(3))  # relative 0..2
    wrapper = legacy_message(1, 102, gzip.compress(inner), attributes=GZIP)
    batch = only(wrapper)
    assert (batch.base_offset, batch.last_offset, batch.record_count) == (100, 102, 3)
    bad = legacy_message(1, 1, gzip.compress(inner), attributes=GZIP)
    with pytest.raises(InvalidValue, match=r"wrapper offset 1 is below its last inner offset 2"):
        only(bad)


def test_legacy_v0_wrapper_offsets_are_absolute() -> None:
    inner = b"".join(legacy_message(0, 50 + i, b"v") for i in range(4))
    batch = only(legacy_message(0, 53, gzip.compress(inner), attributes=GZIP))
    assert (batch.base_offset, batch.last_offset, batch.record_count) == (50, 53, 4)


def test_legacy_gzip_with_concatenated_members() -> None:
    # GZIPInputStream reads on across gzip members; so must the count.
    inner = [legacy_message(0, i, b"v") for i in range(3)]
    value = gzip.compress(inner[0]) + gzip.compress(inner[1] + inner[2])
    assert only(legacy_message(0, 2, value, attributes=GZIP)).record_count == 3


@pytest.mark.parametrize(("codec", "name"), [(SNAPPY, "snappy"), (LZ4, "lz4")])
@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_snappy_and_lz4_wrappers_are_not_counted(magic: int, codec: int, name: str) -> None:
    # Not decompressed at all: any value will do.
    data = legacy_message(magic, 9, b"opaque compressed bytes", attributes=codec)
    batch = only(data, verify_crc=True)
    assert (batch.record_count, batch.inner_count_known, batch.compression) == (1, False, name)
    assert (batch.base_offset, batch.last_offset, batch.crc_ok) == (9, 9, True)
    summary = summarize(HAND_V0 + data)
    assert (summary.record_count, summary.inner_counts_known) == (2, False)


def test_gzip_bomb_is_reported_uncounted() -> None:
    inner = legacy_message(0, 0, b"\x00" * 100_000)
    data = legacy_message(0, 0, gzip.compress(inner), attributes=GZIP)
    batch = only(data, max_inflated_size=50_000)
    assert (batch.record_count, batch.inner_count_known, batch.compression) == (1, False, "gzip")
    assert only(data).inner_count_known
    # The limit is on total output, across members too.
    two = legacy_message(0, 0, gzip.compress(inner) * 2, attributes=GZIP)
    assert not only(two, max_inflated_size=len(inner) + 1).inner_count_known
    assert only(two, max_inflated_size=2 * len(inner)).record_count == 2


@pytest.mark.parametrize(("codec", "name"), [(SNAPPY, "snappy"), (LZ4, "lz4"), (ZSTD, "zstd")])
def test_v2_codecs_are_named_without_decompressing(codec: int, name: str) -> None:
    batch = with_v2_attributes(kp_batch(2, NONE, VALUES), codec)
    info = only(batch, verify_crc=True)
    assert (info.compression, info.record_count, info.crc_ok) == (name, 5, True)


def test_v2_attribute_bits() -> None:
    base = kp_batch(2, NONE, VALUES)
    # LogAppendTime | control | delete horizon (KIP-534)
    info = only(with_v2_attributes(base, 0x08 | 0x20 | 0x40), verify_crc=True)
    assert info.timestamp_type == "LogAppendTime"
    assert (info.control, info.has_delete_horizon, info.transactional) == (True, True, False)
    assert info.crc_ok
    summary = summarize(base + with_v2_attributes(base, 0x30))
    assert (summary.record_count, summary.control_record_count) == (10, 5)
    assert summary.transactional


def test_empty_v2_batch_is_legal() -> None:
    empty = with_length(kp_batch(2, NONE, [b"x"])[:61], 49)
    empty = with_v2_field(empty, 57, ">i", 0)
    info = only(empty, verify_crc=True)
    assert (info.size, info.record_count, info.crc_ok) == (61, 0, True)


def test_memoryview_input_is_not_copied_and_may_be_a_slice() -> None:
    buffer = bytearray(b"junk" + HAND_V2 + b"more")
    view = memoryview(buffer)[4:-4]
    assert only(view).size == 70
    # A view of signed bytes is read as unsigned bytes.
    assert only(view.cast("b"), verify_crc=True).crc_ok


# --- CRC ----------------------------------------------------------------------------


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


@pytest.mark.parametrize("at", [21, 30, 60, 61, 69])
def test_v2_crc_corruption(at: int) -> None:
    assert only(flip(HAND_V2, at), verify_crc=True).crc_ok is False
    assert only(flip(HAND_V2, at)).crc_ok is None


def test_v2_crc_does_not_cover_the_leader_epoch() -> None:
    # The broker rewrites partitionLeaderEpoch without recomputing the CRC.
    assert only(flip(HAND_V2, 14), verify_crc=True).crc_ok is True


def test_v2_crc_field_corruption() -> None:
    assert only(flip(HAND_V2, 18), verify_crc=True).crc_ok is False


@pytest.mark.parametrize("at", [13, 19, 30, 35])
def test_legacy_crc_corruption(at: int) -> None:
    # In HAND_V1: the CRC itself, the timestamp, the key, the value.
    assert only(flip(HAND_V1, at), verify_crc=True).crc_ok is False
    assert only(flip(HAND_V0, 28), verify_crc=True).crc_ok is False


def test_gzip_wrapper_crc_covers_inner_messages() -> None:
    good = legacy_message(0, 0, b"v")
    bad_inner = legacy_message(0, 1, b"w", crc=zlib.crc32(good[16:]))
    data = legacy_message(0, 1, gzip.compress(good + bad_inner), attributes=GZIP)
    info = only(data, verify_crc=True)
    assert (info.record_count, info.crc_ok) == (2, False)
    assert only(data).crc_ok is None
    summary = summarize(HAND_V0 + data + HAND_V0, verify_crc=True)
    assert summary.crc_ok is False


def test_summary_crc_false_then_true_stays_false() -> None:
    assert summarize(flip(HAND_V2, 69) + HAND_V2, verify_crc=True).crc_ok is False
    assert summarize(HAND_V2 + flip(HAND_V2, 69), verify_crc=True).crc_ok is False


# --- truncation ---------------------------------------------------------------------


def test_every_prefix_is_complete_batches_plus_a_tail() -> None:
    data = HAND_V2 + HAND_V0 + HAND_V1 + kp_batch(1, GZIP, VALUES) + kp_batch(2, GZIP, VALUES)
    ends = [70, 99, 135]
    ends += [ends[-1] + len(kp_batch(1, GZIP, VALUES)), len(data)]
    for cut in range(len(data) + 1):
        complete = [e for e in ends if e <= cut]
        summary = summarize(data[:cut])
        assert summary.batch_count == len(complete)
        assert summary.partial_tail_bytes == cut - (complete[-1] if complete else 0)
        assert summary.complete == (cut in ends or cut == 0)
        if summary.complete:
            assert summarize(data[:cut], allow_partial_tail=False) == summary
        else:
            with pytest.raises(Truncated, match=rf"inside the batch at byte {max([0, *complete])}"):
                summarize(data[:cut], allow_partial_tail=False)


def test_truncated_error_carries_corrupt_message() -> None:
    with pytest.raises(Truncated) as info:
        list(iter_batches(HAND_V2[:5], allow_partial_tail=False))
    assert info.value.error_code == ErrorCode.CORRUPT_MESSAGE


def test_tail_is_still_judged_once_its_length_and_magic_are_there() -> None:
    # A negative length in a 12-byte tail is corruption, not truncation.
    with pytest.raises(InvalidValue, match=r"batch at byte 70: length -1"):
        summarize(HAND_V2 + with_length(HAND_V2, -1)[:12])
    # An unknown magic in a 17-byte tail, likewise.
    tail = HAND_V2[:16] + b"\x07"
    with pytest.raises(InvalidValue, match=r"batch at byte 70: unknown magic 7"):
        summarize(HAND_V2 + tail)


# --- invalid values -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (with_length(HAND_V2, -5), r"at byte 0: length -5 is below the minimum of 14"),
        (with_length(HAND_V2, 13), r"at byte 0: length 13 is below the minimum of 14"),
        (with_length(HAND_V2, 48), r"at byte 0: length 48 is below the magic 2 minimum of 49"),
        (with_length(HAND_V1, 21), r"at byte 0: length 21 is below the magic 1 minimum of 22"),
        (HAND_V2[:16] + b"\x03" + HAND_V2[17:], r"at byte 0: unknown magic 3"),
        (HAND_V2[:16] + b"\xff" + HAND_V2[17:], r"at byte 0: unknown magic -1"),
        (HAND_V0 + HAND_V2[:16] + b"\x80", r"at byte 29: unknown magic -128"),
        (with_v2_field(HAND_V2, 57, ">i", -1), r"at byte 0: negative recordsCount -1"),
        (with_v2_attributes(HAND_V2, 5), r"at byte 0: unknown compression codec 5"),
        (with_v2_attributes(HAND_V2, 0x17), r"at byte 0: unknown compression codec 7"),
        # 9 payload bytes hold one record at most (7 bytes each, uncompressed).
        (with_v2_field(HAND_V2, 57, ">i", 2), r"at byte 0: 2 records cannot fit in 9"),
        (legacy_message(0, 0, b"v", attributes=ZSTD), r"codec 4 is not valid at magic 0"),
        (legacy_message(1, 0, b"v", attributes=6), r"codec 6 is not valid at magic 1"),
        (legacy_message(0, 0, None, attributes=GZIP), r"wrapper with a null value"),
        (legacy_message(1, 0, None, attributes=SNAPPY), r"wrapper with a null value"),
    ],
)
def test_invalid_values(data: bytes, message: str) -> None:
    with pytest.raises(InvalidValue, match=message) as info:
        summarize(data)
    assert info.value.error_code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(InvalidValue, match=message):
        count_records(data)


def test_max_batch_size() -> None:
    assert only(HAND_V2, max_batch_size=70).size == 70
    with pytest.raises(InvalidValue, match=r"at byte 0: length 58 exceeds the limit of 57"):
        summarize(HAND_V2, max_batch_size=69)
    # The limit applies before the whole batch has arrived.
    with pytest.raises(InvalidValue, match=r"length 2147483647 exceeds"):
        summarize(with_length(HAND_V2, 2**31 - 1)[:20])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # magic, attributes, key length, [key], value length, [value]
        (b"\x00\x00" + struct.pack(">i", -2) + struct.pack(">i", 0), r"key length -2 overruns"),
        (b"\x00\x00" + struct.pack(">i", 5) + b"abcd", r"key length 5 overruns"),
        (b"\x00\x00" + struct.pack(">i", 1) + b"a" + b"\x00\x00\x00", r"key length 1 overruns"),
        (b"\x00\x00" + struct.pack(">ii", -1, -2), r"value length -2 does not end"),
        (b"\x00\x00" + struct.pack(">ii", -1, 2) + b"a", r"value length 2 does not end"),
        (b"\x00\x00" + struct.pack(">ii", -1, 0) + b"x", r"value length 0 does not end"),
    ],
)
def test_legacy_key_and_value_must_fill_the_message(body: bytes, message: str) -> None:
    data = struct.pack(">qiI", 7, len(body) + 4, zlib.crc32(body)) + body
    with pytest.raises(InvalidValue, match=rf"message at byte 0: {message}"):
        summarize(data)


def wrap(inner: bytes, magic: int = 0, offset: int = 0) -> bytes:
    return legacy_message(magic, offset, gzip.compress(inner), attributes=GZIP)


def gz(data: bytes) -> bytes:
    """gzip with a fixed header time, so parametrized ids are the same in every process."""
    return gzip.compress(data, mtime=0)


INNER = " of the gzip message set in the wrapper at byte 29"


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (b"not gzip at all", InvalidValue, r"message at byte 29: gzip value does not inflate"),
        (gz(HAND_V0)[:-9], InvalidValue, r"message at byte 29: gzip value ends before"),
        (gz(b""), InvalidValue, r"message at byte 29: compressed wrapper holds no messages"),
        (gz(HAND_V0[:-1]), Truncated, r"message at byte 0" + INNER + ": the message set ends"),
        (gz(HAND_V0 + HAND_V0[:11]), Truncated, r"message at byte 29" + INNER + ": the message set ends"),
        (gz(HAND_V0 + HAND_V0[:16]), Truncated, r"message at byte 29" + INNER),
        (gz(HAND_V0 + HAND_V0[:20]), Truncated, r"message at byte 29" + INNER),
        (gz(struct.pack(">qiI", 0, 14, 0) + b"\x00\x00" + struct.pack(">ii", -1, 2)), InvalidValue, r"message at byte 0" + INNER + ": value length 2 does not end"),
        (gz(HAND_V0 + HAND_V1), InvalidValue, r"byte 29" + INNER + ": magic 1 does not match the wrapper's 0"),
        (gz(legacy_message(0, 0, b"x", attributes=GZIP)), InvalidValue, r"byte 0" + INNER + ": nested compression"),
        (gz(with_length(HAND_V0, -1)), InvalidValue, r"batch at byte 0" + INNER + ": length -1"),
    ],
)  # fmt: skip
def test_invalid_gzip_wrappers(value: bytes, error: type[ProtocolError], message: str) -> None:
    data = HAND_V0 + legacy_message(0, 0, value, attributes=GZIP)
    with pytest.raises(error, match=message) as info:
        summarize(data)
    assert info.value.error_code == ErrorCode.CORRUPT_MESSAGE


# --- peek_magic ---------------------------------------------------------------------


def test_peek_magic() -> None:
    assert [peek_magic(HAND_V0 + HAND_V1 + HAND_V2, p) for p in (0, 29, 65)] == [0, 1, 2]
    assert peek_magic(HAND_V2[:17]) == 2
    with pytest.raises(Truncated, match=r"no magic byte at byte 16: records are 16 bytes"):
        peek_magic(HAND_V2[:16])
    with pytest.raises(Truncated):
        peek_magic(HAND_V2, -1)
    with pytest.raises(Truncated):
        peek_magic(HAND_V2, 60)
    with pytest.raises(InvalidValue, match=r"batch at byte 0: unknown magic -2"):
        peek_magic(HAND_V2[:16] + b"\xfe")


# --- the schemas: construct and the fast path agree ---------------------------------


def test_schema_sizes() -> None:
    assert RECORD_BATCH_V2_HEADER.sizeof() == records.RECORD_BATCH_OVERHEAD == 61
    assert LEGACY_MESSAGE_V0_HEADER.sizeof() == 12 + 6
    assert LEGACY_MESSAGE_V1_HEADER.sizeof() == 12 + 14


def test_fixed_format_refuses_what_it_cannot_express() -> None:
    with pytest.raises(TypeError, match="'wide'"):
        records._fixed_format(c.Struct("wide" / c.BitStruct("x" / c.BitsInteger(24))))


@given(st.binary(min_size=61, max_size=61))
def test_v2_header_fast_path_agrees_with_construct(header: bytes) -> None:
    header = header[:16] + b"\x02" + header[17:]
    parsed = RECORD_BATCH_V2_HEADER.parse(header)
    fast = records._V2_HEADER.unpack_from(header)
    names = [f.name for f in RECORD_BATCH_V2_HEADER.subcons]
    attributes = fast[names.index("attributes")]
    for name, value in zip(names, fast, strict=True):
        if name != "attributes":
            assert parsed[name] == value
    bits = parsed.attributes
    assert int(bits.compression) == attributes & records._CODEC_MASK
    assert int(bits.timestamp_type) == bool(attributes & records._TIMESTAMP_TYPE_MASK)
    assert bits.is_transactional == bool(attributes & records._TRANSACTIONAL_MASK)
    assert bits.is_control == bool(attributes & records._CONTROL_MASK)
    assert bits.has_delete_horizon == bool(attributes & records._DELETE_HORIZON_MASK)


@given(st.sampled_from([0, 1]), st.binary(min_size=26, max_size=26))
def test_legacy_header_fast_path_agrees_with_construct(magic: int, header: bytes) -> None:
    schema = LEGACY_MESSAGE_V0_HEADER if magic == 0 else LEGACY_MESSAGE_V1_HEADER
    fast_struct = records._V0_HEADER if magic == 0 else records._V1_HEADER
    header = header[:16] + bytes([magic]) + header[17:]
    parsed = schema.parse(header)
    fast = fast_struct.unpack_from(header)
    names = [f.name for f in schema.subcons]
    attributes = fast[names.index("attributes")]
    for name, value in zip(names, fast, strict=True):
        if name != "attributes":
            assert parsed[name] == value
    assert int(parsed.attributes.compression) == attributes & records._CODEC_MASK
    assert int(parsed.attributes.timestamp_type) == bool(attributes & records._TIMESTAMP_TYPE_MASK)


v2_headers = st.fixed_dictionaries(
    {
        "base_offset": st.integers(-(2**63), 2**63 - 1),
        "partition_leader_epoch": st.integers(-(2**31), 2**31 - 1),
        "producer_id": st.integers(-(2**63), 2**63 - 1),
        "producer_epoch": st.integers(-(2**15), 2**15 - 1),
        "base_sequence": st.integers(-(2**31), 2**31 - 1),
        "last_offset_delta": st.integers(-(2**31), 2**31 - 1),
        "base_timestamp": st.integers(-(2**63), 2**63 - 1),
        "max_timestamp": st.integers(-(2**63), 2**63 - 1),
        "records_count": st.integers(0, 2**31 - 1),
        "codec": st.sampled_from(["gzip", "snappy", "lz4", "zstd"]),
        "log_append": st.booleans(),
        "transactional": st.booleans(),
        "control": st.booleans(),
        "horizon": st.booleans(),
        "payload": st.binary(max_size=64),
    }
)


@given(v2_headers)
def test_construct_built_v2_batches_read_back(h: dict[str, Any]) -> None:
    """Construct builds a header; the walk reads back every field it declared."""
    after_crc = (
        RECORD_BATCH_V2_HEADER.build(
            {
                "base_offset": h["base_offset"],
                "batch_length": 49 + len(h["payload"]),
                "partition_leader_epoch": h["partition_leader_epoch"],
                "magic": 2,
                "crc": 0,
                "attributes": {
                    "unused": 0,
                    "has_delete_horizon": h["horizon"],
                    "is_control": h["control"],
                    "is_transactional": h["transactional"],
                    "timestamp_type": "LogAppendTime" if h["log_append"] else "CreateTime",
                    "compression": h["codec"],
                },
                "last_offset_delta": h["last_offset_delta"],
                "base_timestamp": h["base_timestamp"],
                "max_timestamp": h["max_timestamp"],
                "producer_id": h["producer_id"],
                "producer_epoch": h["producer_epoch"],
                "base_sequence": h["base_sequence"],
                "records_count": h["records_count"],
            }
        )
        + h["payload"]
    )
    data = with_v2_field(after_crc, 17, ">I", 0)  # any field rewrite recomputes the CRC
    info = only(data, verify_crc=True)
    assert info == BatchInfo(
        position=0,
        size=61 + len(h["payload"]),
        magic=2,
        base_offset=h["base_offset"],
        last_offset=h["base_offset"] + h["last_offset_delta"],
        record_count=h["records_count"],
        inner_count_known=True,
        compression=h["codec"],
        timestamp_type="LogAppendTime" if h["log_append"] else "CreateTime",
        base_timestamp=h["base_timestamp"],
        max_timestamp=h["max_timestamp"],
        partition_leader_epoch=h["partition_leader_epoch"],
        producer_id=h["producer_id"],
        producer_epoch=h["producer_epoch"],
        base_sequence=h["base_sequence"],
        transactional=h["transactional"],
        control=h["control"],
        has_delete_horizon=h["horizon"],
        crc_ok=True,
    )
    assert DefaultRecordBatch(data).validate_crc()


# --- garbage: only ProtocolError ever escapes ---------------------------------------

CORPUS = [
    HAND_V2,
    HAND_V0,
    HAND_V1,
    kp_batch(2, GZIP, VALUES, producer_id=1, producer_epoch=0, base_sequence=0),
    kp_batch(2, NONE, VALUES),
    kp_batch(0, GZIP, VALUES),
    kp_batch(1, GZIP, VALUES),
    kp_batch(1, NONE, VALUES[:2]),
    legacy_message(1, 3, b"snappy?", attributes=SNAPPY),
]

READERS: list[Callable[[bytes], object]] = [
    lambda d: list(iter_batches(d)),
    lambda d: list(iter_batches(d, verify_crc=True, allow_partial_tail=False)),
    lambda d: summarize(d, verify_crc=True, max_inflated_size=256),
    lambda d: summarize(d, max_batch_size=64),
    lambda d: peek_magic(d),
    lambda d: peek_magic(d, 13),
    count_records,
]


def only_protocol_errors(data: bytes) -> None:
    for read in READERS:
        with contextlib.suppress(ProtocolError):
            read(data)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_garbage(data: bytes) -> None:
    only_protocol_errors(data)


@given(st.binary(max_size=100), st.sampled_from([0, 1, 2]), st.binary(max_size=100))
def test_garbage_after_a_plausible_prefix(head: bytes, magic: int, rest: bytes) -> None:
    # Steer past the length and magic checks often enough to reach the deeper readers.
    prefix = bytes(8) + struct.pack(">i", len(head) + 5) + bytes(4) + bytes([magic])
    only_protocol_errors(prefix + head + rest)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    batches = draw(st.lists(st.sampled_from(CORPUS), min_size=1, max_size=4))
    data = bytearray(b"".join(batches))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(data)))
    return bytes(data[:cut]) + draw(st.binary(max_size=20))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_batches(data: bytes) -> None:
    only_protocol_errors(data)


@given(st.lists(st.sampled_from(CORPUS), max_size=5), st.binary(max_size=11))
def test_concatenations_and_short_tails(batches: list[bytes], tail: bytes) -> None:
    data = b"".join(batches)
    summary = summarize(data + tail, verify_crc=True)
    assert summary.batch_count == len(list(MemoryRecords(data)))
    assert summary.partial_tail_bytes == len(tail)
    assert summary.total_bytes == len(data) + len(tail)
    assert summary.crc_ok is (True if batches else None)
    assume(tail)
    with pytest.raises(Truncated, match=rf"inside the batch at byte {len(data)}"):
        summarize(data + tail, allow_partial_tail=False)


# --- count_records: the audit's short cut -------------------------------------------


@pytest.mark.parametrize(("magic", "codec"), [(2, NONE), (2, GZIP), (1, NONE), (1, GZIP), (0, GZIP)])
@given(counts=st.lists(st.integers(0, 12), max_size=4), tail=st.binary(max_size=11))
def test_count_records_counts_what_kafka_python_built(
    magic: int, codec: int, counts: list[int], tail: bytes
) -> None:
    # kafka-python cannot build an empty legacy set: a legacy "batch" is a message.
    counts = [n for n in counts if n or magic == 2]
    data = b"".join(kp_batch(magic, codec, [b"v%d" % i for i in range(n)]) for n in counts)
    assert count_records(data + tail) == sum(counts)
    assert count_records(memoryview(b"xx" + data + tail)[2:]) == sum(counts)


def _outcome(read: Callable[[bytes], int], data: bytes) -> object:
    try:
        return read(data)
    except ProtocolError as exc:
        return type(exc), str(exc)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_count_records_agrees_with_the_full_walk_on_damaged_input(data: bytes) -> None:
    assert _outcome(count_records, data) == _outcome(lambda d: summarize(d).record_count, data)
