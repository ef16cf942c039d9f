"""Who this sidecar is, and which brokers it tells clients of.

:class:`Identity` is the one place that knows this sidecar's broker id (configured, or
learned from the broker it stands in front of), its advertised endpoints (with the ports it
bound when the configuration says 0), its BrokerMetadata tags and the KIP-584 features it
supports. Registration in ZooKeeper, the coordinator's address, the address rewriter's own
entry and BrokerMetadata read it; none of them gets the whole sidecar.

:class:`Brokers` answers the local APIs' :class:`~proxy.local.ports.BrokerDirectory`: this
sidecar, and the other sidecars it knows of (registered in ZooKeeper, else the broker's
own list mapped through the address book).
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.features import registration_features
from protocol.apis import PRODUCE
from proxy.config import Endpoint, HostPort, SidecarConfig
from proxy.control.features_state import FeatureState
from proxy.control.registration import Registration
from proxy.control.upstream import Upstream
from proxy.datapath.addressing import AddressBook
from proxy.local.broker_metadata import builtin_tags
from proxy.local.ports import BrokerEntry


class Identity:
    """This sidecar as others see it (see the module docstring)."""

    def __init__(self, config: SidecarConfig, upstream: Upstream) -> None:
        self.config = config
        self.upstream = upstream
        #: Bound addresses by listener name, filled in as listeners bind.
        self.bound: dict[str, HostPort] = {}
        #: KIP-584 features (set once built: they need the coordinator first), else ``None``.
        self.features: FeatureState | None = None

    @property
    def broker_id(self) -> int:
        """``broker.id``, or the id learned from the upstream (-1 while unknown)."""
        configured: int = self.config["broker.id"]
        if configured >= 0:
            return configured
        info = self.upstream.info
        return info.node_id if info is not None and info.node_id is not None else -1

    async def wait_broker_id(self) -> int:
        """The broker id, once known."""
        while self.broker_id < 0:
            await self.upstream.wait_learned()
            if self.broker_id < 0:  # the broker did not say which node it is
                raise RuntimeError("broker.id=-1 but the broker's Metadata does not name it")
        return self.broker_id

    def advertised(self, listener: str) -> Endpoint:
        """The endpoint clients are told for ``listener`` (bound port when port was 0)."""
        endpoint = self.config.advertised(listener)
        if endpoint.port == 0 and listener in self.bound:
            return Endpoint(endpoint.name, endpoint.host, self.bound[listener].port)
        return endpoint

    def advertised_endpoints(self) -> list[Endpoint]:
        """Every advertised endpoint, in listener order."""
        return [self.advertised(e.name) for e in self.config.listeners]

    def coordinator_address(self, listener: str) -> tuple[int, str, int]:
        """``(node id, host, port)`` clients on ``listener`` are told for groups: this sidecar."""
        mine = self.advertised(listener)
        return self.broker_id, mine.host, mine.port

    def security_protocol(self, listener: str) -> str:
        """The security protocol of ``listener``."""
        return self.config.security_protocol(listener)

    def upstream_text(self) -> str:
        """The upstream broker, as configured."""
        return str(self.config["sidecar.upstream"])

    def supported_features(self) -> dict[str, dict[str, int]]:
        """KIP-584 supported features for the registration (Kafka's format)."""
        return registration_features(self.features.supported) if self.features is not None else {}

    def tags(self) -> dict[str, str]:
        """Builtin BrokerMetadata tags, then the operator's ``tag.*`` tags."""
        info = self.upstream.info
        produce = info.api_versions.get(PRODUCE) if info is not None else None
        formats = "v0,v1,v2" if produce is not None and produce[0] <= 2 else "v2"
        endpoints = [f"{e.name.lower()}://{e.host}:{e.port}" for e in self.advertised_endpoints()]
        tags = builtin_tags(self.broker_id, endpoints, self.config["message.max.bytes"], formats)
        tags.update(self.config.tags)
        return tags


class OwnAddressFirst:
    """An address book that answers this sidecar's own id with its advertised address.

    Whatever the underlying book says at the moment (a ZooKeeper view being rebuilt after a
    session expiry, say), Metadata through this sidecar always names the sidecar itself.
    """

    def __init__(self, identity: Identity, book: AddressBook) -> None:
        self.identity = identity
        self.book = book

    def lookup(self, node_id: int, host: str, port: int, listener: str) -> HostPort | None:
        """This sidecar's advertised address for its own id, else the book's answer."""
        if node_id == self.identity.broker_id and node_id >= 0:
            mine = self.identity.advertised(listener)
            return HostPort(mine.host, mine.port)
        return self.book.lookup(node_id, host, port, listener)


class Brokers:
    """The brokers (sidecars) a client on a listener is told about (BrokerMetadata)."""

    def __init__(self, identity: Identity, registration: Registration | None,
                 address_book: Callable[[], AddressBook]) -> None:
        self.identity = identity
        self.registration = registration
        #: The address book in force (it is replaced once the listeners are bound).
        self.address_book = address_book

    def broker_entries(self, listener: str) -> tuple[BrokerEntry, list[BrokerEntry]]:
        """This sidecar and the others it knows of, as BrokerMetadata entries."""
        identity = self.identity
        mine = identity.advertised(listener)
        me = BrokerEntry(identity.broker_id, mine.host, mine.port, identity.tags())
        others: list[BrokerEntry] = []
        if self.registration is not None:
            others = [e for e in self.registration.entries(listener) if e.node_id != me.node_id]
        elif identity.upstream.info is not None:
            book = self.address_book()
            for broker in identity.upstream.info.brokers:
                if broker.node_id == me.node_id:
                    continue
                address = book.lookup(broker.node_id, broker.host, broker.port, listener)
                if address is not None:
                    others.append(BrokerEntry(broker.node_id, address.host, address.port,
                                              {"broker.id": str(broker.node_id)}))
        return me, others
