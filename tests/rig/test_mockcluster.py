"""librdkafka's mock cluster as a rig component: a real launcher process, raw Kafka requests.

Responses are decoded with our own protocol code; what the mock advertises and how it behaves
is written out here by hand, as `proxy/tools/rig/mockcluster.py` documents it. A librdkafka
upgrade that changes any of it fails here first: update the module's notes with the test.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from protocol.apis import DEFAULT_REGISTRY
from protocol.errors import TrailingBytes
from protocol.schema import decode, decode_prefix
from proxy.tools.rig.errors import ComponentStartError
from proxy.tools.rig.mockcluster import MockCluster, MockClusterError, start_mock_cluster
from proxy.tools.rig.mockcluster_main import (
    LIBRARY_ENV,
    ControlError,
    answer,
    parse_bootstraps,
    round_robin_leaders,
)
from tests.faults.support import read_frame, request

pytestmark = pytest.mark.integration

METADATA, API_VERSIONS = 3, 18

# ApiVersions v2 from librdkafka 2.16.0's mock: key -> (min, max).
ADVERTISED = {
    0: (0, 10),  # Produce
    1: (0, 16),  # Fetch
    2: (0, 7),  # ListOffsets
    3: (0, 13),  # Metadata
    8: (0, 9),  # OffsetCommit
    9: (0, 6),  # OffsetFetch
    10: (0, 3),  # FindCoordinator
    11: (0, 6),  # JoinGroup
    12: (0, 5),  # Heartbeat: one past Kafka's last version
    13: (0, 4),  # LeaveGroup
    14: (0, 4),  # SyncGroup
    18: (0, 2),  # ApiVersions
    22: (0, 4),  # InitProducerId
    23: (2, 2),  # OffsetForLeaderEpoch
    24: (0, 1),  # AddPartitionsToTxn
    25: (0, 1),  # AddOffsetsToTxn
    26: (0, 1),  # EndTxn
    28: (0, 3),  # TxnOffsetCommit
    68: (1, 1),  # ConsumerGroupHeartbeat
    71: (0, 0),  # GetTelemetrySubscriptions
    72: (0, 0),  # PushTelemetry
    76: (1, 1),  # ShareGroupHeartbeat
    78: (1, 1),  # ShareFetch
    79: (1, 1),  # ShareAcknowledge
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockCluster]:
    """One three-broker cluster for the module; tests that change a broker put it back."""
    with start_mock_cluster(3, log_dir=tmp_path_factory.mktemp("mockcluster")) as mc:
        yield mc


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _exchange(address: tuple[str, int], api_key: int, version: int, body: dict[str, Any]) -> bytes:
    """One request on a fresh connection; the response body (its header stripped)."""
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(request(api_key, version, 7, body))
        frame = read_frame(sock)
    assert frame[:4] == (7).to_bytes(4, "big"), "correlation id"
    return frame[4 + DEFAULT_REGISTRY.api(api_key).response_header_version(version) :]


def _metadata(
    address: tuple[str, int], topics: list[str] | None = None, version: int = 12
) -> tuple[Any, bytes]:
    """A Metadata response decoded with our schema, and the bytes left after its body."""
    body = {
        "Topics": None if topics is None else [{"Name": name} for name in topics],
        "AllowAutoTopicCreation": False,
    }
    data = _exchange(address, METADATA, version, body)
    value, used = decode_prefix(DEFAULT_REGISTRY.api(METADATA).response, version, data)
    return value, data[used:]


def _leaders(address: tuple[str, int], topic: str) -> dict[int, tuple[int, int]]:
    """Partition -> (leader, leader epoch), from Metadata."""
    value, _ = _metadata(address, [topic])
    (entry,) = value.Topics
    assert entry.ErrorCode == 0, entry
    return {p.PartitionIndex: (p.LeaderId, p.LeaderEpoch) for p in entry.Partitions}


# --------------------------------------------------------------------------- the cluster


def test_metadata_lists_every_broker_at_the_address_the_handle_gives(cluster: MockCluster) -> None:
    assert sorted(cluster.brokers) == [1, 2, 3]
    assert cluster.bootstrap == ",".join(f"{h}:{p}" for h, p in cluster.brokers.values())
    assert cluster.librdkafka_version.startswith("2.")
    for address in cluster.brokers.values():
        value, _ = _metadata(address)
        assert {b.NodeId: (b.Host, b.Port) for b in value.Brokers} == cluster.brokers
        assert value.ControllerId == 1


@pytest.mark.parametrize("version", [8, 9, 12, 13])
def test_flexible_metadata_responses_carry_one_byte_past_the_body(
    cluster: MockCluster, version: int
) -> None:
    spec = DEFAULT_REGISTRY.api(METADATA).response
    data = _exchange(cluster.brokers[1], METADATA, version, {"Topics": None})
    _, used = decode_prefix(spec, version, data)
    if version < 9:  # not flexible: exact
        assert used == len(data)
        decode(spec, version, data)
    else:
        assert data[used:] == b"\x00"
        with pytest.raises(TrailingBytes):
            decode(spec, version, data)


def test_api_versions_advertise_the_documented_table(cluster: MockCluster) -> None:
    spec = DEFAULT_REGISTRY.api(API_VERSIONS).response
    value = decode(spec, 2, _exchange(cluster.brokers[2], API_VERSIONS, 2, {}))
    assert value.ErrorCode == 0
    assert {k.ApiKey: (k.MinVersion, k.MaxVersion) for k in value.ApiKeys} == ADVERTISED
    # v3 is refused, in a body whose key count is a plain byte: 1 entry, read as "empty".
    data = _exchange(cluster.brokers[2], API_VERSIONS, 3, {"ClientSoftwareName": "t"})
    assert data == bytes.fromhex("0023 01 0012 0000 0002 00000000")
    refused, used = decode_prefix(spec, 3, data)
    assert (refused.ErrorCode, list(refused.ApiKeys), used) == (35, [], 8)


@pytest.mark.parametrize(
    ("api_key", "body"),
    [
        (19, {"Topics": [], "TimeoutMs": 1000}),  # CreateTopics
        (20, {"TopicNames": [], "TimeoutMs": 1000}),  # DeleteTopics
        (32, {"Resources": []}),  # DescribeConfigs
        (60, {"IncludeClusterAuthorizedOperations": False}),  # DescribeCluster
        (15, {"Groups": []}),  # DescribeGroups
        (17, {"Mechanism": "PLAIN"}),  # SaslHandshake
        (16, {}),  # ListGroups
    ],
)
def test_an_api_it_does_not_serve_gets_the_connection_closed(
    cluster: MockCluster, api_key: int, body: dict[str, Any]
) -> None:
    with pytest.raises(ConnectionError, match="closed after 0 of 4 bytes"):
        _exchange(cluster.brokers[1], api_key, 0, body)


def test_a_tls_handshake_is_cut_off(cluster: MockCluster) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(cluster.brokers[1], timeout=5) as sock, pytest.raises(OSError):
        context.wrap_socket(sock).close()


def test_admin_calls_that_need_the_controller_get_broker_1(cluster: MockCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    description = admin.describe_cluster(request_timeout=5).result(timeout=10)
    assert description.controller.id == 1
    assert sorted(node.id for node in description.nodes) == [1, 2, 3]


def test_a_created_topic_has_its_leaders_spread_over_every_broker(cluster: MockCluster) -> None:
    topic = _unique("spread")
    cluster.create_topic(topic, 6)
    expected = {0: 1, 1: 2, 2: 3, 3: 1, 4: 2, 5: 3}
    for address in cluster.brokers.values():
        assert {p: leader for p, (leader, _) in _leaders(address, topic).items()} == expected
    assert cluster.leaders(topic) == expected


def test_set_leader_moves_a_leader_and_bumps_its_epoch(cluster: MockCluster) -> None:
    topic = _unique("move")
    cluster.create_topic(topic, 3, replication=3)
    before = _leaders(cluster.brokers[1], topic)
    assert before[0][0] == 1
    cluster.set_leader(topic, 0, 3)
    after = _leaders(cluster.brokers[2], topic)
    assert after[0] == (3, before[0][1] + 1)
    assert (after[1], after[2]) == (before[1], before[2])
    assert cluster.spread_leaders(topic, 3) == {0: 1, 1: 2, 2: 3}
    assert {p: leader for p, (leader, _) in _leaders(cluster.brokers[3], topic).items()} == {
        0: 1, 1: 2, 2: 3,
    }  # fmt: skip


def test_a_broker_down_closes_its_connections_and_refuses_new_ones_until_up(
    cluster: MockCluster,
) -> None:
    topic = _unique("down")
    cluster.create_topic(topic, 3)
    address = cluster.brokers[2]
    existing = socket.create_connection(address, timeout=5)
    try:
        existing.sendall(request(API_VERSIONS, 0, 1, {}))
        assert read_frame(existing)
        cluster.broker_down(2)
        try:
            assert existing.recv(1) == b"", "an open connection ends with EOF"
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(address, timeout=5).close()
            with socket.socket() as squatter, pytest.raises(OSError) as taken:
                squatter.bind(address)
            assert taken.value.errno == errno.EADDRINUSE, "the port stays bound"
            # The others stop listing broker 2, yet it still leads partition 1: no election.
            value, _ = _metadata(cluster.brokers[1], [topic])
            assert sorted(b.NodeId for b in value.Brokers) == [1, 3]
            assert _leaders(cluster.brokers[1], topic)[1][0] == 2
        finally:
            cluster.broker_up(2)
    finally:
        existing.close()
    assert _exchange(address, API_VERSIONS, 0, {})[:2] == b"\x00\x00"
    value, _ = _metadata(cluster.brokers[3])
    assert sorted(b.NodeId for b in value.Brokers) == [1, 2, 3]


def test_set_rtt_delays_every_response_of_that_broker(cluster: MockCluster) -> None:
    def round_trip() -> float:
        began = time.monotonic()
        _exchange(cluster.brokers[3], API_VERSIONS, 0, {})
        return time.monotonic() - began

    cluster.set_rtt(3, 250)
    try:
        assert round_trip() >= 0.25
    finally:
        cluster.set_rtt(3, 0)
    assert round_trip() < 0.25


_SET_LEADER = "rd_kafka_mock_partition_set_leader"


@pytest.mark.parametrize(
    ("bad_call", "message", "call", "error_name"),
    [
        pytest.param(lambda mc, t: mc.set_leader(_unique("never"), 0, 1), "unknown topic",
                     None, None, id="set_leader-unknown-topic"),
        pytest.param(lambda mc, t: mc.set_leader(t, 0, 9), "Broker not available",
                     _SET_LEADER, "BROKER_NOT_AVAILABLE", id="set_leader-unknown-broker"),
        pytest.param(lambda mc, t: mc.set_leader(t, 5, 1), "Unknown topic or partition",
                     _SET_LEADER, "UNKNOWN_TOPIC_OR_PART", id="set_leader-unknown-partition"),
        pytest.param(lambda mc, t: mc.create_topic(t, 3), "Topic already exists",
                     "rd_kafka_mock_topic_create", "TOPIC_ALREADY_EXISTS", id="create-twice"),
        pytest.param(lambda mc, t: mc.create_topic(_unique("empty"), 0),
                     "partitions must be >= 1", None, None, id="create-no-partitions"),
        pytest.param(lambda mc, t: mc.broker_down(0), r"no broker 0: the brokers are 1\.\.3",
                     None, None, id="down-broker-0"),
        pytest.param(lambda mc, t: mc.broker_up(4), "no broker 4", None, None, id="up-broker-4"),
        pytest.param(lambda mc, t: mc.set_rtt(9, 10), "no broker 9", None, None, id="rtt-broker-9"),
        pytest.param(lambda mc, t: mc.set_rtt(1, -1), "rtt must be >= 0", None, None,
                     id="rtt-negative"),
        pytest.param(lambda mc, t: mc.leaders(_unique("never")), "unknown topic", None, None,
                     id="leaders-unknown-topic"),
        pytest.param(lambda mc, t: mc.call("rebalance"), "unknown op 'rebalance'", None, None,
                     id="unknown-op"),
        pytest.param(lambda mc, t: mc.call("set_leader", topic=t), "missing 2 required", None,
                     None, id="missing-arguments"),
    ],
)  # fmt: skip
def test_a_bad_control_call_raises_a_clear_error(
    cluster: MockCluster,
    bad_call: Callable[[MockCluster, str], object],
    message: str,
    call: str | None,
    error_name: str | None,
) -> None:
    topic = _unique("bad")
    cluster.create_topic(topic, 3)
    with pytest.raises(MockClusterError, match=message) as info:
        bad_call(cluster, topic)
    assert (info.value.call, info.value.error_name) == (call, error_name)
    if call is not None:
        assert call in str(info.value)


def test_set_leader_on_an_unknown_topic_does_not_create_it(cluster: MockCluster) -> None:
    topic = _unique("typo")
    with pytest.raises(MockClusterError, match="unknown topic"):
        cluster.set_leader(topic, 0, 1)
    value, _ = _metadata(cluster.brokers[1], [topic])
    assert [t.ErrorCode for t in value.Topics] == [3]  # UNKNOWN_TOPIC_OR_PARTITION


# --------------------------------------------------------------------------- its life cycle


def test_stop_ends_the_launcher_cleanly_and_closes_the_brokers(tmp_path: Path) -> None:
    with start_mock_cluster(2, log_dir=tmp_path) as mc:
        addresses = list(mc.brokers.values())
        assert len(addresses) == 2
        assert _exchange(addresses[1], API_VERSIONS, 0, {})[:2] == b"\x00\x00"
    assert mc.process.returncode == 0
    for address in addresses:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(address, timeout=5).close()
    assert "SIGTERM, stopping" in mc.log_tail()


def test_a_launcher_that_dies_is_reported_with_its_exit_code_and_log(tmp_path: Path) -> None:
    mc = start_mock_cluster(1, log_dir=tmp_path)
    try:
        assert mc.process.pid is not None
        os.kill(mc.process.pid, signal.SIGKILL)
        with pytest.raises(MockClusterError) as info:
            mc.broker_down(1)
    finally:
        mc.stop()
    message = str(info.value)
    assert "mock cluster broker_down: no answer from the launcher" in message
    assert "exit code: -9" in message
    assert str(mc.log_path) in message
    assert "mockcluster: 1 brokers at 127.0.0.1:" in message  # the log tail


def test_a_launcher_that_cannot_start_is_reported_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "no-such-librdkafka.so"
    monkeypatch.setenv(LIBRARY_ENV, str(missing))
    with pytest.raises(ComponentStartError) as info:
        start_mock_cluster(1, log_dir=tmp_path)
    assert info.value.returncode == 2
    assert f"{LIBRARY_ENV}='{missing}' is not a file" in str(info.value)


# --------------------------------------------------------------------------- no process


def test_bootstraps_are_numbered_from_1_in_order() -> None:
    assert parse_bootstraps("127.0.0.1:4001,127.0.0.1:4002") == {
        1: ("127.0.0.1", 4001),
        2: ("127.0.0.1", 4002),
    }
    with pytest.raises(ValueError, match="not host:port"):
        parse_bootstraps("127.0.0.1")


def test_round_robin_gives_each_broker_its_share() -> None:
    assert round_robin_leaders(5, 2) == {0: 1, 1: 2, 2: 1, 3: 2, 4: 1}
    assert round_robin_leaders(0, 3) == {}


def test_the_control_protocol_answers_every_line_with_one_json_object() -> None:
    def fail() -> None:
        raise ControlError("boom", call="rd_kafka_x", code=3, name="UNKNOWN_TOPIC_OR_PART")

    ops: dict[str, Callable[..., Any]] = {"echo": lambda value: value, "fail": fail}
    assert json.loads(answer(ops, b'{"op": "echo", "value": [1, 2]}\n')) == {
        "ok": True,
        "result": [1, 2],
    }
    replies = [
        json.loads(answer(ops, line))
        for line in (b'{"op": "fail"}', b"not json", b"[1]", b'{"op": "nope"}', b'{"op": "echo"}')
    ]
    assert [reply["ok"] for reply in replies] == [False] * 5
    errors = [reply["error"] for reply in replies]
    assert errors[0] == {"call": "rd_kafka_x", "code": 3, "name": "UNKNOWN_TOPIC_OR_PART",
                         "message": "boom"}  # fmt: skip
    assert errors[1]["message"].startswith("bad request:")
    assert errors[2]["message"] == "a request is a JSON object"
    assert errors[3]["message"] == "unknown op 'nope'; known: echo, fail"
    assert "missing 1 required positional argument: 'value'" in errors[4]["message"]
