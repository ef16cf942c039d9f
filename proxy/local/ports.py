"""The narrow ports through which local APIs reach what the sidecar shares.

Each port is a :class:`typing.Protocol` with only what its users need; the control plane
(:mod:`proxy.control.server`) supplies the implementations, and tests supply plain
objects. The value types that cross them (:class:`UpstreamInfo`, :class:`BrokerEntry`)
live here too, so the data path, the local APIs and the control plane share them without
importing one another.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import trio

from coordinator.core import GroupCoordinator
from coordinator.features import FeatureError, FeatureSnapshot, FeatureUpdate, UpdatePlan
from coordinator.group_configs import AlterResult as GroupAlterResult
from coordinator.group_configs import ConfigOp
from coordinator.group_configs import DescribeResult as GroupDescribeResult
from coordinator.messages.common import Client
from coordinator.outcome import Response, Step
from coordinator.share_group import (
    DescribedShareGroup,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from protocol.headers import RequestHeader
from proxy.auth.acl.evaluate import Authorizer
from proxy.auth.acl.model import AclBinding, BindingFilter
from proxy.auth.sasl.scram import ScramCredential
from quotas.admin import ClientWrite, Write
from quotas.clients import ClientQuotas


@dataclass(frozen=True)
class BrokerAddress:
    """A broker as the upstream's Metadata names it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class UpstreamInfo:
    """What the control connection learned from the broker."""

    api_versions: dict[int, tuple[int, int]]
    #: The broker's whole ApiVersions answer (its KIP-584 feature fields are passed on).
    api_versions_body: Mapping[str, Any]
    brokers: tuple[BrokerAddress, ...] = ()
    cluster_id: str | None = None
    node_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BrokerEntry:
    """One broker as BrokerMetadata describes it."""

    node_id: int
    host: str
    port: int
    tags: Mapping[str, str] = field(default_factory=dict)


class UpstreamView(Protocol):
    """What the upstream broker supports, as the control connection last learned it."""

    @property
    def info(self) -> UpstreamInfo | None:
        """The last answer, or ``None`` before the first."""
        ...


class BrokerDirectory(Protocol):
    """The brokers (sidecars) a client on a listener is told about."""

    def broker_entries(self, listener: str) -> tuple[BrokerEntry, list[BrokerEntry]]:
        """This sidecar, and the others it knows of."""
        ...


class QuotaPort(Protocol):
    """Per-IP connection-rate quotas (KIP-612)."""

    @property
    def can_write(self) -> bool:
        """True when quotas live in ZooKeeper (writes possible)."""
        ...

    def snapshot(self) -> dict[str | None, float]:
        """What DescribeClientQuotas reports: ``{ip or None (default): rate}``."""
        ...

    async def alter(self, writes: Sequence[Write]) -> None:
        """Apply the writes (ZooKeeper); raises on failure."""
        ...


class ClientQuotaPort(Protocol):
    """User and client-id quotas (KIP-55), where this sidecar may enforce them."""

    @property
    def enforcing(self) -> bool:
        """Whether this sidecar enforces them now (and so answers their administration)."""
        ...

    @property
    def current(self) -> ClientQuotas:
        """ZooKeeper's quotas as last read."""
        ...

    @property
    def refused(self) -> Mapping[str, str]:
        """Quota keys this sidecar does not enforce, and why (setting one is refused)."""
        ...

    async def alter_clients(self, writes: Sequence[ClientWrite]) -> None:
        """Apply the writes (ZooKeeper); raises on failure."""
        ...


#: ``{user: {mechanism name: credential}}``.
Users = dict[str, dict[str, ScramCredential]]


class UserDirectory(Protocol):
    """SCRAM users in ZooKeeper (``/config/users``)."""

    def scram_users(self) -> Users:
        """The users as currently known (watch-fed)."""
        ...

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """One user's credential for a mechanism, if any."""
        ...

    async def apply(self, user: str, changes: Mapping[str, ScramCredential | None]) -> None:
        """Write one user's credential changes (ZooKeeper); raises on failure."""
        ...


