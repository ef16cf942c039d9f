"""Produce requests with acks=0, remembered in case the broker answers them (sans-IO).

Kafka never answers a Produce with acks=0, and a client does not read an answer to one;
some brokers answer anyway (Tansu 0.6). Forwarded, such an answer would be taken for the
answer to the client's next request. Responses come in request order, so an answer to an
acks=0 Produce can only arrive right after the answers owed before that Produce, and it
carries the Produce's correlation id: :class:`SilentProduces` recognises it by both, and
the connection drops it (counted in ``ksidecar_unasked_responses_total``). When the next
expected answer has the same id, it wins: a Kafka broker never answers acks=0.
"""

from __future__ import annotations

from collections import deque

from protocol.errors import ProtocolError
from protocol.headers import peek_correlation_id

#: acks=0 Produce requests remembered per connection.
MAX_SILENT_PRODUCES = 1024


class SilentProduces:
    """The acks=0 Produce requests one connection forwarded (see the module docstring)."""

    __slots__ = ("_sent",)

    def __init__(self) -> None:
        #: ``(correlation id, answers the broker owed before it)``, oldest first.
        self._sent: deque[tuple[int, int]] = deque(maxlen=MAX_SILENT_PRODUCES)

    def __bool__(self) -> bool:
        return bool(self._sent)

    def sent(self, correlation_id: int, owed_before: int) -> None:
        """An acks=0 Produce went to the broker after ``owed_before`` answered requests."""
        self._sent.append((correlation_id, owed_before))

    def unasked(self, body: memoryview, answered: int, expected: int | None) -> bool:
        """Whether the response ``body`` (after its size) answers an acks=0 Produce: the
        broker has answered ``answered`` requests so far, and the next one owed has
        correlation id ``expected`` (``None``: none is owed)."""
        sent = self._sent
        while sent and sent[0][1] < answered:
            sent.popleft()  # a later request was answered: no answer can come for it now
        if not sent or sent[0][1] != answered:
            return False
        try:
            correlation_id = peek_correlation_id(body[:4])
        except ProtocolError:
            return False
        if correlation_id != sent[0][0] or correlation_id == expected:
            return False
        sent.popleft()
        return True
