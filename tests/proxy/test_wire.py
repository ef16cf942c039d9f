"""Wire-level tests: raw sockets through a real sidecar in front of the real Tansu broker.

Requests are built with our protocol package; responses are read with kafka-python's codec
(an independent implementation of Kafka's JSON specs) or by hand, and compared with what
Tansu itself answers on a direct connection.
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Callable
from typing import Any

import crc32c
import pytest
import trio
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse, MetadataResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from protocol.apis import DEFAULT_REGISTRY
from proxy.control.server import Sidecar
from proxy.tools.rig.tansu import TansuServer
from tests.proxy.conftest import StartSidecar
from tests.proxy.wire import (
    Wire,
    create_topic,
    kp_decode,
    our_decode,
    request_frame,
    sample,
    wait_until,
)

pytestmark = pytest.mark.integration

SOFTWARE = {"ClientSoftwareName": "wire-test", "ClientSoftwareVersion": "1.0"}
BROKER_METADATA = 10035


def topic_name() -> str:
    return f"wire-{uuid.uuid4().hex[:10]}"


def cid(frame: bytes) -> int:
    value: int = struct.unpack_from(">i", frame)[0]
    return value


async def sidecar_wire(start_sidecar: StartSidecar, **keys: str) -> tuple[Sidecar, Wire]:
    sidecar = await start_sidecar(**keys)
    return sidecar, await Wire.connect("127.0.0.1", sidecar.bound["PLAINTEXT"].port)


def record_batch(count: int, seed: int) -> bytes:
    """A v2 record batch built by kafka-python (not our code), with headers and keys."""
    rng = random.Random(seed)
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )
    for offset in range(count):
        builder.append(
            offset, timestamp=1_700_000_000_000 + offset, key=rng.randbytes(8),
            value=rng.randbytes(rng.randrange(1, 300)), headers=[("h", rng.randbytes(3))],
        )
    return bytes(builder.build())


def produce_body(topic: str, records: bytes, acks: int) -> dict[str, Any]:
    return {
        "TransactionalId": None, "Acks": acks, "TimeoutMs": 5000,
        "TopicData": [{"Name": topic, "PartitionData": [{"Index": 0, "Records": records}]}],
    }


def fetch_body(topic: str, offset: int = 0, max_wait_ms: int = 500) -> dict[str, Any]:
    return {
        "ReplicaId": -1, "MaxWaitMs": max_wait_ms, "MinBytes": 1, "MaxBytes": 1 << 20,
        "IsolationLevel": 0,
        "Topics": [{"Topic": topic, "Partitions": [
            {"Partition": 0, "FetchOffset": offset, "PartitionMaxBytes": 1 << 20}]}],
    }


def list_offsets_body(topic: str) -> dict[str, Any]:
    return {"ReplicaId": -1, "IsolationLevel": 0, "Topics": [
        {"Name": topic, "Partitions": [{"PartitionIndex": 0, "Timestamp": -2}]}]}


def split_batches(records: bytes) -> list[bytes]:
    """Record batches laid end to end, delimited by hand (offset 8: int32 batch length)."""
    batches, at = [], 0
    while at + 12 <= len(records):
        length = struct.unpack_from(">i", records, at + 8)[0]
        batches.append(records[at : at + 12 + length])
        at += 12 + length
    return batches


# -- pipelining ------------------------------------------------------------------------


async def test_pipelined_local_and_forwarded_answers_leave_in_request_order(
    start_sidecar: StartSidecar,
) -> None:
    sidecar, wire = await sidecar_wire(start_sidecar)
    port = sidecar.bound["PLAINTEXT"].port
    topic = topic_name()
    await create_topic(wire, topic)

    # (api key, version, body, checker of the decoded response)
    def ok_versions(r: Any) -> bool:
        return bool(r.error_code == 0 and any(k.api_key == 3 for k in r.api_keys))

    def ok_metadata(r: Any) -> bool:
        return [(b.host, b.port) for b in r.brokers] == [("127.0.0.1", port)]

    def ok_offsets(r: Any) -> bool:
        return [p.error_code for t in r.topics for p in t.partitions] == [0]

    plan: list[tuple[int, int, dict[str, Any] | bytes, Callable[[Any], bool] | None]] = [
        (18, 0, {}, ok_versions),
        (3, 1, {"Topics": [{"Name": topic}]}, ok_metadata),
        (BROKER_METADATA, 0, {"NodeIds": []}, None),
        (18, 3, SOFTWARE, ok_versions),
        (3, 12, {"Topics": [{"Name": topic}]}, ok_metadata),
        (2, 1, list_offsets_body(topic), ok_offsets),
        (9999, 0, b"\x00\x01\x02", None),  # unknown: a correlation id alone
        (18, 1, {}, ok_versions),
        (BROKER_METADATA, 1, {"NodeIds": [-1]}, None),
        (3, 4, {"Topics": None, "AllowAutoTopicCreation": False}, ok_metadata),
        (18, 4, SOFTWARE, ok_versions),
        (60, 0, {}, lambda r: [(b.host, b.port) for b in r.brokers] == [("127.0.0.1", port)]),
        (18, 2, {}, ok_versions),
        (2, 5, list_offsets_body(topic), ok_offsets),
    ]
    classes = {18: ApiVersionsResponse, 3: MetadataResponse, 2: ListOffsetsResponse,
               60: DescribeClusterResponse}
    rounds = 3
    ids = random.Random(1).sample(range(1, 2**31), len(plan) * rounds)  # not monotonic
    frames = [
        request_frame(key, version, ids[r * len(plan) + i], body)
        for r in range(rounds)
        for i, (key, version, body, _) in enumerate(plan)
    ]
    with trio.fail_after(10):
        await wire.send(frames)  # one write
        responses = await wire.read_frames(len(frames))
    assert [cid(f) for f in responses] == ids
    for n, frame in enumerate(responses):
        key, version, _, check = plan[n % len(plan)]
        if key == 9999:
            assert len(frame) == 4
        elif key == BROKER_METADATA:
            _, body = our_decode(frame, key, version)
            assert [(b.Host, b.Port) for b in body.Brokers] == [("127.0.0.1", port)]
        else:
            _, decoded = kp_decode(classes[key], version, frame, key)
            assert check is not None and check(decoded), (key, version, decoded)
    per_round_local = sum(1 for k, *_ in plan if k in (18, BROKER_METADATA))
    assert sample(sidecar, "ksidecar_local_responses_total", api="ApiVersions") + sample(
        sidecar, "ksidecar_local_responses_total", api="BrokerMetadata"
    ) == rounds * per_round_local


async def test_requests_split_into_tiny_writes_are_all_answered(
    start_sidecar: StartSidecar,
) -> None:
    sidecar, wire = await sidecar_wire(start_sidecar)
    frames = b"".join(
        request_frame(18, 0, 1, {}) + request_frame(3, 1, 2, {"Topics": []})
        + request_frame(BROKER_METADATA, 1, 3, {"NodeIds": [-1]})
        for _ in range(3)
    )
    rng = random.Random(3)
    with trio.fail_after(10):
        at = 0
        while at < len(frames):  # 1 to 7 bytes per write
            step = rng.randrange(1, 8)
            await wire.send(frames[at : at + step])
            at += step
        responses = await wire.read_frames(9)
    assert [cid(f) for f in responses] == [1, 2, 3] * 3
    _, meta = kp_decode(MetadataResponse, 1, responses[1], 3)
    assert [b.port for b in meta.brokers] == [sidecar.bound["PLAINTEXT"].port]


async def test_one_correlation_id_for_every_request_still_pairs_by_order(
    start_sidecar: StartSidecar,
) -> None:
    """Correlation ids are the client's business: pairing is by position, not by id."""
    sidecar, wire = await sidecar_wire(start_sidecar)
    port = sidecar.bound["PLAINTEXT"].port
    kinds = [18, 3, 3, 18, 3, 18, 18, 3]
    with trio.fail_after(10):
        await wire.send([
            request_frame(18, 0, 7, {}) if k == 18 else request_frame(3, 1, 7, {"Topics": []})
            for k in kinds
        ])
        responses = await wire.read_frames(len(kinds))
    for kind, frame in zip(kinds, responses, strict=True):
        assert cid(frame) == 7
        if kind == 18:
            _, versions = kp_decode(ApiVersionsResponse, 0, frame, 18)
            assert versions.error_code == 0 and len(versions.api_keys) > 20
        else:
            _, meta = kp_decode(MetadataResponse, 1, frame, 3)
            assert [b.port for b in meta.brokers] == [port]


