"""A small raw Kafka client for wire-level tests.

Requests are built with :mod:`protocol.headers` and :mod:`protocol.schema` (or given as
raw bytes); responses are read as whole frames and, where a test wants an independent
reading, decoded with kafka-python's codec (:func:`kp_decode`), which is generated from
Kafka's JSON specs and shares no code with ours.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import trio

from protocol.apis import DEFAULT_REGISTRY, ApiRegistry
from protocol.framing import EOF, NEED_DATA, FrameDecoder, encode_frame
from protocol.headers import encode_request_header
from protocol.schema import decode, encode

if TYPE_CHECKING:
    from proxy.control.server import Sidecar

CLIENT_ID = "wire-test"


def request_frame(
    api_key: int,
    version: int,
    correlation_id: int,
    body: Mapping[str, Any] | bytes = b"",
    *,
    client_id: str | None = CLIENT_ID,
    registry: ApiRegistry = DEFAULT_REGISTRY,
) -> bytes:
    """A whole request frame; ``body`` is field values (encoded with our schema) or raw bytes.

    For an API or version we do not know, the header is v1 (what every client sends) and
    ``body`` must be bytes.
    """
    api = registry.get(api_key)
    known = api is not None and version in api.versions
    header_version = api.request_header_version(version) if api is not None and known else 1
    if isinstance(body, Mapping):
        assert api is not None and known, f"no schema for {api_key} v{version}"
        payload = encode(api.request, version, body)
    else:
        payload = body
    head = encode_request_header(api_key, version, correlation_id, client_id, header_version)
    return encode_frame(head + payload)


def response_body(
    frame: bytes, api_key: int, version: int, registry: ApiRegistry = DEFAULT_REGISTRY
) -> tuple[int, bytes]:
    """``(correlation id, body after the response header)`` of a response frame (no prefix).

    The header version is worked out here from the rule in PROTOCOL_NOTES.md, not asked of
    the code under test: ApiVersions always v0, else v1 (one tag-count byte, which our
    tests expect to be 0) when the version is flexible.
    """
    correlation_id = struct.unpack_from(">i", frame)[0]
    api = registry.api(api_key)
    flexible = api_key != 18 and api.response.is_flexible(version)
    if flexible:
        assert frame[4] == 0, "response header carries tagged fields"
        return correlation_id, frame[5:]
    return correlation_id, frame[4:]


def our_decode(
    frame: bytes, api_key: int, version: int, registry: ApiRegistry = DEFAULT_REGISTRY
) -> tuple[int, Any]:
    """Decode a response frame with our own schema table: ``(correlation id, body)``."""
    correlation_id, body = response_body(frame, api_key, version, registry)
    return correlation_id, decode(registry.api(api_key).response, version, body)


def kp_decode(response_class: Any, version: int, frame: bytes, api_key: int) -> tuple[int, Any]:
    """Decode a response frame with kafka-python's codec (an independent oracle)."""
    correlation_id, body = response_body(frame, api_key, version)
    return correlation_id, response_class[version].decode(io.BytesIO(body))


def kp_request(request: Any, correlation_id: int, client_id: str = CLIENT_ID) -> bytes:
    """A whole request frame encoded by kafka-python (header included)."""
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


async def call_kp(wire: Wire, request: Any, response_class: Any, key: int, version: int, corr: int) -> Any:
    """Send a request encoded by kafka-python and decode its answer with kafka-python."""
    await wire.send(kp_request(request, corr))
    frame = await wire.read_frame()
    assert frame is not None, "connection closed instead of answering"
    got_corr, body = kp_decode(response_class, version, frame, key)
    assert got_corr == corr
    return body


class Wire:
    """One raw client connection (a trio stream) that sends bytes and reads frames."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(1 << 30)
        self.closed = False

    @classmethod
    async def connect(cls, host: str, port: int) -> Wire:
        """Open a plain TCP connection."""
        return cls(await trio.open_tcp_stream(host, port))

    async def send(self, data: bytes | Iterable[bytes]) -> None:
        """Write bytes (or several frames) in one write."""
        payload = data if isinstance(data, bytes | bytearray) else b"".join(data)
        await self.stream.send_all(payload)

    async def read_frame(self) -> bytes | None:
        """The next frame body (size prefix removed), or ``None`` at end of stream."""
        while True:
            frame = self.decoder.next_frame()
            if frame is EOF:
                return None
            if frame is not NEED_DATA:
                return bytes(frame[4:])
            data = await self._receive()
            self.decoder.receive_data(data)

    async def read_frames(self, count: int) -> list[bytes]:
        """Exactly ``count`` frames; fails if the stream ends first."""
        frames: list[bytes] = []
        for _ in range(count):
            frame = await self.read_frame()
            assert frame is not None, f"connection closed after {len(frames)} of {count} frames"
            frames.append(frame)
        return frames

    async def call(
        self,
        api_key: int,
        version: int,
        correlation_id: int,
        body: Mapping[str, Any] | bytes = b"",
    ) -> bytes:
        """Send one request and return its response frame (correlation id checked)."""
        await self.send(request_frame(api_key, version, correlation_id, body))
        frame = await self.read_frame()
        assert frame is not None, f"connection closed instead of answering {api_key} v{version}"
        assert struct.unpack_from(">i", frame)[0] == correlation_id
        return frame

    async def _receive(self) -> bytes:
        """The next bytes from the peer; ``b""`` (and ``closed`` set) once it has gone."""
        try:
            data = await self.stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            data = b""
        if not data:
            self.closed = True
        return data

    async def wait_closed(self) -> bytes:
        """Read until the peer closes; return whatever bytes arrived first."""
        rest = bytearray()
        while True:
            data = await self._receive()
            if not data:
                return bytes(rest)
            rest += data

    async def aclose(self) -> None:
        """Close our side."""
        await trio.aclose_forcefully(self.stream)


async def read_one_frame(stream: trio.abc.Stream) -> bytes:
    """The next whole frame on ``stream`` (size prefix included), for a test that expects
    exactly one answer and nothing after it (no buffering between calls, unlike `Wire`)."""
    buffer = b""
    while len(buffer) < 4 or len(buffer) < 4 + struct.unpack(">i", buffer[:4])[0]:
        data = await stream.receive_some(65536)
        assert data
        buffer += data
    return buffer


async def create_topic(wire: Wire, name: str, partitions: int = 1, correlation_id: int = 77) -> None:
    """CreateTopics v4 for one topic; asserts it was created."""
    frame = await wire.call(19, 4, correlation_id, {
        "Topics": [{"Name": name, "NumPartitions": partitions, "ReplicationFactor": 1,
                    "Assignments": [], "Configs": []}],
        "TimeoutMs": 5000,
        "ValidateOnly": False,
    })
    _, body = our_decode(frame, 19, 4)
    assert [(t.Name, t.ErrorCode) for t in body.Topics] == [(name, 0)]


def sample(sidecar: Sidecar, name: str, **labels: str) -> float:
    """One sample of the sidecar's own metrics registry (0 when never recorded)."""
    value = sidecar.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def confluent_consume(config: Mapping[str, Any], topic: str, count: int, seconds: float) -> list[tuple[bytes, bytes]]:
    """Read up to ``count`` (key, value) pairs of partition 0 from offset 0 with confluent-kafka
    (blocking; run it in a thread)."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**config, "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[bytes, bytes]] = []
    try:
        deadline = time.monotonic() + seconds
        while len(got) < count and time.monotonic() < deadline:
            message: Any = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.key(), message.value()))
    finally:
        consumer.close()
    return got


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` (cheap, in-process state) until it holds or ``timeout`` passes."""
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)
