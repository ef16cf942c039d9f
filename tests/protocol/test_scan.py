"""The structural scanner agrees with the decoder (protocol/scan.py).

* Generated messages, every schema: the scanner ends exactly where the encoding ends, and
  finds at the top level exactly the tags the encoding wrote (known and unknown).
* Arbitrary bytes, every response schema the sidecar scans, plus a sample of others: if
  the decoder accepts, the scanner accepts and ends at the same offset; if the scanner
  refuses, the decoder refuses too.
* Hand-made Produce and Fetch responses: records are skipped, NodeEndpoints is found.
* The progressive finder (cut-through forwarding) fed any chunking of a message finds
  the tag section :func:`top_level_tags` finds, refuses what it refuses, never calls a
  byte of the section safe to forward, and keeps only a little of a large message.
"""

from __future__ import annotations

import itertools
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import DEFAULT_REGISTRY
from protocol.errors import (
    DecodeError,
    InvalidTaggedFields,
    InvalidValue,
    ProtocolError,
    TrailingBytes,
    Truncated,
)
from protocol.primitives import UNKNOWN_TAGS_KEY, is_default
from protocol.scan import (
    TagSection,
    TagSectionFinder,
    TopArray,
    before_tags,
    message_end,
    plan,
    response_header_size,
    skip_tags,
    top_level_tags,
    walk,
    walker,
)
from protocol.schema import decode, decode_prefix, encode, field_default
from protocol.spec import NO_VERSIONS, FieldSpec, MessageSpec, Versions
from tests.protocol.strategies import all_schemas, message_values

CASES = [
    pytest.param(spec, version, id=f"{spec.name}-v{version}")
    for _kind, spec, version in all_schemas()
]
EXAMPLES = max(3, settings().max_examples // 33)

PRODUCE = DEFAULT_REGISTRY.api(0)
FETCH = DEFAULT_REGISTRY.api(1)
#: The responses the sidecar scans for NodeEndpoints, at every version they have it.
SCANNED = [
    pytest.param(api.response, v, id=f"{api.response.name}-v{v}")
    for api, first in ((PRODUCE, 10), (FETCH, 16))
    for v in range(first, (api.versions.hi or first) + 1)
]


@pytest.mark.parametrize(("spec", "version"), CASES)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_scanner_ends_where_the_encoding_ends(spec: MessageSpec, version: int, data: st.DataObject) -> None:
    value = data.draw(message_values(spec, version))
    wire = encode(spec, version, value)
    assert message_end(spec, version, wire) == len(wire)
    assert message_end(spec, version, b"xyz" + wire + b"tail", 3) == 3 + len(wire)
    section = top_level_tags(spec, version, wire)
    if not spec.is_flexible(version):
        assert section.tags == {} and section.start == len(wire)
        return
    unknown = {tag for tag, _ in value.get(UNKNOWN_TAGS_KEY, ())}
    known = {f.tag for f in spec.fields if f.tagged_in(version)}
    written = {
        f.tag for f in spec.fields
        if f.tagged_in(version) and not is_default(value.get(f.name), field_default(f, version))
    }  # fmt: skip
    assert written <= set(section.tags)
    assert unknown <= set(section.tags)
    assert set(section.tags) - unknown <= known
    for tag, (start, end) in section.tags.items():
        assert section.start < start <= end <= len(wire), tag
    for tag, raw in value.get(UNKNOWN_TAGS_KEY, ()):
        start, end = section.tags[tag]
        assert wire[start:end] == raw


@pytest.mark.parametrize(("spec", "version"), [*SCANNED, *CASES[::7]])
@settings(max_examples=EXAMPLES * 4)
@given(data=st.binary(max_size=80))
def test_scanner_agrees_with_the_decoder_on_arbitrary_bytes(
    spec: MessageSpec, version: int, data: bytes
) -> None:
    try:
        _, used = decode_prefix(spec, version, data)
    except ProtocolError:
        used = None
    try:
        end = message_end(spec, version, data)
    except (DecodeError, ProtocolError):
        assert used is None, "the scanner refused what the decoder accepts"
        return
    if used is not None:
        assert end == used


@pytest.mark.parametrize(("spec", "version"), SCANNED)
@settings(max_examples=EXAMPLES * 4)
@given(data=st.data())
def test_scanner_agrees_with_the_decoder_on_mutated_messages(
    spec: MessageSpec, version: int, data: st.DataObject
) -> None:
    wire = bytearray(encode(spec, version, data.draw(message_values(spec, version))))
    if wire:
        for _ in range(data.draw(st.integers(1, 3))):
            wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(wire)))
    sample = bytes(wire[:cut])
    try:
        decode(spec, version, sample)
        accepted = True
    except ProtocolError:
        accepted = False
    try:
        top_level_tags(spec, version, sample)
    except ProtocolError:
        assert not accepted, "the scanner refused what the decoder accepts"


