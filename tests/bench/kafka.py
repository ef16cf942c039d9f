"""A minimal raw Kafka client for load generation: blocking sockets, prebuilt frames.

The load generator must cost as little CPU as possible, because it shares the machine's
two cores with the broker and the proxy under test. So requests are built once with our
protocol package (headers and bodies) and kafka-python's record-batch builder (an
independent encoder), then sent again and again: a window of ``W`` frames with
correlation ids ``0..W-1`` is kept in flight, and each response that comes back releases
the frame with the same id, which is sent again unchanged. Reusing correlation ids is
legal: Kafka only requires that responses come back in request order, which each frame's
position in the ring already checks.

Responses are delimited by their size prefix and counted; only the ones a workload
samples are decoded (to check their error codes).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Mapping
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder

from protocol.apis import DEFAULT_REGISTRY
from protocol.framing import encode_frame
from protocol.headers import encode_request_header
from protocol.schema import decode, encode

CLIENT_ID = "ksidecar-bench"
RECORD_SIZE = 1024
_SIZE = struct.Struct(">i")


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` as a tuple."""
    host, _, port = address.rpartition(":")
    return host, int(port)


def request(api_key: int, version: int, correlation_id: int, body: Mapping[str, Any] | bytes) -> bytes:
    """A whole request frame (size prefix included), body encoded with our schema."""
    api = DEFAULT_REGISTRY.api(api_key)
    payload = body if isinstance(body, bytes) else encode(api.request, version, body)
    head = encode_request_header(
        api_key, version, correlation_id, CLIENT_ID, api.request_header_version(version)
    )
    return encode_frame(head + payload)


def response_body(api_key: int, version: int, frame: bytes | memoryview) -> Any:
    """Decode a response frame (size prefix excluded) with our schema."""
    api = DEFAULT_REGISTRY.api(api_key)
    skip = 4 if api.response_header_version(version) == 0 else 5
    return decode(api.response, version, frame[skip:])


def record_batch(count: int, size: int = RECORD_SIZE) -> bytes:
    """One uncompressed v2 record batch of ``count`` records of ``size`` bytes each."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=count * (size + 64) + 1024,
    )  # fmt: skip
    now = int(time.time() * 1000)
    value = bytes(range(256)) * (size // 256) + bytes(size % 256)
    for offset in range(count):
        if builder.append(offset, now, None, value, []) is None:
            raise ValueError("record batch builder is full")
    return bytes(builder.build())


def produce_request(
    correlation_id: int, topic: str, batch: bytes, acks: int, version: int = 10, partition: int = 0
) -> bytes:
    """A Produce request frame for ``partition`` (0 unless given) of ``topic``."""
    return request(0, version, correlation_id, {
        "TransactionalId": None,
        "Acks": acks,
        "TimeoutMs": 30000,
        "TopicData": [{"Name": topic, "PartitionData": [{"Index": partition, "Records": batch}]}],
    })  # fmt: skip


class RawConnection:
    """One blocking TCP connection that sends frames and reads whole response frames."""

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(split_address(address), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = bytearray()
        self._start = 0

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes | bytearray | memoryview) -> None:
        """Write all of ``data``."""
        self.sock.sendall(data)

    def receive(self) -> int:
        """Read what the socket has (blocking for at least one byte); return the count."""
        chunk = self.sock.recv(4 << 20)
        if not chunk:
            raise ConnectionError("peer closed the connection")
        if self._start and self._start == len(self._buffer):
            self._buffer = bytearray(chunk)
            self._start = 0
        else:
            if self._start > (1 << 20):
                del self._buffer[: self._start]
                self._start = 0
            self._buffer += chunk
        return len(chunk)

    def take_frames(self, keep: bool = False) -> tuple[int, list[bytes]]:
        """Complete response frames buffered so far: their count, and their bodies if ``keep``."""
        buffer, start, count = self._buffer, self._start, 0
        kept: list[bytes] = []
        end = len(buffer)
        while end - start >= 4:
            (size,) = _SIZE.unpack_from(buffer, start)
            if end - start - 4 < size:
                break
            if keep:
                kept.append(bytes(buffer[start + 4 : start + 4 + size]))
            start += 4 + size
            count += 1
        self._start = start
        return count, kept

    def read_frame(self) -> bytes:
        """The next response frame body (blocking)."""
        while True:
            count, frames = self.take_frames_limited()
            if count:
                return frames[0]
            self.receive()

    def take_frames_limited(self) -> tuple[int, list[bytes]]:
        """At most one complete frame (for request/response calls)."""
        buffer, start = self._buffer, self._start
        if len(buffer) - start < 4:
            return 0, []
        (size,) = _SIZE.unpack_from(buffer, start)
        if len(buffer) - start - 4 < size:
            return 0, []
        self._start = start + 4 + size
        return 1, [bytes(buffer[start + 4 : start + 4 + size])]

    def call(self, api_key: int, version: int, body: Mapping[str, Any] | bytes) -> Any:
        """One request, its decoded response."""
        self.send(request(api_key, version, 1, body))
        return response_body(api_key, version, self.read_frame())


def create_topic(address: str, name: str, partitions: int = 1) -> None:
    """Create ``name`` (CreateTopics v4); an existing topic is fine."""
    with RawConnection(address) as conn:
        body = conn.call(19, 4, {
            "Topics": [{"Name": name, "NumPartitions": partitions, "ReplicationFactor": 1,
                        "Assignments": [], "Configs": []}],
            "TimeoutMs": 5000,
            "ValidateOnly": False,
        })  # fmt: skip
    error = body.Topics[0].ErrorCode
    if error not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
        raise RuntimeError(f"CreateTopics {name}: error {error}")
