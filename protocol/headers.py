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

The common header (v1 or v2, a ClientId that is UTF-8 and, in v2, no tagged fields) is read
without construct: one ``struct`` unpack of the fixed prefix and a slice for the ClientId
(:func:`decode_request_header`: 0.7 µs where the schema took 3.5). Anything else (a header
v0, tags, a truncated or undecodable header, an unknown API) is read by the schema, so its
errors are the schema's; ``tests/protocol/test_headers.py`` holds the two to the same answer
on arbitrary bytes.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence
from typing import NamedTuple

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
#: RequestApiKey, RequestApiVersion, CorrelationId and ClientId's length (header v1 and v2).
_REQUEST_FIXED = struct.Struct(">hhih")
_CORRELATION_ID = struct.Struct(">i")
_RESPONSE_PARSERS = tuple(compiled_parser(RESPONSE_HEADER, v) for v in (0, 1))


class RequestHeader(NamedTuple):
    """A decoded request header; ``size`` is where the body starts in the frame (a named
    tuple: one is made for every request, at a third of a frozen dataclass's cost)."""

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
    if len(frame) >= 4:
        correlation_id: int = _CORRELATION_ID.unpack_from(frame)[0]
        return correlation_id
    return int(_RESPONSE_PARSERS[0]._parsereport(io.BytesIO(frame), None, "")["CorrelationId"])


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
    size = len(frame)
    if size >= 10:
        api_key, api_version, correlation_id, length = _REQUEST_FIXED.unpack_from(frame)
        versions = registry.header_versions.get((api_key, api_version))
        if versions is not None:
            end = 10 + length
            client_id: str | None = None
            if length == -1:
                end = 10
            elif length < 0 or end > size:
                end = -1  # the schema says what is wrong
            else:
                try:
                    client_id = str(frame[10:end], "utf-8")
                except UnicodeDecodeError:
                    end = -1
            version = versions[0]
            if version == 2 and end >= 0:
                end = end + 1 if end < size and frame[end] == 0 else -1  # tags: the schema reads them
            if end >= 0:
                return RequestHeader(api_key, api_version, correlation_id, client_id, version, end)
    return _decode_request_header(frame, registry)


def _decode_request_header(frame: bytes | bytearray | memoryview, registry: ApiRegistry) -> RequestHeader:
    """:func:`decode_request_header` by the schema: every header, and every error."""
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
