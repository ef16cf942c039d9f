"""Topic id → name for the whole sidecar: one directory, asked of the broker on demand.

Produce v13 and Fetch v13+ name topics by id only. Whoever must show a name (the ACLs,
whose resources are by name; the audit, whose rows are) reads it here. The directory
learns pairs from Metadata answers that pass through the sidecar, and otherwise asks the
broker over the control connection's settings (TLS, login) for every topic, at most once
per :data:`REFRESH_INTERVAL`; concurrent askers wait for the same answer.

In the deployed shape a sidecar may serve a client's Fetch by topic id without ever having
passed that client a Metadata answer (the client asked another sidecar), so a name it has
not learned is normal, and asked for.

Observers run on threads of their own: :meth:`TopicDirectory.lookup_blocking` is their way
in, a bounded wait for the event loop's answer (``ObserverConfig.topic_name``).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping

import trio

from coordinator.topics import TopicInfo

log = logging.getLogger(__name__)

#: The shortest time between two requests for every topic.
REFRESH_INTERVAL = 1.0

#: The longest an observer thread waits for the broker's answer.
LOOKUP_TIMEOUT = 2.0

#: Unnamed ids remembered at most (then forgotten at once: each costs a refresh at most).
MAX_MISSED = 10_000

#: Asks the broker for topics (``None``: all), e.g. :meth:`~proxy.control.upstream.Upstream.topics`.
AskTopics = Callable[[set[str] | None], Awaitable[list[TopicInfo]]]


class TopicDirectory:
    """Topic ids and names, as the broker's Metadata answers said."""

    def __init__(self, ask: AskTopics | None, interval: float = REFRESH_INTERVAL) -> None:
        self._ask = ask
        self._interval = interval
        self._names: dict[uuid.UUID, str] = {}
        self._refreshed_at = -interval
        self._refreshing: trio.Event | None = None
        #: The event loop's token once it serves (set by :meth:`serving`): observer threads
        #: reach the loop through it.
        self._token: trio.lowlevel.TrioToken | None = None
        #: Ids the broker did not name at the last refresh, by when (the loop's clock):
        #: asked again only after an interval.
        self._missed: dict[uuid.UUID, float] = {}

    @property
    def names(self) -> Mapping[uuid.UUID, str]:
        """Topic id → name, as far as known."""
        return self._names

    def learn(self, pairs: Iterable[tuple[uuid.UUID, str]]) -> None:
        """Pairs a Metadata answer named (ids that are all zeros are no ids)."""
        for topic_id, name in pairs:
            if topic_id.int and self._names.get(topic_id) != name:
                self._names[topic_id] = name

    async def refresh(self) -> None:
        """Ask the broker for every topic's id (at most once an interval; concurrent
        callers wait for the same answer). A failure is logged: the ids stay unknown."""
        if self._refreshing is not None:
            await self._refreshing.wait()
            return
        if self._ask is None or trio.current_time() - self._refreshed_at < self._interval:
            return
        self._refreshing = done = trio.Event()
        try:
            found = await self._ask(None)
            self.learn((t.topic_id, t.name) for t in found)
        except Exception as exc:  # an UpstreamError or a broken link: keep serving
            log.warning("could not learn topic ids from the broker: %s", exc)
        finally:
            self._refreshed_at = trio.current_time()
            self._refreshing = None
            done.set()

    def serving(self) -> None:
        """Called from the event loop once it serves: observer threads may ask from now."""
        self._token = trio.lowlevel.current_trio_token()

    def lookup_blocking(self, topic_id: uuid.UUID, timeout: float = LOOKUP_TIMEOUT) -> str | None:
        """The name of ``topic_id``, asking the broker if it is not known yet (from a
        thread other than the event loop's; waits at most ``timeout`` seconds, whatever the
        loop is doing). ``None`` when the broker does not name it either (asked again after
        an interval), or cannot be asked in time."""
        name = self._names.get(topic_id)
        token = self._token
        if name is not None or token is None or self._ask is None:
            return name
        answered = threading.Event()

        def start() -> None:  # in the event loop
            trio.lowlevel.spawn_system_task(self._lookup, topic_id, timeout, answered)

        try:
            token.run_sync_soon(start)
        except trio.RunFinishedError:  # the loop has stopped
            return None
        answered.wait(timeout)
        return self._names.get(topic_id)

    async def _lookup(self, topic_id: uuid.UUID, timeout: float, answered: threading.Event) -> None:
        try:
            missed = self._missed.get(topic_id)
            if topic_id not in self._names and (missed is None or trio.current_time() - missed >= self._interval):
                with trio.move_on_after(timeout):
                    await self.refresh()
            if topic_id not in self._names:
                if len(self._missed) >= MAX_MISSED:
                    self._missed.clear()
                self._missed[topic_id] = trio.current_time()
        finally:
            answered.set()