FLEXIBLE = [case for case in CASES if case.values[0].is_flexible(case.values[1])]


def _chunks(data: st.DataObject, size: int) -> list[int]:
    """Cut points of a random chunking of ``size`` bytes."""
    cuts = sorted(set(data.draw(st.lists(st.integers(0, size), max_size=12))))
    return [0, *cuts, size]


def _found(spec: MessageSpec, version: int, wire: bytes, cuts: list[int]) -> TagSection:
    """The top-level tag section as a forwarder finds it, feeding ``wire`` in pieces."""
    finder = TagSectionFinder(spec, version, len(wire))
    safe = 0
    for start, end in itertools.pairwise(cuts):
        finder.feed(wire[start:end])
        assert safe <= finder.safe <= finder.received, "safe went back or ran ahead"
        safe = finder.safe
    assert finder.start is not None and safe == finder.start
    section = finder.section()
    spans: dict[int, tuple[int, int]] = {}
    used = skip_tags(memoryview(section), 0, len(section), spans)
    if used != len(section):
        raise TrailingBytes(len(section) - used, "after the tag section")
    return TagSection(finder.start, {tag: (a + finder.start, b + finder.start) for tag, (a, b) in spans.items()})


@pytest.mark.parametrize(("spec", "version"), FLEXIBLE)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_the_finder_finds_the_tag_section_in_any_chunking(
    spec: MessageSpec, version: int, data: st.DataObject
) -> None:
    wire = encode(spec, version, data.draw(message_values(spec, version)))
    assert _found(spec, version, wire, _chunks(data, len(wire))) == top_level_tags(spec, version, wire)


@pytest.mark.parametrize(("spec", "version"), SCANNED)
@settings(max_examples=EXAMPLES * 4)
@given(data=st.data())
def test_the_finder_refuses_what_the_scanner_refuses(
    spec: MessageSpec, version: int, data: st.DataObject
) -> None:
    if data.draw(st.booleans()):
        sample = data.draw(st.binary(max_size=80))
    else:
        wire = bytearray(encode(spec, version, data.draw(message_values(spec, version))))
        for _ in range(data.draw(st.integers(0, 3)) if wire else 0):
            wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
        sample = bytes(wire[: data.draw(st.integers(0, len(wire)))])
    try:
        expected: TagSection | type[Exception] = top_level_tags(spec, version, sample)
    except ProtocolError as exc:
        expected = type(exc)
    try:
        found: TagSection | type[Exception] = _found(spec, version, sample, _chunks(data, len(sample)))
    except ProtocolError as exc:
        found = type(exc)
    assert found == expected


def test_the_finder_skips_records_without_keeping_them() -> None:
    wire = _fetch_response(16, [{"NodeId": 1, "Host": "h", "Port": 9, "Rack": None}])
    expected = top_level_tags(FETCH.response, 16, wire)
    finder = TagSectionFinder(FETCH.response, 16, len(wire))
    kept = 0
    for at in range(0, len(wire), 4096):
        finder.feed(wire[at : at + 4096])
        kept = max(kept, len(finder._buf))
        if finder.received < 100_000:  # inside the first partition's records
            assert finder.safe == finder.received, "records are forwarded as they come"
    assert kept <= 4096 + 16
    assert finder.start == expected.start
    assert finder.section() == wire[expected.start :]
    with pytest.raises(TrailingBytes):
        finder.feed(b"x")


def test_the_finder_needs_a_tag_section_and_a_whole_message() -> None:
    with pytest.raises(ValueError, match="no top-level tagged fields"):
        TagSectionFinder(FETCH.response, 11, 100)
    wire = _fetch_response(16, [])
    finder = TagSectionFinder(FETCH.response, 16, len(wire))
    finder.feed(wire[:-1])
    assert finder.start == len(wire) - 1 and finder.safe == finder.start
    with pytest.raises(Truncated):
        finder.section()  # one byte of the section has not arrived


