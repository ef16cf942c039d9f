"""Sidecar registration in ZooKeeper, and the watched view of every sidecar registered.

Each sidecar writes an ephemeral ``/brokers/ids/<broker.id>`` in the shape Kafka's own
brokers use (``endpoints``, ``listener_security_protocol_map``, ``host``, ``port``,
``features``, ``version``), with its advertised sidecar endpoints and its BrokerMetadata
tags. All sidecars watch ``/brokers/ids``: the children's endpoints become the
:class:`~proxy.datapath.addressing.RegisteredAddressBook` that rewrites broker addresses,
and the tags answer BrokerMetadata for other sidecars' ids.

The session is the sidecar's one :class:`~proxy.control.zk.ZooKeeper`: watch callbacks
reach trio through its bridge, and a LOST session (the ephemeral node is gone) arrives on
its state channel; the node is then written again.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import trio
from kazoo.client import KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from proxy.config import Endpoint, HostPort
from proxy.control.zk import ZooKeeper
from proxy.local.ports import BrokerEntry

log = logging.getLogger(__name__)

IDS_PATH = "/brokers/ids"


class RegistrationError(Exception):
    """The broker id is taken by another live session."""


class Registrant(Protocol):
    """What registration needs to know of the sidecar it registers."""

    def advertised_endpoints(self) -> list[Endpoint]:
        """Every advertised endpoint, in listener order."""
        ...

    def security_protocol(self, listener: str) -> str:
        """The security protocol of a listener."""
        ...

    def tags(self) -> dict[str, str]:
        """The BrokerMetadata tags."""
        ...

    def upstream_text(self) -> str:
        """The upstream broker, as configured."""
        ...

    async def wait_broker_id(self) -> int:
        """This sidecar's broker id, once known (learned from the upstream when -1)."""
        ...

    def supported_features(self) -> dict[str, dict[str, int]]:
        """KIP-584 supported features, ``{name: {"min_version": a, "max_version": b}}``."""
        ...


def registration_json(registrant: Registrant) -> bytes:
    """The znode body for this sidecar (Kafka's broker registration, version 5, plus tags)."""
    endpoints = registrant.advertised_endpoints()
    first = endpoints[0]
    body = {
        "version": 5,
        "host": first.host,
        "port": first.port,
        "jmx_port": -1,
        "timestamp": str(int(time.time() * 1000)),
        "endpoints": [str(e) for e in endpoints],
        "listener_security_protocol_map": {e.name: registrant.security_protocol(e.name) for e in endpoints},
        "features": registrant.supported_features(),
        "tags": registrant.tags(),
        "ksidecar": {"upstream": registrant.upstream_text()},
    }
    return json.dumps(body, sort_keys=True).encode()


def parse_registration(raw: bytes) -> dict[str, Any] | None:
    """A registration body, or ``None`` if it is not one we can read."""
    try:
        body = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def endpoints_of(body: dict[str, Any]) -> dict[str, HostPort]:
    """``{listener name: address}`` from a registration's ``endpoints``."""
    result: dict[str, HostPort] = {}
    for text in body.get("endpoints", []):
        if not isinstance(text, str) or "://" not in text:
            continue
        name, _, rest = text.partition("://")
        host, _, port = rest.rpartition(":")
        if port.isdigit():
            result[name.upper()] = HostPort(host.strip("[]"), int(port))
    return result


