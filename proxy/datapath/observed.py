"""A connection's exchanges handed to the observers (KIP-388).

Each request, once answered (or once the connection ends without an answer), is one
exchange for the observers' :class:`~observers.hub.Tap`: its header, who sent it, the
request frame, the answer as the client got it, its times and what the ACLs or a filter
refused of it. No secret ever reaches an observer: SaslAuthenticate and
AlterUserScramCredentials bodies stay out (passthrough forwards them to the broker).
"""

from __future__ import annotations

import time

import trio

from observers.hub import Tap
from protocol.apis import ALTER_USER_SCRAM_CREDENTIALS, SASL_AUTHENTICATE
from proxy.datapath.responder import Slot
from proxy.local.api import Context

#: Requests whose bodies carry secrets (a PLAIN password or SCRAM proof; salted passwords):
#: observers get their header facts only.
SECRET_REQUESTS = frozenset({SASL_AUTHENTICATE, ALTER_USER_SCRAM_CREDENTIALS})
#: How often a connection held up by a blocking observer looks again for room (seconds).
BLOCKED_POLL = 0.001


def hand_over(tap: Tap, context: Context, slot: Slot, response: bytes | memoryview | None, now: float) -> None:
    """Hand ``slot``'s complete exchange to the observers (``response``: as sent, or ``None``)."""
    record = slot.record
    if record.header is None:
        return  # a raw SASL token is not a Kafka request
    elapsed = now - slot.received_at
    frame = slot.request
    size = len(frame) if frame is not None else 0
    if record.header.api_key in SECRET_REQUESTS:
        frame = None
    tap.completed(
        header=record.header, response_header_version=record.response_header_version,
        principal=context.principal, client_software=context.client_software, denials=slot.denials,
        frame=frame, request_size=size,
        received_at=time.time() - elapsed, expects_response=record.expects_response,
        local=slot.local, response=response, elapsed=elapsed,
        upstream_elapsed=slot.answered_at - slot.forwarded_at if not slot.local else 0.0,
    )
    slot.request = None


async def wait_for_room(tap: Tap) -> None:
    """Backpressure from an observer with ``overflow=block``: wait until it has room."""
    while not tap.retry():
        await trio.sleep(BLOCKED_POLL)
