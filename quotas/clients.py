"""User and client-id quotas (KIP-13, KIP-55, KIP-124, KIP-599), sans-IO.

Theory of operation
-------------------
A quota *entity* names a user, a client id, or both; either part may be the type's default
entity (``<default>`` in ZooKeeper, a null name on the wire). Kafka keeps each entity's
quotas in ZooKeeper at::

    /config/users/<user>                    /config/clients/<client-id>
    /config/users/<user>/clients/<client-id>

with names made safe by :func:`sanitize` (Kafka's ``Sanitizer``) and ``<default>`` for a
default part. :func:`entity_path` and :func:`entity_of_path` convert both ways.

A connection is throttled by the most specific entity that sets the quota in question
(KIP-55's eight levels, Kafka's ``ClientQuotaManager``)::

    1 user + client-id           5 <default user> + <default client-id>
    2 user + <default client-id> 6 <default user>
    3 user                       7 client-id
    4 <default user> + client-id 8 <default client-id>

Each quota key is resolved on its own: Kafka runs one quota manager per key (produce,
fetch, request, controller mutation), and each manager knows only the entities that set
its key. Besides the value, :func:`resolve` says which *sensor* the rate is measured on:
Kafka's ``DefaultQuotaCallback.quotaMetricTags`` picks the ``(user, client-id)`` metric
tags from the level found — levels 1, 2, 4, 5 measure each (user, client id) pair apart;
levels 3 and 6 measure all of a user's client ids together, ``(user, "")``; levels 7 and 8
measure a client id across users, ``("", client-id)``. A default entity applies to each
user (client id) separately: its tags carry the connection's own names, never
``<default>``. The user tag is the *sanitized* user, as in Kafka's metrics.

Kafka then reads the limit back *from the tags* (``DefaultQuotaCallback.quotaLimit``), and
so does :func:`resolve`: for a client with an empty client id, a quota found at levels 2
or 5 yields tags ``(user, "")``, which read levels 3 and 6 only; if neither is set the
client is not limited. That is Kafka's behaviour, kept on purpose.

The user of a connection is its principal's name: ``alice`` for ``User:alice`` (Kafka's
``KafkaPrincipal.getName``, the principal type dropped), and ``ANONYMOUS`` for a client
that did not authenticate (``KafkaPrincipal.ANONYMOUS``), so ``/config/users/ANONYMOUS``
and ``/config/users/<default>`` apply to such clients as they do on a broker.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Literal
from urllib.parse import quote, unquote_plus

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

KeyType = Literal["long", "double"]

#: Kafka's ``QuotaConfig`` user and client-id keys and their ``ConfigDef`` types.
QUOTA_KEYS: Mapping[str, KeyType] = MappingProxyType({
    PRODUCER_BYTE_RATE: "long",
    CONSUMER_BYTE_RATE: "long",
    REQUEST_PERCENTAGE: "double",
    CONTROLLER_MUTATION_RATE: "double",
})

#: The largest Java ``long``: a LONG quota above it is refused.
LONG_MAX = 2**63 - 1
ANONYMOUS = "ANONYMOUS"
DEFAULT_NAME = "<default>"
USERS = "users"
CLIENTS = "clients"
CONFIG_ROOT = "/config"


class Default(Enum):
    """The default entity of a type (``<default>``); use :data:`DEFAULT`."""

    ENTITY = DEFAULT_NAME

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = Default.ENTITY

#: One part of an entity: a name, the default entity, or ``None`` for "this type absent".
Part = str | Default | None


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: a name as a ZooKeeper node name (and metric tag).

    Java's ``URLEncoder`` over UTF-8 keeps ``A-Za-z0-9.-*_``, writes a space as ``+`` and
    every other byte as ``%XX``; Kafka then writes ``*`` as ``%2A`` and the space as ``%20``.
    What is left unescaped is ``A-Za-z0-9._-``, which is ``quote`` without its ``~``.
    """
    return quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    """Kafka's ``Sanitizer.desanitize`` (Java's ``URLDecoder``: ``+`` is a space)."""
    return unquote_plus(name)


