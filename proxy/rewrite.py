"""Address rewriting: clients see sidecar addresses wherever a response names a broker.

The places a broker address appears are data (:data:`SITES`): the ``Brokers`` of
Metadata and DescribeCluster, FindCoordinator's single coordinator (v0-3) or its batched
``Coordinators`` (v4+), and the ``NodeEndpoints`` tagged field of Produce (v10+), Fetch
(v16+), ShareFetch and ShareAcknowledge responses. A response of any other API, or of a
version without such a field, is never decoded here.

A broker the :class:`~proxy.addressing.AddressBook` cannot map is withheld, never passed
through: a broker-list entry is dropped (the client treats the partition's leader as
unknown and refreshes), and a coordinator becomes COORDINATOR_NOT_AVAILABLE (the client
retries FindCoordinator). Each one is counted and logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import construct as c

from protocol.apis import Api
from protocol.errors import ErrorCode
from protocol.schema import decode, encode
from protocol.spec import MessageSpec
from proxy.addressing import AddressBook

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Site:
    """A field of a response that holds broker entries.

    ``array`` is the field name of a list of entries (or ``None``: the entry's fields are
    at the top level, FindCoordinator v0-3). ``id_field`` names the node id; ``error``
    says the entry carries its own error code (coordinators), so an unmapped one is
    turned into COORDINATOR_NOT_AVAILABLE instead of being dropped.
    """

    array: str | None
    id_field: str = "NodeId"
    error: bool = False


SITES: dict[int, tuple[Site, ...]] = {
    0: (Site("NodeEndpoints"),),  # Produce v10+ (KIP-951)
    1: (Site("NodeEndpoints"),),  # Fetch v16+ (KIP-951)
    3: (Site("Brokers"),),  # Metadata
    10: (Site(None, error=True), Site("Coordinators", error=True)),  # FindCoordinator
    60: (Site("Brokers", id_field="BrokerId"),),  # DescribeCluster
    78: (Site("NodeEndpoints"),),  # ShareFetch
    79: (Site("NodeEndpoints"),),  # ShareAcknowledge
}

_COORDINATOR_NOT_AVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)


def _present(spec: MessageSpec, site: Site, version: int) -> bool:
    name = site.array if site.array is not None else site.id_field
    return any(f.name == name and f.present_in(version) for f in spec.fields)


def rewrites_version(api: Api, version: int) -> bool:
    """True when responses of ``api`` at ``version`` can name brokers."""
    return any(_present(api.response, s, version) for s in SITES.get(api.key, ()))


@dataclass
class RewriteResult:
    """A rewritten body and what happened to its entries."""

    body: bytes
    rewritten: int
    unmapped: int


class Rewriter:
    """Rewrites response bodies for one listener through an address book."""

    def __init__(
        self,
        book: AddressBook,
        listener: str,
        on_unmapped: Callable[[str, int], None] | None = None,
    ) -> None:
        self.book = book
        self.listener = listener
        self.on_unmapped = on_unmapped

    def rewrite(self, api: Api, version: int, body: bytes | memoryview) -> RewriteResult | None:
        """The rewritten body, or ``None`` when the response names no broker."""
        sites = [s for s in SITES.get(api.key, ()) if _present(api.response, s, version)]
        if not sites:
            return None
        value = decode(api.response, version, body)
        rewritten = unmapped = 0
        for site in sites:
            if site.array is None:
                r, u = self._entry(api, value, site)
                rewritten, unmapped = rewritten + r, unmapped + u
                continue
            entries = value.get(site.array)
            if not entries:
                continue
            kept = c.ListContainer()
            for entry in entries:
                r, u = self._entry(api, entry, site)
                rewritten, unmapped = rewritten + r, unmapped + u
                if u and not site.error:
                    continue
                kept.append(entry)
            value[site.array] = kept
        if not rewritten and not unmapped:
            return None
        return RewriteResult(encode(api.response, version, value), rewritten, unmapped)

    def _entry(self, api: Api, entry: Any, site: Site) -> tuple[int, int]:
        if site.error and entry.get("ErrorCode", 0) != 0:
            return 0, 0  # an error answer names no broker
        node_id = entry[site.id_field]
        address = self.book.lookup(node_id, entry["Host"], entry["Port"], self.listener)
        if address is None:
            if self.on_unmapped is not None:
                self.on_unmapped(api.name, node_id)
            if site.error:
                entry["ErrorCode"] = _COORDINATOR_NOT_AVAILABLE
                entry["NodeId"] = -1
                entry["Host"] = ""
                entry["Port"] = -1
            return 0, 1
        entry["Host"] = address.host
        entry["Port"] = address.port
        return 1, 0
