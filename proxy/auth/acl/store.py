"""ACLs in ZooKeeper, in Kafka's ZooKeeper-mode format, watched through Kafka's change notifications.

Where Kafka's ``AclAuthorizer`` keeps them (``ZkAclStore``, ``ZkAclChangeStore`` in
``kafka/zk/ZkData.scala``), so tools that read those paths keep working:

* a LITERAL pattern is the znode ``/kafka-acl/<ResourceType>/<name>``, a PREFIXED one
  ``/kafka-acl-extended/prefixed/<ResourceType>/<name>`` (``Topic``, ``Group``, ``Cluster``,
  ``TransactionalId``, ``DelegationToken``, ``User``);
* its data is ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
  "operation":"Read","host":"*"}]}``; a pattern whose last ACL goes is deleted;
* every change is announced by a sequential znode: ``/kafka-acl-changes/acl_changes_<seq>``
  holding ``TOPIC:<name>`` for a literal pattern, ``/kafka-acl-extended-changes/acl_changes_<seq>``
  holding ``{"version":1,"resourceType":"TOPIC","name":...,"patternType":"PREFIXED"}``;
  announcements older than 15 minutes are purged, as Kafka's brokers purge them.

Theory of operation. :meth:`AclStore.start` notes the newest announcement, loads every
pattern, then watches both announcement paths: each new announcement re-reads the one
pattern it names (a ZooKeeper watch, so every sidecar sees a change well within a second).
Writes are compare-and-set on the pattern znode's version, retried on a concurrent change,
then announced. ``on_change`` receives a fresh :class:`AclIndex` after every change, on
kazoo's thread: hand it over without blocking. The kazoo client is injected (a kazoo
recipe's habit); every method but the callbacks blocks, so call them from a worker thread.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from proxy.auth.acl.evaluate import AclIndex
from proxy.auth.acl.model import (
    RESOURCE_TYPES,
    AclBinding,
    AclEntry,
    BindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    parse_principal,
)

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl"
EXTENDED_ROOT = "/kafka-acl-extended"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
#: Announcements older than this are deleted (Kafka's ``changeExpirationMs``, 15 minutes).
CHANGE_EXPIRY_S = 15 * 60
#: Compare-and-set attempts before a write gives up (Kafka's ``maxUpdateRetries``).
MAX_RETRIES = 10
#: Seconds of random pause after a lost compare-and-set, times the attempt: without it a
#: dozen writers of one pattern race in lockstep and the last gives up after MAX_RETRIES.
RETRY_BACKOFF = 0.01


class AclStoreError(Exception):
    """A write that could not be made (ZooKeeper kept changing under it)."""


def root_of(pattern_type: PatternType) -> str:
    """The znode under which patterns of a type live."""
    if pattern_type == PatternType.LITERAL:
        return LITERAL_ROOT
    return f"{EXTENDED_ROOT}/{pattern_type.name.lower()}"


def path_of(pattern: ResourcePattern) -> str:
    """The znode of one pattern (``ResourceZNode.path``)."""
    return f"{root_of(pattern.pattern_type)}/{pattern.resource_type.pascal}/{pattern.name}"


def encode_entries(entries: Iterable[AclEntry]) -> bytes:
    """Kafka's ACL JSON (``AclEntry.toJsonCompatibleMap``)."""
    acls = [{"principal": e.principal, "permissionType": e.permission.pascal, "operation": e.operation.pascal,
             "host": e.host} for e in sorted(set(entries))]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_entries(raw: bytes | None) -> set[AclEntry]:
    """The entries of a pattern znode; unreadable entries are skipped (and logged)."""
    if not raw:
        return set()
    try:
        body = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        log.warning("ignoring an unreadable ACL znode: %r", raw[:200])
        return set()
    if not isinstance(body, dict) or body.get("version") != 1 or not isinstance(body.get("acls"), list):
        log.warning("ignoring an ACL znode of an unknown format: %r", raw[:200])
        return set()
    out: set[AclEntry] = set()
    for item in body["acls"]:
        try:
            principal = parse_principal(str(item["principal"]))
            entry = AclEntry(principal or "", str(item["host"]), Operation.parse(str(item["operation"])),
                             Permission.parse(str(item["permissionType"])))
        except (KeyError, TypeError):
            log.warning("ignoring an unreadable ACL entry: %r", item)
            continue
        if principal is None or entry.operation in (Operation.UNKNOWN, Operation.ANY) \
                or entry.permission in (Permission.UNKNOWN, Permission.ANY):
            log.warning("ignoring an ACL entry with unknown elements: %r", item)
            continue
        out.add(entry)
    return out


