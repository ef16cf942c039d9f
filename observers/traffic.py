"""Who moved how much: per topic-partition bytes and records of Produce and Fetch frames.

Shared by the audit and the Prometheus observer, which read raw exchanges
(:mod:`observers.api`): the few fields they need are picked from the bodies
(:class:`protocol.pick.Picker`), never decoded whole. Record counts come from the batch
headers (:func:`protocol.records.count_records`: v2 batches carry their count, legacy
message sets are walked). Produce v13+ and Fetch v13+ name topics by id (KIP-516);
:class:`TopicNames` maps ids to names from the Metadata responses the observer sees, and
an id it has not seen stays in its text form. The responses' ``ThrottleTimeMs`` (client
quotas, KIP-219) comes along at no extra walk: Produce's from the pick that reads its
errors, Fetch's from its first four bytes.

Every function here raises :class:`~protocol.errors.ProtocolError` on a body that is not
a message of its version (the decoder would refuse it too: :mod:`protocol.pick`).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from protocol.apis import DEFAULT_REGISTRY
from protocol.errors import ProtocolError
from protocol.pick import Picker
from protocol.records import count_records
from protocol.spec import MessageSpec

#: Topic ids remembered per observer (each Metadata response may teach new ones).
MAX_TOPIC_IDS = 100_000
_NULL_ID = uuid.UUID(int=0)

PRODUCE_REQUEST = Picker(DEFAULT_REGISTRY.api(0).request, {
    "Acks": None,
    "TopicData": {"Name": None, "TopicId": None, "PartitionData": {"Index": None, "Records": None}},
})  # fmt: skip
PRODUCE_RESPONSE = Picker(DEFAULT_REGISTRY.api(0).response, {
    "Responses": {"Name": None, "TopicId": None,
                  "PartitionResponses": {"Index": None, "ErrorCode": None}},
    "ThrottleTimeMs": None,
})  # fmt: skip
FETCH_RESPONSE = Picker(DEFAULT_REGISTRY.api(1).response, {
    "Responses": {"Topic": None, "TopicId": None,
                  "Partitions": {"PartitionIndex": None, "ErrorCode": None, "Records": None}},
})  # fmt: skip
SHARE_FETCH_RESPONSE = Picker(DEFAULT_REGISTRY.api(78).response, {
    "Responses": {"TopicId": None, "Partitions": {"PartitionIndex": None, "ErrorCode": None, "Records": None}},
})  # fmt: skip
METADATA_RESPONSE = Picker(DEFAULT_REGISTRY.api(3).response, {"Topics": {"Name": None, "TopicId": None}})
#: What the audit's topic inventory reads of a Metadata response.
METADATA_INVENTORY = Picker(DEFAULT_REGISTRY.api(3).response, {
    "Topics": {"ErrorCode": None, "Name": None, "TopicId": None,
               "Partitions": {"PartitionIndex": None}},
})  # fmt: skip
FETCH_REQUEST = Picker(DEFAULT_REGISTRY.api(1).request, {"MaxWaitMs": None})
#: Topics the audit remembers per hour for its inventory (then it records no new ones
#: until the hour changes).
MAX_INVENTORY_TOPICS = 100_000

_THROTTLE = struct.Struct(">i")


def throttle_in(spec: MessageSpec, version: int) -> bool:
    """Whether ``spec`` (a response) has a top-level ``ThrottleTimeMs`` at ``version``."""
    return any(f.name == "ThrottleTimeMs" and f.present_in(version) for f in spec.fields)


#: The first version of the Produce and Fetch responses with a ``ThrottleTimeMs`` (1 for
#: both): a response of an earlier version has none.
PRODUCE_THROTTLE_FROM = min(v for v in range(16) if throttle_in(DEFAULT_REGISTRY.api(0).response, v))
FETCH_THROTTLE_FROM = min(v for v in range(16) if throttle_in(DEFAULT_REGISTRY.api(1).response, v))


class PartitionTraffic(NamedTuple):
    """One topic-partition of a Produce request or a Fetch response."""

    topic: str | None
    partition: int
    #: Bytes of the ``records`` field (0 when null).
    bytes: int
    #: Records in complete batches; ``None`` when the batches could not be read.
    records: int | None
    #: The partition's error from the response; ``None`` when there was no response.
    error_code: int | None


class TopicNames:
    """Topic id → name, learned from Metadata responses (v10+ carry both), else asked of
    ``resolve`` (``ObserverConfig.topic_name``: the broker's name for an id this observer
    has not seen a Metadata answer name)."""

    def __init__(self, resolve: Callable[[uuid.UUID], str | None] | None = None) -> None:
        self._names: dict[uuid.UUID, str] = {}
        self.resolve = resolve

    def learn(self, version: int, metadata_response: memoryview) -> None:
        """Remember every (id, name) pair a Metadata response body holds."""
        (topics,) = METADATA_RESPONSE.pick(version, metadata_response)
        self.learn_pairs(topics)

    def learn_pairs(self, topics: Iterable[tuple[str | None, uuid.UUID]]) -> None:
        """Remember ``(name, id)`` pairs (nameless or id-less ones are skipped)."""
        for name, topic_id in topics:
            known = topic_id != _NULL_ID
            if name and known and (topic_id in self._names or len(self._names) < MAX_TOPIC_IDS):
                self._names[topic_id] = name

    def name(self, name: str | None, topic_id: uuid.UUID) -> str | None:
        """A topic's name: ``name`` if set, else its id mapped, else the id as text."""
        if name:
            return name
        if topic_id == _NULL_ID:
            return name
        known = self._names.get(topic_id)
        if known is None and self.resolve is not None:
            known = self.resolve(topic_id)
            if known:
                self.learn_pairs(((known, topic_id),))
        return known or str(topic_id)

    def __len__(self) -> int:
        return len(self._names)


