"""The ordered responder: a client's answers leave in the order of its requests.

Every request that expects an answer takes a :class:`Slot` in one FIFO when it arrives,
whoever fills it: the upstream pump (a forwarded request), the client pump (a local answer
ready at once) or an answer-later task. The ready prefix of the FIFO leaves in one write;
a slot still waiting holds back everything behind it, which is what Kafka's ordering
promise requires (PROTOCOL_NOTES.md: responses follow request order per connection).

Filling a slot wakes nobody: the task that filled it writes the ready prefix itself when
the client's socket takes it at once (``Connection._deliver``), and wakes the writer task
only for a write that must wait (:meth:`Responses.wake_writer`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from protocol.correlation import InFlight
from proxy.datapath.metrics import ApiMetrics
from proxy.datapath.throttle import Throttle


@dataclass(slots=True)
class Slot:
    """A response position in the client's FIFO."""

    record: InFlight
    api: ApiMetrics
    received_at: float
    data: bytes | memoryview | None = None
    forwarded_at: float = 0.0
    answered_at: float = 0.0
    local: bool = False
    #: The request frame, kept for observers until the exchange completes (else ``None``).
    request: bytes | memoryview | None = None
    #: Applied to the decoded answer before it goes out (ACL enforcement), else ``None``.
    patch: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: What the ACLs refused (or, in shadow mode, would have): ``(resource type, name,
    #: operation, mode)`` each, for the audit.
    denials: tuple[tuple[str, str, str, str], ...] = ()
    #: Bytes of the answer forwarded while it arrived (cut-through); ``data`` is the rest.
    streamed: int = 0
    #: The whole answer as sent, for observers, when ``data`` is only its rest.
    whole: bytes | memoryview | None = None
    #: The request's client-quota throttle (the connection mutes once the answer has gone).
    throttle: Throttle | None = None


class Responses:
    """The FIFO of slots and the two wake-ups around it (writer, reader)."""

    __slots__ = ("_wake_reader", "_wake_writer", "_writer_due", "ready_bytes", "slots")

    def __init__(self) -> None:
        self.slots: deque[Slot] = deque()
        #: Bytes of filled slots not yet written to the client.
        self.ready_bytes = 0
        # The events exist only while someone waits (an idle connection holds none).
        self._wake_writer: trio.Event | None = None
        self._writer_due = False
        self._wake_reader: trio.Event | None = None

    def __len__(self) -> int:
        return len(self.slots)

    def take(self, slot: Slot) -> None:
        """Give an arriving request its place."""
        self.slots.append(slot)

    def fill(self, slot: Slot, data: bytes | memoryview, now: float) -> None:
        """Put a slot's answer in place; it leaves once everything before it is out."""
        slot.data = data
        slot.answered_at = now
        self.ready_bytes += len(data)

    @property
    def head_ready(self) -> bool:
        """True when the oldest slot is filled (something can be written)."""
        slots = self.slots
        return bool(slots) and slots[0].data is not None

    def ready_prefix(self) -> list[Slot]:
        """Remove and return the filled slots at the head of the FIFO."""
        done: list[Slot] = []
        slots = self.slots
        while slots and slots[0].data is not None:
            done.append(slots.popleft())
        return done

    def wake_writer(self) -> None:
        """Make the writer task look again (a write that must wait, or the end of reading)."""
        self._writer_due = True
        if self._wake_writer is not None:
            self._wake_writer.set()

    async def wait_for_writer_work(self) -> None:
        """Wait until :meth:`wake_writer` is called (at once if it was since the last wait)."""
        if not self._writer_due:
            self._wake_writer = trio.Event()
            await self._wake_writer.wait()
            self._wake_writer = None
        self._writer_due = False

    def written(self) -> None:
        """Some slots left: a reader held back by the bounds may go on."""
        if self._wake_reader is not None:
            self._wake_reader.set()
            self._wake_reader = None

    async def wait_for_room(self) -> None:
        """Wait until some answers leave (the FIFO shrank); several tasks may wait."""
        if self._wake_reader is None:
            self._wake_reader = trio.Event()
        await self._wake_reader.wait()