# -- Produce acks=0 and byte-identical records ---------------------------------------


async def test_produce_acks0_gets_no_response_and_records_arrive_byte_identical(
    start_sidecar: StartSidecar, tansu: TansuServer
) -> None:
    sidecar, wire = await sidecar_wire(start_sidecar)
    topic = topic_name()
    await create_topic(wire, topic)
    silent, silent9 = record_batch(5, seed=1), record_batch(4, seed=4)
    acked = record_batch(7, seed=2)

    with trio.fail_after(10):
        await wire.send([
            request_frame(0, 3, 101, produce_body(topic, silent, acks=0)),
            request_frame(3, 1, 102, {"Topics": [{"Name": topic}]}),
            request_frame(0, 9, 99, produce_body(topic, silent9, acks=0)),  # flexible
            request_frame(0, 9, 103, produce_body(topic, acked, acks=1)),
        ])
        first, second = await wire.read_frames(2)
    # Nothing for 101 or 99: the first frame answers the Metadata request.
    assert cid(first) == 102
    assert cid(second) == 103
    _, produced = our_decode(second, 0, 9)
    assert [p.ErrorCode for t in produced.Responses for p in t.PartitionResponses] == [0]

    with trio.fail_after(10):
        frame = await wire.call(1, 4, 104, fetch_body(topic))
    _, fetched = kp_decode(FetchResponse, 4, frame, 1)
    (partition,) = fetched.responses[0].partitions
    assert partition.error_code == 0
    batches = split_batches(bytes(partition.records))
    assert len(batches) == 3
    for got, sent in zip(batches, (silent, silent9, acked), strict=True):
        # Bytes 0-16 are offset, length and leader epoch, which the broker assigns; the
        # CRC-32C at 17 covers 21..end: both it and everything it covers are unchanged.
        assert got[8:12] == sent[8:12] and got[16:] == sent[16:]
        assert struct.unpack_from(">I", got, 17)[0] == crc32c.crc32c(got[21:])

    # Kafka never answers acks=0; Tansu does, and the sidecar drops that answer.
    direct = await Wire.connect(tansu.host, tansu.port)
    await direct.send([request_frame(0, 3, 1, produce_body(topic, record_batch(1, 3), 0)),
                       request_frame(18, 0, 2, {})])
    with trio.fail_after(10):
        (first_direct,) = await direct.read_frames(1)
    tansu_answers_acks0 = cid(first_direct) == 1
    await direct.aclose()
    assert sample(sidecar, "ksidecar_unasked_responses_total") == (2 if tansu_answers_acks0 else 0)


