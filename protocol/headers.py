"""Request and response headers (PROTOCOL_NOTES.md, "Frames and headers").

Request header v0 is ApiKey, ApiVersion, CorrelationId; v1 adds ClientId (nullable string
with an int16 length, *never* compact, even in v2); v2 adds a tagged-field section.
Response header v0 is CorrelationId; v1 adds a tagged-field section. Which version a
message uses is decided by :class:`protocol.apis.Api`.

The fixed 8-byte request prefix is read by a *compiled* construct on every frame the
sidecar forwards; ``tests/protocol/test_headers.py`` proves the compiled and interpreted
forms agree on arbitrary bytes, failures included (STYLE.md, "construct").
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import construct as c

from protocol import primitives as p
from protocol.apis import DEFAULT_REGISTRY, ApiRegistry
from protocol.errors import Truncated

#: ApiKey, ApiVersion, CorrelationId: the part of every request header (all versions).
REQUEST_PREFIX = c.Struct(
    "api_key" / p.Int16,
    "api_version" / p.Int16,
    "correlation_id" / p.Int32,
)
REQUEST_PREFIX_SIZE = 8
_REQUEST_PREFIX_COMPILED = REQUEST_PREFIX.compile()

#: CorrelationId: the part of every response header.
RESPONSE_PREFIX = c.Struct("correlation_id" / p.Int32)
RESPONSE_PREFIX_SIZE = 4
_RESPONSE_PREFIX_COMPILED = RESPONSE_PREFIX.compile()

#: RequestHeader.ClientId: classic nullable string in every header version.
CLIENT_ID = p.KString(nullable=True)
_NO_TAGS = p.TaggedFields(())


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A decoded request header; ``size`` is where the body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int
    size: int
    unknown_tags: tuple[tuple[int, bytes], ...] = ()


def peek_request(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)`` of a request frame body, nothing more."""
    if len(frame) < REQUEST_PREFIX_SIZE:
        raise Truncated(f"request header needs 8 bytes, frame has {len(frame)}")
    prefix = _REQUEST_PREFIX_COMPILED.parse(frame)
    return prefix.api_key, prefix.api_version, prefix.correlation_id


def peek_correlation_id(frame: bytes | bytearray | memoryview) -> int:
    """The correlation id of a response frame body."""
    if len(frame) < RESPONSE_PREFIX_SIZE:
        raise Truncated(f"response header needs 4 bytes, frame has {len(frame)}")
    correlation_id: int = _RESPONSE_PREFIX_COMPILED.parse(frame).correlation_id
    return correlation_id


def request_header_version(
    api_key: int, api_version: int, registry: ApiRegistry = DEFAULT_REGISTRY
) -> int:
    """The header version a request uses; 1 when the key or version is unknown to us.

    An unknown request still has a v1-shaped start (every client sends a ClientId), which
    is enough to log who sent it and to answer it by correlation id.
    """
    api = registry.get(api_key)
    if api is None or api_version not in api.versions:
        return 1
    return api.request_header_version(api_version)


def decode_request_header(
    frame: bytes | bytearray | memoryview, registry: ApiRegistry = DEFAULT_REGISTRY
) -> RequestHeader:
    """Decode the whole request header at the start of a frame body."""
    api_key, api_version, correlation_id = peek_request(frame)
    version = request_header_version(api_key, api_version, registry)
    if version == 0:
        return RequestHeader(api_key, api_version, correlation_id, None, 0, REQUEST_PREFIX_SIZE)
    stream = io.BytesIO(frame)
    stream.seek(REQUEST_PREFIX_SIZE)
    try:
        client_id = CLIENT_ID._parsereport(stream, None, "")
        unknown: tuple[tuple[int, bytes], ...] = ()
        if version >= 2:
            tags = c.Container()
            _NO_TAGS.parse_into(tags, stream, None, "")
            unknown = tuple(tags.get(p.UNKNOWN_TAGS_KEY, ()))
    except c.StreamError as exc:  # pragma: no cover - read_exact raises Truncated first
        raise Truncated(f"request header: {exc}") from None
    return RequestHeader(
        api_key, api_version, correlation_id, client_id, version, stream.tell(), unknown
    )


def encode_request_header(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    header_version: int,
    unknown_tags: Sequence[tuple[int, bytes]] = (),
) -> bytes:
    """Build a request header of ``header_version`` (0, 1 or 2)."""
    out = io.BytesIO()
    out.write(
        REQUEST_PREFIX.build(
            {"api_key": api_key, "api_version": api_version, "correlation_id": correlation_id}
        )
    )
    if header_version >= 1:
        CLIENT_ID._build(client_id, out, None, "")
    if header_version >= 2:
        _NO_TAGS.build_from({p.UNKNOWN_TAGS_KEY: list(unknown_tags)}, out, None, "")
    return out.getvalue()


def decode_response_header(
    frame: bytes | bytearray | memoryview, header_version: int
) -> tuple[int, int]:
    """``(correlation_id, size)`` of a response header of ``header_version`` (0 or 1)."""
    correlation_id = peek_correlation_id(frame)
    if header_version == 0:
        return correlation_id, RESPONSE_PREFIX_SIZE
    stream = io.BytesIO(frame)
    stream.seek(RESPONSE_PREFIX_SIZE)
    _NO_TAGS.parse_into(c.Container(), stream, None, "")
    return correlation_id, stream.tell()


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    """Build a response header of ``header_version`` (0 or 1, with no tags)."""
    head: bytes = RESPONSE_PREFIX.build({"correlation_id": correlation_id})
    return head + b"\x00" if header_version >= 1 else head
