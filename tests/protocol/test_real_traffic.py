"""Frames real clients exchange with a real broker all decode, and re-encode byte-identically.

confluent-kafka (librdkafka), kafka-python and aiokafka talk to a Tansu broker through a
small recording relay written here: it copies bytes both ways untouched and splits each
direction into frames with :class:`~protocol.framing.FrameDecoder`; the broker answers. The
broker is started for this module with its advertised listener set to the relay, so every
connection a client opens after bootstrap (leaders, coordinators) comes through the relay too.

Each client creates a topic, produces, consumes in a group with commits, and runs admin
calls (create, describe, list). Afterwards, per connection:

* every request decodes (header and body) with our schemas; responses are paired with their
  requests by :class:`~protocol.correlation.CorrelationTracker` and decode at the request's
  version;
* every message re-encodes to the exact bytes received, unless it carried a tagged field at
  its default value (a writer may send those; ours never does): such messages are detected
  by reading the tagged sections on the wire, and must then still decode to the same value.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import socket
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import construct as c
import pytest

from protocol import primitives as p
from protocol.apis import API_VERSIONS, DEFAULT_REGISTRY, Api
from protocol.correlation import CorrelationTracker, FrameKind, InFlight
from protocol.errors import DecodeError, TrailingBytes
from protocol.framing import FrameDecoder
from protocol.headers import decode_request_header, decode_response_header, peek_correlation_id
from protocol.records import summarize
from protocol.schema import decode, decode_interpreted, decode_prefix, encode
from protocol.spec import MessageSpec
from proxy.tools.rig.ports import LOOPBACK
from proxy.tools.rig.process import ManagedProcess, start_on_port
from proxy.tools.rig.tansu import api_versions, find_tansu
from tests.protocol.strategies import plain

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECORDS = 60
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")


# --------------------------------------------------------------------------- the relay


@dataclass
class Connection:
    """One client connection through the relay: its frames in each direction, in order."""

    client: str
    requests: list[bytes] = field(default_factory=list)
    responses: list[bytes] = field(default_factory=list)


class Relay:
    """A TCP relay that records frames; the bytes it forwards are never altered."""

    def __init__(self) -> None:
        self.listener = socket.create_server((LOOPBACK, 0))
        self.port: int = self.listener.getsockname()[1]
        self.upstream: tuple[str, int] | None = None
        self.label = "setup"
        self.connections: list[Connection] = []
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._spawn(self._accept)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        assert self.upstream is not None
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed by stop()
            broker = socket.create_connection(self.upstream)
            connection = Connection(self.label)
            with self._lock:
                self.connections.append(connection)
                self._sockets += [client, broker]
            self._spawn(self._pump, client, broker, connection.requests)
            self._spawn(self._pump, broker, client, connection.responses)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, frames: list[bytes]) -> None:
        decoder = FrameDecoder()
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                decoder.receive_data(data)
                while isinstance(frame := decoder.next_frame(), memoryview):
                    frames.append(bytes(frame[4:]))
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def stop(self) -> None:
        self.listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()
        for thread in self._threads:
            thread.join(timeout=5)


def start_advertising_broker(log_dir: Path, advertised_port: int) -> tuple[int, ManagedProcess]:
    """A memory-backed Tansu broker that tells clients to connect to the relay's port.

    Returns the port it listens on and the running process.
    """
    binary = find_tansu()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            ("RUST_LOG", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "CLUSTER_ID")
        )
    }

    def build(port: int) -> ManagedProcess:
        argv = [
            str(binary), "broker",
            "--cluster-id", "ksidecar-traffic",
            "--listener-url", f"tcp://{LOOPBACK}:{port}",
            "--advertised-listener-url", f"tcp://{LOOPBACK}:{advertised_port}",
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip
        return ManagedProcess(
            "tansu-traffic",
            argv,
            log_path=log_dir / "tansu-traffic.log",
            probe=lambda: bool(api_versions(LOOPBACK, port, timeout=1.0)),
            env=env,
        )

    return start_on_port(build, None)


# --------------------------------------------------------------------------- the clients


def run_confluent(bootstrap: str, topic: str, group: str) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ConfigResource,
        NewTopic,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    for i in range(RECORDS):
        producer.produce(topic, b"v%d" % i, key=b"k%d" % i, headers=[("h", b"x")])
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    got = 0
    for _ in range(60):
        messages = consumer.consume(100, timeout=1.0)
        got += sum(1 for m in messages if m.error() is None)
        if messages:
            consumer.commit(asynchronous=False)
        if got >= RECORDS:
            break
    assert got == RECORDS
    consumer.close()
    admin.list_consumer_groups().result(timeout=30)
    admin.describe_consumer_groups([group])[group].result(timeout=30)
    admin.list_topics(timeout=10)
    _quietly(lambda: admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]))


def run_kafka_python(bootstrap: str, topic: str, group: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
        from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, compression_type="gzip")
    for i in range(RECORDS):
        producer.send(topic, b"v%d" % i, key=b"k%d" % i)
    producer.flush(30)
    fire_and_forget = KafkaProducer(bootstrap_servers=bootstrap, acks=0)
    fire_and_forget.send(topic, b"acks=0")
    fire_and_forget.flush(30)
    fire_and_forget.close()
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
    )
    got = 0
    for _ in range(60):
        for records in consumer.poll(timeout_ms=1000).values():
            got += len(records)
        if got:
            consumer.commit()
        if got >= RECORDS + 1:
            break
    assert got >= RECORDS
    consumer.close()
    admin.list_groups()
    _quietly(lambda: admin.describe_groups([group]))
    admin.describe_cluster()
    _quietly(lambda: admin.list_group_offsets({group: None}))
    admin.close()


def run_aiokafka(bootstrap: str, topic: str, group: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 2, 1)])
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        await producer.start()
        await asyncio.gather(*[await producer.send(topic, b"v%d" % i) for i in range(RECORDS)])
        await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
        )
        await consumer.start()
        got = 0
        for _ in range(60):
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                got += len(records)
            if got:
                await consumer.commit()
            if got >= RECORDS:
                break
        assert got == RECORDS
        await consumer.stop()
        await admin.list_consumer_groups()
        with contextlib.suppress(Exception):  # the frames are what this test is after
            await admin.describe_consumer_groups([group])
        await admin.describe_cluster()
        await admin.close()

    asyncio.run(main())


def _quietly(call: Callable[[], Any]) -> None:
    """Admin calls the broker may not implement: the frames matter, not the outcome."""
    with contextlib.suppress(Exception):
        call()


RUNNERS: dict[str, Callable[[str, str, str], None]] = {
    "confluent-kafka": run_confluent,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
}


@pytest.fixture(scope="module")
def recording(rig_dir: Path) -> Iterator[list[Connection]]:
    """Run every client through the relay against a fresh broker; yield the connections."""
    relay = Relay()
    broker_port, broker = start_advertising_broker(rig_dir, relay.port)
    try:
        relay.start((LOOPBACK, broker_port))
        for client in CLIENTS:
            relay.label = client
            tag = uuid.uuid4().hex[:8]
            RUNNERS[client](f"{LOOPBACK}:{relay.port}", f"traffic-{client}-{tag}", f"g-{tag}")
        relay.stop()
        yield relay.connections
    finally:
        relay.stop()
        broker.stop()


# --------------------------------------------------------------------------- checking


def _head_id(tracker: CorrelationTracker) -> int | None:
    head = tracker._pending[0] if len(tracker) else None
    return head.correlation_id if head is not None else None


@dataclass
class Exchange:
    """One decoded request or response and what re-encoding it gave."""

    api: Api
    version: int
    kind: str
    body: bytes
    value: c.Container
    default_tags: list[str]
    #: Bytes after the message in its frame (a known client bug, see :func:`exchanges`).
    trailing: int


def tagged_defaults_sent(spec: MessageSpec, version: int, body: bytes) -> list[str]:
    """Known tags present on the wire with their default value (interpreted decode, recorded).

    The tagged sections are read again from the wire by a reader that knows nothing of the
    schema (count, then tag/size/bytes), so "present" is what the peer sent.
    """
    found: list[str] = []
    original = p.TaggedFields.parse_into

    def recording(self: p.TaggedFields, obj: c.Container, stream: io.BytesIO, *rest: Any) -> None:
        start = stream.tell()
        original(self, obj, stream, *rest)
        end = stream.tell()
        section = io.BytesIO(stream.getbuffer()[start:end])
        for _ in range(p._read_uvarint(section, 5)):
            tag = p._read_uvarint(section, 5)
            section.seek(p._read_uvarint(section, 5), 1)
            known = self.known.get(tag)
            if known is not None and p.is_default(obj[known.name], known.default):
                found.append(f"{known.name} (tag {tag})")

    setattr(p.TaggedFields, "parse_into", recording)  # noqa: B010 - patched for one decode
    try:
        decode_interpreted(spec, version, body)
    finally:
        setattr(p.TaggedFields, "parse_into", original)  # noqa: B010
    return found


def exchanges(connection: Connection) -> Iterator[Exchange]:
    """Every message on ``connection``, decoded; responses paired by correlation id."""
    tracker = CorrelationTracker()
    silent: dict[int, InFlight] = {}
    for frame in connection.requests:
        record = tracker.classify(frame)
        assert record.kind is FrameKind.REQUEST and record.header is not None
        tracker.expect(record)
        if not record.expects_response:
            silent[record.header.correlation_id] = record
        header = record.header
        assert decode_request_header(frame) == header
        api = DEFAULT_REGISTRY.checked(header.api_key, header.api_version)
        body = frame[header.size :]
        trailing = 0
        try:
            value = decode(api.request, header.api_version, body)
        except TrailingBytes:
            # librdkafka #5049: its "all topics" Metadata request (v9+) writes the null
            # Topics array as a classic int32 before the compact byte. Kafka reads 0x00 as
            # null (all topics) and ignores what is left; so must a reader of real traffic.
            value, used = decode_prefix(api.request, header.api_version, body)
            assert (api.key, value["Topics"]) == (3, None), api.name
            trailing, body = len(body) - used, body[:used]
        defaults = tagged_defaults_sent(api.request, header.api_version, body)
        yield Exchange(api, header.api_version, "request", body, value, defaults, trailing)
    for frame in connection.responses:
        correlation_id = peek_correlation_id(frame)
        if correlation_id in silent and correlation_id != _head_id(tracker):
            # Tansu answers Produce with acks=0, which Kafka never does; the sidecar copes
            # (proxy/datapath/connection.py), and the answer must still decode.
            record = silent.pop(correlation_id)
        else:
            record = tracker.on_response(frame)
        assert record.header is not None
        api = DEFAULT_REGISTRY.api(record.header.api_key)
        version = record.header.api_version
        _, size = decode_response_header(frame, record.response_header_version)
        body = frame[size:]
        try:
            value = decode(api.response, version, body)
        except DecodeError:
            # ApiVersions at a version the broker lacks: error 35 in a v0 body (KIP-511).
            assert api.key == API_VERSIONS
            version = 0
            value = decode(api.response, 0, body)
            assert value["ErrorCode"] == 35
        defaults = tagged_defaults_sent(api.response, version, body)
        yield Exchange(api, version, "response", body, value, defaults, 0)


@pytest.fixture(scope="module")
def decoded(recording: list[Connection]) -> dict[str, list[Exchange]]:
    by_client: dict[str, list[Exchange]] = {client: [] for client in CLIENTS}
    for connection in recording:
        if connection.client in by_client:
            by_client[connection.client].extend(exchanges(connection))
    return by_client


@pytest.mark.parametrize("client", CLIENTS)
def test_traffic_covers_the_client_apis(client: str, decoded: dict[str, list[Exchange]]) -> None:
    names = {e.api.name for e in decoded[client] if e.kind == "request"}
    expected = {
        "ApiVersions",
        "Metadata",
        "CreateTopics",
        "Produce",
        "Fetch",
        "FindCoordinator",
        "JoinGroup",
        "SyncGroup",
        "OffsetCommit",
        "OffsetFetch",
        "ListGroups",
    }
    assert expected <= names, sorted(names)
    responded = {e.api.name for e in decoded[client] if e.kind == "response"}
    assert expected <= responded, sorted(responded)


@pytest.mark.parametrize("client", CLIENTS)
def test_trailing_bytes_only_from_the_known_librdkafka_bug(
    client: str, decoded: dict[str, list[Exchange]]
) -> None:
    padded = [e for e in decoded[client] if e.trailing]
    if client != "confluent-kafka":
        assert padded == []
    assert all((e.api.key, e.kind, e.trailing) == (3, "request", 3) for e in padded)


@pytest.mark.parametrize("client", CLIENTS)
def test_every_message_reencodes_byte_identically(
    client: str, decoded: dict[str, list[Exchange]]
) -> None:
    identical = 0
    for exchange in decoded[client]:
        spec = exchange.api.request if exchange.kind == "request" else exchange.api.response
        again = encode(spec, exchange.version, exchange.value)
        if exchange.default_tags:
            # Ours leaves default-valued tags out; the value must survive all the same.
            assert again != exchange.body
            assert plain(decode(spec, exchange.version, again)) == plain(exchange.value)
            continue
        assert again == exchange.body, f"{spec.name} v{exchange.version}"
        identical += 1
    assert identical > 20


@pytest.mark.parametrize("client", CLIENTS)
def test_record_batches_in_produce_and_fetch_are_readable(
    client: str, decoded: dict[str, list[Exchange]]
) -> None:
    produced = fetched = 0
    for exchange in decoded[client]:
        if exchange.api.name == "Produce" and exchange.kind == "request":
            for topic in exchange.value["TopicData"]:
                for partition in topic["PartitionData"]:
                    summary = summarize(
                        partition["Records"] or b"", allow_partial_tail=False, verify_crc=True
                    )
                    assert summary.crc_ok is not False
                    produced += summary.record_count
        if exchange.api.name == "Fetch" and exchange.kind == "response":
            for topic in exchange.value["Responses"]:
                for partition in topic["Partitions"]:
                    fetched += summarize(partition["Records"] or b"").record_count
    assert produced >= RECORDS
    assert fetched >= RECORDS
