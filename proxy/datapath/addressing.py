"""Where each broker's sidecar listens: the mapping behind address rewriting.

Given a broker as a response names it (node id, host, port) and the listener the client
came in on, an :class:`AddressBook` says which sidecar address the client must see
instead, or ``None`` when no sidecar is known for that broker (the rewriter then
withholds the entry rather than leak a broker address: clients never bypass sidecars).

Schemes (``sidecar.address.mapping``):

* ``offset``: same host, port + a per-listener offset (every sidecar laid out alike);
* ``static``: an explicit ``broker id → host:port`` table;
* ``zookeeper``: sidecars registered under ``/brokers/ids/<id>`` with their advertised
  endpoints (kept current by :mod:`proxy.control.registration`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from proxy.config import HostPort


class AddressBook(Protocol):
    """Maps a broker to the sidecar address a client on ``listener`` must use."""

    def lookup(self, node_id: int, host: str, port: int, listener: str) -> HostPort | None:
        """The sidecar address for this broker, or ``None`` if unknown."""


class OffsetAddressBook:
    """Same host, port shifted by the listener's offset."""

    def __init__(self, offsets: Mapping[str, int]) -> None:
        self.offsets = dict(offsets)

    def lookup(self, node_id: int, host: str, port: int, listener: str) -> HostPort | None:
        """``host:(port + offset)``; ``None`` if the result is not a valid port."""
        offset = self.offsets.get(listener)
        if offset is None:
            return None
        shifted = port + offset
        return HostPort(host, shifted) if 0 < shifted <= 65535 else None


class StaticAddressBook:
    """A fixed table; the same address whatever the listener."""

    def __init__(self, table: Mapping[int, HostPort]) -> None:
        self.table = dict(table)

    def lookup(self, node_id: int, host: str, port: int, listener: str) -> HostPort | None:
        """The configured address of ``node_id``."""
        return self.table.get(node_id)


class RegisteredAddressBook:
    """Sidecars' own registrations: node id → {listener name → address}.

    The table is replaced whole by the registration watcher (never mutated in place), so
    a lookup always sees one consistent snapshot.
    """

    def __init__(self) -> None:
        self.table: dict[int, dict[str, HostPort]] = {}

    def replace(self, table: dict[int, dict[str, HostPort]]) -> None:
        """Install a new snapshot of the registrations."""
        self.table = table

    def lookup(self, node_id: int, host: str, port: int, listener: str) -> HostPort | None:
        """The registered endpoint of ``node_id`` on the same listener name."""
        endpoints = self.table.get(node_id)
        if not endpoints:
            return None
        return endpoints.get(listener)