async def test_large_records_cross_many_reads_unchanged(start_sidecar: StartSidecar) -> None:
    _, wire = await sidecar_wire(start_sidecar)
    topic = topic_name()
    await create_topic(wire, topic)
    rng = random.Random(12)
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=8 << 20,
    )
    for offset in range(2):
        builder.append(offset, timestamp=1_700_000_000_000, key=None,
                       value=rng.randbytes(900_000), headers=[])
    batch = bytes(builder.build())
    with trio.fail_after(20):
        frame = await wire.call(0, 9, 1, produce_body(topic, batch, acks=-1))
        _, produced = our_decode(frame, 0, 9)
        assert [p.ErrorCode for t in produced.Responses for p in t.PartitionResponses] == [0]
        body = fetch_body(topic)
        body["Topics"][0]["Partitions"][0]["PartitionMaxBytes"] = body["MaxBytes"] = 4 << 20
        frame = await wire.call(1, 4, 2, body)
    _, fetched = kp_decode(FetchResponse, 4, frame, 1)
    (got,) = split_batches(bytes(fetched.responses[0].partitions[0].records))
    assert got[8:12] == batch[8:12] and got[16:] == batch[16:]
    assert struct.unpack_from(">I", got, 17)[0] == crc32c.crc32c(got[21:])