@dataclass(frozen=True, slots=True)
class Entity:
    """A user / client-id quota entity: either part or both (``None`` = type absent)."""

    user: Part = None
    client_id: Part = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise ValueError("a quota entity names a user, a client id, or both")

    def __str__(self) -> str:
        return entity_path(self)


def _node_name(part: str | Default) -> str:
    if isinstance(part, Default):
        return DEFAULT_NAME
    if not part:
        raise ValueError("an empty name has no znode")
    return sanitize(part)


def _part_of(node: str) -> str | Default:
    return DEFAULT if node == DEFAULT_NAME else desanitize(node)


def entity_path(entity: Entity) -> str:
    """The entity's path under ``/config`` (Kafka's ``entity_path``): ``users/alice/clients/p1``."""
    if entity.user is None:
        assert entity.client_id is not None
        return f"{CLIENTS}/{_node_name(entity.client_id)}"
    user = f"{USERS}/{_node_name(entity.user)}"
    if entity.client_id is None:
        return user
    return f"{user}/{CLIENTS}/{_node_name(entity.client_id)}"


def znode_path(entity: Entity, root: str = CONFIG_ROOT) -> str:
    """The entity's znode: ``/config/users/<user>/clients/<client>`` and its siblings."""
    return f"{root}/{entity_path(entity)}"


def entity_of_path(path: str) -> Entity:
    """The entity an entity path names (relative to ``/config``, or absolute under it).

    Raises ``ValueError`` for anything that is not one of Kafka's three layouts.
    """
    relative = path.removeprefix(CONFIG_ROOT + "/") if path.startswith("/") else path
    parts = relative.split("/")
    if any(not p for p in parts):
        raise ValueError(f"{path!r}: not a quota entity path")
    if len(parts) == 2 and parts[0] == CLIENTS:
        return Entity(client_id=_part_of(parts[1]))
    if len(parts) == 2 and parts[0] == USERS:
        return Entity(user=_part_of(parts[1]))
    if len(parts) == 4 and parts[0] == USERS and parts[2] == CLIENTS:
        return Entity(user=_part_of(parts[1]), client_id=_part_of(parts[3]))
    raise ValueError(f"{path!r}: not a quota entity path")


def parse_value(key: str, text: str) -> float | None:
    """A stored quota value as a number, or ``None`` if ``key`` is no quota key or ``text``
    is not a finite number (such an entry is ignored, as a broker could not apply it)."""
    if key not in QUOTA_KEYS:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def format_value(key: str, value: float) -> str:
    """A quota value as Kafka's ZooKeeper mode writes it: a LONG key as a whole number."""
    if QUOTA_KEYS.get(key) == "long":
        return str(min(round(value), LONG_MAX))  # Java's double-to-long cast saturates
    return repr(float(value))


@dataclass(frozen=True, slots=True)
class Limit:
    """A resolved quota: its value, the sensor it is measured on, and where it was found.

    ``sensor`` is Kafka's metric tags ``(user, client-id)``: the sanitized user or ``""``,
    the client id or ``""``. Connections with equal sensors share one rate.
    """

    value: float
    sensor: tuple[str, str]
    entity: Entity


_Key = tuple[Part, Part]
_CACHE_LIMIT = 65536


