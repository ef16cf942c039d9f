"""Address rewriting: clients see sidecar addresses wherever a response names a broker.

The places a broker address appears are data (:data:`SITES`): the ``Brokers`` of
Metadata and DescribeCluster, FindCoordinator's single coordinator (v0-3) or its batched
``Coordinators`` (v4+), and the ``NodeEndpoints`` tagged field of Produce (v10+), Fetch
(v16+), ShareFetch and ShareAcknowledge responses. A response of any other API, or of a
version without such a field, is never decoded here.

Produce and Fetch responses are the bulk of the traffic and carry records; their only
broker field is a top-level tagged field, which brokers send only when a leader moved
(KIP-951). So when every site of a response is a tagged field, the response is only
scanned (:func:`protocol.scan.top_level_tags`: the structure is walked, records are
skipped without being copied). If a site's tag is present, only that tag's value is
decoded, rewritten and re-encoded, and the top-level tag section (the last bytes of the
response) is rebuilt around it: the records before it go out as the broker sent them.

A broker the :class:`~proxy.datapath.addressing.AddressBook` cannot map is withheld, never passed
through: a broker-list entry is dropped (the client treats the partition's leader as
unknown and refreshes), and a coordinator becomes COORDINATOR_NOT_AVAILABLE (the client
retries FindCoordinator). Each one is counted and logged.

Metadata's broker list also names every sidecar of the fleet that is missing from it (when
the embedded coordinator runs, ``fleet`` below): FindCoordinator may name any of them, and
librdkafka (2.10 and later) forgets a node that its latest Metadata does not list, its
coordinator connection included, then asks again and is told the same node. Kafka's
coordinators are always among its brokers; a sidecar's may not be while its own broker
restarts (Kafka drops a broker that is down from the list), or in front of a broker whose
node id is not the sidecar's.

Bytes a broker sends after a response's body (librdkafka's mock cluster writes the top-level
tag section of flexible Metadata twice; clients stop reading at the body's end) are no reason
to refuse it: the body is rewritten and the bytes after it follow unchanged, reported through
the listener's :class:`~protocol.leniency.Leniency` (docs/protocol.md, "Leniency"). A streamed
response's tag section is rewritten in its own length with the same rule.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import construct as c

from protocol.apis import Api
from protocol.errors import ErrorCode
from protocol.framing import size_prefix
from protocol.leniency import QUIET, RESPONSE, Leniency
from protocol.scan import (
    Step,
    Steps,
    merge_fixed,
    plan_field,
    skip_tags,
    top_level_tags_prefix,
    walker,
)
from protocol.schema import decode, encode, struct_defaults
from protocol.spec import NO_VERSIONS, FieldSpec, MessageSpec, Versions
from protocol.tagged import encoded_section, fitted_section
from proxy.config import HostPort
from proxy.datapath.addressing import AddressBook

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Site:
    """A field of a response that holds broker entries.

    ``array`` is the field name of a list of entries (or ``None``: the entry's fields are
    at the top level, FindCoordinator v0-3). ``id_field`` names the node id; ``error``
    says the entry carries its own error code (coordinators), so an unmapped one is
    turned into COORDINATOR_NOT_AVAILABLE instead of being dropped. ``names_fleet`` says
    the list is where clients look a coordinator's node up (Metadata's brokers): every
    sidecar of the fleet is added to it if missing.
    """

    array: str | None
    id_field: str = "NodeId"
    error: bool = False
    names_fleet: bool = False


SITES: dict[int, tuple[Site, ...]] = {
    0: (Site("NodeEndpoints"),),  # Produce v10+ (KIP-951)
    1: (Site("NodeEndpoints"),),  # Fetch v16+ (KIP-951)
    3: (Site("Brokers", names_fleet=True),),  # Metadata
    10: (Site(None, error=True), Site("Coordinators", error=True)),  # FindCoordinator
    60: (Site("Brokers", id_field="BrokerId"),),  # DescribeCluster
    78: (Site("NodeEndpoints"),),  # ShareFetch
    79: (Site("NodeEndpoints"),),  # ShareAcknowledge
}

_COORDINATOR_NOT_AVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)


def _present(spec: MessageSpec, site: Site, version: int) -> bool:
    name = site.array if site.array is not None else site.id_field
    return any(f.name == name and f.present_in(version) for f in spec.fields)


@dataclass(frozen=True, slots=True)
class _Field:
    """A site that is one top-level array field: how to find it without decoding what
    comes before it, and how to read and write it alone."""

    site: Site
    #: Skips the fields before it (:func:`protocol.scan.walk`).
    before: Steps
    #: Skips the field itself.
    steps: Steps
    #: A one-field message holding just it (:func:`field_alone`).
    spec: MessageSpec


@dataclass(frozen=True, slots=True)
class _Plan:
    """What rewriting one API version involves, worked out once."""

    response: MessageSpec
    sites: tuple[Site, ...]
    #: When every site is a top-level tagged field: ``{tag: (site, spec of its value)}``.
    tags: dict[int, tuple[Site, MessageSpec]] | None
    #: When the one site is a top-level array field (Metadata's and DescribeCluster's
    #: ``Brokers``, FindCoordinator's ``Coordinators``, ShareFetch's ``NodeEndpoints``).
    field: _Field | None = None


def field_alone(response: MessageSpec, field: FieldSpec, version: int, flexible: bool) -> MessageSpec:
    """A one-field message holding just ``field``, so that the field's bytes can be read and
    written on their own with the ordinary schema machinery (:func:`read_alone`)."""
    return MessageSpec(f"{response.name}.{field.name}", "data", None, Versions(version, version),
                       Versions(version, None) if flexible else NO_VERSIONS, (field,))


def _value_spec(response: MessageSpec, field: FieldSpec, version: int) -> MessageSpec:
    """The one-field message of a tagged field's value: a tagged value is encoded as the
    field would be outside the tag section, so it is that field, untagged, in a flexible
    message."""
    return field_alone(response, dataclasses.replace(field, tag=None, tagged=NO_VERSIONS), version, True)


def read_alone(spec: MessageSpec, version: int, raw: bytes | memoryview) -> Any:
    """The value of the one field of ``spec`` from its bytes alone (a flexible message's
    own empty tag section, one zero byte, is supplied)."""
    flexible = spec.is_flexible(version)
    return decode(spec, version, bytes(raw) + b"\x00" if flexible else raw)[spec.fields[0].name]


def write_alone(spec: MessageSpec, version: int, value: Any) -> bytes:
    """The bytes of the one field of ``spec`` holding ``value`` (without the message's own
    tag count)."""
    encoded = encode(spec, version, {spec.fields[0].name: value})
    return encoded[:-1] if spec.is_flexible(version) else encoded


def _field_plan(response: MessageSpec, site: Site, version: int) -> _Field | None:
    """The plan for rewriting ``site`` as a splice, or ``None`` when it is not one
    top-level array field at ``version``."""
    flexible = response.is_flexible(version)
    before: list[Step] = []
    for f in response.fields:
        if not f.present_in(version) or f.tagged_in(version):
            continue
        if f.name == site.array:
            if not f.is_array:
                return None
            return _Field(site, merge_fixed(before), plan_field(f, version, flexible),
                          field_alone(response, f, version, flexible))
        before.extend(plan_field(f, version, flexible))
    return None


_PLANS: dict[tuple[int, int], _Plan] = {}


def _plan(api: Api, version: int) -> _Plan:
    key = (api.key, version)
    found = _PLANS.get(key)
    if found is None or found.response is not api.response:
        sites = tuple(s for s in SITES.get(api.key, ()) if _present(api.response, s, version))
        fields = {f.name: f for f in api.response.fields}
        tags: dict[int, tuple[Site, MessageSpec]] | None = {}
        for site in sites:
            f = fields.get(site.array or "")
            if f is None or not f.tagged_in(version) or f.tag is None:
                tags = None
                break
            assert tags is not None
            tags[f.tag] = (site, _value_spec(api.response, f, version))
        spliced = _field_plan(api.response, sites[0], version) if len(sites) == 1 and tags is None else None
        found = _PLANS[key] = _Plan(api.response, sites, tags if sites else None, spliced)
    return found


def rewrites_version(api: Api, version: int) -> bool:
    """True when responses of ``api`` at ``version`` can name brokers."""
    return bool(_plan(api, version).sites)


def reads_to_end(api: Api, version: int) -> bool:
    """True when the rewrite of a response of ``api`` at ``version`` reads it to the end
    of its body, and so reports the bytes after it (a splice does not)."""
    plan = _plan(api, version)
    return bool(plan.sites) and plan.field is None


def rewrites_tags_only(api: Api, version: int) -> bool:
    """True when every place a response of ``api`` at ``version`` can name a broker is a
    top-level tagged field: the bytes before its tag section are never changed."""
    return _plan(api, version).tags is not None


@dataclass
class RewriteResult:
    """A rewritten body, as the parts it is made of, and what happened to its entries.

    A spliced Metadata is the broker's bytes before the brokers, the rewritten brokers and
    the broker's bytes after them (megabytes of topics): a caller that frames the body joins
    the parts once, with its own prefix and header (:meth:`framed`).
    """

    parts: tuple[bytes | memoryview, ...]
    rewritten: int
    unmapped: int

    @property
    def body(self) -> bytes:
        """The rewritten body, joined."""
        return b"".join(self.parts)

    def framed(self, head: bytes) -> bytes:
        """The whole frame: its size prefix, ``head`` (the response header), the body."""
        return b"".join((size_prefix(len(head) + sum(len(part) for part in self.parts)), head, *self.parts))


class Rewriter:
    """Rewrites response bodies for one listener through an address book."""

    def __init__(
        self,
        book: AddressBook,
        listener: str,
        on_unmapped: Callable[[str, int], None] | None = None,
        leniency: Leniency = QUIET,
        fleet: Callable[[str], Mapping[int, HostPort]] | None = None,
    ) -> None:
        self.book = book
        self.listener = listener
        self.on_unmapped = on_unmapped
        #: Reads what a response holds beyond its body, and reports it.
        self.leniency = leniency
        #: The fleet's sidecars a coordinator answer may name, by node id, with their
        #: addresses on a listener (``None``: no embedded coordinator, nothing added).
        self.fleet = fleet

    def rewrite(self, api: Api, version: int, body: bytes | memoryview) -> RewriteResult | None:
        """The rewritten body, or ``None`` when the response names no broker."""
        plan = _plan(api, version)
        sites = plan.sites
        if not sites:
            return None
        if plan.tags is not None:
            return self._rewrite_tags(api, version, body, plan.tags)
        if plan.field is not None:
            return self._rewrite_field(api, version, body, plan.field)
        return self.rewrite_decoded(api, version, body)

    def rewrite_decoded(self, api: Api, version: int, body: bytes | memoryview) -> RewriteResult | None:
        """:meth:`rewrite` by decoding the whole response and encoding it again: for sites
        that are not one array field (FindCoordinator v0-3's top-level entry), and the
        reference the faster paths are held to (tests/proxy/test_rewrite_splice.py)."""
        sites = _plan(api, version).sites
        value, trailing = self.leniency.response(api, version, body)
        rewritten = unmapped = 0
        for site in sites:
            if site.array is None:
                r, u = self._entry(api, value, site)
                rewritten, unmapped = rewritten + r, unmapped + u
                continue
            entries = value.get(site.array)
            if not entries:
                continue
            value[site.array], r, u = self._entries(api, version, entries, site)
            rewritten, unmapped = rewritten + r, unmapped + u
        if not rewritten and not unmapped:
            return None
        return RewriteResult((encode(api.response, version, value), trailing), rewritten, unmapped)

    def _rewrite_field(self, api: Api, version: int, body: bytes | memoryview, field: _Field) -> RewriteResult | None:
        """Rewrite a site that is one top-level array field: find it by skipping what comes
        before it, decode and encode it alone, and splice it between the broker's bytes.

        What follows the field (Metadata's topics and partitions, a ShareFetch's tag
        section, bytes after the body) is neither decoded nor checked: it goes to the
        client as the broker sent it, so the cost is in the brokers named, not in the
        partitions. A client that cannot read that part would not have read it from the
        broker either (docs/protocol.md, "Leniency").
        """
        view = memoryview(body)
        end = len(view)
        start = walker(field.before)(view, 0, end)
        stop = walker(field.steps)(view, start, end)
        entries = read_alone(field.spec, version, view[start:stop])
        if not entries:
            return None
        kept, rewritten, unmapped = self._entries(api, version, entries, field.site)
        if not rewritten and not unmapped:
            return None
        encoded = write_alone(field.spec, version, kept)
        return RewriteResult((view[:start], encoded, view[stop:]), rewritten, unmapped)

    def _rewrite_tags(
        self,
        api: Api,
        version: int,
        body: bytes | memoryview,
        sites: dict[int, tuple[Site, MessageSpec]],
    ) -> RewriteResult | None:
        """Rewrite sites that are top-level tagged fields, decoding nothing else."""
        section, end = top_level_tags_prefix(api.response, version, body)
        trailing = self.leniency.trailing(api.name, RESPONSE, body, end)
        view = memoryview(body)
        found = self._rewritten_entries(api, version, view, section.tags, sites)
        if found is None:
            return None
        entries, _, rewritten, unmapped = found
        head = bytes(view[: section.start])
        return RewriteResult((head, encoded_section(entries), trailing), rewritten, unmapped)

    def rewrite_section(self, api: Api, version: int, section: bytes) -> RewriteResult | None:
        """The top-level tag section of a response whose bytes before it are already on
        their way to the client (cut-through): rewritten in exactly its own length.

        The rewritten entries are written in order and the room left is filled with a tag
        no reader knows (:func:`~protocol.tagged.fitted_section`). Entries that grew past
        the room are dropped instead, as an unmapped broker is: the client then learns
        the leader from Metadata, which names sidecars. Bytes after the section (after the
        body) follow unchanged, reported as for a whole response. ``None`` when nothing
        names a broker. Raises the scanner's errors for a section that cannot be read.
        """
        sites = _plan(api, version).tags
        if not sites:
            return None
        view = memoryview(section)
        spans: dict[int, tuple[int, int]] = {}
        end = skip_tags(view, 0, len(view), spans)
        trailing = self.leniency.trailing(api.name, RESPONSE, view, end)
        found = self._rewritten_entries(api, version, view, spans, sites)
        if found is None:
            return None
        entries, replaced, rewritten, unmapped = found
        body = fitted_section(entries, end)
        if body is None:
            log.info("%s v%d: rewritten %s does not fit the room the broker's took; dropped",
                     api.name, version, ", ".join(sites[tag][0].array or "" for tag in replaced))
            kept = [(tag, value) for tag, value in entries if tag not in replaced]
            body = fitted_section(kept, end)
            assert body is not None, "dropping an entry always leaves room for the filler"
        return RewriteResult((body, trailing), rewritten, unmapped)

    def _rewritten_entries(
        self,
        api: Api,
        version: int,
        view: memoryview,
        tags: dict[int, tuple[int, int]],
        sites: dict[int, tuple[Site, MessageSpec]],
    ) -> tuple[list[tuple[int, bytes | memoryview]], set[int], int, int] | None:
        """The section's entries ``(tag, value)`` in order, site tags rewritten: with the
        tags replaced and the rewritten and unmapped counts (``None`` when none names a
        broker). ``tags`` maps each tag present to its value's span in ``view``."""
        values: dict[int, bytes] = {}
        rewritten = unmapped = 0
        for tag, (site, spec) in sites.items():
            where = tags.get(tag)
            if where is None:
                continue
            raw = view[where[0] : where[1]]
            if len(raw) == 1 and raw[0] == 1:  # a compact array of no entries: names no broker
                continue
            entries = read_alone(spec, version, raw)
            if not entries:
                continue
            kept, r, u = self._entries(api, version, entries, site)
            rewritten, unmapped = rewritten + r, unmapped + u
            values[tag] = write_alone(spec, version, kept)
        if not rewritten and not unmapped:
            return None
        entries = [(tag, values.get(tag, view[start:end])) for tag, (start, end) in tags.items()]
        return entries, set(values), rewritten, unmapped

    def _entries(self, api: Api, version: int, entries: Any, site: Site) -> tuple[c.ListContainer, int, int]:
        """Rewrite a list of broker entries: ``(kept entries, rewritten, unmapped)``.

        An unmapped entry is dropped, except where it carries its own error code
        (coordinators), which :meth:`_entry` sets instead. A list that names the fleet
        gets the sidecars it lacks at its end, each counted as rewritten.
        """
        kept = c.ListContainer()
        rewritten = unmapped = 0
        for entry in entries:
            r, u = self._entry(api, entry, site)
            rewritten, unmapped = rewritten + r, unmapped + u
            if u and not site.error:
                continue
            kept.append(entry)
        if site.names_fleet and self.fleet is not None:
            listed = {entry[site.id_field] for entry in kept}
            for node_id, address in sorted(self.fleet(self.listener).items()):
                if node_id not in listed:
                    kept.append(_broker_entry(api, version, site, node_id, address))
                    rewritten += 1
        return kept, rewritten, unmapped

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


def _broker_entry(api: Api, version: int, site: Site, node_id: int, address: HostPort) -> c.Container:
    """A broker entry of ``site``'s list at ``version`` naming ``node_id`` at ``address``,
    its other fields (Metadata's ``Rack``) at their defaults."""
    assert site.array is not None
    entry = struct_defaults(api.response.element(site.array).fields, version)
    entry[site.id_field] = node_id
    entry["Host"] = address.host
    entry["Port"] = address.port
    return entry
