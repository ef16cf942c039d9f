"""Unit tests of the sidecar's own answers and of address rewriting (sans-IO, no broker).

Expected bytes are written out by hand from the message layouts (PROTOCOL_NOTES.md);
responses that name brokers are built and read back with kafka-python's codec, an
implementation independent of ours.
"""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse, MetadataResponse
from kafka.protocol.producer import ProduceResponse

from protocol.apis import DEFAULT_REGISTRY
from protocol.errors import ProtocolError
from proxy.config.keys import HostPort
from proxy.datapath.addressing import OffsetAddressBook, RegisteredAddressBook, StaticAddressBook
from proxy.datapath.rewrite import Rewriter, rewrites_version
from proxy.local.api_versions import advertised_ranges, handle_api_versions
from proxy.local.broker_metadata import (
    BrokerEntry,
    builtin_tags,
    handle_broker_metadata,
    protocol_version_max,
    select,
    version_int,
)

R = DEFAULT_REGISTRY
BM = R.broker_metadata_key
LOCAL = {18, BM}


def h(text: str) -> bytes:
    return bytes.fromhex(text)


# -- ApiVersions -----------------------------------------------------------------------


def test_advertised_ranges_intersect_the_broker_with_our_table() -> None:
    upstream = {
        0: (3, 11),  # inside ours (0-13): the broker's
        3: (0, 99),  # above ours: cut at our 13
        10: (5, 6),
        18: (0, 3),  # answered locally: always our whole 0-4
        60: (3, 5),  # ours is 0-2: no overlap, left out
        9999: (0, 5),  # a key we cannot parse: left out
    }
    assert advertised_ranges(R, upstream, LOCAL) == [
        (0, 3, 11), (3, 0, 13), (10, 5, 6), (18, 0, 4), (BM, 0, 1),
    ]


def test_advertised_ranges_without_the_broker_offer_all_we_parse() -> None:
    ranges = advertised_ranges(R, None, LOCAL)
    assert len(ranges) == len(R)
    assert (3, 0, 13) in ranges and (18, 0, 4) in ranges and (BM, 0, 1) in ranges


RANGES = [(0, 3, 11), (18, 0, 4), (BM, 0, 1)]
KEYS_V0 = "00000003" "0000 0003 000b" "0012 0000 0004" "2733 0000 0001"  # 10035 = 0x2733
KEYS_V3 = "04" "0000 0003 000b 00" "0012 0000 0004 00" "2733 0000 0001 00"
SOFTWARE_V3 = h("0a") + b"wire-test" + h("04") + b"1.0" + h("00")


@pytest.mark.parametrize(
    ("version", "body", "expected"),
    [
        (0, b"", "0000" + KEYS_V0),
        (1, b"", "0000" + KEYS_V0 + "00000000"),
        (2, b"", "0000" + KEYS_V0 + "00000000"),
        (3, SOFTWARE_V3, "0000" + KEYS_V3 + "00000000" + "00"),
        (4, SOFTWARE_V3, "0000" + KEYS_V3 + "00000000" + "00"),
    ],
)
def test_api_versions_bytes(version: int, body: bytes, expected: str) -> None:
    assert handle_api_versions(R, version, body, RANGES) == (version, h(expected))


def test_api_versions_default_features_are_not_written() -> None:
    defaults = {"SupportedFeatures": [], "FinalizedFeaturesEpoch": -1, "FinalizedFeatures": [],
                "ZkMigrationReady": False}
    _, body = handle_api_versions(R, 3, SOFTWARE_V3, RANGES, defaults)
    assert body == h("0000" + KEYS_V3 + "00000000" + "00")


def test_api_versions_features_are_tagged_fields() -> None:
    features = {
        "SupportedFeatures": [{"Name": "metadata.version", "MinVersion": 1, "MaxVersion": 20}],
        "FinalizedFeaturesEpoch": 5,
        "FinalizedFeatures": [],
        "ZkMigrationReady": False,
    }
    _, body = handle_api_versions(R, 3, SOFTWARE_V3, RANGES, features)
    tags = (
        "02"  # two tagged fields
        "00 17" "02 11" + b"metadata.version".hex() + "0001 0014 00"  # tag 0, 23 bytes
        "01 08 0000000000000005"  # tag 1: FinalizedFeaturesEpoch
    )
    assert body == h("0000" + KEYS_V3 + "00000000" + tags)
    decoded = ApiVersionsResponse[3].decode(io.BytesIO(body))
    assert [(f.name, f.min_version, f.max_version) for f in decoded.supported_features] == [
        ("metadata.version", 1, 20)
    ]
    assert decoded.finalized_features_epoch == 5


