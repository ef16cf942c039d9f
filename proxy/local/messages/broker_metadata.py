"""BrokerMetadata (the KIP-35 draft, seed 002) as typed messages, v0-v1.

The API is the sidecar's own (:mod:`protocol.messages.extensions` declares its schema);
v1 has v0's fields with compact encodings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: ``NodeIds`` entry that asks for the answering sidecar itself.
SELF = -1


@dataclass(frozen=True, kw_only=True, slots=True)
class BrokerMetadataRequest:
    """BrokerMetadata v0-v1: empty ``node_ids`` asks for every broker, ``[-1]`` for this one."""

    node_ids: tuple[int, ...] = ()

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> BrokerMetadataRequest:
        """From a decoded BrokerMetadata request body."""
        return cls(node_ids=tuple(body["NodeIds"]))


@dataclass(frozen=True, kw_only=True, slots=True)
class BrokerDescription:
    """One sidecar as BrokerMetadata describes it: its address, protocol range and tags."""

    node_id: int
    host: str
    port: int
    protocol_version_min: int
    protocol_version_max: int
    #: ``(key, value)`` pairs, in order.
    tags: tuple[tuple[str, str], ...] = ()

    def to_wire(self) -> dict[str, Any]:
        """To one ``Brokers`` entry."""
        return {"NodeId": self.node_id, "Host": self.host, "Port": self.port,
                "ProtocolVersionMin": self.protocol_version_min,
                "ProtocolVersionMax": self.protocol_version_max,
                "Tags": [{"Key": key, "Value": value} for key, value in self.tags]}


@dataclass(frozen=True, kw_only=True, slots=True)
class BrokerMetadataResponse:
    """BrokerMetadata answer: the brokers asked for that the sidecar knows."""

    brokers: tuple[BrokerDescription, ...] = ()

    def to_wire(self, version: int) -> dict[str, Any]:
        """To a BrokerMetadata response body (the same fields at v0 and v1)."""
        return {"Brokers": [b.to_wire() for b in self.brokers]}