async def test_fetch_response_passes_through_unchanged(
    start_sidecar: StartSidecar, tansu: TansuServer
) -> None:
    """A response nobody rewrites is the broker's bytes, unchanged (compared on a direct link)."""
    _, wire = await sidecar_wire(start_sidecar)
    topic = topic_name()
    await create_topic(wire, topic)
    with trio.fail_after(10):
        await wire.call(0, 3, 1, produce_body(topic, record_batch(20, seed=9), acks=-1))
        through = await wire.call(1, 4, 5, fetch_body(topic))
        direct = await Wire.connect(tansu.host, tansu.port)
        straight = await direct.call(1, 4, 5, fetch_body(topic))
    await direct.aclose()
    assert through == straight
    assert len(through) > 20 * 8


async def test_responses_that_may_name_brokers_pass_unchanged_when_they_name_none(
    start_sidecar: StartSidecar, tansu: TansuServer
) -> None:
    """Produce v10+ and Fetch v16+ are decoded for NodeEndpoints; with none, the broker's
    bytes go back as they came (a direct connection gives the same Fetch answer)."""
    _, wire = await sidecar_wire(start_sidecar)
    topic = topic_name()
    await create_topic(wire, topic)
    direct = await Wire.connect(tansu.host, tansu.port)
    with trio.fail_after(10):
        _, meta = kp_decode(MetadataResponse, 12, await wire.call(3, 12, 1, {"Topics": [{"Name": topic}]}), 3)
        topic_id = meta.topics[0].topic_id
        produced = await wire.call(0, 11, 2, produce_body(topic, record_batch(30, seed=11), acks=-1))
        _, body = our_decode(produced, 0, 11)
        assert [p.ErrorCode for t in body.Responses for p in t.PartitionResponses] == [0]
        request = {
            "ReplicaId": -1, "MaxWaitMs": 500, "MinBytes": 1, "MaxBytes": 1 << 20,
            "IsolationLevel": 0, "SessionId": 0, "SessionEpoch": -1,
            "Topics": [{"TopicId": topic_id, "Partitions": [
                {"Partition": 0, "FetchOffset": 0, "PartitionMaxBytes": 1 << 20}]}],
        }
        for version in (16, 17):
            through = await wire.call(1, version, 3, request)
            straight = await direct.call(1, version, 3, request)
            _, fetched = kp_decode(FetchResponse, version, through, 1)
            records = bytes(fetched.responses[0].partitions[0].records)
            assert len(split_batches(records)) == 1
            assert through == straight
    await direct.aclose()


# -- unknown and unsupported requests --------------------------------------------------


@pytest.mark.parametrize(
    ("key", "version", "body"),
    [
        (9999, 0, b"\x00\x00\x00\x01anything"),  # an API key nobody knows
        (3, 99, b"\x00"),  # Metadata at a version nobody speaks
        (68, 0, b""),  # ConsumerGroupHeartbeat: we parse it, Tansu does not support it
        (BROKER_METADATA, 7, b""),  # our own API at a version we do not have
    ],
)
async def test_unsupported_request_gets_a_bare_correlation_id(
    start_sidecar: StartSidecar, key: int, version: int, body: bytes
) -> None:
    sidecar, wire = await sidecar_wire(start_sidecar)
    with trio.fail_after(10):
        await wire.send([
            request_frame(3, 1, 10, {"Topics": []}),
            request_frame(key, version, 0x01020304, body),
            request_frame(18, 0, 12, {}),
        ])
        meta, bare, after = await wire.read_frames(3)
        assert (cid(meta), bare, cid(after)) == (10, bytes.fromhex("01020304"), 12)
        # Still usable afterwards.
        again = await wire.call(3, 1, 13, {"Topics": []})
    assert cid(again) == 13
    label = str(key)
    assert sample(sidecar, "ksidecar_unsupported_requests_total", api_key=label) == 1
    outcome = sample(sidecar, "ksidecar_requests_total",
                     api=DEFAULT_REGISTRY.name(key), version="other" if key in (9999, 3, 10035) else str(version),
                     outcome="unsupported")
    assert outcome == 1


