"""``connections.max.idle.ms`` and ``socket.request.read.timeout.ms``: one sweeper for
every connection of the sidecar.

A connection that has sent nothing for the idle timeout, has no answer outstanding and is
not draining is closed (reason ``idle``). A connection whose request frame is still
incomplete the read timeout after its first bytes is closed too (reason
``request_read_timeout``): a client that announces a large frame and stops would hold its
share of ``queued.max.request.bytes`` for good. One task looks at every connection a tenth
of the shorter timeout apart (at most once a second), so a connection costs no task and no
deadline of its own: a watchdog task per connection was about a tenth of the CPU of setting
one up, and a deadline per read a few percent of a large Produce's. The price is
precision, as with Kafka's own check at each poll: a connection is closed between one and
1.1 timeouts after the moment that counts (the timeout plus at most a second).
"""

from __future__ import annotations

import logging
from typing import Protocol

import trio

log = logging.getLogger(__name__)

#: The sweeper looks at least this often (seconds), whatever the timeout.
MAX_PERIOD = 1.0


class Sweepable(Protocol):
    """What the sweeper asks of a connection."""

    #: When the client last sent bytes (trio time).
    last_receive: float
    #: When the first bytes of the request frame being read arrived (``None``: between frames).
    frame_began: float | None

    def idle_expired(self, now: float, timeout: float) -> bool:
        """Close the connection if it is idle at ``now`` (True if it was closed)."""

    def read_expired(self, now: float, timeout: float) -> bool:
        """Close the connection if its frame is not complete ``timeout`` after its first
        bytes (True if it was closed)."""


class IdleSweeper:
    """Closes the connections idle for ``timeout`` seconds."""

    __slots__ = ("_connections", "period", "read_timeout", "timeout")

    def __init__(self, timeout: float, read_timeout: float | None = None) -> None:
        if not timeout > 0:
            raise ValueError(f"idle timeout must be > 0, got {timeout!r}")
        if read_timeout is not None and not read_timeout > 0:
            raise ValueError(f"request read timeout must be > 0, got {read_timeout!r}")
        self.timeout = timeout
        #: ``socket.request.read.timeout.ms`` in seconds (``None``: frames may take forever).
        self.read_timeout = read_timeout
        self.period = min(timeout / 10, (read_timeout or timeout) / 10, MAX_PERIOD)
        self._connections: set[Sweepable] = set()

    def configure(self, timeout: float, read_timeout: float | None) -> None:
        """New timeouts (a reload), for every connection watched from the next sweep."""
        checked = IdleSweeper(timeout, read_timeout)  # the same checks
        self.timeout, self.read_timeout, self.period = checked.timeout, checked.read_timeout, checked.period

    def add(self, connection: Sweepable) -> None:
        """Watch ``connection`` from now on."""
        self._connections.add(connection)

    def discard(self, connection: Sweepable) -> None:
        """Stop watching ``connection`` (it has ended)."""
        self._connections.discard(connection)

    def __len__(self) -> int:
        return len(self._connections)

    def sweep(self, now: float) -> int:
        """Close every watched connection idle, or slow with a frame, at ``now``; how many
        were closed."""
        cutoff = now - self.timeout
        closed = 0
        for connection in [c for c in self._connections if c.last_receive <= cutoff]:
            if connection.idle_expired(now, self.timeout):
                self._connections.discard(connection)
                closed += 1
        if self.read_timeout is not None:
            began = now - self.read_timeout
            for connection in [c for c in self._connections
                               if c.frame_began is not None and c.frame_began <= began]:
                if connection.read_expired(now, self.read_timeout):
                    self._connections.discard(connection)
                    closed += 1
        return closed

    async def run(self) -> None:
        """Sweep every :attr:`period` seconds, forever."""
        while True:
            await trio.sleep(self.period)
            closed = self.sweep(trio.current_time())
            if closed:
                log.debug("closed %d idle or slow connection(s)", closed)
