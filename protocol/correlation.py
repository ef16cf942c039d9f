"""Correlation tracking: which request each response answers, and what it needs to be read.

A Kafka connection answers requests in the order it received them, so one FIFO of
:class:`InFlight` records per connection pairs every response with its request: the
response's correlation id must be the oldest pending one's, else the peer is broken.

Two exceptions shape the tracker (PROTOCOL_NOTES.md):

* Produce with ``acks=0`` gets no response: it is recorded with
  ``expects_response=False`` and never enters the FIFO.
* After a successful SaslHandshake **v0** the client sends raw SASL tokens (size-prefixed,
  no Kafka header) and the broker answers each with a raw token. The tracker counts the
  rounds the mechanism needs (PLAIN and OAUTHBEARER one, SCRAM two); for other mechanisms
  (GSSAPI) it treats client frames as tokens until one reads as a Kafka request header.
"""

from __future__ import annotations

import io
import struct
from collections import deque
from enum import Enum
from typing import NamedTuple

from protocol import primitives as p
from protocol.apis import DEFAULT_REGISTRY, PRODUCE, SASL_HANDSHAKE, ApiRegistry
from protocol.errors import DecodeError, ProtocolError, Truncated
from protocol.headers import RequestHeader, decode_request_header, peek_correlation_id
from protocol.schema import decode

_ACKS = struct.Struct(">h")

#: SASL rounds (client token, server token) each mechanism needs after a v0 handshake.
SASL_ROUNDS = {"PLAIN": 1, "OAUTHBEARER": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2}


class FrameKind(Enum):
    """What a frame on a Kafka connection is."""

    REQUEST = "request"
    SASL_TOKEN = "sasl-token"


class InFlight(NamedTuple):
    """A request (or raw SASL token) the client sent and what its answer needs (a named
    tuple: one is made for every request, at a third of a frozen dataclass's cost)."""

    kind: FrameKind
    header: RequestHeader | None
    expects_response: bool
    response_header_version: int = 0
    #: For SaslHandshake: the mechanism asked for (to enter raw-token mode on success).
    sasl_mechanism: str | None = None

    @property
    def correlation_id(self) -> int | None:
        """The request's correlation id; ``None`` for a raw SASL token."""
        return self.header.correlation_id if self.header is not None else None


class CorrelationMismatch(ProtocolError):
    """The upstream answered with a correlation id other than the oldest pending one."""


def produce_acks(header: RequestHeader, frame: bytes | bytearray | memoryview) -> int:
    """The ``Acks`` of a Produce request, read without decoding its topic data.

    v0-2 start with Acks; v3+ put TransactionalId first (compact from v9). A null or short
    TransactionalId (its length in one byte, or two) is stepped over by hand; anything else
    is read by the schema, whose errors are the reference.
    """
    at = header.size
    size = len(frame)
    version = header.api_version
    start = end = -1  # the TransactionalId's bytes, when it is not null
    if version >= 9:
        if at < size and frame[at] < 0x80:  # a one-byte uvarint: length + 1, 0 for null
            start = at + 1
            end = at = start + max(frame[at] - 1, 0)
    elif version >= 3:
        if at + 2 <= size:
            length = _ACKS.unpack_from(frame, at)[0]
            if length >= -1:
                start = at + 2
                end = at = start + max(length, 0)
    else:
        start = end = at
    if start >= 0 and at + 2 <= size:
        try:
            str(frame[start:end], "utf-8")  # as strict as the schema
        except UnicodeDecodeError:
            pass
        else:
            acks: int = _ACKS.unpack_from(frame, at)[0]
            return acks
    return _produce_acks(header, frame)


def _produce_acks(header: RequestHeader, frame: bytes | bytearray | memoryview) -> int:
    """:func:`produce_acks` by the schema."""
    stream = io.BytesIO(frame)
    stream.seek(header.size)
    if header.api_version >= 3:
        p.KString(compact=header.api_version >= 9, nullable=True)._parsereport(stream, None, "")
    acks: int = int.from_bytes(p.read_exact(stream, 2), "big", signed=True)
    return acks