def _records(body: memoryview, span: tuple[int, int] | None) -> tuple[int, int | None]:
    """Bytes and records of a records field at ``span`` of ``body`` (null: 0 and 0)."""
    if span is None:
        return 0, 0
    start, end = span
    try:
        return end - start, count_records(body[start:end])
    except ProtocolError:  # bytes no broker would accept or send: size known, count not
        return end - start, None


def produce_traffic(
    version: int, request: memoryview, response: memoryview | None, names: TopicNames
) -> tuple[int, list[PartitionTraffic], int | None]:
    """A Produce request's ``acks``, one entry per topic-partition it carries with the
    response's error for it (``None`` without a response, or when the response cannot be
    read), and the response's ``ThrottleTimeMs`` (``None`` likewise, and before version 1).

    The response is walked once for both: its throttle time is its last field before the
    tag section, read by the same pick as the errors."""
    acks, topics = PRODUCE_REQUEST.pick(version, request)
    errors: dict[tuple[Any, int], int] = {}
    throttle: int | None = None
    if response is not None:
        try:
            answered, picked_throttle = PRODUCE_RESPONSE.pick(version, response)
        except ProtocolError:
            answered = []
        else:
            throttle = picked_throttle if version >= PRODUCE_THROTTLE_FROM else None
        for name, topic_id, partitions in answered:
            key = name or topic_id
            for index, error in partitions:
                errors[(key, index)] = error
    out: list[PartitionTraffic] = []
    for name, topic_id, partitions in topics:
        key = name or topic_id
        topic = names.name(name, topic_id)
        for index, span in partitions:
            size, records = _records(request, span)
            out.append(PartitionTraffic(topic, index, size, records, errors.get((key, index))))
    return acks, out, throttle


def fetch_traffic(version: int, response: memoryview, names: TopicNames) -> list[PartitionTraffic]:
    """One entry per topic-partition of a Fetch response body (what the client received)."""
    (topics,) = FETCH_RESPONSE.pick(version, response)
    out: list[PartitionTraffic] = []
    for name, topic_id, partitions in topics:
        topic = names.name(name, topic_id)
        for index, error, span in partitions:
            size, records = _records(response, span)
            out.append(PartitionTraffic(topic, index, size, records, error))
    return out


def share_fetch_traffic(version: int, response: memoryview, names: TopicNames) -> list[PartitionTraffic]:
    """One entry per topic-partition of a ShareFetch response body (KIP-932: what a share
    group's member received; topics by id)."""
    (topics,) = SHARE_FETCH_RESPONSE.pick(version, response)
    out: list[PartitionTraffic] = []
    for topic_id, partitions in topics:
        topic = names.name(None, topic_id)
        for index, error, span in partitions:
            size, records = _records(response, span)
            out.append(PartitionTraffic(topic, index, size, records, error))
    return out


def fetch_throttle(version: int, response: memoryview) -> int | None:
    """A Fetch response body's ``ThrottleTimeMs``, its first field from version 1: four
    bytes read, nothing walked (``None`` before version 1 or when the body is shorter).
    Whether the rest is a Fetch response is :func:`fetch_traffic`'s to find out."""
    if version < FETCH_THROTTLE_FROM or len(response) < _THROTTLE.size:
        return None
    value: int = _THROTTLE.unpack_from(response, 0)[0]
    return value


def fetch_max_wait(version: int, request: memoryview) -> int:
    """A Fetch request body's ``MaxWaitMs``: how long the broker may hold it (a long poll)."""
    (max_wait,) = FETCH_REQUEST.pick(version, request)
    wait: int = max_wait
    return wait


class TopicInventory:
    """The topics a Metadata response reports, each at most once per hour: the audit's
    topic inventory (schema v2, ``topic_partitions``).

    A topic is new in an hour the first time it is reported in it, or when its partition
    count changed since it was last recorded. At most :data:`MAX_INVENTORY_TOPICS` are
    remembered per hour; the rest wait for the next hour.
    """

    def __init__(self, limit: int = MAX_INVENTORY_TOPICS) -> None:
        self.limit = limit
        self.hour = -1
        self._seen: dict[str, int] = {}

    def read(self, version: int, metadata_response: memoryview, names: TopicNames) -> list[tuple[str, int]]:
        """``(topic, partitions)`` of every topic the response reports without an error
        (and teach ``names`` the ids it carries)."""
        (topics,) = METADATA_INVENTORY.pick(version, metadata_response)
        names.learn_pairs((name, topic_id) for _, name, topic_id, _ in topics)
        return [(name, len(partitions)) for error, name, _, partitions in topics
                if error == 0 and name]

    def fresh(self, hour: int, topics: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """Of ``topics`` reported in ``hour`` (hours since the epoch), those to record."""
        if hour > self.hour:
            self.hour = hour
            self._seen.clear()
        seen, out = self._seen, []
        for name, partitions in topics:
            if seen.get(name) == partitions:
                continue
            if name not in seen and len(seen) >= self.limit:
                continue
            seen[name] = partitions
            out.append((name, partitions))
        return out