def test_api_versions_above_ours_is_error_35_in_v0() -> None:
    assert handle_api_versions(R, 5, b"\x01\x02", RANGES) == (0, h("0023 00000001 0012 0000 0004"))
    assert handle_api_versions(R, 300, b"", RANGES)[1] == h("0023 00000001 0012 0000 0004")


@pytest.mark.parametrize(
    "body",
    [
        h("01") + h("04") + b"1.0" + h("00"),  # empty name
        h("05") + b"a b!" + h("04") + b"1.0" + h("00"),
        h("05") + b"-abc" + h("04") + b"1.0" + h("00"),
        h("05") + b"abc." + h("04") + b"1.0" + h("00"),
        h("03") + b"ok" + h("04") + b"1_0" + h("00"),  # bad version
        h("00") + h("04") + b"1.0" + h("00"),  # null name
        h("0a") + b"wire",  # truncated
    ],
)
def test_api_versions_invalid_request(body: bytes) -> None:
    assert handle_api_versions(R, 3, body, RANGES) == (3, h("002a 01 00000000 00"))


@pytest.mark.parametrize("name", [b"a", b"A1", b"librdkafka", b"kafka-python.x-2", b"1.2.3"])
def test_api_versions_valid_software_names(name: bytes) -> None:
    body = bytes([len(name) + 1]) + name + h("02") + b"9" + h("00")
    assert handle_api_versions(R, 3, body, RANGES)[1][:2] == h("0000")


# -- BrokerMetadata --------------------------------------------------------------------


def test_version_int() -> None:
    assert version_int("0.1.0") == "0x00010000"
    assert version_int("1.2.3") == "0x01020300"
    assert version_int("2.10") == "0x020a0000"


def test_builtin_tags() -> None:
    assert builtin_tags(3, ["plaintext://h:1", "ssl://h:2"], 1000, "v2") == {
        "broker.id": "3",
        "broker.version": "ksidecar-0.1.0",
        "broker.version.int": "0x00010000",
        "compression.codecs": "1=gzip,2=snappy,3=lz4,4=zstd",
        "message.max.bytes": "1000",
        "message.formats": "v2",
        "endpoints": "plaintext://h:1,ssl://h:2",
    }


ME = BrokerEntry(1, "me", 1001)
TWO = BrokerEntry(2, "two", 1002)
THREE = BrokerEntry(3, "three", 1003)
ALSO_ME = BrokerEntry(1, "impostor", 9999)


@pytest.mark.parametrize(
    ("node_ids", "expected"),
    [
        ([], [ME, TWO, THREE]),  # everyone, by id; the registration of my id is me
        ([-1], [ME]),
        ([1], [ME]),
        ([3, -1, 3], [THREE, ME]),
        ([-1, 1], [ME]),
        ([42], []),
        ([42, 2], [TWO]),
    ],
)
def test_select(node_ids: list[int], expected: list[BrokerEntry]) -> None:
    assert select(node_ids, ME, [THREE, ALSO_ME, TWO]) == expected


def test_broker_metadata_v0_bytes() -> None:
    me = BrokerEntry(7, "h", 9, {"a": "b"})
    body = handle_broker_metadata(R, 0, h("00000001 ffffffff"), me, [TWO])
    pmax = protocol_version_max(R).to_bytes(4, "big")
    assert body == h("00000001" "00000007" "0001 68" "00000009" "00000000") + pmax + h(
        "00000001" "0001 61" "0001 62"
    )
    assert int.from_bytes(pmax, "big") > 250  # every (API, version) pair we parse (298 with Kafka 4.1.0)


def test_broker_metadata_v1_bytes() -> None:
    me = BrokerEntry(7, "h", 9, {"a": "b"})
    body = handle_broker_metadata(R, 1, h("02 ffffffff 00"), me, [])
    pmax = protocol_version_max(R).to_bytes(4, "big")
    assert body == h("02" "00000007" "02 68" "00000009" "00000000") + pmax + h(
        "02" "02 61 02 62 00" "00" "00"
    )
    assert handle_broker_metadata(R, 1, h("02 0000002a 00"), me, []) == h("01 00")


def test_broker_metadata_bad_body_raises_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        handle_broker_metadata(R, 0, h("000003e8 00000001"), ME, [])
    with pytest.raises(ProtocolError):
        handle_broker_metadata(R, 0, h("00000000 ff"), ME, [])  # trailing byte


# -- rewriting ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "version", "expected"),
    [(3, 0, True), (3, 13, True), (10, 0, True), (10, 6, True), (60, 0, True),
     (0, 9, False), (0, 10, True), (1, 15, False), (1, 16, True), (18, 4, False),
     (2, 9, False), (19, 7, False)],
)
def test_rewrites_version(key: int, version: int, expected: bool) -> None:
    assert rewrites_version(R.api(key), version) is expected


