"""Kafka ACLs as the sidecar holds them (``sidecar.authorizer=acls``): watched, authorized, written.

:class:`AclState` is the ACL directory of the local APIs
(:class:`~proxy.local.ports.AclDirectory`: DescribeAcls, CreateAcls, DeleteAcls) and the
source of the current :class:`~proxy.auth.acl.evaluate.Authorizer`, which the data path
asks once per request (``docs/authorization.md``). The ACLs are ZooKeeper's
(:class:`~proxy.auth.acl.store.AclStore`, Kafka's paths, watched through Kafka's change
announcements): an ACL written through any sidecar, or by Kafka's own tools, holds on every
sidecar once its watch fires. Every change installs a new authorizer (and with it an empty
decision cache); our own writes take effect at once (read-your-writes).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence

from proxy.auth.acl.evaluate import AclIndex, Authorizer
from proxy.auth.acl.model import AclBinding, BindingFilter, Operation, ResourceType
from proxy.auth.acl.store import AclStore
from proxy.control.topic_directory import TopicDirectory
from proxy.control.zk import ZooKeeper

log = logging.getLogger(__name__)


class AclState:
    """The sidecar's ACLs and the authorizer over them."""

    def __init__(self, zk: ZooKeeper, *, super_users: frozenset[str], allow_if_no_acl: bool,
                 open_keys: frozenset[int] = frozenset(), topics: TopicDirectory | None = None,
                 enforcing: bool = True) -> None:
        self.zk = zk
        #: ``sidecar.authorizer.mode=enforce``; in ``shadow`` mode the ACLs refuse nothing and
        #: change nothing a client sees.
        self.enforcing = enforcing
        #: Topic ID → name (Produce v13 and Fetch v13+ name topics by ID only; their ACLs
        #: are by name): the sidecar's one directory, shared with the observers.
        self.topics = topics if topics is not None else TopicDirectory(None)
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self.open_keys = open_keys
        self._authorizer = self._over(AclIndex())
        self.store = AclStore(zk.client, zk.deliver(self._changed))

    @property
    def topic_names(self) -> Mapping[uuid.UUID, str]:
        """Topic ID → name, as far as known."""
        return self.topics.names

    def learn_topics(self, pairs: Iterable[tuple[uuid.UUID, str]]) -> None:
        """Topic IDs and names a Metadata answer passing through the sidecar named."""
        self.topics.learn(pairs)

    async def refresh_topics(self) -> None:
        """Ask the broker for every topic's ID (at most once a second; concurrent callers
        wait for the same answer). A failure is logged: the IDs stay unknown, and refused."""
        await self.topics.refresh()

    def describable(self, principal: str, host: str, names: set[str]) -> set[str]:
        """The topics of ``names`` that ``principal`` from ``host`` may Describe (the
        embedded coordinator filters a member's regex with it)."""
        authorizer = self._authorizer
        return {n for n in names if authorizer.authorize(principal, host, Operation.DESCRIBE, ResourceType.TOPIC, n)}

    def configure(self, *, super_users: frozenset[str], allow_if_no_acl: bool) -> None:
        """``super.users`` and ``allow.everyone.if.no.acl.found`` (a reload): the next
        authorization uses them."""
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._authorizer = self._over(self._authorizer.acls)

    def _over(self, index: AclIndex) -> Authorizer:
        return Authorizer(index, super_users=self.super_users, allow_if_no_acl=self.allow_if_no_acl,
                          open_keys=self.open_keys)

    @property
    def authorizer(self) -> Authorizer:
        """The authorizer of the current ACL snapshot."""
        return self._authorizer

    def _changed(self, _index: AclIndex) -> None:
        # Deliveries may arrive late and out of order with our own installs: take the
        # store's current state, never the (possibly older) one handed over.
        self.install(self.store.index())

    def install(self, index: AclIndex) -> None:
        """A new snapshot of the ACLs (the next decision uses it)."""
        if len(index) != len(self._authorizer.acls) or index.patterns() != self._authorizer.acls.patterns():
            log.info("ACLs now %d on %d resource pattern(s)", len(index), len(index.patterns()))
        self._authorizer = self._over(index)

    async def start(self) -> None:
        """Load ``/kafka-acl`` and start watching Kafka's change announcements."""
        await self.zk.call(self.store.start)
        self.install(self.store.index())

    def describe(self, filter_: BindingFilter) -> list[AclBinding]:
        """The ACLs the filter matches, as currently known."""
        return self._authorizer.acls.matching(filter_)

    async def create(self, bindings: Sequence[AclBinding]) -> list[Exception | None]:
        """Add ACLs in ZooKeeper; ours hold at once."""
        results = await self.zk.call(self.store.create, bindings)
        self.install(self.store.index())
        return results

    async def delete(self, filters: Sequence[BindingFilter]) -> list[list[tuple[AclBinding, Exception | None]]]:
        """Remove the ACLs the filters match in ZooKeeper; at once here."""
        results = await self.zk.call(self.store.delete, filters)
        self.install(self.store.index())
        return results
