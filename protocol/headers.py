"""Request and response headers (PROTOCOL_NOTES.md, "Frames and headers").

Request header v0 is ApiKey, ApiVersion, CorrelationId; v1 adds ClientId (nullable string
with an int16 length, *never* compact, even in v2); v2 adds a tagged-field section.
Response header v0 is CorrelationId; v1 adds a tagged-field section. Which version a
message uses is decided by :class:`protocol.apis.Api`.

The schemas are the generated table's ``RequestHeader``/``ResponseHeader`` specs, read by
:func:`protocol.schema.compiled_parser`: every frame the sidecar forwards has its header
decoded, so the compiled form matters (``python -m tests.bench.protocol_bench``), and
``tests/protocol/test_compiled.py`` proves compiled and interpreted parsers agree on
arbitrary bytes, failures included (STYLE.md, "construct"). Decoding reads the v0 prefix,
picks the header version from the API key and version, then reads that version's header.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from protocol import primitives as p
from protocol.apis import CONTROLLED_SHUTDOWN, DEFAULT_REGISTRY, ApiRegistry
from protocol.messages import HEADERS
from protocol.schema import compiled_parser, encode

REQUEST_HEADER = HEADERS["RequestHeader"]
RESPONSE_HEADER = HEADERS["ResponseHeader"]

#: ApiKey, ApiVersion, CorrelationId: the part of every request header (all versions).
REQUEST_PREFIX_SIZE = 8
#: CorrelationId: the part of every response header.
RESPONSE_PREFIX_SIZE = 4

_REQUEST_PARSERS = tuple(compiled_parser(REQUEST_HEADER, v) for v in (0, 1, 2))
_RESPONSE_PARSERS = tuple(compiled_parser(RESPONSE_HEADER, v) for v in (0, 1))


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
    prefix = _REQUEST_PARSERS[0]._parsereport(io.BytesIO(frame), None, "")
    return prefix["RequestApiKey"], prefix["RequestApiVersion"], prefix["CorrelationId"]


def peek_correlation_id(frame: bytes | bytearray | memoryview) -> int:
    """The correlation id of a response frame body."""
    correlation_id: int = _RESPONSE_PARSERS[0]._parsereport(io.BytesIO(frame), None, "")[
        "CorrelationId"
    ]
    return correlation_id


def request_header_version(
    api_key: int, api_version: int, registry: ApiRegistry = DEFAULT_REGISTRY
) -> int:
    """The header version a request uses; 1 when the key or version is unknown to us.

    An unknown request still has a v1-shaped start (every client sends a ClientId), which
    is enough to log who sent it and to answer it by correlation id.
    """
    if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
        return 0  # the only header v0 request (a broker's, removed in Kafka 4.0: KIP-896)
    api = registry.get(api_key)
    if api is None or api_version not in api.versions:
        return 1
    return api.request_header_version(api_version)


def decode_request_header(
    frame: bytes | bytearray | memoryview, registry: ApiRegistry = DEFAULT_REGISTRY
) -> RequestHeader:
    """Decode the whole request header at the start of a frame body."""
    stream = io.BytesIO(frame)
    prefix = _REQUEST_PARSERS[0]._parsereport(stream, None, "")
    api_key = prefix["RequestApiKey"]
    api_version = prefix["RequestApiVersion"]
    version = request_header_version(api_key, api_version, registry)
    if version == 0:
        return RequestHeader(
            api_key, api_version, prefix["CorrelationId"], None, 0, REQUEST_PREFIX_SIZE
        )
    stream.seek(0)
    header = _REQUEST_PARSERS[version]._parsereport(stream, None, "")
    return RequestHeader(
        api_key,
        api_version,
        header["CorrelationId"],
        header["ClientId"],
        version,
        stream.tell(),
        tuple(header.get(p.UNKNOWN_TAGS_KEY, ())),
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
    fields = {
        "RequestApiKey": api_key,
        "RequestApiVersion": api_version,
        "CorrelationId": correlation_id,
        "ClientId": client_id,
        p.UNKNOWN_TAGS_KEY: list(unknown_tags),
    }
    return encode(REQUEST_HEADER, header_version, fields)


def decode_response_header(
    frame: bytes | bytearray | memoryview, header_version: int
) -> tuple[int, int]:
    """``(correlation_id, size)`` of a response header of ``header_version`` (0 or 1)."""
    stream = io.BytesIO(frame)
    header = _RESPONSE_PARSERS[1 if header_version >= 1 else 0]._parsereport(stream, None, "")
    return header["CorrelationId"], stream.tell()


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    """Build a response header of ``header_version`` (0 or 1, with no tags)."""
    version = 1 if header_version >= 1 else 0
    return encode(RESPONSE_HEADER, version, {"CorrelationId": correlation_id})
