"""The one rule for frames that deviate from their schema, and the one place it is applied.

A response is refused only where a client could not read it either; a request only where
Kafka's broker could not. Whatever the sidecar reads and does not understand reaches its
peer unchanged:

* bytes after a message's body (a frame's size says where the frame ends, the schema
  where the body does; every client and Kafka's broker stop at the body's end) are kept
  and passed on after whatever the reader writes back (``trailing_bytes``);
* tagged fields no schema names are kept by the codec itself (:mod:`protocol.tagged`);
  they are not a deviation, and not reported.

Every reader in the sidecar that decodes a frame to act on it goes through a
:class:`Leniency`; it reports each deviation once per frame to its ``report`` callback
``(api name, direction, kind, bytes)``, which counts and logs it
(``ksidecar_lenient_frames_total``, docs/protocol.md, "Leniency"). A reader of a frame that
another reader has already reported (an observer's copy, a response patched after it was
rewritten) uses :data:`QUIET`.
"""

from __future__ import annotations

from collections.abc import Callable

import construct as c

from protocol.apis import Api
from protocol.schema import decode_prefix

#: The direction of a frame, as the metric labels it.
REQUEST = "request"
RESPONSE = "response"

TRAILING_BYTES = "trailing_bytes"
"""The leniency kind of a frame with bytes after its body."""

#: Told ``(api name, direction, kind, bytes)`` of every frame read despite a deviation.
Report = Callable[[str, str, str, int], None]


class Leniency:
    """Reads request and response bodies by the rule above, reporting each deviation."""

    __slots__ = ("report",)

    def __init__(self, report: Report | None = None) -> None:
        self.report = report

    def request(self, api: Api, version: int, body: bytes | memoryview) -> c.Container:
        """A request body decoded; bytes after it are ignored, as Kafka's broker ignores them."""
        value, end = decode_prefix(api.request, version, body)
        self.trailing(api.name, REQUEST, body, end)
        return value

    def response(self, api: Api, version: int, body: bytes | memoryview) -> tuple[c.Container, bytes]:
        """A response body decoded, and the bytes after it (to follow whatever is written back)."""
        value, end = decode_prefix(api.response, version, body)
        return value, self.trailing(api.name, RESPONSE, body, end)

    def trailing(self, api_name: str, direction: str, body: bytes | memoryview, end: int) -> bytes:
        """The bytes of ``body`` after its message, which ends at ``end`` (reported if any)."""
        extra = len(body) - end
        if not extra:
            return b""
        if self.report is not None:
            self.report(api_name, direction, TRAILING_BYTES, extra)
        return bytes(body[end:])


QUIET = Leniency()
"""Reads as leniently, and reports nothing (the frame was reported by its first reader)."""
