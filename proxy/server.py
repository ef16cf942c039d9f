"""The sidecar process: listeners, the control connection, registration, metrics, drain.

:class:`Sidecar` owns everything one sidecar shares between its connections. ``serve``
runs until cancelled or until :meth:`Sidecar.drain` finishes; it reports readiness with
``task_status.started(sidecar)`` once every listener is bound, so tests and the CLI know
the real ports (port 0 picks a free one).
"""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING

import trio

from protocol.apis import PRODUCE, ApiRegistry
from proxy.acceptor import serve_listener
from proxy.addressing import (
    AddressBook,
    OffsetAddressBook,
    RegisteredAddressBook,
    StaticAddressBook,
)
from proxy.config import Endpoint, HostPort, SidecarConfig
from proxy.connection import Connection
from proxy.handlers.broker_metadata import BrokerEntry, builtin_tags
from proxy.http import serve_http
from proxy.metrics import SidecarMetrics
from proxy.observing import load_hub, run_hub
from proxy.quota_metrics import register_quota_metrics
from proxy.router import Router
from proxy.tls import listener_ssl_context, upstream_ssl_context
from proxy.upstream import Upstream, upstream_login
from quotas.admin import effective_rate
from quotas.gate import AcceptGate, GateConfig, limit
from quotas.rate import RateConfig

if TYPE_CHECKING:
    from proxy.registration import Registration

log = logging.getLogger(__name__)

TLS_HANDSHAKE_TIMEOUT = 10.0


def gate_config(config: SidecarConfig) -> GateConfig:
    """The accept gate's limits from the KIP-612 / KIP-402 keys."""
    names = [e.name for e in config.listeners]
    overrides = config.listener_overrides
    listener_rates = {n: limit(overrides.get(n, {}).get("max.connection.creation.rate")) for n in names}
    listener_max = {n: overrides.get(n, {}).get("max.connections") for n in names}
    max_per_ip = config["max.connections.per.ip"]
    return GateConfig(
        rate=RateConfig(config["quota.window.num"], config["quota.window.size.seconds"] * 1000),
        sidecar_rate=limit(config["max.connection.creation.rate"]),
        listener_rates={n: r for n, r in listener_rates.items() if r is not None},
        protected_listener=config["inter.broker.listener.name"] or None,
        max_connections=None if limit(config["max.connections"]) is None else config["max.connections"],
        listener_max_connections={n: m for n, m in listener_max.items() if m is not None and limit(m) is not None},
        max_connections_per_ip=None if limit(max_per_ip) is None else max_per_ip,
        max_connections_per_ip_overrides=config["max.connections.per.ip.overrides"],
        smoothing=config["sidecar.connection.rate.smoothing"],
    )


