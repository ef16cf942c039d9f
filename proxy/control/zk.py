"""One ZooKeeper session for the whole sidecar, bridged from kazoo's threads to trio.

Every store (registration, per-IP quotas, SCRAM users; later groups and features) takes
the one :class:`KazooClient` this owns as a parameter, as kazoo's recipes do. kazoo calls
back on its own threads; :meth:`ZooKeeper.deliver` wraps a trio-side callback so that a
watch event reaches trio with ``TrioToken.run_sync_soon`` (never blocking kazoo's thread),
and session state changes arrive over a memory channel (:meth:`ZooKeeper.states`), so no
part of the sidecar polls ZooKeeper. Blocking kazoo calls run in worker threads
(:meth:`ZooKeeper.call`).

kazoo's reconnect backoff is capped well under the session timeout
(:data:`MAX_RECONNECT_DELAY_FRACTION`), so a ZooKeeper that comes back is found before the
session it kept for us expires.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import trio
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from proxy.control.zk_security import ZkSecurity

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

#: The longest wait between reconnect attempts, as a share of the session timeout.
MAX_RECONNECT_DELAY_FRACTION = 0.25


class ZooKeeperUnavailable(Exception):
    """No ZooKeeper server answered within the session timeout."""


def split_chroot(connect: str) -> tuple[str, str | None]:
    """``"h1:2181,h2:2181/ksidecar"`` → ``("h1:2181,h2:2181", "/ksidecar")``."""
    hosts, sep, chroot = connect.partition("/")
    return hosts, ("/" + chroot.rstrip("/")) if sep and chroot.strip("/") else None


def ensure_chroot(connect: str, timeout: float, security: ZkSecurity | None = None) -> None:
    """Create the connect string's chroot if missing, as Kafka does at start (blocking); with
    ``zookeeper.set.acl``, owned by ``security``'s identity and world-readable, as Kafka's."""
    hosts, chroot = split_chroot(connect)
    if chroot is None:
        return
    client = (security or ZkSecurity()).client(hosts, timeout=timeout)
    client.start(timeout=timeout)
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()


def make_client(connect: str, session_timeout: float, security: ZkSecurity | None = None) -> KazooClient:
    """A kazoo client whose reconnect backoff stays well under ``session_timeout``,
    authenticated as ``security``'s identity (creating with its ACLs) when given."""
    cap = max(0.5, session_timeout * MAX_RECONNECT_DELAY_FRACTION)
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=cap)
    return (security or ZkSecurity()).client(connect, timeout=session_timeout, connection_retry=retry)


class ZooKeeper:
    """The sidecar's ZooKeeper session and its bridge to trio."""

    def __init__(self, connect: str, session_timeout: float, security: ZkSecurity | None = None) -> None:
        self.connect = connect
        self.session_timeout = session_timeout
        #: The identity, ACL choice and TLS (``zookeeper.set.acl``, ``zookeeper.digest.*``,
        #: ``zookeeper.ssl.*``).
        self.security = security or ZkSecurity()
        self.client = make_client(connect, session_timeout, self.security)
        self._token: trio.lowlevel.TrioToken | None = None
        self._subscribers: list[trio.MemorySendChannel[str]] = []
        self._closing = False

    def use_tls(self, security: ZkSecurity) -> None:
        """``zookeeper.ssl.*`` as reloaded: the session's next connection to a server (a
        reconnect, or a new session) presents and checks these files; the connection open
        now goes on. Whether TLS is on at all, and the identity, stay as started."""
        if self.security.tls is None or security.tls is None:
            return
        self.security = dataclasses.replace(self.security, tls=security.tls)
        for name, value in security.tls.kazoo_kwargs().items():
            if name != "use_ssl":
                setattr(self.client, name, value)

    async def start(self) -> None:
        """Create the chroot, open the session, and start forwarding state changes."""
        self._token = trio.lowlevel.current_trio_token()
        try:
            await trio.to_thread.run_sync(ensure_chroot, self.connect, self.session_timeout, self.security)
            await trio.to_thread.run_sync(lambda: self.client.start(timeout=self.session_timeout))
        except KazooTimeoutError:
            raise ZooKeeperUnavailable(
                f"zookeeper.connect={self.connect!r}: no ZooKeeper answered within "
                f"{self.session_timeout:g}s"
            ) from None
        deliver = self.deliver(self._state_changed)

        def listener(state: str) -> None:
            deliver(state)  # returns None: a kazoo state listener that returns True is removed

        self.client.add_listener(listener)
        if self.security.username or self.security.tls is not None:
            log.info("ZooKeeper session: %s", self.security.describe())

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking kazoo call in a worker thread."""
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    def deliver(self, callback: Callable[P, object]) -> Callable[P, Any]:
        """A kazoo-thread-safe callable that runs ``callback(*args)`` on trio, soon.

        Returns True while the trio run lives (a kazoo watch returning False stops).
        """

        def on_kazoo_thread(*args: P.args, **kwargs: P.kwargs) -> bool:
            token = self._token
            if token is None:
                return False
            try:
                token.run_sync_soon(lambda: callback(*args, **kwargs))
            except trio.RunFinishedError:
                return False
            return True

        return on_kazoo_thread

    def states(self) -> trio.MemoryReceiveChannel[str]:
        """A channel of session states (``KazooState`` values) from now on."""
        send, receive = trio.open_memory_channel[str](math.inf)
        self._subscribers.append(send)
        return receive

    def _state_changed(self, state: str) -> None:
        if self._closing:
            return
        log.log(logging.WARNING if state != KazooState.CONNECTED else logging.INFO,
                "ZooKeeper session %s", state.lower())
        for send in list(self._subscribers):
            try:
                send.send_nowait(state)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                self._subscribers.remove(send)

    async def close(self) -> None:
        """End the session (its ephemeral nodes go with it)."""
        self._closing = True
        for send in self._subscribers:
            send.close()
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._stop)

    def _stop(self) -> None:
        with contextlib.suppress(Exception):
            self.client.stop()
        with contextlib.suppress(Exception):
            self.client.close()