MB = MetadataResponse.MetadataResponseBroker
MT = MetadataResponse.MetadataResponseTopic
MP = MT.MetadataResponsePartition
TOPIC_ID = uuid.UUID("8d958d7e-93ce-463a-9430-6aa62310cb46")


def metadata_v12(brokers: list[tuple[int, str, int, str | None]]) -> bytes:
    return bytes(MetadataResponse[12](
        throttle_time_ms=7,
        brokers=[MB(node_id=n, host=host, port=port, rack=rack) for n, host, port, rack in brokers],
        cluster_id="cluster", controller_id=1,
        topics=[MT(error_code=0, name="t", topic_id=TOPIC_ID, is_internal=False, partitions=[
            MP(error_code=0, partition_index=0, leader_id=2, leader_epoch=4, replica_nodes=[2, 1],
               isr_nodes=[2], offline_replicas=[])])],
    ).encode())


class Unmapped:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def __call__(self, api: str, node_id: int) -> None:
        self.calls.append((api, node_id))


def test_metadata_brokers_rewritten_and_nothing_else() -> None:
    book = StaticAddressBook({1: HostPort("sc1", 19092), 2: HostPort("sc2", 19093)})
    original = metadata_v12([(1, "b1", 9092, "r1"), (2, "b2", 9093, None)])
    result = Rewriter(book, "PLAINTEXT").rewrite(R.api(3), 12, original)
    assert result is not None
    assert (result.rewritten, result.unmapped) == (2, 0)
    expected = MetadataResponse[12].decode(original).to_dict()
    expected["brokers"] = [
        {"node_id": 1, "host": "sc1", "port": 19092, "rack": "r1"},
        {"node_id": 2, "host": "sc2", "port": 19093, "rack": None},
    ]
    assert MetadataResponse[12].decode(result.body).to_dict() == expected


def test_offset_mapping_keeps_the_host_and_shifts_the_port() -> None:
    book = OffsetAddressBook({"PLAINTEXT": 10000, "SSL": 10001})
    original = metadata_v12([(1, "b1", 9092, None)])
    for listener, port in (("PLAINTEXT", 19092), ("SSL", 19093)):
        result = Rewriter(book, listener).rewrite(R.api(3), 12, original)
        assert result is not None
        brokers = MetadataResponse[12].decode(result.body).brokers
        assert [(b.node_id, b.host, b.port) for b in brokers] == [(1, "b1", port)]


def test_unmapped_broker_is_withheld_and_reported() -> None:
    unmapped = Unmapped()
    book = StaticAddressBook({1: HostPort("sc1", 19092)})
    original = metadata_v12([(1, "b1", 9092, None), (2, "b2", 9093, None)])
    result = Rewriter(book, "PLAINTEXT", unmapped).rewrite(R.api(3), 12, original)
    assert result is not None
    assert (result.rewritten, result.unmapped) == (1, 1)
    brokers = MetadataResponse[12].decode(result.body).brokers
    assert [(b.node_id, b.host, b.port) for b in brokers] == [(1, "sc1", 19092)]
    assert unmapped.calls == [("Metadata", 2)]


def test_metadata_without_brokers_is_left_alone() -> None:
    assert Rewriter(StaticAddressBook({}), "PLAINTEXT").rewrite(R.api(3), 12, metadata_v12([])) is None


class Fleet:
    """The registered sidecars a Rewriter is given, per listener (as the server's view)."""

    def __init__(self, table: dict[int, dict[str, HostPort]]) -> None:
        self.table = table

    def __call__(self, listener: str) -> dict[int, HostPort]:
        return {n: e[listener] for n, e in self.table.items() if listener in e}


FLEET = Fleet({1: {"PLAINTEXT": HostPort("sc1", 19092)}, 2: {"PLAINTEXT": HostPort("sc2", 19093)},
               3: {"PLAINTEXT": HostPort("sc3", 19094), "SSL": HostPort("sc3", 19194)}})
BOOK = StaticAddressBook({1: HostPort("sc1", 19092), 2: HostPort("sc2", 19093), 3: HostPort("sc3", 19094)})