class CorrelationTracker:
    """The sans-IO request/response pairing of one client connection."""

    def __init__(self, registry: ApiRegistry = DEFAULT_REGISTRY) -> None:
        self.registry = registry
        self._pending: deque[InFlight] = deque()
        self._sasl_rounds: int | None = 0  # None: until a frame reads as a Kafka request
        #: The mechanism of the exchange under way (after a v0 handshake), upper case.
        self._sasl_mechanism: str | None = None

    def __len__(self) -> int:
        """Requests (and tokens) still waiting for their response."""
        return len(self._pending)

    @property
    def in_sasl_exchange(self) -> bool:
        """True while client frames are raw SASL tokens (after a v0 handshake)."""
        return self._sasl_rounds != 0

    def classify(self, frame: bytes | bytearray | memoryview) -> InFlight:
        """Read what a client frame is (header, whether it expects a response).

        Nothing is recorded: call :meth:`expect` for frames sent on to the upstream, so
        requests the sidecar answers itself never wait in the upstream FIFO.
        """
        if self.in_sasl_exchange and not self._looks_like_request(frame):
            return InFlight(FrameKind.SASL_TOKEN, None, expects_response=True)
        self._sasl_rounds = 0
        header = decode_request_header(frame, self.registry)
        key = header.api_key
        versions = self.registry.header_versions.get((key, header.api_version))
        if versions is None:  # a key or version we do not parse
            return InFlight(FrameKind.REQUEST, header, True, 0, None)
        if key == PRODUCE:
            return InFlight(FrameKind.REQUEST, header, produce_acks(header, frame) != 0, versions[1], None)
        mechanism = None
        if key == SASL_HANDSHAKE and header.api_version == 0:
            body = decode(self.registry.api(key).request, 0, memoryview(frame)[header.size :])
            mechanism = body["Mechanism"]
        return InFlight(FrameKind.REQUEST, header, True, versions[1], mechanism)

    def expect(self, record: InFlight) -> None:
        """Record that ``record`` went to the upstream and its response will follow."""
        if record.expects_response:
            self._pending.append(record)

    def on_response(self, frame: bytes | bytearray | memoryview) -> InFlight:
        """Pair a frame from the upstream with the oldest pending request."""
        if not self._pending:
            raise CorrelationMismatch("upstream sent a response with no request pending")
        head = self._pending[0]
        if head.kind is FrameKind.REQUEST:
            correlation_id = peek_correlation_id(frame)
            if correlation_id != head.correlation_id:
                raise CorrelationMismatch(
                    f"upstream answered correlation id {correlation_id}, "
                    f"expected {head.correlation_id}"
                )
        self._pending.popleft()
        if head.kind is FrameKind.SASL_TOKEN:
            if self._sasl_rounds is not None and self._sasl_rounds > 0:
                self._sasl_rounds -= 1
                if self._sasl_mechanism == "OAUTHBEARER" and len(frame) > 0:
                    # Not the empty final answer but an error challenge (RFC 7628 3.2.2):
                    # the client answers it with 0x01, once, before the server fails it.
                    self._sasl_mechanism = None
                    self._sasl_rounds += 1
        elif head.sasl_mechanism is not None:
            self._enter_sasl_if_accepted(head, frame)
        return head

    def _enter_sasl_if_accepted(
        self, head: InFlight, frame: bytes | bytearray | memoryview
    ) -> None:
        api = self.registry.api(SASL_HANDSHAKE)
        try:
            body = decode(api.response, 0, memoryview(frame)[4:])
        except DecodeError:
            return  # not our business to fail it: the client will read the same bytes
        if body["ErrorCode"] == 0:
            assert head.sasl_mechanism is not None
            self._sasl_mechanism = head.sasl_mechanism.upper()
            self._sasl_rounds = SASL_ROUNDS.get(self._sasl_mechanism)

    def _looks_like_request(self, frame: bytes | bytearray | memoryview) -> bool:
        if self._sasl_rounds is not None:
            return False  # a known mechanism: count rounds, never guess
        try:
            header = decode_request_header(frame, self.registry)
        except (Truncated, DecodeError):
            return False
        api = self.registry.get(header.api_key)
        return api is not None and header.api_version in api.versions