def encode_change(pattern: ResourcePattern) -> bytes:
    """The body of a change announcement (``LiteralAclChangeStore`` / ``ExtendedAclChangeStore``)."""
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return json.dumps({"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
                       "patternType": pattern.pattern_type.name}, separators=(",", ":")).encode()


def decode_change(raw: bytes | None, literal: bool) -> ResourcePattern | None:
    """The pattern a change announcement names, or ``None`` when unreadable."""
    if raw is None:
        return None
    try:
        text = raw.decode()
        if literal:
            kind, sep, name = text.partition(":")
            rtype, ptype = ResourceType.parse(kind), PatternType.LITERAL
            if not sep:
                return None
        else:
            body = json.loads(text)
            rtype = ResourceType.parse(str(body["resourceType"]))
            ptype = PatternType.parse(str(body["patternType"]))
            name = str(body["name"])
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    if rtype not in RESOURCE_TYPES or ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        return None
    return ResourcePattern(rtype, name, ptype)


def _sequence(child: str) -> int:
    try:
        return int(child[len(CHANGE_PREFIX):])
    except ValueError:
        return -1


class AclStore:
    """The ACLs in ZooKeeper: loaded, watched, written (see the module docstring)."""

    def __init__(self, client: KazooClient, on_change: Callable[[AclIndex], None] | None = None) -> None:
        self.client = client
        self.on_change = on_change or (lambda _index: None)
        self._patterns: dict[ResourcePattern, frozenset[AclEntry]] = {}
        self._seen: dict[str, int] = {LITERAL_CHANGES: -1, EXTENDED_CHANGES: -1}
        self._lock = threading.RLock()

    # -- reading ------------------------------------------------------------------------

    def start(self) -> None:
        """Create Kafka's paths, load every pattern, watch the announcements (blocking)."""
        for path in (LITERAL_ROOT, root_of(PatternType.PREFIXED), LITERAL_CHANGES, EXTENDED_CHANGES):
            self.client.ensure_path(path)
        for changes in (LITERAL_CHANGES, EXTENDED_CHANGES):
            children = self.client.get_children(changes)
            self._seen[changes] = max((_sequence(c) for c in children), default=-1)
        with self._lock:
            self._patterns = {p: frozenset(e) for p, e in self.read_all().items()}
        self._publish()
        for changes in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self.client.ChildrenWatch(changes, self._announced(changes))

    def read_all(self) -> dict[ResourcePattern, set[AclEntry]]:
        """Every pattern with its entries, read from ZooKeeper now (``AclAuthorizer.loadAllAcls``)."""
        found: dict[ResourcePattern, set[AclEntry]] = {}
        for ptype in (PatternType.LITERAL, PatternType.PREFIXED):
            root = root_of(ptype)
            try:
                kinds = self.client.get_children(root)
            except NoNodeError:
                continue
            for kind in kinds:
                rtype = ResourceType.parse(kind)
                if rtype not in RESOURCE_TYPES:
                    log.warning("ignoring unknown ACL resource type %r under %s", kind, root)
                    continue
                try:
                    names = self.client.get_children(f"{root}/{kind}")
                except NoNodeError:
                    continue
                for name in names:
                    entries = self._read(ResourcePattern(rtype, name, ptype))[0]
                    if entries:
                        found[ResourcePattern(rtype, name, ptype)] = entries
        return found

    def index(self) -> AclIndex:
        """The ACLs as currently known (watch-fed)."""
        with self._lock:
            return AclIndex(AclBinding(p, e) for p, entries in self._patterns.items() for e in entries)

    def bindings(self) -> list[AclBinding]:
        """Every ACL as currently known."""
        return self.index().bindings()

    def _read(self, pattern: ResourcePattern) -> tuple[set[AclEntry], int]:
        """One pattern's entries and znode version (-1: no znode)."""
        try:
            raw, stat = self.client.get(path_of(pattern))
        except NoNodeError:
            return set(), -1
        return decode_entries(raw), stat.version

    def _announced(self, changes: str) -> Callable[[list[str]], None]:
        literal = changes == LITERAL_CHANGES

        def on_children(children: list[str]) -> None:
            fresh = sorted((c for c in children if _sequence(c) > self._seen[changes]), key=_sequence)
            if not fresh:
                return
            for child in fresh:
                try:
                    raw, _stat = self.client.get(f"{changes}/{child}")
                except NoNodeError:
                    continue
                pattern = decode_change(raw, literal)
                if pattern is None:
                    log.warning("ignoring an unreadable ACL change announcement %s/%s", changes, child)
                    continue
                entries, _version = self._read(pattern)
                self._install(pattern, entries)
            with self._lock:
                self._seen[changes] = max(self._seen[changes], _sequence(fresh[-1]))
            self._publish()
            self._purge(changes, children)

        return on_children

    def _purge(self, changes: str, children: list[str]) -> None:
        """Delete announcements older than :data:`CHANGE_EXPIRY_S` (as Kafka's brokers do)."""
        cutoff_ms = (time.time() - CHANGE_EXPIRY_S) * 1000
        for child in children:
            try:
                stat = self.client.exists(f"{changes}/{child}")
                if stat is not None and stat.ctime < cutoff_ms:
                    self.client.delete(f"{changes}/{child}")
            except (NoNodeError, NotEmptyError):
                continue
            except Exception as exc:  # purging is housekeeping: never fail a change over it
                log.debug("could not purge %s/%s: %s", changes, child, exc)

    def _install(self, pattern: ResourcePattern, entries: Iterable[AclEntry]) -> None:
        with self._lock:
            frozen = frozenset(entries)
            if frozen:
                self._patterns[pattern] = frozen
            else:
                self._patterns.pop(pattern, None)

    def _publish(self) -> None:
        self.on_change(self.index())

    # -- writing ------------------------------------------------------------------------

    def _update(self, pattern: ResourcePattern, change: Callable[[set[AclEntry]], set[AclEntry]]) -> bool:
        """Compare-and-set one pattern's entries; True when ZooKeeper changed (then announced)."""
        path = path_of(pattern)
        for attempt in range(MAX_RETRIES):
            if attempt:  # lost a race: step aside a random while, as Kafka's AclAuthorizer does
                time.sleep(random.uniform(0, RETRY_BACKOFF * attempt))
            current, version = self._read(pattern)
            wanted = change(set(current))
            if wanted == current:
                self._install(pattern, current)
                return False
            try:
                if not wanted:
                    self.client.delete(path, version=version)
                elif version < 0:
                    self.client.create(path, encode_entries(wanted), makepath=True)
                else:
                    self.client.set(path, encode_entries(wanted), version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # somebody changed it meanwhile: read again
            self._install(pattern, wanted)
            changes = LITERAL_CHANGES if pattern.pattern_type == PatternType.LITERAL else EXTENDED_CHANGES
            self.client.create(f"{changes}/{CHANGE_PREFIX}", encode_change(pattern), sequence=True, makepath=True)
            return True
        raise AclStoreError(f"{path}: gave up after {MAX_RETRIES} concurrent modifications")

    def create(self, bindings: Sequence[AclBinding]) -> list[Exception | None]:
        """Add ACLs (already validated), one compare-and-set per pattern; per binding, the failure."""
        results: list[Exception | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for i, binding in enumerate(bindings):
            by_pattern.setdefault(binding.pattern, []).append(i)
        for pattern, indexes in by_pattern.items():
            added = {bindings[i].entry for i in indexes}
            try:
                self._update(pattern, lambda current, more=added: current | more)  # type: ignore[misc]
            except Exception as exc:  # ZooKeeper failed: these bindings fail, the others go on
                for i in indexes:
                    results[i] = exc
        self._publish()
        return results

    def delete(self, filters: Sequence[BindingFilter]) -> list[list[tuple[AclBinding, Exception | None]]]:
        """Remove the ACLs the filters match; per filter, the bindings it removed (and failures).

        As ``AclAuthorizer.deleteAcls``: the candidates are the known patterns and the
        patterns a filter names exactly; each removed ACL counts for the first filter that
        matches it.
        """
        with self._lock:
            candidates: set[ResourcePattern] = set(self._patterns)
        for f in filters:
            p = f.pattern
            if p.resource_type in RESOURCE_TYPES and p.name is not None:
                if p.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
                    candidates.add(ResourcePattern(p.resource_type, p.name, p.pattern_type))
                elif p.pattern_type == PatternType.ANY:
                    candidates.add(ResourcePattern(p.resource_type, p.name, PatternType.LITERAL))
                    candidates.add(ResourcePattern(p.resource_type, p.name, PatternType.PREFIXED))
        results: list[list[tuple[AclBinding, Exception | None]]] = [[] for _ in filters]
        for pattern in sorted(candidates):
            matching = [(i, f) for i, f in enumerate(filters) if f.pattern.matches(pattern)]
            if not matching:
                continue
            removed: dict[AclEntry, int] = {}

            def change(current: set[AclEntry], matching: Any = matching, removed: Any = removed) -> set[AclEntry]:
                removed.clear()
                for entry in current:
                    for i, f in matching:
                        if f.entry.matches(entry):
                            removed[entry] = i
                            break
                return current - set(removed)

            failure: Exception | None = None
            try:
                self._update(pattern, change)
            except Exception as exc:
                failure = exc
            for entry, i in sorted(removed.items()):
                results[i].append((AclBinding(pattern, entry), failure))
        self._publish()
        return results