def test_metadata_names_a_fleet_sidecar_whose_broker_it_lacks() -> None:
    """Broker 3 restarting: Kafka's Metadata leaves it out, but sidecar 3 still coordinates
    groups, so the list names it, after the broker's own entries."""
    original = metadata_v12([(2, "b2", 9093, "r2"), (1, "b1", 9092, None)])
    result = Rewriter(BOOK, "PLAINTEXT", fleet=FLEET).rewrite(R.api(3), 12, original)
    assert result is not None
    assert (result.rewritten, result.unmapped) == (3, 0)
    expected = MetadataResponse[12].decode(original).to_dict()
    expected["brokers"] = [
        {"node_id": 2, "host": "sc2", "port": 19093, "rack": "r2"},
        {"node_id": 1, "host": "sc1", "port": 19092, "rack": None},
        {"node_id": 3, "host": "sc3", "port": 19094, "rack": None},
    ]
    assert MetadataResponse[12].decode(result.body).to_dict() == expected


@pytest.mark.parametrize("version", [0, 1, 9])
def test_metadata_names_the_fleet_at_versions_without_racks_or_tags(version: int) -> None:
    """A broker behind three sidecars whose ids are not its own (the test fleet's shape)."""
    original = bytes(MetadataResponse[version](
        brokers=[MB(node_id=111, host="b", port=9092, rack=None)],
        **({"controller_id": 111} if version else {}),
        **({"throttle_time_ms": 0, "cluster_id": "c"} if version >= 3 else {}),
        topics=[]).encode())
    book = StaticAddressBook({111: HostPort("sc1", 19092)})
    result = Rewriter(book, "PLAINTEXT", fleet=FLEET).rewrite(R.api(3), version, original)
    assert result is not None
    brokers = MetadataResponse[version].decode(result.body).brokers
    assert [(b.node_id, b.host, b.port) for b in brokers] == [(111, "sc1", 19092), (1, "sc1", 19092),
                                                            (2, "sc2", 19093), (3, "sc3", 19094)]


def test_the_fleet_is_named_on_its_own_listener_and_only_in_metadata() -> None:
    original = metadata_v12([(3, "b3", 9093, None)])
    result = Rewriter(BOOK, "SSL", fleet=FLEET).rewrite(R.api(3), 12, original)
    # SSL: sidecars 1 and 2 have no such listener; sidecar 3 is listed (its broker's entry).
    assert result is not None
    assert [(b.node_id, b.host, b.port) for b in MetadataResponse[12].decode(result.body).brokers] == [
        (3, "sc3", 19094)]
    cluster = bytes(DescribeClusterResponse[1](
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1, cluster_id="c", controller_id=1,
        brokers=[DescribeClusterResponse.DescribeClusterBroker(broker_id=1, host="b1", port=9092, rack=None)],
    ).encode())
    described = Rewriter(BOOK, "PLAINTEXT", fleet=FLEET).rewrite(R.api(60), 1, cluster)
    assert described is not None
    assert [(b.broker_id, b.host, b.port) for b in DescribeClusterResponse[1].decode(described.body).brokers] == [
        (1, "sc1", 19092)]


def find_coordinator(version: int, **fields: Any) -> bytes:
    return bytes(FindCoordinatorResponse[version](throttle_time_ms=0, **fields).encode())


def test_find_coordinator_single() -> None:
    book = StaticAddressBook({1: HostPort("sc1", 19092)})
    for version in range(4):
        extra: dict[str, Any] = {"error_message": None} if version >= 1 else {}
        original = find_coordinator(version, error_code=0, node_id=1, host="b1", port=9092, **extra)
        result = Rewriter(book, "PLAINTEXT").rewrite(R.api(10), version, original)
        assert result is not None
        got = FindCoordinatorResponse[version].decode(result.body)
        assert (got.error_code, got.node_id, got.host, got.port) == (0, 1, "sc1", 19092)


def test_find_coordinator_single_unmapped_becomes_coordinator_not_available() -> None:
    unmapped = Unmapped()
    original = find_coordinator(3, error_code=0, error_message=None, node_id=2, host="b2", port=9093)
    result = Rewriter(StaticAddressBook({}), "PLAINTEXT", unmapped).rewrite(R.api(10), 3, original)
    assert result is not None
    got = FindCoordinatorResponse[3].decode(result.body)
    assert (got.error_code, got.node_id, got.host, got.port) == (15, -1, "", -1)
    assert unmapped.calls == [("FindCoordinator", 2)]


def test_find_coordinator_error_answer_is_left_alone() -> None:
    unmapped = Unmapped()
    original = find_coordinator(3, error_code=15, error_message="x", node_id=-1, host="", port=-1)
    assert Rewriter(StaticAddressBook({}), "PLAINTEXT", unmapped).rewrite(R.api(10), 3, original) is None
    assert unmapped.calls == []


