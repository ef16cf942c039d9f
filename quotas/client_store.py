"""User and client-id quotas in ZooKeeper, where Kafka keeps them (KIP-55).

Three layouts under ``/config``, each znode Kafka's dynamic-config JSON
(``{"version":1,"config":{"producer_byte_rate":"1048576"}}``)::

    /config/users/<user>                      /config/clients/<client-id>
    /config/users/<user>/clients/<client-id>

(names sanitized, ``<default>`` for a default part: :mod:`quotas.clients`). The store
watches ``/config/users`` and ``/config/clients`` with :class:`quotas.store.EntityConfigStore`
and, for each user, that user's ``clients`` node and its children; after every change it
hands a fresh :class:`quotas.clients.ClientQuotas` to its listener (on kazoo's thread:
hand it over without blocking). A snapshot equal to the last one is not handed again, so a
SCRAM credential changed at ``/config/users/<user>`` leaves the data path's caches alone.

``/config/users/<user>`` also holds the user's SCRAM credentials
(:mod:`proxy.auth.user_store`) and may exist only as the parent of ``clients``, with an
empty config: both read as "no quota". Writes change quota keys only, compare-and-set on
the znode version, retried on a concurrent change (as :class:`quotas.store.IpQuotaStore`).

Removing the last quota of a client-id entity (``/config/clients/<c>`` or
``/config/users/<u>/clients/<c>``) deletes its znode when it has no children, and an
emptied ``/config/users/<u>/clients`` with it, as Kafka's ``AdminZkClient`` does. A user
znode is left in place with an empty config: the SCRAM users' store writes there too, and
its compare-and-set does not expect the node to vanish.

Kafka's ZooKeeper mode also writes a change notification for each write
(``/config/changes/config_change_<seq>``, ``{"version":2,"entity_path":"users/alice"}``)
for brokers to re-read the entity. Sidecars watch the znodes themselves, and without a
broker nobody would purge those nodes, so none is written unless ``notify=True`` (for a
ZooKeeper shared with Kafka brokers that apply the same quotas).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from quotas.clients import (
    CLIENTS,
    CONFIG_ROOT,
    EMPTY,
    USERS,
    ClientQuotas,
    Entity,
    entity_path,
    format_value,
    quotas_from_configs,
    znode_path,
)
from quotas.store import EntityConfigStore, decode_config, encode_config

log = logging.getLogger(__name__)

CHANGES = "changes"
CHANGE_PREFIX = "config_change_"
ATTEMPTS = 10

#: One entity's changes: ``(quota key, new value or None to remove)``, applied in order.
Changes = Iterable[tuple[str, "float | None"]]


class StoreConflict(RuntimeError):
    """A write gave up after :data:`ATTEMPTS` concurrent modifications of its znode."""


class _UserConfigs(EntityConfigStore):
    """``/config/users`` as :class:`EntityConfigStore` watches it, telling the client store
    which user znodes exist (to watch each one's ``clients``)."""

    def __init__(
        self,
        client: KazooClient,
        path: str,
        on_change: Callable[[dict[str, dict[str, str]]], None],
        on_users: Callable[[list[str]], None],
    ) -> None:
        super().__init__(client, path, on_change)
        self._on_users = on_users

    def _children(self, children: list[str]) -> None:
        super()._children(children)
        self._on_users(children)


class ClientQuotaStore:
    """Watches and writes user and client-id quotas; see the module docstring.

    ``client`` is a started kazoo client (injected); ``root`` is Kafka's ``/config``.
    """

    def __init__(
        self,
        client: KazooClient,
        on_change: Callable[[ClientQuotas], None] | None = None,
        *,
        root: str = CONFIG_ROOT,
        notify: bool = False,
    ) -> None:
        self.client = client
        self.root = root
        self.notify = notify
        self.on_change = on_change or (lambda _quotas: None)
        self._lock = threading.Lock()
        self._users = _UserConfigs(client, f"{root}/{USERS}", self._changed, self._users_now)
        self._clients = EntityConfigStore(client, f"{root}/{CLIENTS}", self._changed)
        #: user znode → the token of its live ``clients`` watches (stale watches stop), and
        #: for the children watch, the creation (czxid) of the ``clients`` node it watches.
        self._user_tokens: dict[str, object] = {}
        self._children_tokens: dict[str, tuple[object, int]] = {}
        self._nested: dict[tuple[str, str], dict[str, str]] = {}
        self._nested_watched: set[tuple[str, str]] = set()
        self._snapshot: ClientQuotas = EMPTY

    # -- reading ---------------------------------------------------------------------------

    def start(self) -> None:
        """Create the paths if needed and start watching (blocking: call from a thread)."""
        self._users.start()
        self._clients.start()

    def snapshot(self) -> ClientQuotas:
        """The quotas as currently known (watch-fed)."""
        with self._lock:
            return self._snapshot

    def read(self) -> ClientQuotas:
        """The quotas read directly from ZooKeeper (blocking; no watch needed)."""
        configs: dict[str, dict[str, str]] = {}
        for kind in (USERS, CLIENTS):
            for name in self._children_of(f"{self.root}/{kind}"):
                configs[f"{kind}/{name}"] = self._config_at(f"{self.root}/{kind}/{name}")
        for user in self._children_of(f"{self.root}/{USERS}"):
            for name in self._children_of(f"{self.root}/{USERS}/{user}/{CLIENTS}"):
                path = f"{USERS}/{user}/{CLIENTS}/{name}"
                configs[path] = self._config_at(f"{self.root}/{path}")
        return quotas_from_configs(configs)

    def _children_of(self, path: str) -> list[str]:
        try:
            return list(self.client.get_children(path))
        except NoNodeError:
            return []

    def _config_at(self, path: str) -> dict[str, str]:
        try:
            return decode_config(self.client.get(path)[0])
        except NoNodeError:
            return {}

    def _changed(self, _configs: object = None) -> None:
        configs: dict[str, dict[str, str]] = {}
        for name, config in self._users.configs().items():
            configs[f"{USERS}/{name}"] = config
        for name, config in self._clients.configs().items():
            configs[f"{CLIENTS}/{name}"] = config
        with self._lock:
            for (user, name), config in self._nested.items():
                configs[f"{USERS}/{user}/{CLIENTS}/{name}"] = dict(config)
        fresh = quotas_from_configs(configs)
        with self._lock:
            if fresh == self._snapshot:
                return
            self._snapshot = fresh
        self.on_change(fresh)

    def _users_now(self, users: list[str]) -> None:
        """The user znodes changed: watch new users' ``clients``, forget users gone."""
        present = set(users)
        started: list[tuple[str, object]] = []
        with self._lock:
            for user in present - self._user_tokens.keys():
                token = object()
                self._user_tokens[user] = token
                started.append((user, token))
            for user in self._user_tokens.keys() - present:
                del self._user_tokens[user]
                self._children_tokens.pop(user, None)
        for user, token in started:
            self.client.DataWatch(self._clients_path(user), self._clients_node(user, token))

    def _clients_path(self, user: str) -> str:
        return f"{self.root}/{USERS}/{user}/{CLIENTS}"

    def _clients_node(self, user: str, token: object) -> Callable[[bytes | None, Any], bool]:
        """Watches ``/config/users/<user>/clients`` coming and going; watches its children
        while it exists (kazoo's ChildrenWatch stops for good when its node is deleted)."""

        def changed(_data: bytes | None, stat: Any) -> bool:
            with self._lock:
                if self._user_tokens.get(user) is not token:
                    return False  # the user went away: a newer watch, if any, takes over
                if stat is None:
                    self._children_tokens.pop(user, None)
                    return True
                # The node may have been deleted and made again between two reads, and the
                # children watch of the old one stopped: a new creation (czxid) gets a new one.
                if self._children_tokens.get(user, (None, None))[1] == stat.czxid:
                    return True
                children_token = object()
                self._children_tokens[user] = (children_token, stat.czxid)
            self.client.ChildrenWatch(self._clients_path(user), self._clients_children(user, children_token))
            return True

        return changed

    def _clients_children(self, user: str, token: object) -> Callable[[list[str]], bool]:
        def changed(children: list[str]) -> bool:
            new: list[str] = []
            with self._lock:
                if self._children_tokens.get(user, (None, None))[0] is not token:
                    return False  # superseded: a newer watch serves this user's clients
                for child in children:
                    if (user, child) not in self._nested_watched:
                        self._nested_watched.add((user, child))
                        new.append(child)
                gone = [key for key in self._nested if key[0] == user and key[1] not in children]
                for key in gone:
                    del self._nested[key]
            for child in new:
                self.client.DataWatch(f"{self._clients_path(user)}/{child}", self._nested_data(user, child))
            if gone:
                self._changed()
            return True

        return changed

    def _nested_data(self, user: str, child: str) -> Callable[[bytes | None, Any], bool]:
        def changed(data: bytes | None, stat: Any) -> bool:
            with self._lock:
                if stat is None:
                    self._nested.pop((user, child), None)
                    self._nested_watched.discard((user, child))
                else:
                    self._nested[(user, child)] = decode_config(data)
            self._changed()
            return stat is not None  # stop watching a deleted node

        return changed

    # -- writing ---------------------------------------------------------------------------

    def alter(self, entity: Entity, changes: Changes) -> None:
        """Apply one entity's quota changes in one compare-and-set (blocking: from a thread).

        Values are written as Kafka's ZooKeeper mode writes them (a LONG key as a whole
        number); other keys of the znode (SCRAM credentials) are kept.
        """
        changes = list(changes)
        path = znode_path(entity, self.root)
        for _ in range(ATTEMPTS):
            try:
                raw, stat = self.client.get(path)
                version = stat.version
                children = stat.numChildren
            except NoNodeError:
                raw, version, children = None, -1, 0
            config = decode_config(raw)
            before = dict(config)
            for key, value in changes:
                if value is None:
                    config.pop(key, None)
                else:
                    config[key] = format_value(key, value)
            try:
                if version < 0:
                    if not config:
                        return
                    self.client.create(path, encode_config(config), makepath=True)
                elif config == before:
                    return
                elif config or entity.client_id is None or children:
                    self.client.set(path, encode_config(config), version=version)
                else:
                    self.client.delete(path, version=version)
                    self._drop_empty_clients(entity)
            except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                continue  # somebody changed it meanwhile: read again
            self._notify(entity)
            return
        raise StoreConflict(f"{path}: gave up after {ATTEMPTS} concurrent modifications")

    def _drop_empty_clients(self, entity: Entity) -> None:
        """After a user's last client-id entity went: its empty ``clients`` node goes too."""
        if entity.user is None:
            return
        clients = znode_path(Entity(user=entity.user), self.root) + f"/{CLIENTS}"
        # Gone already, or another client id still has quotas: either way, nothing to do.
        with contextlib.suppress(NoNodeError, NotEmptyError):
            self.client.delete(clients)

    def _notify(self, entity: Entity) -> None:
        if not self.notify:
            return
        changes = f"{self.root}/{CHANGES}"
        body = json.dumps({"version": 2, "entity_path": entity_path(entity)}, separators=(",", ":"))
        self.client.ensure_path(changes)
        self.client.create(f"{changes}/{CHANGE_PREFIX}", body.encode(), sequence=True)
