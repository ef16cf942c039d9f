"""Pieces shared by the group messages: the requesting client and topic-partition sets."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

#: Kafka's ``Uuid.ZERO_UUID``: "no topic id" in versions that carry names.
ZERO_UUID = UUID(int=0)

Wire = dict[str, Any]
"""A response body as ``protocol.schema.encode`` takes it (absent fields take defaults)."""


#: ``(principal, host, topic names) -> the names the principal may Describe`` (the shell's
#: view of the ACLs, :attr:`coordinator.context.Context.topic_access`).
TopicAccess = Callable[[str, str, set[str]], set[str]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Client:
    """Who sent a request, from its header and connection (DescribeGroups reports both)."""

    client_id: str = ""
    client_host: str = ""
    #: The authenticated principal (``User:alice``); ``""`` where it is not known (a member
    #: stored before principals were kept).
    principal: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class TopicPartitions:
    """Partitions of one topic, by topic id (the KIP-848 messages' shape)."""

    topic_id: UUID
    partitions: tuple[int, ...]

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> TopicPartitions:
        """From a decoded ``TopicPartitions`` struct."""
        return cls(topic_id=body["TopicId"], partitions=tuple(body["Partitions"]))

    def to_wire(self) -> Wire:
        """To a ``TopicPartitions`` struct."""
        return {"TopicId": self.topic_id, "Partitions": list(self.partitions)}


def opt(body: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """A field that only some versions have: its value, or ``default`` when absent."""
    return body.get(name, default)
