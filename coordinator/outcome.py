"""What the core hands back: answers now or later, store writes, and the types of both.

Every entry point of :class:`coordinator.core.GroupCoordinator` returns a :class:`Step`:

* ``response`` -- the answer to this request, or ``None`` when the request is *parked*;
* ``ticket`` -- set when parked: the answer arrives later as an :class:`Answer` with this
  ticket, in the ``answers`` of some later step (another request, a timer, a finished write);
* ``answers`` -- parked requests that this step answered;
* ``writes`` -- :class:`WriteSet` s for the ZooKeeper store. A set with a ``ticket`` holds a
  request's answer back until it is durable: the shell performs it and then calls
  ``writes_done(ticket, now, ok=...)``, whose step carries the answer.

A parked request is answered exactly once. The shell may drop answers for tickets whose
connection has gone; the core never needs to hear about it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from coordinator.messages.common import Wire


class Response(Protocol):
    """Any typed group response: it can be turned into a body of the request's version."""

    def to_wire(self, version: int) -> Wire:
        """The body for ``protocol.schema.encode(api.response, version, ...)``."""
        ...


R = TypeVar("R", bound=Response)
R_co = TypeVar("R_co", bound=Response, covariant=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    """The late answer to a parked request."""

    ticket: int
    response: Response


@dataclass(frozen=True, kw_only=True, slots=True)
class OffsetValue:
    """A committed offset as stored (see docs/coordinator.md for the znode format)."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    #: Milliseconds since the epoch when it was committed.
    commit_timestamp: int
    #: OffsetCommit v2-4 RetentionTimeMs: when it expires regardless of the group's state.
    expire_timestamp: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class OffsetWrite:
    """Store (``value``) or delete (``None``) one partition's committed offset."""

    group_id: str
    topic: str
    partition: int
    value: OffsetValue | None


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupWrite:
    """Store a group's registry record, or (``None`` and no ``source``) delete the group
    and its offsets.

    With a ``source`` the record is written behind: :func:`coordinator.batching.flatten`
    renders it when the writer takes the batch, once for the last write of each group, so
    the record stored is the group as it is then (never older than when this was queued).
    """

    group_id: str
    record: dict[str, Any] | None
    source: Callable[[], dict[str, Any]] | None = field(default=None, compare=False)

    @property
    def deletes(self) -> bool:
        """Whether this write deletes the group."""
        return self.record is None and self.source is None

    def rendered(self) -> GroupWrite:
        """This write with its record rendered (itself when it has no ``source``)."""
        if self.source is None:
            return self
        return GroupWrite(group_id=self.group_id, record=self.source())


Write = OffsetWrite | GroupWrite


@dataclass(frozen=True, kw_only=True, slots=True)
class WriteSet:
    """Writes that belong together; with a ``ticket``, an answer waits for them."""

    writes: tuple[Write, ...]
    ticket: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Rebalance:
    """A finished rebalance, for metrics: from its start (a classic group leaving Stable or
    Empty, a KIP-848 group epoch bump) to Stable or Empty again."""

    group_id: str
    protocol: str  # "classic" | "consumer"
    generation: int
    duration_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Step(Generic[R_co]):
    """The result of one call into the core."""

    response: R_co | None = None
    ticket: int | None = None
    answers: tuple[Answer, ...] = ()
    writes: tuple[WriteSet, ...] = ()
    #: Rebalances this call finished (metrics: count and duration).
    rebalances: tuple[Rebalance, ...] = ()


class Outbox:
    """Collects what a call produces on the way; the core drains it into a :class:`Step`."""

    def __init__(self) -> None:
        self._next_ticket = 0
        self.answers: list[Answer] = []
        self.writes: list[WriteSet] = []
        self.rebalances: list[Rebalance] = []

    def ticket(self) -> int:
        """A fresh ticket for a parked request."""
        self._next_ticket += 1
        return self._next_ticket

    def answer(self, ticket: int, response: Response) -> None:
        """Answer a parked request."""
        self.answers.append(Answer(ticket=ticket, response=response))

    def write(self, *writes: Write, ticket: int | None = None) -> None:
        """Queue writes for the store (held answer: ``ticket``)."""
        if writes or ticket is not None:
            self.writes.append(WriteSet(writes=tuple(writes), ticket=ticket))

    def drain(self, response: R | None = None, ticket: int | None = None) -> Step[R]:
        """Everything collected, as a step answering ``response`` (or parked as ``ticket``)."""
        step: Step[R] = Step(response=response, ticket=ticket, answers=tuple(self.answers),
                             writes=tuple(self.writes), rebalances=tuple(self.rebalances))
        self.answers.clear()
        self.writes.clear()
        self.rebalances.clear()
        return step

    def rebalanced(self, group_id: str, protocol: str, generation: int, started: int | None,
                   now: int) -> None:
        """Record a finished rebalance that started at ``started`` (nothing if ``None``)."""
        if started is not None:
            self.rebalances.append(Rebalance(group_id=group_id, protocol=protocol,
                                             generation=generation, duration_ms=max(now - started, 0)))