class Sidecar:
    """One sidecar: configuration, shared state, and the tasks that serve it."""

    def __init__(self, config: SidecarConfig) -> None:
        self.config = config
        self.registry = ApiRegistry(config["sidecar.broker.metadata.api.key"])
        self.metrics = SidecarMetrics(self.registry)
        upstream = config["sidecar.upstream"]
        self.upstream = Upstream(
            upstream,
            ssl_context=upstream_ssl_context(config),
            connect_timeout=config["sidecar.upstream.connect.timeout.ms"] / 1000,
            registry=self.registry,
            login=upstream_login(config),
        )
        self.registered = RegisteredAddressBook()
        self.address_book: AddressBook = self.registered  # replaced in serve() once bound
        self.bound: dict[str, HostPort] = {}
        self.connections: set[Connection] = set()
        self.registration: Registration | None = None
        self.metrics_address: HostPort | None = None
        self._routers: dict[str, Router] = {}
        self._listener_scopes: list[trio.CancelScope] = []
        self._unmapped_logged: set[tuple[str, int]] = set()
        self.draining = False
        self.gate = AcceptGate(gate_config(config), self.ip_quota)
        self.ip_quotas: dict[str | None, float] = {}
        self._slot_freed = trio.Event()
        register_quota_metrics(self)
        #: Observers (KIP-388), or ``None`` when ``observer.class.names`` is empty.
        self.observers = load_hub(config, self.registry, self.metrics.registry, self.broker_id)

    # -- identity ----------------------------------------------------------------------

    @property
    def broker_id(self) -> int:
        """``broker.id``, or the id learned from the upstream (-1 while unknown)."""
        configured: int = self.config["broker.id"]
        if configured >= 0:
            return configured
        info = self.upstream.info
        return info.node_id if info is not None and info.node_id is not None else -1

    def advertised(self, listener: str) -> Endpoint:
        """The endpoint clients are told for ``listener`` (bound port when port was 0)."""
        endpoint = self.config.advertised(listener)
        if endpoint.port == 0 and listener in self.bound:
            return Endpoint(endpoint.name, endpoint.host, self.bound[listener].port)
        return endpoint

    def advertised_endpoints(self) -> list[Endpoint]:
        """Every advertised endpoint, in listener order."""
        return [self.advertised(e.name) for e in self.config.listeners]

    def router_for(self, listener: str) -> Router:
        """The router of ``listener`` (one per listener, shared by its connections)."""
        router = self._routers.get(listener)
        if router is None:
            router = self._routers[listener] = Router(self, listener)
        return router

    def tags(self) -> dict[str, str]:
        """Builtin BrokerMetadata tags, then the operator's ``tag.*`` tags."""
        info = self.upstream.info
        produce = info.api_versions.get(PRODUCE) if info is not None else None
        formats = "v0,v1,v2" if produce is not None and produce[0] <= 2 else "v2"
        endpoints = [f"{e.name.lower()}://{e.host}:{e.port}" for e in self.advertised_endpoints()]
        tags = builtin_tags(self.broker_id, endpoints, self.config["message.max.bytes"], formats)
        tags.update(self.config.tags)
        return tags

    def broker_entries(self, listener: str) -> tuple[BrokerEntry, list[BrokerEntry]]:
        """This sidecar and the others it knows of, as BrokerMetadata entries."""
        mine = self.advertised(listener)
        me = BrokerEntry(self.broker_id, mine.host, mine.port, self.tags())
        others: list[BrokerEntry] = []
        if self.registration is not None:
            others = [e for e in self.registration.entries(listener) if e.node_id != me.node_id]
        elif self.upstream.info is not None:
            for broker in self.upstream.info.brokers:
                if broker.node_id == me.node_id:
                    continue
                address = self.address_book.lookup(broker.node_id, broker.host, broker.port, listener)
                if address is not None:
                    others.append(BrokerEntry(broker.node_id, address.host, address.port,
                                              {"broker.id": str(broker.node_id)}))
        return me, others

    def log_unmapped(self, api_name: str, node_id: int) -> None:
        """Log an unmapped broker id once per (API, id) (counted every time in metrics)."""
        key = (api_name, node_id)
        if key not in self._unmapped_logged and len(self._unmapped_logged) < 1000:
            self._unmapped_logged.add(key)
            log.warning(
                "%s response names broker %d, which has no known sidecar address; the entry is "
                "withheld from clients (see sidecar.address.mapping)", api_name, node_id,
            )

    @property
    def ready(self) -> bool:
        """True when listeners are bound and the upstream answers."""
        return bool(self.bound) and self.upstream.healthy and not self.draining

    # -- serving -----------------------------------------------------------------------

    def _build_address_book(self) -> AddressBook:
        scheme = self.config["sidecar.address.mapping"]
        if scheme == "auto":
            scheme = "zookeeper" if self.config["zookeeper.connect"] else "offset"
        if scheme == "static":
            return StaticAddressBook(self.config["sidecar.address.map"])
        if scheme == "zookeeper":
            return self.registered
        fixed = self.config["sidecar.address.port.offset"]
        upstream_port = self.config["sidecar.upstream"].port
        offsets = {
            e.name: fixed if fixed is not None else self.advertised(e.name).port - upstream_port
            for e in self.config.listeners
        }
        return OffsetAddressBook(offsets)

    async def serve(self, *, task_status: trio.TaskStatus[Sidecar] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the sidecar until cancelled or drained."""
        async with trio.open_nursery() as nursery:
            await nursery.start(
                self.upstream.refresh_forever,
                self.config["sidecar.upstream.api.versions.refresh.ms"] / 1000,
            )
            if not self.upstream.healthy:
                log.warning("upstream %s not reachable yet; clients will be refused until it is",
                            self.upstream.address)
            listeners: list[tuple[Endpoint, list[trio.SocketListener]]] = []
            for endpoint in self.config.listeners:
                sockets = await trio.open_tcp_listeners(endpoint.port, host=endpoint.host or None)
                port = sockets[0].socket.getsockname()[1]
                self.bound[endpoint.name] = HostPort(endpoint.host, port)
                listeners.append((endpoint, sockets))
            self.address_book = self._build_address_book()
            if self.config["zookeeper.connect"]:
                from proxy.registration import Registration

                self.registration = Registration(self)
                await nursery.start(self.registration.run)
            metrics_at: HostPort | None = self.config["sidecar.metrics.listener"]
            if metrics_at is not None:
                self.metrics_address = await nursery.start(serve_http, self, metrics_at)
            for endpoint, sockets in listeners:
                nursery.start_soon(self._accept, endpoint, sockets)
            nursery.start_soon(self._expire_ip_sensors)
            if self.observers is not None:
                nursery.start_soon(
                    run_hub, self.observers, self.config["observer.close.timeout.ms"] / 1000
                )
            log.info(
                "sidecar broker.id=%d listening on %s, upstream %s%s", self.broker_id,
                ", ".join(f"{n}://{a}" for n, a in self.bound.items()), self.upstream.address,
                "" if self.config["zookeeper.connect"] else " (standalone: no ZooKeeper)",
            )
            task_status.started(self)

    async def _accept(self, endpoint: Endpoint, sockets: list[trio.SocketListener]) -> None:
        context = listener_ssl_context(self.config, endpoint.name)
        # One scope per listener (a CancelScope enters one `with` only). Connections live
        # in their own nursery: drain() cancels (and closes) only the accepting sockets,
        # so in-flight requests can still complete.
        scope = trio.CancelScope()
        self._listener_scopes.append(scope)
        if self.draining:
            scope.cancel()
        async with trio.open_nursery() as connections:
            with scope:
                try:
                    await serve_listener(self, endpoint.name, sockets, context, connections)
                finally:
                    for socket_listener in sockets:
                        await trio.aclose_forcefully(socket_listener)

    async def _expire_ip_sensors(self) -> None:
        """Drop per-IP rate sensors idle for an hour (Kafka expires them too)."""
        while True:
            await trio.sleep(60)
            dropped = self.gate.expire(int(trio.current_time() * 1000))
            if dropped:
                log.debug("expired %d idle per-IP connection-rate sensor(s)", dropped)

    async def wait_slot_freed(self) -> None:
        """Wait until some admitted connection closes (``max.connections``)."""
        await self._slot_freed.wait()

    def _free_slot(self) -> None:
        self._slot_freed.set()
        self._slot_freed = trio.Event()

    async def serve_connection(
        self, stream: trio.SocketStream, listener: str, context: ssl.SSLContext | None, ip: str
    ) -> None:
        """Serve one admitted connection; give its quota slot back when it ends."""
        try:
            await self._handle(stream, listener, context)
        finally:
            self.gate.release(listener, ip)
            self._free_slot()

    def ip_quota(self, ip: str) -> float | None:
        """The per-IP connection rate quota for ``ip`` (``None``: unlimited)."""
        return limit(
            effective_rate(
                ip,
                self.ip_quotas,
                limit(self.config["sidecar.ip.connection.creation.rate"]),
                self.config["sidecar.ip.connection.creation.rate.overrides"],
            )
        )

    def set_ip_quotas(self, snapshot: dict[str | None, float]) -> None:
        """Install a new snapshot of ZooKeeper's per-IP quotas (applies to new connections)."""
        self.ip_quotas = snapshot
        log.info("per-IP connection quotas now %s", {k or "<default>": v for k, v in snapshot.items()})

    async def _handle(
        self, stream: trio.abc.Stream, listener: str, context: ssl.SSLContext | None
    ) -> None:
        try:
            assert isinstance(stream, trio.SocketStream)
            peer = stream.socket.getpeername()[:2]
        except OSError:
            await trio.aclose_forcefully(stream)
            return
        self.metrics.connections.labels(listener).inc()
        client: trio.abc.Stream = stream
        if context is not None:
            tls = trio.SSLStream(stream, context, server_side=True)
            try:
                with trio.fail_after(TLS_HANDSHAKE_TIMEOUT):
                    await tls.do_handshake()
            except (trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError) as exc:
                self.metrics.errors.labels("tls_handshake").inc()
                self.metrics.connections_closed.labels(listener, "tls_handshake").inc()
                log.info("TLS handshake with %s:%d on %s failed: %s", peer[0], peer[1], listener, exc)
                await trio.aclose_forcefully(stream)
                return
            client = tls
        connection = Connection(self, client, listener, peer)
        self.connections.add(connection)
        gauge = self.metrics.connections_active.labels(listener)
        gauge.inc()
        try:
            await connection.run()
        finally:
            gauge.dec()
            self.connections.discard(connection)

    async def drain(self, deadline: float | None = None) -> None:
        """Stop accepting, let in-flight requests finish (up to the drain time), then return."""
        timeout = self.config["sidecar.shutdown.drain.ms"] / 1000 if deadline is None else deadline
        self.draining = True
        for scope in self._listener_scopes:
            scope.cancel()
        for connection in list(self.connections):
            connection.stop_reading()
        with trio.move_on_after(timeout):
            while self.connections:
                await trio.sleep(0.01)
        if self.connections:
            log.warning("drain deadline passed with %d connection(s) still busy", len(self.connections))