T = TypeVar("T")


class Pending(Generic[T]):
    """An answer the group coordinator holds back (a parked JoinGroup, an OffsetCommit
    waiting for ZooKeeper); the local API awaits it as an answer-later."""

    __slots__ = ("_done", "_value")

    def __init__(self) -> None:
        self._done = trio.Event()
        self._value: T | None = None

    def set(self, value: T) -> None:
        """Deliver the answer (at most once)."""
        if not self._done.is_set():
            self._value = value
            self._done.set()

    async def wait(self) -> T:
        """The answer, once delivered."""
        await self._done.wait()
        assert self._value is not None
        return self._value


#: A call into the coordinator core: ``(core, now in ms since the epoch) -> Step``.
GroupCall = Callable[[GroupCoordinator, int], "Step[Any]"]


class GroupPort(Protocol):
    """The embedded consumer-group coordinator (:mod:`coordinator`), as local APIs reach it."""

    def run(self, call: GroupCall, api: str = "", group_ids: tuple[str, ...] = ()) -> Response | Pending[Response]:
        """Run ``call`` (the request of API ``api``, about the groups ``group_ids``) on the
        core: its answer now, or a :class:`Pending` one. In a fleet a call about a group
        this sidecar is about to claim waits for the claim (none for FindCoordinator and
        ListGroups, which name no group)."""
        ...

    def coordinator_address(self, listener: str) -> tuple[int, str, int]:
        """``(node id, host, port)`` this sidecar advertises on ``listener``."""
        ...

    def subscriptions_changed(self) -> None:
        """A KIP-848 member changed its subscription: refresh topic metadata soon."""
        ...


class AclDirectory(Protocol):
    """Kafka ACLs in ZooKeeper (``/kafka-acl``, watched) and the authorizer over them."""

    @property
    def authorizer(self) -> Authorizer:
        """The authorizer of the current ACL snapshot (replaced on every change)."""
        ...

    @property
    def enforcing(self) -> bool:
        """Whether the ACLs are enforced (``sidecar.authorizer.mode=enforce``); in
        ``shadow`` mode they change nothing a client sees."""
        ...

    def describe(self, filter_: BindingFilter) -> list[AclBinding]:
        """The ACLs the filter matches, as currently known."""
        ...

    @property
    def topic_names(self) -> Mapping[uuid.UUID, str]:
        """Topic ID → name as far as known (requests that name topics by ID)."""
        ...

    def learn_topics(self, pairs: Iterable[tuple[uuid.UUID, str]]) -> None:
        """Topic IDs and names a Metadata answer named."""
        ...

    async def refresh_topics(self) -> None:
        """Learn every topic's ID from the broker (rate-limited)."""
        ...

    async def create(self, bindings: Sequence[AclBinding]) -> list[Exception | None]:
        """Add validated ACLs (ZooKeeper); per binding, the failure if any."""
        ...

    async def delete(self, filters: Sequence[BindingFilter]) -> list[list[tuple[AclBinding, Exception | None]]]:
        """Remove what the filters match; per filter, the removed ACLs and failures."""
        ...


class FeatureOutcome(Protocol):
    """An UpdateFeatures decision and, if the write failed, why."""

    @property
    def plan(self) -> UpdatePlan:
        """The decision on the request."""
        ...

    @property
    def write_error(self) -> FeatureError | None:
        """Set when the plan was valid but the write failed (compare-and-set lost)."""
        ...


class GroupConfigPort(Protocol):
    """Group configs (KIP-848, KIP-932) of the groups the embedded coordinator serves, in
    ZooKeeper (:mod:`proxy.control.group_configs`)."""

    def describe(self, group_id: str, keys: Sequence[str] | None, *, synonyms: bool,
                 documentation: bool) -> GroupDescribeResult:
        """DescribeConfigs for one GROUP resource, from the watched configs."""
        ...

    async def alter(self, group_id: str, ops: Sequence[ConfigOp], *, validate_only: bool) -> GroupAlterResult:
        """IncrementalAlterConfigs for one GROUP resource, written to ZooKeeper when it
        changes something."""
        ...


