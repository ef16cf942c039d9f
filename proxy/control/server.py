"""The composition root: one sidecar's parts, built from its configuration and wired together.

:class:`Sidecar` builds every part once (the upstream link, the ZooKeeper session and the
stores that share it, the accept gate, the observer hub, one local-API table and router per
listener) and hands each only the narrow ports it needs; nothing below imports this module.
``serve`` runs until cancelled or until :meth:`Sidecar.drain` finishes; it reports readiness
with ``task_status.started(sidecar)`` once every listener is bound, so tests and the CLI know
the real ports (port 0 picks a free one).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import ssl
import weakref
from collections.abc import Awaitable, Callable

import trio
from prometheus_client import CollectorRegistry, Counter

from coordinator.features import parse_supported_override, supported_features
from coordinator.share_group import ShareGroupSettings
from coordinator.share_records import ShareSettings
from observers.errors import ObserverError
from observers.worker import Settings
from protocol.apis import ApiRegistry
from protocol.leniency import RESPONSE, Leniency
from proxy.auth.gate import ListenerAuth
from proxy.auth.principal_mapping import PrincipalMapper
from proxy.config import Endpoint, HostPort, SidecarConfig
from proxy.config.keys import ConfigError, filter_entries, observer_entries
from proxy.config.settings import (
    ConnectionSettings,
    SaslSettings,
    coordinator_settings,
    queued_max_request_bytes,
)
from proxy.control.acceptor import serve_listener
from proxy.control.acl_state import AclState
from proxy.control.client_quota_metrics import RateCollector, ThrottleCounters
from proxy.control.client_quota_state import BROKER, ClientQuotaState
from proxy.control.features_state import FeatureState
from proxy.control.gate_config import gate_config
from proxy.control.group_configs import GroupConfigs, broker_group_settings
from proxy.control.groups import GroupService
from proxy.control.http import ReloadHook, serve_http
from proxy.control.identity import Brokers, Identity, OwnAddressFirst
from proxy.control.jwks import JwksFetcher, JwksSettings, token_rules
from proxy.control.observing import load_hub, run_hub
from proxy.control.quota_metrics import register_quota_metrics
from proxy.control.quota_state import IpQuotas
from proxy.control.registration import Registration, endpoints_of
from proxy.control.share_reader import BrokerReader
from proxy.control.shares import ShareService
from proxy.control.tls import (
    PrincipalMappingFailed,
    ServerTls,
    check_certificate_change,
    listener_principal_mapper,
    listener_tls,
    tls_principal,
    upstream_ssl_context,
)
from proxy.control.topic_directory import TopicDirectory
from proxy.control.upstream import Upstream, upstream_login
from proxy.control.users import ScramUsers
from proxy.control.zk import ZooKeeper
from proxy.control.zk_security import ZkSecurity
from proxy.datapath.addressing import (
    AddressBook,
    OffsetAddressBook,
    RegisteredAddressBook,
    StaticAddressBook,
)
from proxy.datapath.authorize import Authorization
from proxy.datapath.client_quota import ClientQuotaFilter
from proxy.datapath.connection import Connection, Parts
from proxy.datapath.dispatch import Dispatch, Gate, RequestFilter
from proxy.datapath.filters import FilterMetrics, LoadedFilter, load_filters
from proxy.datapath.idle import IdleSweeper
from proxy.datapath.memory import RequestMemory
from proxy.datapath.metrics import SidecarMetrics
from proxy.datapath.mutation_quota import MutationQuotaFilter
from proxy.datapath.rewrite import SITES, Rewriter
from proxy.datapath.routing import Router
from proxy.local.api import Context
from proxy.local.ports import Ports
from proxy.local.remote import Owner
from proxy.local.sasl import SaslApis
from proxy.local.table import TableSpec, build_table
from quotas.gate import AcceptGate
from quotas.rate import RateConfig

log = logging.getLogger(__name__)

TLS_HANDSHAKE_TIMEOUT = 10.0


class Role(enum.Enum):
    """What one process of a sidecar does (``sidecar.workers``, docs/operations.md)."""

    #: Everything, in one process (``sidecar.workers=1``).
    SINGLE = "single"
    #: Binds the listeners and admits connections (KIP-612), hands each to a worker, and
    #: owns the sidecar-wide state: the coordinator, features, ACL, SCRAM and quota
    #: administration, registration; serves HTTP.
    SUPERVISOR = "supervisor"
    #: Serves the client connections handed to it, whole; asks the supervisor for the APIs
    #: of the sidecar-wide state.
    WORKER = "worker"


#: Serves one admitted connection elsewhere (the supervisor's hand-off to a worker):
#: ``(stream, listener, ip)``, returning when the connection has ended.
HandOff = Callable[[trio.SocketStream, str, str], Awaitable[None]]


class Sidecar:
    """One sidecar, or one process of a sidecar with several (:class:`Role`): its parts,
    and the tasks that serve it."""

    def __init__(self, config: SidecarConfig, *, role: Role = Role.SINGLE, owner: Owner | None = None,
                 worker: int = 0, workers: int = 1, hand_off: HandOff | None = None) -> None:
        self.config = config
        self.role = role
        #: A worker's channel to the supervisor, which answers the APIs of the shared state.
        self.owner = owner
        #: This worker's index (0 in a single process): in its log lines and audit files.
        self.worker = worker
        self._hand_off = hand_off
        self.registry = ApiRegistry(config["sidecar.broker.metadata.api.key"])
        self.metrics = SidecarMetrics(self.registry)
        self._lenient_logged: set[tuple[str, str, str]] = set()
        #: The one rule every reader of a frame applies (docs/protocol.md, "Leniency").
        self.leniency = Leniency(self.log_lenient)
        self.upstream = Upstream(
            config["sidecar.upstream"],
            ssl_context=upstream_ssl_context(config),
            connect_timeout=config["sidecar.upstream.connect.timeout.ms"] / 1000,
            registry=self.registry,
            login=upstream_login(config),
            leniency=self.leniency,
        )
        connect: str = config["zookeeper.connect"]
        #: The one ZooKeeper session every store shares (``None``: standalone).
        self.zk = ZooKeeper(connect, config["zookeeper.session.timeout.ms"] / 1000,
                            ZkSecurity.from_values(config.values)) if connect else None
        self.ip_quotas = IpQuotas(
            config["sidecar.ip.connection.creation.rate"],
            config["sidecar.ip.connection.creation.rate.overrides"],
            self.zk,
        )
        self.users = ScramUsers(self.zk)
        #: User and client-id quotas (``sidecar.client.quotas``): watched, and enforced here
        #: or left to the broker.
        self.client_quotas = ClientQuotaState(
            config["sidecar.client.quotas"],
            RateConfig(config["quota.window.num"], config["quota.window.size.seconds"] * 1000),
            self.zk, self.upstream)
        if self.client_quotas.store is not None:
            series = config["observer.prometheus.max.principals"]
            if role is not Role.SUPERVISOR:  # where throttles are decided
                self.client_quotas.rates.on_throttle = ThrottleCounters(self.metrics.registry, series)
            if role is not Role.WORKER:  # where the page is (a supervisor's rates: every worker's usage)
                self.metrics.registry.register(RateCollector(self.client_quotas.rates, series))
        #: OAUTHBEARER's signing keys, when a JWKS URL is set (:mod:`proxy.control.jwks`).
        self.jwks = (JwksFetcher(JwksSettings.from_config(config), token_rules(config))
                     if config["sasl.oauthbearer.jwks.endpoint.url"] and role is not Role.SUPERVISOR else None)
        #: Who this sidecar is: broker id, advertised endpoints, tags (:mod:`proxy.control.identity`).
        self.identity = Identity(config, self.upstream)
        self.registered = RegisteredAddressBook()
        self.address_book: AddressBook = self.registered  # replaced in serve() once bound
        self.registration = Registration(self.zk, self.identity, self.registered.replace,
                                         register=role is not Role.WORKER) if self.zk else None
        #: Bound addresses by listener (the identity's: advertised ports that were 0).
        self.bound = self.identity.bound
        self.connections: set[Connection] = set()
        self.metrics_address: HostPort | None = None
        #: What ``POST /-/reload`` runs (set by ``ksidecar run``; ``None``: not offered).
        self.reload_hook: ReloadHook | None = None
        self.draining = False
        self.gate = AcceptGate(gate_config(config), self.ip_quotas.rate_for)
        self._listener_scopes: list[trio.CancelScope] = []
        self._unmapped_logged: set[tuple[str, int]] = set()
        self._slot_freed = trio.Event()
        self._parts: dict[str, Parts] = {}
        #: Every listener's dispatch still serving a connection: a reload gives each the new
        #: filters (the connections built before it keep their other parts).
        self._dispatches: weakref.WeakSet[Dispatch] = weakref.WeakSet()
        #: Each SSL listener's server context, built at start (a certificate that does not
        #: load: no start) and again on each reload, so that every process serves the same.
        self._tls: dict[str, ServerTls] = _listeners_tls(config)
        #: ``ssl.principal.mapping.rules`` of each SSL listener, parsed once (bad rules: no start).
        self._principal_mappers = _principal_mappers(config)
        register_quota_metrics(self.metrics.registry, self.gate, [e.name for e in config.listeners])
        self.sasl_lenient = Counter(
            "ksidecar_sasl_lenient_logins", "SASL logins that succeeded only under a rule looser "
            "than the RFC (deviation: scram-nonce-suffix, see sidecar.sasl.scram.nonce.check), by "
            "listener, mechanism and deviation.", ["listener", "mechanism", "deviation"],
            registry=self.metrics.registry)
        #: KIP-584 features (with ZooKeeper: ``/feature`` is shared by the fleet), else ``None``;
        #: built below, once the coordinator is (observers read it only once serving).
        self.features: FeatureState | None = None
        #: Topic id → name for the ACLs and the observers (asked of the broker on demand).
        self.topics = TopicDirectory(self.upstream.topics)
        #: Observers (KIP-388), or ``None`` when ``observer.class.names`` is empty.
        self.observers = None if role is Role.SUPERVISOR else load_hub(
            config, self.registry, self.metrics.registry, self.broker_id, self.feature_level,
            self.topics.lookup_blocking, worker=worker)
        #: Kafka ACLs in ZooKeeper (``sidecar.authorizer=acls``; the key table refuses it
        #: without ZooKeeper), else ``None``.
        self.acls: AclState | None = None
        if config["sidecar.authorizer"] == "acls" and self.zk is not None:
            self.acls = AclState(self.zk, super_users=config["super.users"],
                                 allow_if_no_acl=config["allow.everyone.if.no.acl.found"],
                                 open_keys=frozenset({config["sidecar.broker.metadata.api.key"]}),
                                 topics=self.topics, enforcing=config["sidecar.authorizer.mode"] == "enforce")
        #: The embedded group coordinator (``sidecar.coordinator=embedded``), else ``None``.
        self.groups: GroupService | None = None
        #: Share groups (KIP-932), served beside the embedded coordinator, else ``None``.
        self.shares: ShareService | None = None
        #: Group configs (KIP-848, KIP-932) of the groups the embedded coordinator serves.
        self.group_configs: GroupConfigs | None = None
        if config["sidecar.coordinator"] == "embedded" and role is not Role.WORKER:
            assert self.zk is not None  # the key table refuses embedded without ZooKeeper
            self.group_configs = GroupConfigs(self.zk, broker_group_settings(config))
            self.groups = GroupService(
                coordinator_settings(config), self.zk, self.upstream, self.identity.coordinator_address,
                self.metrics.registry,
                refresh_interval=config["sidecar.coordinator.metadata.refresh.ms"] / 1000,
                # KIP-848 regexes resolve only to topics the member's principal may Describe.
                topic_access=self.acls.describable if self.acls is not None and config[
                    "sidecar.authorizer.mode"] == "enforce" else None,
                group_configs=self.group_configs,
            )
            groups = self.groups
            self.shares = ShareService(
                self.zk, BrokerReader(self.upstream), self.upstream, self.metrics.registry,
                group_settings=ShareGroupSettings(
                    max_size=config["group.share.max.size"],
                    session_timeout_ms=config["group.share.session.timeout.ms"],
                    heartbeat_interval_ms=config["group.share.heartbeat.interval.ms"]),
                share_settings=ShareSettings(
                    record_lock_duration_ms=config["group.share.record.lock.duration.ms"],
                    delivery_count_limit=config["group.share.delivery.count.limit"],
                    max_record_locks=config["group.share.partition.max.record.locks"]),
                max_sessions=config["group.share.max.share.sessions"],
                coordinates=groups.coordinates,
                enabled=lambda: self.feature_level("share.version") >= 1,
                peer=self._share_peer,
                group_configs=self.group_configs, foreign_group=lambda group_id: group_id in groups.core.ctx.groups,
                refresh_interval=config["sidecar.coordinator.metadata.refresh.ms"] / 1000)
        #: ACL enforcement on the data path (``sidecar.authorizer=acls``), else ``None``.
        self.authorization = None if self.acls is None else Authorization(
            self.acls, self.registry, self.metrics.registry, shadow=config["sidecar.authorizer.mode"] == "shadow",
            leniency=self.leniency)
        self._filter_metrics = FilterMetrics(self.metrics.registry)
        #: The operators' request filters (``filter.class.names``), in order, shared by every listener.
        self.filters: tuple[LoadedFilter, ...] = () if role is Role.SUPERVISOR else self._load_filters(config)
        if self.zk is not None:
            override: str = config["sidecar.features.supported.override"]
            supported = (parse_supported_override(override) if override else
                         supported_features(embedded_coordinator=config["sidecar.coordinator"] == "embedded"))
            registration = self.registration
            self.features = self.identity.features = FeatureState(
                self.zk, supported, lambda: registration.bodies if registration is not None else {},
                lambda: self.identity.broker_id)
        self.ports = Ports(
            upstream=self.upstream,
            brokers=Brokers(self.identity, self.registration, lambda: self.address_book),
            quotas=self.ip_quotas,
            client_quotas=self.client_quotas if self.client_quotas.store is not None else None,
            users=self.users if self._owns_scram_users() and role is not Role.WORKER else None,
            groups=self.groups,
            super_users=config["super.users"],
            acls=self.acls,
            features=self.features,
            group_configs=self.group_configs,
            shares=self.shares,
        )
        #: What the listeners' tables serve besides ApiVersions, BrokerMetadata and SASL.
        self.table_spec = TableSpec(
            scram_credentials=self._owns_scram_users(),
            groups=config["sidecar.coordinator"] == "embedded", acls=self.acls is not None,
            features=self.features is not None,
            forward_unparsed=config["sidecar.unparsed.request.policy"] == "forward",
            names_brokers=frozenset(SITES), owner=owner)
        self.connection_settings = ConnectionSettings.from_config(config)
        #: ``connections.max.idle.ms`` and ``socket.request.read.timeout.ms`` for every
        #: connection (one task, not one per connection).
        self.idle = IdleSweeper(self.connection_settings.idle_timeout,
                                self.connection_settings.request_read_timeout)
        #: Request bytes held by all connections (``queued.max.request.bytes``; a worker
        #: holds its share of it: the budget is the sidecar's).
        queued = queued_max_request_bytes(config)
        self.memory = RequestMemory(None if queued is None else max(1, queued // workers))
        self._all_closed = trio.Event()
        #: Requests forwarded to the broker and answers it gave, over closed connections.
        self.forwarded_total = 0
        self.broker_answers_total = 0

    # -- identity (proxy.control.identity) -----------------------------------------------

    @property
    def broker_id(self) -> int:
        """``broker.id``, or the id learned from the upstream (-1 while unknown)."""
        return self.identity.broker_id

    def advertised(self, listener: str) -> Endpoint:
        """The endpoint clients are told for ``listener`` (bound port when port was 0)."""
        return self.identity.advertised(listener)

    def _share_peer(self, group_id: str, listener: str) -> tuple[str, int] | None:
        """Where a share group's requests go when the fleet shares this sidecar's broker and
        the placement gives the group to another sidecar (docs/coordinator.md, "Share
        groups"): that sidecar's address on ``listener``, a plain one; else ``None``."""
        groups, registration = self.groups, self.registration
        if groups is None or groups.fleet is None or registration is None:
            return None
        fleet = groups.fleet
        chosen = fleet.owner(group_id)
        if chosen is None or fleet.me is None or chosen == fleet.me:
            return None
        theirs, mine = registration.bodies.get(chosen), registration.bodies.get(fleet.me)
        if theirs is None or mine is None or theirs.get("ksidecar") != mine.get("ksidecar"):
            return None  # another broker's sidecar (the deployed shape): its partitions are its own
        if (theirs.get("listener_security_protocol_map") or {}).get(listener) != "PLAINTEXT":
            return None
        address = endpoints_of(theirs).get(listener)
        return None if address is None else (address.host, address.port)

    def feature_level(self, name: str) -> int:
        """The fleet's finalized level of feature ``name`` (0 when not finalized, and always
        without ZooKeeper): what observers read (the audit's format)."""
        return self.features.level(name) if self.features is not None else 0

    def log_unmapped(self, api_name: str, node_id: int) -> None:
        """Log an unmapped broker id once per (API, id) (counted every time in metrics)."""
        self.metrics.unmapped.labels(api_name).inc()
        key = (api_name, node_id)
        if key not in self._unmapped_logged and len(self._unmapped_logged) < 1000:
            self._unmapped_logged.add(key)
            log.warning(
                "%s response names broker %d, which has no known sidecar address; the entry is "
                "withheld from clients (see sidecar.address.mapping)", api_name, node_id,
            )

    def log_lenient(self, api_name: str, direction: str, kind: str, extra: int) -> None:
        """Count a frame read despite a deviation its reader reads past (a client for a
        response, Kafka's broker for a request); log it once per (API, direction, kind),
        never per frame."""
        self.metrics.lenient.labels(api_name, direction, kind).inc()
        key = (api_name, direction, kind)
        if key not in self._lenient_logged:
            self._lenient_logged.add(key)
            peer = "the broker" if direction == RESPONSE else "a client"
            log.warning(
                "%s %s from %s deviates from its schema in a way Kafka's readers read past "
                "(%s: %d byte(s) after the body); accepted and passed on unchanged, counted in "
                "ksidecar_lenient_frames_total, logged once", api_name, direction, peer, kind, extra,
            )

    # -- health (the HTTP endpoint's view) ------------------------------------------------

    @property
    def ready(self) -> bool:
        """True when listeners are bound and the upstream answers."""
        return self.readiness() is None

    def readiness(self) -> str | None:
        """``None`` when ready, else why not."""
        if self.draining:
            return "draining"
        if not self.bound:
            return "not listening"
        if not self.upstream.healthy:
            return "upstream not reachable"
        return None

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """The registry ``/metrics`` exports."""
        return self.metrics.registry

    @property
    def own_registry(self) -> CollectorRegistry:
        """The registry this process's own collectors go in (here, the one exported)."""
        return self.metrics.registry

    async def before_scrape(self) -> None:
        """Bring the upstream gauge up to date."""
        self.metrics.upstream_up.set(1 if self.upstream.healthy else 0)

    # -- per-IP quotas (kept for the CLI and tests) ----------------------------------------

    def ip_quota(self, ip: str) -> float | None:
        """The per-IP connection rate quota for ``ip`` (``None``: unlimited)."""
        return self.ip_quotas.rate_for(ip)

    def set_ip_quotas(self, snapshot: dict[str | None, float]) -> None:
        """Install a new snapshot of per-IP quotas (applies to new connections)."""
        self.ip_quotas.install(snapshot)

    # -- wiring ----------------------------------------------------------------------------

    def _owns_scram_users(self) -> bool:
        """True when this sidecar answers the SCRAM credential APIs (it terminates SASL)."""
        config = self.config
        return (
            config["sidecar.sasl.mode"] == "terminate"
            and self.zk is not None
            and any(config.is_sasl(e.name) for e in config.listeners)
        )

    def parts_for(self, listener: str) -> Parts:
        """What every connection of ``listener`` is built from (built once)."""
        parts = self._parts.get(listener)
        if parts is not None:
            return parts
        auth: ListenerAuth | None = None
        sasl: SaslApis | None = None
        if self.config.is_sasl(listener):
            auth = ListenerAuth(
                listener, SaslSettings.from_config(self.config, listener), self.users.credential,
                lambda *labels: self.metrics.sasl_authentications.labels(*labels).inc(),
                has_zookeeper=self.zk is not None,
                count_lenient=lambda *labels: self.sasl_lenient.labels(*labels).inc(),
                oauthbearer=self.jwks.mechanism() if self.jwks is not None else None,
            )
            sasl = SaslApis(auth) if auth.terminating else None
        table = build_table(self.registry, dataclasses.replace(self.table_spec, sasl=sasl))
        # With the embedded coordinator, Metadata names every sidecar FindCoordinator may name.
        fleet = self._fleet_addresses if self.config["sidecar.coordinator"] == "embedded" and self.zk else None
        rewriter = Rewriter(OwnAddressFirst(self.identity, self.address_book), listener, self._unmapped,
                            self.leniency, fleet)
        router = Router(self.registry, table, self.upstream, rewriter,
                        lambda api: self.metrics.rewrites.labels(api).inc(),
                        unparsed_policy=self.config["sidecar.unparsed.request.policy"])
        hub = self.observers
        registry = self.registry

        def gate(context: Context) -> Gate | None:
            if auth is None:
                return None
            if auth.terminating:
                context.sasl = auth.session()
            return auth.gate(context, registry, context.sasl)

        parts = self._parts[listener] = Parts(
            settings=self.connection_settings,
            registry=self.registry,
            router=router,
            metrics=self.metrics,
            open_upstream=self.upstream.connect,
            memory=self.memory,
            upstream_failed=self.upstream.report_failure,
            gate=gate,
            tap=(lambda c: hub.tap(c.listener, c.peer[0], c.peer[1], self.broker_id)) if hub else (lambda c: None),
            idle=self.idle,
            dispatch=Dispatch(self.registry, router, self.metrics, (*self._quota_filters, *self.filters),
                              authorization=self.authorization, leniency=self.leniency,
                              unsupported_policy=self.connection_settings.unsupported_policy,
                              throttles=bool(self._quota_filters)),
        )
        assert parts.dispatch is not None  # given above
        self._dispatches.add(parts.dispatch)
        return parts

    def _load_filters(self, config: SidecarConfig, *, again: bool = False) -> tuple[LoadedFilter, ...]:
        return tuple(load_filters(config["filter.class.names"], filter_entries(config), self.registry,
                                  self._filter_metrics, leniency=self.leniency, reload_modules=again))

    # -- reloading (proxy.control.reload) ---------------------------------------------------

    def prepare_reload(self, config: SidecarConfig) -> PreparedReload:
        """Build every part a reload to ``config`` changes, without putting any in force:
        each SSL listener's context from its files as they are now (held to Kafka's rules
        for a changed certificate), the principal mapping rules, the request filters
        (their modules imported again and configured; a supervisor builds them only to
        check them). Raises :class:`~proxy.config.ConfigError` saying why: then nothing
        changes."""
        tls = _listeners_tls(config)
        for listener, new in tls.items():
            old = self._tls.get(listener)
            if old is not None:
                check_certificate_change(config, listener, old, new)
        mappers = _principal_mappers(config)
        filters = self._load_filters(config, again=True)
        if self.role is Role.SUPERVISOR:  # built only to check them: the workers run their own
            for loaded in filters:
                loaded.close()
            filters = ()
        try:
            queues = self.observers.queue_settings(observer_entries(config)) if self.observers is not None else []
        except ObserverError as exc:
            raise ConfigError(str(exc)) from None
        return PreparedReload(config=config, tls=tls, mappers=mappers, filters=filters, observer_queues=queues)

    async def apply_reload(self, config: SidecarConfig) -> None:
        """A single process's reload (:class:`proxy.control.reload.Reloading`): prepare,
        then commit."""
        self.commit_reload(self.prepare_reload(config))

    def commit_reload(self, prepared: PreparedReload) -> None:
        """Put a prepared reload in force, at once (nothing here can fail): new connections
        get every new value, connections already open the new request filters from their
        next request (a request already decided finishes as it was decided), and the idle
        and read timeouts."""
        config = self.config = prepared.config
        self._tls = prepared.tls
        self._principal_mappers = prepared.mappers
        replaced, self.filters = self.filters, prepared.filters
        if self.observers is not None:
            self.observers.use_queue_settings(prepared.observer_queues)
        self.connection_settings = ConnectionSettings.from_config(config)
        self.idle.configure(self.connection_settings.idle_timeout, self.connection_settings.request_read_timeout)
        self._parts = {}  # new connections: new settings, SASL mechanisms and users file
        chain = (*self._quota_filters, *self.filters)
        for dispatch in list(self._dispatches):
            dispatch.replace_filters(chain)
        for loaded in replaced:
            loaded.close()
        self.gate.reconfigure(gate_config(config))
        self.ip_quotas.configure(config["sidecar.ip.connection.creation.rate"],
                                 config["sidecar.ip.connection.creation.rate.overrides"])
        self.ports = dataclasses.replace(self.ports, super_users=config["super.users"])
        if self.acls is not None:
            self.acls.configure(super_users=config["super.users"],
                                allow_if_no_acl=config["allow.everyone.if.no.acl.found"])
        if self.zk is not None:
            self.zk.use_tls(ZkSecurity.from_values(config.values))
        logging.getLogger().setLevel(config["sidecar.log.level"].upper())

    @property
    def _quota_filters(self) -> tuple[RequestFilter, ...]:
        """The client-quota filters (byte rates, topic mutations), where this sidecar may
        enforce client quotas."""
        quotas = self.client_quotas
        if quotas.store is None or quotas.mode == BROKER:
            return ()
        return (ClientQuotaFilter(quotas.rates),
                MutationQuotaFilter(quotas.rates, self.registry, self.upstream.topics, self.leniency))

    def _fleet_addresses(self, listener: str) -> dict[int, HostPort]:
        """Every registered sidecar's address on ``listener``: the coordinators a
        FindCoordinator answer may name (:class:`~coordinator.fleet.Fleet` reads the same
        registrations)."""
        return {node: endpoints[listener] for node, endpoints in self.registered.table.items() if listener in endpoints}

    def _unmapped(self, api_name: str, node_id: int) -> None:
        self.log_unmapped(api_name, node_id)

    def _build_address_book(self) -> AddressBook:
        scheme = self.config["sidecar.address.mapping"]
        if scheme == "auto":
            scheme = "zookeeper" if self.zk is not None else "offset"
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

    # -- serving ---------------------------------------------------------------------------

    async def serve(self, *, bound: dict[str, HostPort] | None = None,
                    task_status: trio.TaskStatus[Sidecar] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the sidecar until cancelled or drained. A worker is given the addresses its
        supervisor bound (``bound``) and binds nothing itself."""
        self.topics.serving()
        worker = self.role is Role.WORKER
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    self.upstream.refresh_forever,
                    self.config["sidecar.upstream.api.versions.refresh.ms"] / 1000,
                )
                if not self.upstream.healthy and not worker:
                    log.warning("upstream %s not reachable yet; clients will be refused until it is",
                                self.upstream.address)
                listeners: list[tuple[Endpoint, list[trio.SocketListener]]] = []
                if bound is not None:
                    self.bound.update(bound)
                else:
                    for endpoint in self.config.listeners:
                        sockets = await trio.open_tcp_listeners(endpoint.port, host=endpoint.host or None)
                        port = sockets[0].socket.getsockname()[1]
                        self.bound[endpoint.name] = HostPort(endpoint.host, port)
                        listeners.append((endpoint, sockets))
                self.address_book = self._build_address_book()
                if self.zk is not None:
                    await self.zk.start()
                    if self.features is not None:
                        await self.features.start()  # refuses to start on incompatible features
                    if not worker:
                        await self.ip_quotas.start()
                    await self.client_quotas.start()
                    nursery.start_soon(self.client_quotas.recheck_forever)
                    await self.users.start()
                    if self.acls is not None:
                        await self.acls.start()
                    assert self.registration is not None
                    await nursery.start(self.registration.run)
                    if self.groups is not None:
                        await nursery.start(self.groups.serve)
                    if self.shares is not None:
                        await nursery.start(self.shares.serve)
                metrics_at: HostPort | None = self.config["sidecar.metrics.listener"]
                if metrics_at is not None and self.role is Role.SINGLE:
                    self.metrics_address = await nursery.start(serve_http, self, metrics_at)
                if self.jwks is not None:
                    await nursery.start(self.jwks.run)
                for endpoint, sockets in listeners:
                    nursery.start_soon(self._accept, endpoint, sockets)
                if not worker:
                    nursery.start_soon(self._expire_ip_sensors)
                nursery.start_soon(self.idle.run)
                if self.observers is not None:
                    nursery.start_soon(
                        run_hub, self.observers, self.config["observer.close.timeout.ms"] / 1000
                    )
                if worker:
                    task_status.started(self)
                    return
                log.info(
                    "sidecar broker.id=%d listening on %s, upstream %s%s%s", self.broker_id,
                    ", ".join(f"{n}://{a}" for n, a in self.bound.items()), self.upstream.address,
                    "" if self.zk is not None else " (standalone: no ZooKeeper)",
                    "; consumer groups: embedded coordinator" if self.groups is not None
                    else "; consumer groups: passed through to the broker",
                )
                log.info("authorizer: %s", "none (requests are authorized by the broker, as the identity "
                         "it sees)" if self.acls is None else f"acls ({self.config['sidecar.authorizer.mode']}; "
                         f"{len(self.acls.authorizer.acls)} ACL(s) in ZooKeeper)")
                task_status.started(self)
        finally:
            if self.zk is not None:
                await self.zk.close()

    async def _accept(self, endpoint: Endpoint, sockets: list[trio.SocketListener]) -> None:
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
                    await serve_listener(self, endpoint.name, sockets, connections)
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

    async def serve_connection(self, stream: trio.SocketStream, listener: str, ip: str) -> None:
        """Serve one admitted connection; give its quota slot back when it ends. (TLS is a
        worker's: a supervisor hands the socket on before its handshake.)"""
        try:
            if self._hand_off is not None:
                await self._hand_off(stream, listener, ip)
            else:
                await self._handle(stream, listener, self.tls_context(listener))
        finally:
            self.gate.release(listener, ip)
            self._free_slot()

    async def serve_handed(self, stream: trio.SocketStream, listener: str) -> None:
        """Serve a connection the supervisor admitted and handed to this worker."""
        await self._handle(stream, listener, self.tls_context(listener))

    def tls_context(self, listener: str) -> ssl.SSLContext | None:
        """The server context new connections of ``listener`` get (``None``: not SSL)."""
        tls = self._tls.get(listener)
        return None if tls is None else tls.context

    def server_certificate(self, listener: str) -> ServerTls | None:
        """The certificate ``listener`` presents to new connections (``None``: not SSL)."""
        return self._tls.get(listener)

    async def _handle(
        self, stream: trio.abc.Stream, listener: str, tls_context: ssl.SSLContext | None
    ) -> None:
        try:
            assert isinstance(stream, trio.SocketStream)
            peer = stream.socket.getpeername()[:2]
        except OSError:
            await trio.aclose_forcefully(stream)
            return
        self.metrics.connections.labels(listener).inc()
        client: trio.abc.Stream = stream
        if tls_context is not None:
            tls = trio.SSLStream(stream, tls_context, server_side=True)
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
        principal = "User:ANONYMOUS"
        mapper = self._principal_mappers.get(listener)
        if mapper is not None and isinstance(client, trio.SSLStream):
            try:  # Kafka's SSL principal: the certificate's subject through the mapping rules
                principal = tls_principal(client.getpeercert(binary_form=True), mapper) or principal
            except PrincipalMappingFailed as exc:
                self.metrics.connections_closed.labels(listener, "ssl_principal_mapping").inc()
                log.info("TLS client %s:%d on %s failed authentication: %s", peer[0], peer[1], listener, exc)
                await trio.aclose_forcefully(client)
                return
        context = Context(listener=listener, peer=(peer[0], peer[1]), ports=self.ports, principal=principal)
        connection = Connection(self.parts_for(listener), client, context)
        self.connections.add(connection)
        gauge = self.metrics.connections_active.labels(listener)
        gauge.inc()
        if self.draining:
            connection.stop_reading()  # accepted while the drain began
        try:
            await connection.run()
        finally:
            gauge.dec()
            self.connections.discard(connection)
            self.forwarded_total += connection.stats.forwarded
            self.broker_answers_total += connection.link.answered
            if self.draining and not self.connections:
                self._all_closed.set()

    def unanswered(self) -> int:
        """Requests read on every connection whose answers have not left yet."""
        return sum(connection.unanswered for connection in self.connections)

    async def stop(self) -> int:
        """Stop at once (a second signal during the drain): the requests abandoned."""
        return self.unanswered()

    async def drain(self, deadline: float | None = None) -> int:
        """Stop accepting and reading, answer everything read, close gently; the count abandoned.

        Every connection stops at a frame boundary, sends the broker what it read, and
        waits for the answers it owes (``Connection.stop_reading``). Returns how many
        requests were still unanswered when ``deadline`` (``sidecar.shutdown.drain.ms``)
        passed: 0 after a complete drain. Cancelling the drain (a second SIGTERM) leaves
        the count to :meth:`unanswered`.
        """
        timeout = self.config["sidecar.shutdown.drain.ms"] / 1000 if deadline is None else deadline
        started = trio.current_time()
        self.stop_accepting()
        pending = self.unanswered()
        log.info("draining %d connection(s) with %d request(s) in flight", len(self.connections), pending)
        for connection in list(self.connections):
            connection.stop_reading()
        if not self.connections:
            self._all_closed.set()
        with trio.move_on_after(timeout):
            await self._all_closed.wait()
        abandoned = self.unanswered()
        if self.connections:
            log.warning(
                "drain deadline (%g s) passed: abandoning %d unanswered request(s) on %d connection(s)",
                timeout, abandoned, len(self.connections),
            )
        elif self.role is Role.WORKER:  # the supervisor logs the sidecar's line
            log.info("this worker's connections ended in %.3f s, every request read answered",
                     trio.current_time() - started)
        else:
            log_drained(trio.current_time() - started, self.forwarded_total, self.broker_answers_total)
        return abandoned

    def stop_accepting(self) -> None:
        """Close the listeners (a drain's first step); connections go on."""
        self.draining = True
        for scope in self._listener_scopes:
            scope.cancel()


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreparedReload:
    """What :meth:`Sidecar.prepare_reload` built, for :meth:`Sidecar.commit_reload`."""

    config: SidecarConfig
    tls: dict[str, ServerTls]
    mappers: dict[str, PrincipalMapper]
    filters: tuple[LoadedFilter, ...]
    observer_queues: list[Settings]


def _listeners_tls(config: SidecarConfig) -> dict[str, ServerTls]:
    return {e.name: tls for e in config.listeners if (tls := listener_tls(config, e.name)) is not None}


def _principal_mappers(config: SidecarConfig) -> dict[str, PrincipalMapper]:
    return {e.name: m for e in config.listeners if (m := listener_principal_mapper(config, e.name)) is not None}


def log_drained(seconds: float, forwarded: int, broker_answers: int) -> None:
    """The line a complete drain ends with (what operators and tests look for)."""
    log.info("drained in %.3f s: every request read was answered (forwarded %d, broker answers %d, over the "
             "sidecar's life)", seconds, forwarded, broker_answers)