def _records(size: int) -> bytes:
    return bytes(range(256)) * (size // 256) + bytes(size % 256)


def _fetch_response(version: int, endpoints: list[dict[str, object]]) -> bytes:
    partition = {
        "PartitionIndex": 0, "ErrorCode": 0, "HighWatermark": 10, "LastStableOffset": 10,
        "LogStartOffset": 0, "AbortedTransactions": [], "PreferredReadReplica": -1,
        "Records": _records(100_000),
    }  # fmt: skip
    return encode(FETCH.response, version, {
        "ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 0,
        "Responses": [{"Topic": "t", "TopicId": uuid.UUID(int=7),
                       "Partitions": [partition, partition]}],
        "NodeEndpoints": endpoints,
    })  # fmt: skip


@pytest.mark.parametrize("version", [16, 17])
def test_fetch_node_endpoints_found_after_the_records(version: int) -> None:
    endpoint = {"NodeId": 1, "Host": "broker-1", "Port": 9092, "Rack": None}
    with_endpoints = _fetch_response(version, [endpoint])
    section = top_level_tags(FETCH.response, version, with_endpoints)
    assert set(section.tags) == {0}
    assert section.start > 200_000  # after both partitions' records
    without = _fetch_response(version, [])
    assert top_level_tags(FETCH.response, version, without).tags == {}


def test_produce_response_tags() -> None:
    body = {
        "Responses": [{"Name": "t", "PartitionResponses": [{
            "Index": 0, "ErrorCode": 0, "BaseOffset": 5, "LogAppendTimeMs": -1,
            "LogStartOffset": 0, "RecordErrors": [], "ErrorMessage": None,
        }]}],
        "ThrottleTimeMs": 0,
        "NodeEndpoints": [{"NodeId": 1, "Host": "h", "Port": 1, "Rack": None}],
    }  # fmt: skip
    wire = encode(PRODUCE.response, 10, body)
    assert set(top_level_tags(PRODUCE.response, 10, wire).tags) == {0}
    assert top_level_tags(PRODUCE.response, 10, encode(PRODUCE.response, 10, {
        **body, "NodeEndpoints": []})).tags == {}  # fmt: skip


def test_truncated_and_trailing_bytes_are_refused() -> None:
    wire = _fetch_response(16, [])
    with pytest.raises(Truncated):
        top_level_tags(FETCH.response, 16, wire[:-1])
    with pytest.raises(Truncated):
        top_level_tags(FETCH.response, 16, wire[: len(wire) // 2])
    with pytest.raises(TrailingBytes):
        top_level_tags(FETCH.response, 16, wire + b"\x00")


def test_response_header_size() -> None:
    assert response_header_size(b"\x00\x00\x00\x07rest", 0) == 4
    assert response_header_size(b"\x00\x00\x00\x07\x00rest", 1) == 5
    # One tag (tag 3, two bytes) in the header.
    assert response_header_size(b"\x00\x00\x00\x07\x01\x03\x02ab" + b"rest", 1) == 9
    with pytest.raises(Truncated):
        response_header_size(b"\x00\x00\x00", 0)
    with pytest.raises(Truncated):
        response_header_size(b"\x00\x00\x00\x07\x01\x03\x05ab", 1)


def test_plans_are_cached_and_flat() -> None:
    steps = plan(FETCH.response, 16)
    assert plan(FETCH.response, 16) is steps
    # ThrottleTimeMs, ErrorCode, SessionId merge into one fixed run.
    assert steps[0] == (0, 10)


def _spec(*fields: FieldSpec, flexible: bool = False) -> MessageSpec:
    return MessageSpec("Test", "data", None, Versions(0, 0),
                       Versions(0, None) if flexible else NO_VERSIONS, tuple(fields))


def test_hand_made_specs_edge_cases() -> None:
    ints = _spec(FieldSpec("Xs", "[]int32", Versions(0, None)))
    assert message_end(ints, 0, b"\x00\x00\x00\x01\x00\x00\x00\x07") == 8
    with pytest.raises(Truncated):  # three elements announced, four bytes left
        message_end(ints, 0, b"\x00\x00\x00\x03\x00\x00\x00\x07")
    with pytest.raises(TrailingBytes):  # not flexible: no tag section, one byte too many
        top_level_tags(ints, 0, b"\x00\x00\x00\x00\x00")
    inner = (FieldSpec("A", "int8", Versions(0, None)),)
    nullable = _spec(FieldSpec("S", "Inner", Versions(0, None), nullable=Versions(0, None),
                               fields=inner))
    assert message_end(nullable, 0, b"\xff") == 1
    assert message_end(nullable, 0, b"\x01\x05") == 2
    with pytest.raises(Truncated):
        message_end(nullable, 0, b"")
    tagged = _spec(FieldSpec("A", "int8", Versions(0, None)), flexible=True)
    assert top_level_tags(tagged, 0, b"\x07\x02\x01\x00\x03\x00").tags == {1: (4, 4), 3: (6, 6)}
    with pytest.raises(InvalidTaggedFields):
        top_level_tags(tagged, 0, b"\x07\x02\x01\x00\x01\x00")


def test_the_finder_on_hand_made_specs() -> None:
    """Edges the generated schemas rarely reach: fixed-size elements, a KIP-893 nullable
    struct, tags out of order; each piece fed one byte at a time."""
    inner = (FieldSpec("A", "int8", Versions(0, None)),)

    def found(spec: MessageSpec, wire: bytes) -> TagSection:
        return _found(spec, 0, wire, list(range(len(wire) + 1)))

    ints = _spec(FieldSpec("Xs", "[]int32", Versions(0, None)), flexible=True)
    assert found(ints, b"\x02\x00\x00\x00\x07\x00") == TagSection(5, {})
    with pytest.raises(Truncated):  # one int32 announced, two bytes left
        found(ints, b"\x02\x00\x07\x00")
    nullable = _spec(FieldSpec("S", "Inner", Versions(0, None), nullable=Versions(0, None), fields=inner),
                     flexible=True)
    assert found(nullable, b"\xff\x00") == TagSection(1, {})
    assert found(nullable, b"\x01\x05\x00\x00") == TagSection(3, {})
    with pytest.raises(Truncated):
        found(nullable, b"")
    tagged = _spec(FieldSpec("A", "int8", Versions(0, None)), flexible=True)
    assert found(tagged, b"\x07\x02\x01\x00\x03\x00") == top_level_tags(tagged, 0, b"\x07\x02\x01\x00\x03\x00")
    structs = _spec(FieldSpec("Xs", "[]Inner", Versions(0, None), fields=inner), flexible=True)
    with pytest.raises(InvalidTaggedFields):  # inside an element's own tag section
        found(structs, b"\x02\x07\x02\x01\x00\x01\x00\x00\x00")


# -- one top-level array ----------------------------------------------------------------

#: MetadataResponse v0 written out by hand: one broker (1, "b1", 9092), one topic "t" with no
#: partitions. Brokers: count (4), node id (4), host (2 + 2), port (4) = 16 bytes; the topics'
#: count at 16, the topic from 20: error (2), name (2 + 1), partitions' count (4), to 29.
METADATA_V0 = bytes.fromhex("00000001" "00000001" "0002") + b"b1" + bytes.fromhex(
    "00002384" "00000001" "0000" "0001") + b"t" + bytes.fromhex("00000000")


def test_a_top_level_array_is_found_where_written_by_hand() -> None:
    layout = TopArray(DEFAULT_REGISTRY.api(3).response, 0, "Topics")
    view = memoryview(METADATA_V0)
    assert layout.open(view) == (16, 1, 20)
    assert layout.close(view, 29) == 29 == len(METADATA_V0)
    assert not layout.compact and layout.field.name == "Topics"


def test_a_flexible_array_has_a_compact_count_and_the_tags_follow_it() -> None:
    # v9: throttle (4), no brokers (1), null cluster id (1), controller (4), no topics (1),
    # cluster authorized operations (4), no tags (1).
    body = memoryview(bytes.fromhex("00000000" "01" "00" "00000001" "01" "80000000" "00"))
    layout = TopArray(DEFAULT_REGISTRY.api(3).response, 9, "Topics")
    assert layout.compact
    assert layout.open(body) == (10, 0, 11)
    assert layout.close(body, 11) == 16


def test_a_null_or_overlong_array_is_refused() -> None:
    layout = TopArray(DEFAULT_REGISTRY.api(3).response, 0, "Topics")
    null = METADATA_V0[:16] + bytes.fromhex("ffffffff")
    with pytest.raises(InvalidValue, match=r"MetadataResponse\.Topics: null"):
        layout.open(memoryview(null))
    overlong = METADATA_V0[:16] + bytes.fromhex("000003e8") + METADATA_V0[20:]
    with pytest.raises(Truncated, match="1000 elements announced, 9 byte"):
        layout.open(memoryview(overlong))


@pytest.mark.parametrize(("version", "name"), [(2, "ClusterId"), (0, "NoSuchField"), (9, "ThrottleTimeMs")])
def test_only_a_non_null_array_of_structs_is_a_top_array(version: int, name: str) -> None:
    with pytest.raises(ValueError, match=f"v{version}: {name} is not a non-null array of structs"):
        TopArray(DEFAULT_REGISTRY.api(3).response, version, name)


def _walked(walker_of: object, steps: object, data: bytes) -> object:
    """Where a walk of ``data`` ends, or the type and text of what it raised."""
    view = memoryview(data)
    try:
        if walker_of is None:
            return walk(steps, view, 0, len(view))  # type: ignore[arg-type]
        return walker(steps)(view, 0, len(view))  # type: ignore[arg-type]
    except ProtocolError as exc:
        return (type(exc), str(exc))


@pytest.mark.parametrize(("spec", "version"), CASES)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_the_generated_walker_does_what_walk_does(spec: MessageSpec, version: int, data: st.DataObject) -> None:
    """The walker generated for a plan against the interpreted walk, the reference: on an
    encoded message, the same mutated in a few bytes, and both cut anywhere; the end
    offset, or the same error with the same words."""
    steps = plan(spec, version)
    wire = bytearray(encode(spec, version, data.draw(message_values(spec, version))))
    samples = [bytes(wire)]
    if wire:
        for _ in range(data.draw(st.integers(1, 3))):
            wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
        samples += [bytes(wire), bytes(wire[: data.draw(st.integers(0, len(wire)))])]
    for sample in samples:
        assert _walked(walker, steps, sample) == _walked(None, steps, sample)


@settings(max_examples=EXAMPLES * 20)
@given(data=st.binary(max_size=60), index=st.integers(0, len(CASES) - 1))
def test_the_generated_walker_agrees_on_arbitrary_bytes(data: bytes, index: int) -> None:
    spec, version = CASES[index].values
    steps = plan(spec, version)  # type: ignore[arg-type]
    assert _walked(walker, steps, data) == _walked(None, steps, data)


def test_a_walker_is_made_once_per_plan_and_reads_long_lengths() -> None:
    steps = plan(PRODUCE.response, 10)
    assert walker(steps) is walker(steps)
    # A topic name of 200 bytes: a two-byte compact length, read by length() in both.
    body = {"Responses": [{"Name": "t" * 200, "PartitionResponses": []}], "ThrottleTimeMs": 0}
    wire = encode(PRODUCE.response, 10, body)
    assert walker(steps)(memoryview(wire), 0, len(wire)) == len(wire) == walk(steps, memoryview(wire), 0, len(wire))


def test_a_nullable_struct_cut_before_its_marker_is_refused_alike() -> None:
    """KIP-893: ConsumerGroupHeartbeatResponse v0 ends with the nullable Assignment; a body
    cut right before its marker byte is truncated for walk() and the walker alike."""
    spec = DEFAULT_REGISTRY.api(68).response
    steps = plan(spec, 0)
    body = encode(spec, 0, {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "MemberId": "m",
                            "MemberEpoch": 1, "HeartbeatIntervalMs": 5000, "Assignment": None})
    marker_at = len(body) - 2  # the Assignment's marker (0xff: null), then the top-level tags
    assert body[marker_at] == 0xFF
    for cut in (body[:marker_at], body):
        assert _walked(walker, steps, cut) == _walked(None, steps, cut)
    assert _walked(None, steps, body[:marker_at]) == (Truncated, "needed 1 byte(s), only 0 left")


def test_before_tags_is_none_where_a_version_has_no_tag_section() -> None:
    assert before_tags(PRODUCE.response, 8) is None
    found = before_tags(PRODUCE.response, 9)
    assert found is not None
    wire = encode(PRODUCE.response, 9, {"Responses": [], "ThrottleTimeMs": 0})
    assert found(memoryview(wire), 0, len(wire)) == len(wire) - 1  # the empty section's count