class FeaturePort(Protocol):
    """The sidecar's KIP-584 features: supported here, finalized in ``/feature`` (watched)."""

    @property
    def snapshot(self) -> FeatureSnapshot:
        """Supported and finalized features now (a new object on every change)."""
        ...

    def owns(self, feature: str) -> bool:
        """True for a feature the sidecar decides (the broker decides the others)."""
        ...

    async def update(self, updates: Sequence[FeatureUpdate], *, validate_only: bool) -> FeatureOutcome:
        """Judge the updates and write them compare-and-set (unless ``validate_only``)."""
        ...


class SharePort(Protocol):
    """What the share-group APIs need of the sidecar (:class:`proxy.control.shares.ShareService`)."""

    async def heartbeat(self, req: ShareGroupHeartbeatRequest, client: Client) -> ShareGroupHeartbeatResponse:
        """ShareGroupHeartbeat's answer, once durable."""
        ...

    async def load_groups(self, group_ids: Sequence[str]) -> None:
        """Read these groups from ZooKeeper if not yet."""
        ...

    def describe(self, group_ids: Sequence[str]) -> tuple[DescribedShareGroup, ...]:
        """ShareGroupDescribe's groups."""
        ...

    async def share_fetch(self, version: int, body: Mapping[str, Any], connection: object) -> dict[str, Any]:
        """ShareFetch's answer body."""
        ...

    async def share_acknowledge(self, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """ShareAcknowledge's answer body."""
        ...

    def connection_closed(self, connection: object) -> None:
        """A client connection ended: its share sessions end, their records go back."""
        ...

    def peer(self, group_id: str, listener: str) -> tuple[str, int] | None:
        """Where ``group_id``'s share requests go when another sidecar serves them (a fleet
        sharing one broker), else ``None`` (here)."""
        ...

    async def forward(self, address: tuple[str, int], connection: object, header: RequestHeader,
                      body: bytes) -> bytes | None:
        """That sidecar's answer body to the request, ``None`` when it could not be had."""
        ...

    async def describe_offsets(self, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """DescribeShareGroupOffsets' answer body."""
        ...

    async def alter_offsets(self, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """AlterShareGroupOffsets' answer body."""
        ...

    async def delete_offsets(self, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """DeleteShareGroupOffsets' answer body."""
        ...

    async def group_ids(self) -> list[tuple[str, str]]:
        """``(group id, state)`` of every share group."""
        ...

    async def delete_group(self, group_id: str) -> tuple[int, str | None]:
        """DeleteGroups for one share group: ``(error code, message)``."""
        ...


@dataclass(frozen=True, kw_only=True)
class Ports:
    """Everything a local API may reach; ``None`` where this sidecar has no such part."""

    upstream: UpstreamView
    brokers: BrokerDirectory
    quotas: QuotaPort | None = None
    #: User and client-id quotas (with ZooKeeper, unless ``sidecar.client.quotas=broker``).
    client_quotas: ClientQuotaPort | None = None
    users: UserDirectory | None = None
    #: The embedded group coordinator (``sidecar.coordinator=embedded``), else ``None``.
    groups: GroupPort | None = None
    super_users: frozenset[str] = frozenset()
    #: Kafka ACLs (``sidecar.authorizer=acls``), else ``None``.
    acls: AclDirectory | None = None
    #: KIP-584 features (with ZooKeeper), else ``None``.
    features: FeaturePort | None = None
    #: Group configs (``sidecar.coordinator=embedded``), else ``None``.
    group_configs: GroupConfigPort | None = None
    #: Share groups (``sidecar.coordinator=embedded``), else ``None``.
    shares: SharePort | None = None
