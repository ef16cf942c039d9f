"""Where and how the coordinator's state lies in ZooKeeper (no kazoo here).

Layout, under the connect string's chroot (Kafka's old consumer paths)::

    /consumers/<group>/registry                     the group record (JSON, below)
    /consumers/<group>/offsets/<topic>/<partition>  one committed offset (JSON, below)

**Escaping.** Group ids may hold any characters, and ZooKeeper node names may not contain
``/``, be ``.`` or ``..``, or hold some control characters. Every group id and topic name
is therefore written as one path component by :func:`escape`: its UTF-8 bytes
percent-encoded (RFC 3986) except the unreserved ``A-Z a-z 0-9 - . _ ~``; the names ``.``
and ``..`` are written ``%2E`` and ``%2E%2E``, and the empty string as a lone ``%``. The
result is reversible (:func:`unescape`) and leaves ordinary names (``orders``,
``my.topic``, ``app-1_x``) as they are. Partitions are decimal integers.

**Offset znode** (UTF-8 JSON)::

    {"version": 1, "offset": 42, "leader_epoch": -1, "metadata": "",
     "commit_timestamp": 1700000000000, "expire_timestamp": null}

A znode holding only a decimal number (the format of Kafka's ZooKeeper-based consumers)
is read as that offset, committed at the znode's modification time.

**Group configs** (KIP-848's and KIP-932's GROUP-resource configs) lie apart, where Kafka
kept each entity type's dynamic configs in ZooKeeper (``/config/<entity-type>/<name>``;
``groups`` is Kafka's ``ConfigType.GROUP``), the group id escaped as above::

    /config/groups/<group>                          {"version":1,"config":{"<key>":"<value>"}}

(:func:`group_config_path`; the format is :mod:`coordinator.group_configs`').

**Registry znode**: the record of :meth:`coordinator.classic_group.ClassicGroup.to_record`
or :meth:`coordinator.consumer_group.ConsumerGroup.to_record` as UTF-8 JSON; both carry
``"version": 1`` and ``"type": "classic" | "consumer"``.
"""

from __future__ import annotations

import json
from urllib.parse import quote, unquote

from coordinator.outcome import OffsetValue

ROOT = "/consumers"
#: Where group configs lie (Kafka's ``/config/<entity-type>`` with ``ConfigType.GROUP``).
GROUP_CONFIG_ROOT = "/config/groups"
REGISTRY = "registry"
OFFSETS = "offsets"
OFFSET_FORMAT_VERSION = 1


def escape(name: str) -> str:
    """One path component for ``name`` (see the module docstring)."""
    if name == "":
        return "%"
    if name in (".", ".."):
        return "%2E" * len(name)
    return quote(name, safe="", encoding="utf-8", errors="strict")


def unescape(component: str) -> str:
    """The name a component written by :func:`escape` stands for."""
    if component == "%":
        return ""
    return unquote(component, encoding="utf-8", errors="strict")


def group_path(group_id: str, root: str = ROOT) -> str:
    """``/consumers/<group>``."""
    return f"{root}/{escape(group_id)}"


def registry_path(group_id: str, root: str = ROOT) -> str:
    """``/consumers/<group>/registry``."""
    return f"{group_path(group_id, root)}/{REGISTRY}"


def topic_path(group_id: str, topic: str, root: str = ROOT) -> str:
    """``/consumers/<group>/offsets/<topic>``."""
    return f"{group_path(group_id, root)}/{OFFSETS}/{escape(topic)}"


def offset_path(group_id: str, topic: str, partition: int, root: str = ROOT) -> str:
    """``/consumers/<group>/offsets/<topic>/<partition>``."""
    return f"{topic_path(group_id, topic, root)}/{int(partition)}"


def group_config_path(group_id: str, root: str = GROUP_CONFIG_ROOT) -> str:
    """``/config/groups/<group>``: the group's configs."""
    return f"{root}/{escape(group_id)}"


def encode_offset(value: OffsetValue) -> bytes:
    """The offset znode's bytes."""
    return json.dumps({
        "version": OFFSET_FORMAT_VERSION, "offset": value.offset, "leader_epoch": value.leader_epoch,
        "metadata": value.metadata, "commit_timestamp": value.commit_timestamp,
        "expire_timestamp": value.expire_timestamp,
    }, separators=(",", ":")).encode()


def decode_offset(data: bytes, mtime: int = 0) -> OffsetValue:
    """An offset znode's value; a bare decimal is the old consumers' format."""
    text = data.decode("utf-8").strip()
    if text.lstrip("-").isdigit():
        return OffsetValue(offset=int(text), commit_timestamp=mtime)
    raw = json.loads(text)
    expire = raw.get("expire_timestamp")
    return OffsetValue(offset=int(raw["offset"]), leader_epoch=int(raw.get("leader_epoch", -1)),
                       metadata=str(raw.get("metadata") or ""),
                       commit_timestamp=int(raw.get("commit_timestamp", mtime)),
                       expire_timestamp=None if expire is None else int(expire))


def encode_record(record: dict[str, object]) -> bytes:
    """The registry znode's bytes."""
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode()


def decode_record(data: bytes) -> dict[str, object]:
    """A registry znode's record."""
    record = json.loads(data.decode("utf-8"))
    if not isinstance(record, dict):
        raise ValueError("registry znode does not hold a JSON object")
    return record