async def test_unsupported_request_with_close_policy_closes_only_that_connection(
    start_sidecar: StartSidecar,
) -> None:
    sidecar, wire = await sidecar_wire(start_sidecar, sidecar_unsupported_request_policy="close")
    other = await Wire.connect("127.0.0.1", sidecar.bound["PLAINTEXT"].port)
    await other.call(18, 0, 1, {})
    with trio.fail_after(5):
        await wire.send(request_frame(9999, 0, 5, b""))
        assert await wire.wait_closed() == b""
        # Counted once the sidecar has finished closing (just after our end saw it).
        await wait_until(lambda: sample(sidecar, "ksidecar_errors_total", cause="unsupported_request") == 1)
    assert sample(sidecar, "ksidecar_unsupported_requests_total", api_key="9999") == 1
    with trio.fail_after(5):
        frame = await other.call(3, 1, 2, {"Topics": []})
    assert cid(frame) == 2


async def test_unsupported_produce_with_acks0_closes_instead_of_answering(
    start_sidecar: StartSidecar, tansu: TansuServer
) -> None:
    """A Produce with acks=0 gets no response, so it cannot get a KIP-35 one either: an
    answer would be read as the answer to the client's next request."""
    sidecar, wire = await sidecar_wire(start_sidecar)
    produce_hi = (await trio.to_thread.run_sync(tansu.api_versions))[0][1]
    version = produce_hi + 1  # we parse it; the broker does not support it
    assert version in DEFAULT_REGISTRY.api(0).versions
    topic = topic_name()
    with trio.fail_after(5):
        await wire.send([request_frame(0, version, 5, produce_body(topic, record_batch(1, 1), 0)),
                         request_frame(3, 1, 6, {"Topics": []})])
        assert await wire.wait_closed() == b""
        await wait_until(lambda: sample(sidecar, "ksidecar_errors_total",
                                        cause="unsupported_request") == 1)
    assert sample(sidecar, "ksidecar_unsupported_requests_total", api_key="0") == 1


async def test_unknown_api_key_labels_are_bounded(start_sidecar: StartSidecar) -> None:
    sidecar, wire = await sidecar_wire(start_sidecar)
    keys = list(range(20000, 20040))
    with trio.fail_after(10):
        await wire.send([request_frame(key, 0, key, b"") for key in keys])
        answers = await wire.read_frames(len(keys))
    assert answers == [struct.pack(">i", key) for key in keys]
    labels = [sample(sidecar, "ksidecar_unsupported_requests_total", api_key=str(k)) for k in keys]
    assert labels == [1.0] * 32 + [0.0] * 8  # the first 32 distinct keys get their own label
    assert sample(sidecar, "ksidecar_unsupported_requests_total", api_key="other") == 8


# -- ApiVersions -----------------------------------------------------------------------