def test_find_coordinator_batched() -> None:
    C = FindCoordinatorResponse.Coordinator
    original = find_coordinator(4, coordinators=[
        C(key="g1", node_id=1, host="b1", port=9092, error_code=0, error_message=None),
        C(key="g2", node_id=2, host="b2", port=9093, error_code=0, error_message=None),
        C(key="g3", node_id=-1, host="", port=-1, error_code=16, error_message="not"),
    ])
    unmapped = Unmapped()
    book = StaticAddressBook({1: HostPort("sc1", 19092)})
    result = Rewriter(book, "PLAINTEXT", unmapped).rewrite(R.api(10), 4, original)
    assert result is not None
    got = FindCoordinatorResponse[4].decode(result.body).coordinators
    assert [(c.key, c.node_id, c.host, c.port, c.error_code, c.error_message) for c in got] == [
        ("g1", 1, "sc1", 19092, 0, None),
        ("g2", -1, "", -1, 15, None),
        ("g3", -1, "", -1, 16, "not"),
    ]
    assert unmapped.calls == [("FindCoordinator", 2)]


def test_describe_cluster() -> None:
    B = DescribeClusterResponse.DescribeClusterBroker
    original = bytes(DescribeClusterResponse[1](
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1, cluster_id="c",
        controller_id=1, brokers=[B(broker_id=1, host="b1", port=9092, rack=None)],
    ).encode())
    book = OffsetAddressBook({"PLAINTEXT": 5})
    result = Rewriter(book, "PLAINTEXT").rewrite(R.api(60), 1, original)
    assert result is not None
    got = DescribeClusterResponse[1].decode(result.body)
    assert [(b.broker_id, b.host, b.port) for b in got.brokers] == [(1, "b1", 9097)]
    assert got.cluster_id == "c"


def test_produce_node_endpoints() -> None:
    E = ProduceResponse.NodeEndpoint
    T = ProduceResponse.TopicProduceResponse
    P = T.PartitionProduceResponse
    original = bytes(ProduceResponse[10](
        responses=[T(name="t", partition_responses=[P(index=0, error_code=6, base_offset=-1)])],
        throttle_time_ms=0, node_endpoints=[E(node_id=2, host="b2", port=9093, rack=None)],
    ).encode())
    book = StaticAddressBook({2: HostPort("sc2", 19093)})
    result = Rewriter(book, "PLAINTEXT").rewrite(R.api(0), 10, original)
    assert result is not None
    got = ProduceResponse[10].decode(result.body)
    assert [(e.node_id, e.host, e.port) for e in got.node_endpoints] == [(2, "sc2", 19093)]
    assert got.responses[0].partition_responses[0].error_code == 6
    plain = bytes(ProduceResponse[10](
        responses=[T(name="t", partition_responses=[P(index=0, error_code=0, base_offset=5)])],
        throttle_time_ms=0,
    ).encode())
    assert Rewriter(book, "PLAINTEXT").rewrite(R.api(0), 10, plain) is None


# -- addressing ----------------------------------------------------------------------------


def test_offset_address_book() -> None:
    book = OffsetAddressBook({"PLAINTEXT": 10000, "LOW": -9092})
    assert book.lookup(1, "h", 9092, "PLAINTEXT") == HostPort("h", 19092)
    assert book.lookup(1, "h", 60000, "PLAINTEXT") is None  # 70000 is no port
    assert book.lookup(1, "h", 9092, "LOW") is None  # port 0
    assert book.lookup(1, "h", 9093, "LOW") == HostPort("h", 1)
    assert book.lookup(1, "h", 9092, "SSL") is None  # no offset for that listener


def test_static_address_book() -> None:
    book = StaticAddressBook({1: HostPort("a", 1), 2: HostPort("b", 2)})
    assert book.lookup(2, "ignored", 0, "ANY") == HostPort("b", 2)
    assert book.lookup(3, "h", 9092, "PLAINTEXT") is None


def test_registered_address_book() -> None:
    book = RegisteredAddressBook()
    assert book.lookup(1, "h", 9092, "PLAINTEXT") is None
    first = {1: {"PLAINTEXT": HostPort("s1", 1), "SSL": HostPort("s1", 2)}}
    book.replace(first)
    assert book.lookup(1, "h", 9092, "SSL") == HostPort("s1", 2)
    assert book.lookup(1, "h", 9092, "OTHER") is None
    book.replace({2: {"PLAINTEXT": HostPort("s2", 1)}})
    assert book.lookup(1, "h", 9092, "PLAINTEXT") is None
    assert book.lookup(2, "h", 9092, "PLAINTEXT") == HostPort("s2", 1)
    assert first == {1: {"PLAINTEXT": HostPort("s1", 1), "SSL": HostPort("s1", 2)}}
