"""Sidecar registration in ZooKeeper, and the watched view of every sidecar registered.

Each sidecar writes an ephemeral ``/brokers/ids/<broker.id>`` in the shape Kafka's own
brokers use (``endpoints``, ``listener_security_protocol_map``, ``host``, ``port``,
``features``, ``version``), with its advertised sidecar endpoints and its BrokerMetadata
tags. All sidecars watch ``/brokers/ids``: the children's endpoints become the
:class:`~proxy.addressing.RegisteredAddressBook` that rewrites broker addresses, and the
tags answer BrokerMetadata for other sidecars' ids.

kazoo runs its own threads: blocking calls go through ``trio.to_thread.run_sync``, and
watch callbacks hand their result to trio with ``TrioToken.run_sync_soon`` (they must not
block). When the session is LOST the ephemeral node is gone: it is written again once the
client reconnects.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from proxy.config import HostPort
from proxy.handlers.broker_metadata import BrokerEntry
from proxy.user_store import Users, UserStore
from quotas.store import IpQuotaStore

if TYPE_CHECKING:
    from proxy.server import Sidecar

log = logging.getLogger(__name__)

IDS_PATH = "/brokers/ids"


class RegistrationError(Exception):
    """ZooKeeper could not be reached or the broker id is taken."""


def registration_json(sidecar: Sidecar) -> bytes:
    """The znode body for this sidecar (Kafka's broker registration, version 5, plus tags)."""
    endpoints = sidecar.advertised_endpoints()
    first = endpoints[0]
    body = {
        "version": 5,
        "host": first.host,
        "port": first.port,
        "jmx_port": -1,
        "timestamp": str(int(time.time() * 1000)),
        "endpoints": [str(e) for e in endpoints],
        "listener_security_protocol_map": {
            e.name: sidecar.config.security_protocol(e.name) for e in endpoints
        },
        "features": {},
        "tags": sidecar.tags(),
        "ksidecar": {"upstream": str(sidecar.config["sidecar.upstream"])},
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


def split_chroot(connect: str) -> tuple[str, str | None]:
    """``"h1:2181,h2:2181/ksidecar"`` → ``("h1:2181,h2:2181", "/ksidecar")``."""
    hosts, sep, chroot = connect.partition("/")
    return hosts, ("/" + chroot.rstrip("/")) if sep and chroot.strip("/") else None


def ensure_chroot(connect: str, timeout: float) -> None:
    """Create the connect string's chroot if missing, as Kafka does at start."""
    hosts, chroot = split_chroot(connect)
    if chroot is None:
        return
    client = KazooClient(hosts=hosts, timeout=timeout)
    client.start(timeout=timeout)
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()


class Registration:
    """This sidecar's ephemeral registration and the watch over all of them."""

    def __init__(self, sidecar: Sidecar) -> None:
        self.sidecar = sidecar
        config = sidecar.config
        self.client = KazooClient(
            hosts=config["zookeeper.connect"],
            timeout=config["zookeeper.session.timeout.ms"] / 1000,
        )
        self.bodies: dict[int, dict[str, Any]] = {}
        self.quota_store = IpQuotaStore(self.client, self._quotas_changed)
        #: SCRAM users (``/config/users``), kept current by a watch (proxy.handlers.sasl).
        self.user_store = UserStore(self.client, self._users_changed)
        self.scram_users: Users = {}
        self.node_id = -1
        self._token: trio.lowlevel.TrioToken | None = None
        self._lost = trio.Event()

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
        """Connect, register, watch; keep the registration alive until cancelled."""
        self._token = trio.lowlevel.current_trio_token()
        timeout = self.sidecar.config["zookeeper.session.timeout.ms"] / 1000
        connect = self.sidecar.config["zookeeper.connect"]
        try:
            await trio.to_thread.run_sync(ensure_chroot, connect, timeout)
            await trio.to_thread.run_sync(lambda: self.client.start(timeout=timeout))
        except KazooTimeoutError:
            raise RegistrationError(
                f"zookeeper.connect={self.sidecar.config['zookeeper.connect']!r}: "
                f"no ZooKeeper answered within {timeout:g}s"
            ) from None
        self.client.add_listener(self._state_changed)
        try:
            await trio.to_thread.run_sync(self.client.ensure_path, IDS_PATH)
            await trio.to_thread.run_sync(self.quota_store.start)
            await trio.to_thread.run_sync(self.user_store.start)
            await self._register()
            self.client.ChildrenWatch(IDS_PATH, self._children_changed)
            await self._wait_for_first_view()
            task_status.started()
            while True:
                await self._lost.wait()
                self._lost = trio.Event()
                await self._reregister()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._close)

    async def _wait_for_first_view(self) -> None:
        with trio.move_on_after(5):
            while self.node_id not in self.bodies:
                await trio.sleep(0.01)

    async def _register(self) -> None:
        with trio.fail_after(60):
            while self.sidecar.broker_id < 0:  # learned from the upstream at start
                await trio.sleep(0.1)
        self.node_id = self.sidecar.broker_id
        path = f"{IDS_PATH}/{self.node_id}"
        body = registration_json(self.sidecar)
        deadline = trio.current_time() + self.sidecar.config["zookeeper.session.timeout.ms"] / 1000
        while True:
            try:
                await trio.to_thread.run_sync(
                    lambda: self.client.create(path, body, ephemeral=True)
                )
                log.info("registered %s in ZooKeeper", path)
                return
            except NodeExistsError:
                # A previous session of ours may not have expired yet; anyone else's is a
                # configuration error (two sidecars with one broker.id).
                if trio.current_time() > deadline:
                    raise RegistrationError(
                        f"broker.id={self.node_id}: {path} is held by another live session"
                    ) from None
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

    def _state_changed(self, state: str) -> None:
        # kazoo thread: must not block. LOST means our ephemeral node is gone.
        if state == KazooState.LOST and self._token is not None:
            self._token.run_sync_soon(self._lost.set)

    def _children_changed(self, children: list[str]) -> bool:
        # kazoo thread: reading the children here is allowed (kazoo's own worker thread).
        bodies: dict[int, dict[str, Any]] = {}
        for child in children:
            if not child.lstrip("-").isdigit():
                continue
            try:
                raw, _ = self.client.get(f"{IDS_PATH}/{child}")
            except NoNodeError:
                continue
            body = parse_registration(raw)
            if body is not None:
                bodies[int(child)] = body
        if self._token is not None:
            try:
                self._token.run_sync_soon(self._install, bodies)
            except trio.RunFinishedError:
                return False
        return True

    def _quotas_changed(self, snapshot: dict[str | None, float]) -> None:
        # kazoo thread: hand the snapshot to trio without blocking.
        if self._token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self.sidecar.set_ip_quotas, snapshot)

    def _users_changed(self, users: Users) -> None:
        # kazoo thread: hand the snapshot to trio without blocking.
        if self._token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self.set_scram_users, users)

    def set_scram_users(self, users: Users) -> None:
        """Install a new snapshot of the SCRAM users (new logins use it)."""
        self.scram_users = users

    def _install(self, bodies: dict[int, dict[str, Any]]) -> None:
        self.bodies = bodies
        self.sidecar.registered.replace({k: endpoints_of(v) for k, v in bodies.items()})

    def _close(self) -> None:
        try:
            if self.node_id >= 0 and self.client.connected:
                self.client.delete(f"{IDS_PATH}/{self.node_id}")
        except Exception as exc:  # the session ends anyway; the node goes with it
            log.debug("deleting registration: %s", exc)
        self.client.stop()
        self.client.close()