def expected_ranges(direct: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """The broker's ranges cut to what our schema table parses, plus the local APIs."""
    expected: dict[int, tuple[int, int]] = {}
    for key, (lo, hi) in direct.items():
        api = DEFAULT_REGISTRY.get(key)
        if api is None:
            continue
        ours_hi = api.versions.hi
        assert ours_hi is not None
        cut = (max(lo, api.versions.lo), min(hi, ours_hi))
        if cut[0] <= cut[1]:
            expected[key] = cut
    expected[18] = (0, 4)
    expected[BROKER_METADATA] = (0, 1)
    expected[48] = (0, 1)  # DescribeClientQuotas / AlterClientQuotas: the sidecar answers
    expected[49] = (0, 1)  # them for the ip entity (KIP-612) even though Tansu has neither
    return expected


def api_versions_body(version: int, ranges: dict[int, tuple[int, int]]) -> bytes:
    """An ApiVersions response body written out by hand (sorted keys, no tagged fields)."""
    keys = sorted(ranges)
    if version < 3:
        out = struct.pack(">hi", 0, len(keys))
        out += b"".join(struct.pack(">hhh", k, *ranges[k]) for k in keys)
        return out + (struct.pack(">i", 0) if version >= 1 else b"")
    count = len(keys) + 1
    varint = bytearray()
    while count >= 0x80:
        varint.append(count & 0x7F | 0x80)
        count >>= 7
    varint.append(count)
    out = struct.pack(">h", 0) + bytes(varint)
    out += b"".join(struct.pack(">hhhB", k, *ranges[k], 0) for k in keys)
    return out + struct.pack(">iB", 0, 0)


async def test_api_versions_every_version_is_the_intersection(
    start_sidecar: StartSidecar, tansu: TansuServer
) -> None:
    _, wire = await sidecar_wire(start_sidecar)
    direct = await trio.to_thread.run_sync(tansu.api_versions)  # the rig's own raw v0 client
    expected = expected_ranges(direct)
    assert expected[3] == (0, 12)  # Tansu 0.6 stops at Metadata v12, below our v13
    for version in range(5):
        body = SOFTWARE if version >= 3 else {}
        with trio.fail_after(5):
            frame = await wire.call(18, version, 40 + version, body)
        _, decoded = kp_decode(ApiVersionsResponse, version, frame, 18)
        assert decoded.error_code == 0
        got = {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys}
        assert got == expected
        # Byte for byte: header v0 (correlation id only) and no default-valued tags.
        assert frame == struct.pack(">i", 40 + version) + api_versions_body(version, expected)


async def test_api_versions_above_ours_gets_error_35_with_a_v0_body(
    start_sidecar: StartSidecar,
) -> None:
    _, wire = await sidecar_wire(start_sidecar)
    with trio.fail_after(5):
        await wire.send(request_frame(18, 5, 0x0A0B0C0D, b"\x05some\x02x\x00 future fields"))
        raw = b""
        while len(raw) < 20:
            raw += await wire.stream.receive_some(65536)
    assert raw == bytes.fromhex("00000010 0a0b0c0d 0023 00000001 0012 0000 0004")
    with trio.fail_after(5):
        frame = await wire.call(18, 0, 2, {})
    assert cid(frame) == 2


@pytest.mark.parametrize(
    ("name", "version"),
    [("bad name", "1.0"), ("-lead", "1.0"), ("trail.", "1.0"), ("", "1.0"), ("ok", "1.0_x")],
)
async def test_api_versions_v3_with_invalid_software_name_is_invalid_request(
    start_sidecar: StartSidecar, name: str, version: str
) -> None:
    _, wire = await sidecar_wire(start_sidecar)
    body = {"ClientSoftwareName": name, "ClientSoftwareVersion": version}
    with trio.fail_after(5):
        frame = await wire.call(18, 3, 7, body)
    # As Kafka answers (KafkaApis: getErrorResponse at the request's version): error 42,
    # empty compact array, throttle 0, no tags. (kafka-python would read any error as v0.)
    assert frame == struct.pack(">i", 7) + bytes.fromhex("002a 01 00000000 00")
    with trio.fail_after(5):
        assert cid(await wire.call(18, 3, 8, SOFTWARE)) == 8


# -- BrokerMetadata --------------------------------------------------------------------


def parse_broker_metadata_v0(body: bytes) -> list[tuple[int, str, int, int, int, dict[str, str]]]:
    """BrokerMetadata v0 response read by hand (classic encodings)."""
    at = 0

    def take(fmt: str) -> Any:
        nonlocal at
        values = struct.unpack_from(fmt, body, at)
        at += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def string() -> str:
        nonlocal at
        size = take(">h")
        text = body[at : at + size].decode()
        at += size
        return text

    brokers = []
    for _ in range(take(">i")):
        node_id, host, port = take(">i"), string(), take(">i")
        pmin, pmax = take(">ii")
        tags = {}
        for _ in range(take(">i")):
            key = string()
            tags[key] = string()
        brokers.append((node_id, host, port, pmin, pmax, tags))
    assert at == len(body)
    return brokers


async def test_broker_metadata_filter_and_tags(
    start_sidecar: StartSidecar, tansu: TansuServer
) -> None:
    sidecar, wire = await sidecar_wire(start_sidecar, tag_rack="rack-7", tag_team="blue")
    port = sidecar.bound["PLAINTEXT"].port
    # The broker's own id, asked of the broker directly.
    direct = await Wire.connect(tansu.host, tansu.port)
    _, meta = kp_decode(MetadataResponse, 1, await direct.call(3, 1, 1, {"Topics": []}), 3)
    await direct.aclose()
    ((own_id, _, _),) = [(b.node_id, b.host, b.port) for b in meta.brokers]
    assert (await trio.to_thread.run_sync(tansu.api_versions))[0][0] == 0  # Produce from v0
    tags = {
        "broker.id": str(own_id),
        "broker.version": "ksidecar-0.1.0",
        "broker.version.int": "0x00010000",
        "compression.codecs": "1=gzip,2=snappy,3=lz4,4=zstd",
        "message.max.bytes": "1048588",
        "message.formats": "v0,v1,v2",
        "endpoints": f"plaintext://127.0.0.1:{port}",
        "rack": "rack-7",
        "team": "blue",
    }
    cases: list[tuple[list[int], int]] = [
        ([], 1), ([-1], 1), ([own_id], 1), ([424242], 0), ([424242, -1, own_id], 1),
    ]
    correlation = 100
    for node_ids, count in cases:
        correlation += 1
        with trio.fail_after(5):
            frame = await wire.call(BROKER_METADATA, 0, correlation, {"NodeIds": node_ids})
        brokers = parse_broker_metadata_v0(frame[4:])
        assert len(brokers) == count, node_ids
        for node_id, host, got_port, pmin, pmax, got_tags in brokers:
            assert (node_id, host, got_port, pmin) == (own_id, "127.0.0.1", port, 0)
            assert pmax > 0
            assert got_tags == tags
            assert list(got_tags)[:7] == list(tags)[:7]  # builtin tags first
        # v1: same content, flexible encoding.
        with trio.fail_after(5):
            frame = await wire.call(BROKER_METADATA, 1, correlation, {"NodeIds": node_ids})
        assert frame[4] == 0  # response header v1: no tags
        _, body = our_decode(frame, BROKER_METADATA, 1)
        assert [(b.NodeId, b.Port, {t.Key: t.Value for t in b.Tags}) for b in body.Brokers] == [
            (own_id, port, tags)
        ] * count
        if count == 0:
            assert frame[5:] == b"\x01\x00"  # empty compact array, no tags
    assert sample(sidecar, "ksidecar_local_responses_total", api="BrokerMetadata") == 2 * len(cases)


# -- address rewriting -----------------------------------------------------------------


async def test_responses_name_only_the_sidecar(
    start_sidecar: StartSidecar, tansu: TansuServer
) -> None:
    sidecar, wire = await sidecar_wire(start_sidecar)
    port = sidecar.bound["PLAINTEXT"].port
    mine = ("127.0.0.1", port)
    direct = await Wire.connect(tansu.host, tansu.port)
    _, meta = kp_decode(MetadataResponse, 1, await direct.call(3, 1, 1, {"Topics": []}), 3)
    assert [(b.host, b.port) for b in meta.brokers] == [(tansu.host, tansu.port)]  # needs rewriting
    await direct.aclose()
    topic = topic_name()
    await create_topic(wire, topic)
    correlation = 200
    lo, hi = expected_ranges(await trio.to_thread.run_sync(tansu.api_versions))[3]
    for version in range(lo, hi + 1):
        correlation += 1
        topics: Any = [{"Name": topic}]
        with trio.fail_after(5):
            frame = await wire.call(3, version, correlation, {"Topics": topics})
        _, decoded = kp_decode(MetadataResponse, version, frame, 3)
        assert [(b.host, b.port) for b in decoded.brokers] == [mine], version
        assert [t.name for t in decoded.topics] == [topic]
    for version in range(7):
        correlation += 1
        keys = ["group-a", "group-b"]
        body: dict[str, Any] = (
            {"Key": keys[0], "KeyType": 0} if version < 4 else {"KeyType": 0, "CoordinatorKeys": keys}
        )
        with trio.fail_after(5):
            frame = await wire.call(10, version, correlation, body)
        _, decoded = kp_decode(FindCoordinatorResponse, version, frame, 10)
        if version < 4:
            assert (decoded.error_code, decoded.host, decoded.port) == (0, *mine), version
        else:
            got = [(c.key, c.error_code, c.host, c.port) for c in decoded.coordinators]
            assert got == [(k, 0, *mine) for k in keys], version
    for version in (0, 1):
        correlation += 1
        with trio.fail_after(5):
            frame = await wire.call(60, version, correlation, {})
        _, decoded = kp_decode(DescribeClusterResponse, version, frame, 60)
        assert [(b.host, b.port) for b in decoded.brokers] == [mine]
    assert sample(sidecar, "ksidecar_rewrites_total", api="Metadata") == hi - lo + 1
    assert sample(sidecar, "ksidecar_rewrites_total", api="FindCoordinator") == 7
    assert sample(sidecar, "ksidecar_rewrites_total", api="DescribeCluster") == 2


# -- SASL handshake --------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "NOPE"])
async def test_sasl_handshake_answer_is_passed_back(
    start_sidecar: StartSidecar, tansu: TansuServer, version: int, mechanism: str
) -> None:
    _, wire = await sidecar_wire(start_sidecar)
    direct = await Wire.connect(tansu.host, tansu.port)
    with trio.fail_after(5):
        through = await wire.call(17, version, 31, {"Mechanism": mechanism})
        straight = await direct.call(17, version, 31, {"Mechanism": mechanism})
    await direct.aclose()
    assert through == straight
    error = struct.unpack_from(">h", through, 4)[0]
    # Tansu runs without SASL: it refuses every mechanism, so Kafka requests follow.
    assert error == 33
    with trio.fail_after(5):
        frame = await wire.call(3, 1, 32, {"Topics": []})
        _, decoded = kp_decode(MetadataResponse, 1, frame, 3)
    assert len(decoded.brokers) == 1


# -- backpressure ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "keys",
    [
        {"sidecar_max_in_flight_requests_per_connection": "2"},
        {"sidecar_max_in_flight_requests_per_connection": "1"},
        {"sidecar_max_buffered_bytes_per_connection": "1024"},
    ],
)
async def test_bounded_connection_answers_everything_in_order(
    start_sidecar: StartSidecar, keys: dict[str, str]
) -> None:
    sidecar, wire = await sidecar_wire(start_sidecar, **keys)
    ids = random.Random(5).sample(range(1, 2**31), 50)
    kinds: list[tuple[int, int, dict[str, Any]]] = [
        (18, 0, {}), (3, 1, {"Topics": []}), (BROKER_METADATA, 0, {"NodeIds": []}),
        (18, 3, SOFTWARE), (3, 9, {"Topics": []}),
    ]
    frames = []
    for i in range(50):
        key, version, body = kinds[i % len(kinds)]
        frames.append(request_frame(key, version, ids[i], body))
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            for connection in sidecar.connections:
                peak = max(peak, len(connection.slots))
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        with trio.fail_after(10):
            await wire.send(frames)
            responses = await wire.read_frames(50)
        nursery.cancel_scope.cancel()
    assert [cid(f) for f in responses] == ids
    for i, frame in enumerate(responses):
        key, version, _ = kinds[i % len(kinds)]
        if key != BROKER_METADATA:
            cls = ApiVersionsResponse if key == 18 else MetadataResponse
            kp_decode(cls, version, frame, key)
    limit = int(keys.get("sidecar_max_in_flight_requests_per_connection", "1000"))
    assert 1 <= peak <= limit
