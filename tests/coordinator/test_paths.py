"""Escaping, znode formats and write batching: pure functions, no ZooKeeper."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.batching import CommitBatcher, flatten
from coordinator.outcome import GroupWrite, OffsetValue, OffsetWrite, WriteSet
from coordinator.paths import (
    decode_offset,
    encode_offset,
    escape,
    offset_path,
    unescape,
)

TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)


@given(TEXT)
def test_escape_round_trips_and_is_one_safe_component(name: str) -> None:
    component = escape(name)
    assert unescape(component) == name
    assert "/" not in component and component not in (".", "..", "")
    assert all(c.isascii() and (c.isalnum() or c in "-._~%") for c in component)


@given(TEXT, TEXT)
def test_escape_is_injective(a: str, b: str) -> None:
    assert (escape(a) == escape(b)) == (a == b)


def test_escape_examples() -> None:
    assert escape("orders") == "orders"
    assert escape("my.topic") == "my.topic"
    assert escape("a/b") == "a%2Fb"
    assert escape("..") == "%2E%2E"
    assert escape("") == "%"
    assert escape("100%") == "100%25"
    assert escape("grüße") == "gr%C3%BC%C3%9Fe"
    assert offset_path("g/1", "t", 3) == "/consumers/g%2F1/offsets/t/3"


def test_offset_format() -> None:
    value = OffsetValue(offset=42, leader_epoch=3, metadata="m", commit_timestamp=1_700_000_000_000)
    assert encode_offset(value) == (b'{"version":1,"offset":42,"leader_epoch":3,"metadata":"m",'
                                    b'"commit_timestamp":1700000000000,"expire_timestamp":null}')
    assert decode_offset(encode_offset(value)) == value
    # Kafka's ZooKeeper-based consumers wrote a bare decimal.
    assert decode_offset(b"17", mtime=5) == OffsetValue(offset=17, commit_timestamp=5)


def ow(group: str, partition: int, offset: int | None) -> OffsetWrite:
    value = None if offset is None else OffsetValue(offset=offset, commit_timestamp=0)
    return OffsetWrite(group_id=group, topic="t", partition=partition, value=value)


def test_flatten_keeps_the_last_write_and_respects_deletes() -> None:
    batch = (
        WriteSet(writes=(ow("g", 0, 1), ow("g", 1, 1), ow("h", 0, 1)), ticket=1),
        WriteSet(writes=(ow("g", 0, 2),), ticket=2),
        WriteSet(writes=(GroupWrite(group_id="g", record=None),), ticket=3),
        WriteSet(writes=(ow("g", 5, 9),), ticket=4),
    )
    assert flatten(batch) == [ow("h", 0, 1), GroupWrite(group_id="g", record=None), ow("g", 5, 9)]


def test_batcher_groups_what_arrives_during_a_write() -> None:
    b = CommitBatcher()
    assert b.take() is None
    b.add(WriteSet(writes=(ow("g", 0, 1),), ticket=1))
    first = b.take()
    assert first is not None and len(first) == 1 and b.in_flight
    b.add(WriteSet(writes=(ow("g", 0, 2),), ticket=2))
    b.add(WriteSet(writes=(ow("g", 1, 2),), ticket=3))
    assert b.take() is None  # one transaction at a time
    b.done()
    second = b.take()
    assert second is not None and [ws.ticket for ws in second] == [2, 3]
    assert (b.batches, b.write_sets) == (2, 3)
