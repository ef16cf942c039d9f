"""A request's client-quota throttle, and the answer that carries it (KIP-219).

Theory of operation. When a client goes over its quota, Kafka answers at once with
``ThrottleTimeMs`` set and then does not read the client's connection for that long: a client
that ignores the field gains nothing. The sidecar does the same in front of a broker that
throttles too: the request filter of :mod:`proxy.datapath.client_quota` gives a request a
:class:`Throttle` (its throttle time, or what to measure of its answer), the answer's
``ThrottleTimeMs`` becomes the larger of the broker's and the sidecar's
(:class:`ThrottlePatch`), and the connection stops reading for the sidecar's time once the
answer has gone (:class:`~proxy.datapath.connection.Connection`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar

from protocol.apis import ApiRegistry
from protocol.headers import RequestHeader
from protocol.leniency import QUIET, Leniency
from protocol.scan import response_header_size
from protocol.schema import encode

FETCH = 1
THROTTLE_FIELD = "ThrottleTimeMs"
_INT32 = struct.Struct(">i")


@dataclass(slots=True)
class Throttle:
    """The sidecar's throttle of one request (the request filter makes it; the answer's
    filter may add to it; the connection reads it when the answer has gone)."""

    #: Milliseconds the client waits: set in the answer, and the connection's mute.
    ms: int = 0
    #: Measures the answer (its size in bytes, after the size prefix) and says the throttle
    #: it asks (``consumer_byte_rate``), or ``None`` when only the request was measured.
    measure_answer: Callable[[int], int] | None = None
    #: Applied to the broker's decoded answer (``controller_mutation_rate``: tokens of the
    #: topics the broker refused given back, the topics the quota refused answered), or
    #: ``None``.
    settle: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def _in_place(api_key: int, version: int, settle: Callable[[dict[str, Any]], dict[str, Any]] | None) -> bool:
    """Whether the throttle is four bytes written over the broker's: a Fetch (v1 and later,
    ``ThrottleTimeMs`` the first field of its body) that nothing else changes."""
    return api_key == FETCH and version >= 1 and settle is None


def streams(api_key: int, version: int, throttle: Throttle) -> bool:
    """Whether an answer with this throttle may go to the client while it arrives: when the
    throttle is written in place (the answer's size, which ``consumer_byte_rate`` measures,
    is in its size prefix)."""
    return _in_place(api_key, version, throttle.settle)


def throttle_head(head: bytearray, body_at: int, size: int, throttle: Throttle) -> None:
    """Put the sidecar's throttle into a streamed answer's first bytes (``head``, at least
    ``body_at + 4`` of them, the body starting at ``body_at``), before any goes on: the
    answer of ``size`` bytes (size prefix included) is measured, and ``ThrottleTimeMs``
    becomes the larger of the broker's and the sidecar's."""
    if throttle.measure_answer is not None:
        throttle.ms = max(throttle.ms, throttle.measure_answer(size - 4))
    (broker,) = _INT32.unpack_from(head, body_at)
    if throttle.ms > broker:
        _INT32.pack_into(head, body_at, throttle.ms)


class ThrottledAnswer(Protocol):
    """What :class:`ThrottlePatch` reads of an answer (``proxy.datapath.dispatch.Response``)."""

    @property
    def header(self) -> RequestHeader:
        """The header of the request it answers."""
        ...

    @property
    def header_version(self) -> int:
        """The version of the response header."""
        ...

    @property
    def frame(self) -> bytes | memoryview:
        """The whole frame, size prefix included."""
        ...

    @property
    def throttle(self) -> Throttle | None:
        """The request's throttle, if it has one."""
        ...

    def with_frame(self, frame: bytes) -> Self:
        """The same answer with another frame."""
        ...


A = TypeVar("A", bound=ThrottledAnswer)


class ThrottlePatch:
    """The response filter that puts the sidecar's throttle in the answer: ``ThrottleTimeMs``
    becomes the larger of the broker's and the sidecar's. Answers without the field (old
    versions) go unchanged; the connection's mute throttles them all the same."""

    api_keys = None

    def __init__(self, registry: ApiRegistry, leniency: Leniency = QUIET) -> None:
        self._registry = registry
        self._leniency = leniency

    def on_response(self, response: A) -> A | None:
        """See the class docstring."""
        throttle = response.throttle
        if throttle is None:
            return None
        if throttle.measure_answer is not None:
            throttle.ms = max(throttle.ms, throttle.measure_answer(len(response.frame) - 4))
        if throttle.ms <= 0 and throttle.settle is None:
            return None
        header = response.header
        patched = self.patched(header.api_key, header.api_version, response.header_version, response.frame,
                               throttle.ms, throttle.settle)
        return None if patched is None else response.with_frame(patched)

    def patched(self, api_key: int, version: int, header_version: int, frame: bytes | memoryview,
                ms: int, settle: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> bytes | None:
        """``frame`` (size prefix included) with its ``ThrottleTimeMs`` raised to ``ms`` and
        ``settle`` applied to its body, or ``None`` when nothing changes."""
        view = memoryview(frame)
        head = 4 + response_header_size(view[4:], header_version)
        if _in_place(api_key, version, settle):  # the body's first field: no need to decode the records
            (broker,) = _INT32.unpack_from(view, head)
            if broker >= ms:
                return None
            data = bytearray(view)
            _INT32.pack_into(data, head, ms)
            return bytes(data)
        api = self._registry.api(api_key)
        has_field = any(f.name == THROTTLE_FIELD and version in f.versions for f in api.response.fields)
        if not has_field and settle is None:
            return None
        value, trailing = self._leniency.response(api, version, view[head:])
        if settle is None and value[THROTTLE_FIELD] >= ms:
            return None
        body = dict(value)
        if settle is not None:
            body = settle(body)
        if has_field:
            body[THROTTLE_FIELD] = max(body[THROTTLE_FIELD], ms)
        encoded = encode(api.response, version, body) + trailing
        return _INT32.pack(head - 4 + len(encoded)) + bytes(view[4:head]) + encoded