class ClientQuotas:
    """An immutable snapshot: ``{Entity: {quota key: value}}``, with resolution cached.

    A new snapshot is a new object: its cache starts empty, so a change of quotas never
    meets a stale answer. Keys that are not quota keys are dropped.
    """

    __slots__ = ("_by_key", "_cache", "_entries")

    def __init__(self, entries: Mapping[Entity, Mapping[str, float]] | None = None) -> None:
        cleaned: dict[Entity, Mapping[str, float]] = {}
        by_key: dict[str, dict[_Key, float]] = {key: {} for key in QUOTA_KEYS}
        for entity, values in (entries or {}).items():
            kept = {k: float(v) for k, v in values.items() if k in QUOTA_KEYS}
            if not kept:
                continue
            cleaned[entity] = MappingProxyType(kept)
            for key, value in kept.items():
                by_key[key][(entity.user, entity.client_id)] = value
        self._entries: Mapping[Entity, Mapping[str, float]] = MappingProxyType(cleaned)
        self._by_key = by_key
        self._cache: dict[tuple[str, str, str], Limit | None] = {}

    @property
    def entries(self) -> Mapping[Entity, Mapping[str, float]]:
        """Every entity with at least one quota, read-only."""
        return self._entries

    def __iter__(self) -> Iterator[Entity]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClientQuotas) and dict(self._entries) == dict(other._entries)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ClientQuotas({ {str(e): dict(v) for e, v in self._entries.items()} })"

    def resolve(self, user: str, client_id: str, key: str) -> Limit | None:
        """The quota ``key`` for a connection of ``user`` (principal name) and ``client_id``."""
        cached = self._cache.get((user, client_id, key), _MISSING)
        if cached is not _MISSING:
            return cached  # type: ignore[return-value]
        found = self._resolve(user, client_id, key)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[(user, client_id, key)] = found
        return found

    def _resolve(self, user: str, client_id: str, key: str) -> Limit | None:
        quotas = self._by_key.get(key)
        if not quotas:
            return None
        tags = _metric_tags(quotas, user, client_id)
        return _limit(quotas, tags, user)


_MISSING = object()


def _metric_tags(quotas: Mapping[_Key, float], user: str, client_id: str) -> tuple[str, str]:
    """Kafka's ``DefaultQuotaCallback.quotaMetricTags``, the general case, for one key."""
    tagged_user = sanitize(user)
    if (user, client_id) in quotas or (user, DEFAULT) in quotas:  # levels 1, 2
        return tagged_user, client_id
    if (user, None) in quotas:  # level 3
        return tagged_user, ""
    if (DEFAULT, client_id) in quotas or (DEFAULT, DEFAULT) in quotas:  # levels 4, 5
        return tagged_user, client_id
    if (DEFAULT, None) in quotas:  # level 6
        return tagged_user, ""
    return "", client_id  # levels 7, 8 (or none)


def _limit(quotas: Mapping[_Key, float], tags: tuple[str, str], user: str) -> Limit | None:
    """Kafka's ``DefaultQuotaCallback.quotaLimit``: the limit the tags lead to."""
    tagged_user, client_id = tags
    if tagged_user and client_id:
        order: tuple[_Key, ...] = (
            (user, client_id), (user, DEFAULT), (DEFAULT, client_id), (DEFAULT, DEFAULT))
    elif tagged_user:
        order = ((user, None), (DEFAULT, None))
    elif client_id:
        order = ((None, client_id), (None, DEFAULT))
    else:
        return None
    for candidate in order:
        value = quotas.get(candidate)
        if value is not None:
            return Limit(value=value, sensor=tags, entity=Entity(*candidate))
    return None


def resolve(quotas: ClientQuotas, user: str, client_id: str, key: str) -> Limit | None:
    """The quota ``key`` applying to ``(user, client_id)`` in ``quotas``, or ``None``.

    ``user`` is the principal's name (``ANONYMOUS`` when unauthenticated); see the module
    docstring for the precedence and the sensor. Cached per snapshot.
    """
    return quotas.resolve(user, client_id, key)


def quotas_from_configs(configs: Mapping[str, Mapping[str, str]]) -> ClientQuotas:
    """A snapshot from znode configs keyed by entity path (``users/alice/clients/p1``).

    Unreadable paths, non-quota keys (a user's SCRAM credentials) and unparsable values are
    skipped; a znode with no quota left is no entity.
    """
    entries: dict[Entity, dict[str, float]] = {}
    for path, config in configs.items():
        try:
            entity = entity_of_path(path)
        except ValueError:
            continue
        values = {}
        for key, text in config.items():
            value = parse_value(key, text)
            if value is not None:
                values[key] = value
        if values:
            entries[entity] = values
    return ClientQuotas(entries)


EMPTY = ClientQuotas()
