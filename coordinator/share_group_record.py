"""A KIP-932 share group's durable state and its ZooKeeper form.

What Kafka writes to ``__consumer_offsets`` for a share group (``ShareGroupMetadata``,
``ShareGroupTargetAssignmentMetadata``, ``ShareGroupStatePartitionMetadata`` and the member
records) is :class:`ShareGroupRecord`; :func:`encode_group` / :func:`decode_group` are its
versioned JSON for ZooKeeper, refusing malformed input with :class:`MalformedShareGroup`.
The membership rules that make and read it are :mod:`coordinator.share_group`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID


@dataclass(frozen=True, kw_only=True, slots=True)
class InitTopic:
    """Initializing or initialized share-partitions of one topic (``InitMapValue``)."""

    topic_id: UUID
    name: str
    partitions: frozenset[int]
    timestamp: int


@dataclass(frozen=True, kw_only=True, slots=True)
class DurableMember:
    """What Kafka keeps of a member: ``ShareGroupMemberMetadata``,
    ``ShareGroupCurrentMemberAssignment`` and ``ShareGroupTargetAssignmentMember``."""

    member_id: str
    rack_id: str | None
    client_id: str
    client_host: str
    #: Sorted, as Kafka writes them.
    subscribed_topic_names: tuple[str, ...]
    member_epoch: int
    previous_member_epoch: int
    assigned: tuple[tuple[UUID, tuple[int, ...]], ...]
    target: tuple[tuple[UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class ShareGroupRecord:
    """A share group's durable state: what Kafka writes for it (``ShareGroupMetadata``,
    ``ShareGroupTargetAssignmentMetadata``, ``ShareGroupStatePartitionMetadata`` and the
    member records), the subscribed topics' (name, id, partitions) standing for the metadata
    hash. ``members`` in the order they joined (it decides the assignor's order)."""

    group_epoch: int
    assignment_epoch: int
    assignment_timestamp: int
    subscribed_topics: tuple[tuple[str, UUID, int], ...]
    members: tuple[DurableMember, ...]
    initializing: tuple[InitTopic, ...] = ()
    initialized: tuple[InitTopic, ...] = ()


# -- the ZooKeeper form ----------------------------------------------------------------------------

#: The ZooKeeper format's version (the ``version`` field).
FORMAT_VERSION = 1


class MalformedShareGroup(ValueError):
    """A znode that is not a share group in :data:`FORMAT_VERSION`'s format."""


def encode_group(record: ShareGroupRecord) -> bytes:
    """The znode's bytes: compact JSON, :data:`FORMAT_VERSION`::

        {"version":1,"group_epoch":3,"assignment_epoch":3,"assignment_timestamp":1700000000000,
         "subscribed_topics":[["foo","<topic id>",3]],
         "members":[{"member_id":"m1","rack_id":null,"client_id":"c1","client_host":"/10.0.0.1",
                     "subscribed_topic_names":["foo"],"member_epoch":3,"previous_member_epoch":2,
                     "assigned":[["<topic id>",[0,1,2]]],"target":[["<topic id>",[0,1,2]]]}],
         "initializing":[],"initialized":[["<topic id>","foo",[0,1,2],1700000000000]]}

    Members in the order they joined, their partitions in Kafka's record order (both decide
    the assignor's choices); topic ids in their canonical text form."""
    def pairs(t: tuple[tuple[UUID, tuple[int, ...]], ...]) -> list[list[Any]]:
        return [[str(topic), list(parts)] for topic, parts in t]

    def inits(ts: tuple[InitTopic, ...]) -> list[list[Any]]:
        return [[str(t.topic_id), t.name, sorted(t.partitions), t.timestamp] for t in ts]

    return json.dumps({
        "version": FORMAT_VERSION, "group_epoch": record.group_epoch, "assignment_epoch": record.assignment_epoch,
        "assignment_timestamp": record.assignment_timestamp,
        "subscribed_topics": [[n, str(i), c] for n, i, c in record.subscribed_topics],
        "members": [{"member_id": m.member_id, "rack_id": m.rack_id, "client_id": m.client_id,
                     "client_host": m.client_host, "subscribed_topic_names": list(m.subscribed_topic_names),
                     "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
                     "assigned": pairs(m.assigned), "target": pairs(m.target)} for m in record.members],
        "initializing": inits(record.initializing), "initialized": inits(record.initialized),
    }, separators=(",", ":")).encode()


def decode_group(raw: bytes) -> ShareGroupRecord:
    """A znode's share group; :class:`MalformedShareGroup` saying what is wrong when it is not one."""
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedShareGroup(f"share group: not JSON ({exc}): {raw[:80]!r}") from None
    if not isinstance(body, dict):
        raise MalformedShareGroup(f"share group: not a JSON object: {raw[:80]!r}")
    if body.get("version") != FORMAT_VERSION:
        raise MalformedShareGroup(f"share group: format version {body.get('version')!r}, this release reads "
                                  f"{FORMAT_VERSION}")
    members = [_member(m) for m in _list(body, "members", "share group")]
    ids = [m.member_id for m in members]
    if len(set(ids)) != len(ids):
        raise MalformedShareGroup(f"share group: a member id appears twice: {ids}")
    return ShareGroupRecord(
        group_epoch=_int(body, "group_epoch", "share group"),
        assignment_epoch=_int(body, "assignment_epoch", "share group"),
        assignment_timestamp=_int(body, "assignment_timestamp", "share group"),
        subscribed_topics=tuple(_subscribed(e) for e in _list(body, "subscribed_topics", "share group")),
        members=tuple(members),
        initializing=tuple(_init(e) for e in _list(body, "initializing", "share group")),
        initialized=tuple(_init(e) for e in _list(body, "initialized", "share group")))


def _int(body: Mapping[str, Any], key: str, where: str) -> int:
    value = body.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise MalformedShareGroup(f"{where}: {key} is not an integer: {value!r}")
    return value


def _str(body: Mapping[str, Any], key: str, where: str, *, nullable: bool = False) -> Any:
    value = body.get(key)
    if not (isinstance(value, str) or (nullable and value is None)):
        raise MalformedShareGroup(f"{where}: {key} is not a string: {value!r}")
    return value


def _list(body: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = body.get(key)
    if not isinstance(value, list):
        raise MalformedShareGroup(f"{where}: {key} is not a list: {value!r}")
    return value


def _uuid(value: Any, where: str) -> UUID:
    try:
        return UUID(value)
    except (TypeError, ValueError, AttributeError):
        raise MalformedShareGroup(f"{where}: {value!r} is not a topic id") from None


def _partitions(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                                               for p in value):
        raise MalformedShareGroup(f"{where}: partitions are not a list of partition numbers: {value!r}")
    return tuple(value)


def _pairs(value: Any, where: str) -> tuple[tuple[UUID, tuple[int, ...]], ...]:
    if not isinstance(value, list) or not all(isinstance(e, list) and len(e) == 2 for e in value):
        raise MalformedShareGroup(f"{where}: not a list of [topic id, partitions]: {value!r}")
    out = tuple((_uuid(t, where), _partitions(ps, where)) for t, ps in value)
    if len({t for t, _ in out}) != len(out):
        raise MalformedShareGroup(f"{where}: a topic appears twice: {value!r}")
    return out


def _member(raw: Any) -> DurableMember:
    if not isinstance(raw, dict):
        raise MalformedShareGroup(f"share group: a member is not a JSON object: {raw!r}")
    where = f"share group member {raw.get('member_id')!r}"
    names = _list(raw, "subscribed_topic_names", where)
    if not all(isinstance(n, str) for n in names):
        raise MalformedShareGroup(f"{where}: subscribed_topic_names are not strings: {names!r}")
    return DurableMember(
        member_id=_str(raw, "member_id", where), rack_id=_str(raw, "rack_id", where, nullable=True),
        client_id=_str(raw, "client_id", where), client_host=_str(raw, "client_host", where),
        subscribed_topic_names=tuple(names), member_epoch=_int(raw, "member_epoch", where),
        previous_member_epoch=_int(raw, "previous_member_epoch", where),
        assigned=_pairs(raw.get("assigned"), f"{where}: assigned"),
        target=_pairs(raw.get("target"), f"{where}: target"))


def _subscribed(raw: Any) -> tuple[str, UUID, int]:
    if (not isinstance(raw, list) or len(raw) != 3 or not isinstance(raw[0], str) or not isinstance(raw[2], int)
            or isinstance(raw[2], bool) or raw[2] < 0):
        raise MalformedShareGroup(f"share group: a subscribed topic is not [name, topic id, partitions]: {raw!r}")
    return raw[0], _uuid(raw[1], "share group: subscribed_topics"), raw[2]


def _init(raw: Any) -> InitTopic:
    if (not isinstance(raw, list) or len(raw) != 4 or not isinstance(raw[1], str) or not isinstance(raw[3], int)
            or isinstance(raw[3], bool)):
        raise MalformedShareGroup(f"share group: an initialization is not [topic id, name, partitions, "
                                  f"timestamp]: {raw!r}")
    return InitTopic(topic_id=_uuid(raw[0], "share group: initialization"), name=raw[1],
                     partitions=frozenset(_partitions(raw[2], "share group: initialization")), timestamp=raw[3])