class Registration:
    """This sidecar's ephemeral registration and the watch over all of them."""

    def __init__(
        self,
        zk: ZooKeeper,
        registrant: Registrant,
        on_view: Callable[[dict[int, dict[str, HostPort]]], None],
        *,
        register: bool = True,
    ) -> None:
        self.zk = zk
        #: False for a worker of a sidecar with several: its supervisor registers, it watches.
        self.register = register
        self.registrant = registrant
        self._on_view = on_view
        self.bodies: dict[int, dict[str, Any]] = {}
        self.node_id = -1
        self._first_view = trio.Event()

    def entries(self, listener: str) -> list[BrokerEntry]:
        """Every registered sidecar as a BrokerMetadata entry for ``listener``."""
        entries: list[BrokerEntry] = []
        for node_id, body in sorted(self.bodies.items()):
            address = endpoints_of(body).get(listener)
            if address is None:
                continue
            tags = body.get("tags") if isinstance(body.get("tags"), dict) else {}
            entries.append(BrokerEntry(node_id, address.host, address.port,
                                       {str(k): str(v) for k, v in (tags or {}).items()}))
        return entries

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register and watch; keep the registration alive until cancelled."""
        states = self.zk.states()
        try:
            await self.zk.call(self.zk.client.ensure_path, IDS_PATH)
            if self.register:
                await self._register()
            else:
                self.node_id = await self.registrant.wait_broker_id()
            self.zk.client.ChildrenWatch(IDS_PATH, self._children_changed)
            with trio.move_on_after(5):
                await self._first_view.wait()
            task_status.started()
            async for state in states:
                if state == KazooState.LOST and self.register:
                    await self._reregister()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._deregister)

    async def _register(self) -> None:
        with trio.fail_after(60):
            self.node_id = await self.registrant.wait_broker_id()
        path = f"{IDS_PATH}/{self.node_id}"
        body = registration_json(self.registrant)
        # A sidecar restarted at once (killed, OOM) finds its previous session's node: the
        # server expires that session between one and one and a half session timeouts after
        # its last heartbeat (expiry runs on tick boundaries, and a tick is at most half the
        # shortest session). Twice the timeout covers it; anyone else's node is a
        # configuration error (two sidecars with one broker.id).
        deadline = trio.current_time() + 2 * self.zk.session_timeout
        waiting = False
        while True:
            try:
                await self.zk.call(self.zk.client.create, path, body, ephemeral=True)
                log.info("registered %s in ZooKeeper", path)
                return
            except NodeExistsError:
                if trio.current_time() > deadline:
                    raise RegistrationError(
                        f"broker.id={self.node_id}: {path} is held by another live session "
                        f"(waited {2 * self.zk.session_timeout:g} s, twice zookeeper.session.timeout.ms)"
                    ) from None
                if not waiting:
                    waiting = True
                    log.info("%s exists: waiting for a previous session to expire (up to %g s)",
                             path, 2 * self.zk.session_timeout)
                await trio.sleep(0.5)

    async def _reregister(self) -> None:
        log.warning("ZooKeeper session lost; registering %s/%d again", IDS_PATH, self.node_id)
        while True:
            try:
                await self._register()
                return
            except Exception as exc:  # keep trying: the sidecar itself still serves
                log.warning("re-registration failed: %s", exc)
                await trio.sleep(1)

    def _children_changed(self, children: list[str]) -> bool:
        # kazoo thread: reading the children here is allowed (kazoo's own worker thread).
        bodies: dict[int, dict[str, Any]] = {}
        for child in children:
            if not child.lstrip("-").isdigit():
                continue
            try:
                raw, _ = self.zk.client.get(f"{IDS_PATH}/{child}")
            except NoNodeError:
                continue
            body = parse_registration(raw)
            if body is not None:
                bodies[int(child)] = body
        return bool(self.zk.deliver(self._install)(bodies))

    def _install(self, bodies: dict[int, dict[str, Any]]) -> None:
        self.bodies = bodies
        self._on_view({k: endpoints_of(v) for k, v in bodies.items()})
        if self.node_id in bodies:
            self._first_view.set()

    def _deregister(self) -> None:
        try:
            if self.register and self.node_id >= 0 and self.zk.client.connected:
                self.zk.client.delete(f"{IDS_PATH}/{self.node_id}")
        except Exception as exc:  # the session ends anyway; the node goes with it
            log.debug("deleting registration: %s", exc)
