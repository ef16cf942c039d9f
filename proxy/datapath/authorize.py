"""Kafka ACLs on the data path (``sidecar.authorizer=acls``): the thin shell around
:mod:`proxy.auth.acl.enforce`.

One :class:`Authorization` per sidecar. For each request a connection asks
:meth:`Authorization.check` before it forwards or answers it; the answer is an action of
:mod:`proxy.auth.acl.enforce` (pass, answer locally, forward a narrowed request and patch
the answer, close). In ``shadow`` mode every action is :data:`~proxy.auth.acl.enforce.PASS`:
what enforcement would have refused is counted and logged, nothing is.

Topic IDs (Produce v13, Fetch v13+) are resolved through names learned from every Metadata
answer that passes (:meth:`learn`); a request naming an ID nobody has told us about gets
:data:`REFRESH`: the connection asks the broker once (:meth:`refresh`) and checks again, and
an ID still unknown is refused, as Kafka refuses what it cannot authorize.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter

from protocol.apis import METADATA, ApiRegistry
from protocol.headers import RequestHeader
from protocol.leniency import QUIET, Leniency
from protocol.schema import encode
from proxy.auth.acl.enforce import PASS, Action, Enforcer, Forward
from proxy.auth.acl.evaluate import RequestFacts
from proxy.auth.acl.requests import checks_for
from proxy.datapath.listing import ListingSplice
from proxy.datapath.rewrite import reads_to_end
from proxy.datapath.slices import Slicer
from proxy.local.api import Context
from proxy.local.ports import AclDirectory

log = logging.getLogger(__name__)

#: What :meth:`Authorization.check` returns when the request names unknown topic IDs.
REFRESH: Final = "refresh"
#: API keys whose local handlers apply Kafka's own checks with the same authorizer (the
#: ACL admin APIs: per creation, per filter) or a stricter one (``super.users`` for the SCRAM,
#: quota and feature admin APIs): when the sidecar answers them, it does not check twice.
SELF_AUTHORIZED: Final = frozenset({29, 30, 31, 48, 49, 50, 51, 57})
#: Seconds between two log lines about the same (principal, operation, resource).
LOG_EVERY = 60.0
#: Distinct refusals remembered for :data:`LOG_EVERY` (then the memory starts over).
LOG_MEMORY = 10_000
#: A large answer's listing is read this many elements at a time, with a scheduler pass
#: once a slice of work has gone by (:mod:`proxy.datapath.slices`).
SLICE_ELEMENTS = 64

Patch = Callable[[dict[str, Any]], dict[str, Any]]
#: Refusals of one request for the audit: ``(resource type, name, operation, mode)`` each.
Denials = tuple[tuple[str, str, str, str], ...]


class Authorization:
    """ACL enforcement for every connection of one sidecar."""

    def __init__(self, acls: AclDirectory, registry: ApiRegistry, metrics: CollectorRegistry, *,
                 shadow: bool, leniency: Leniency = QUIET) -> None:
        self.acls = acls
        self.registry = registry
        #: Reads requests and responses by the sidecar's one rule (docs/protocol.md, "Leniency").
        self.leniency = leniency
        self.shadow = shadow
        self.mode = "shadow" if shadow else "enforce"
        self._enforcers: dict[tuple[int, int], Enforcer] = {}
        self._by_id: dict[tuple[int, int], bool] = {}
        self._listings: dict[int, ListingSplice] = {}
        self._logged: dict[tuple[str, str, str, str], float] = {}
        self.denials = Counter(
            "ksidecar_authorization_denials", "Resources refused by the ACLs (in shadow mode: that would be), "
            "by operation and resource type", ["operation", "resource_type", "mode"], registry=metrics)

    def check(self, header: RequestHeader, raw: memoryview, context: Context, expects_response: bool,
              *, local: bool = False, refreshed: bool = False) -> tuple[Action | str, Denials]:
        """The action for one request (``raw``: its body after the header; ``local``: the
        sidecar answers it), and what was refused (in shadow mode: would have been)."""
        authorizer = self.acls.authorizer
        if context.principal in authorizer.super_users or (local and header.api_key in SELF_AUTHORIZED):
            return PASS, ()
        key, version = header.api_key, header.api_version
        enforcer = self._enforcers.get((key, version))
        if enforcer is None:
            api = self.registry.get(key)
            if api is None:  # not parsed here: nothing to authorize by (the router refuses it)
                return PASS, ()
            enforcer = self._enforcers[(key, version)] = Enforcer(api, version)
        facts = RequestFacts(principal=context.principal, host=context.peer[0], api_key=key, api_version=version,
                             topic_names=self.acls.topic_names)
        # A request the sidecar answers is reported by the local API that decodes it again.
        outcome = enforcer.enforce(authorizer, facts, raw, expects_response=expects_response,
                                   leniency=QUIET if local else self.leniency)
        if outcome.denials and not refreshed and self._names_ids(key, version) and any(
                _is_uuid(d.name) for d in outcome.denials):
            return REFRESH, ()
        denials: Denials = ()
        for denial in outcome.denials:
            operation, resource_type = denial.operation.pascal, denial.resource_type.pascal
            self.denials.labels(operation, resource_type, self.mode).inc()
            self._log(context, key, version, operation, resource_type, denial.name)
            denials += ((resource_type, denial.name, operation, self.mode),)
        action = PASS if self.shadow else outcome.action
        if key == METADATA:
            action = self._learning(action)
        return action, denials

    async def refresh(self) -> None:
        """Learn topic IDs from the broker (rate-limited by the ACL state)."""
        await self.acls.refresh_topics()

    def patched(self, patch: Patch, api_key: int, version: int, body: bytes | memoryview) -> bytes:
        """A response body (after its header) with ``patch`` applied, re-encoded; bytes
        after the body follow unchanged (reported unless the rewriter read to them first).

        A Metadata answer is patched in its topics alone, as byte slices
        (:mod:`proxy.datapath.listing`): its cost is in the topics, not the partitions.
        """
        if api_key == METADATA:
            return self._listing(version).apply(patch, body, self.leniency)
        api = self.registry.api(api_key)
        leniency = QUIET if reads_to_end(api, version) else self.leniency
        value, trailing = leniency.response(api, version, body)
        return encode(api.response, version, patch(dict(value))) + trailing

    async def patched_in_slices(self, patch: Patch, api_key: int, version: int, body: bytes | memoryview) -> bytes:
        """:meth:`patched`, for a large answer: a Metadata answer's topics are read in
        slices with scheduler passes between them (:mod:`proxy.datapath.slices`), so that a
        10,000-topic answer does not hold every other connection of the sidecar."""
        if api_key != METADATA:
            return self.patched(patch, api_key, version, body)
        read = self._listing(version).begin(body)
        slicer = Slicer()
        while not read.step(SLICE_ELEMENTS):
            await slicer.turn()
        return read.finish(patch, self.leniency)

    def _listing(self, version: int) -> ListingSplice:
        splice = self._listings.get(version)
        if splice is None:
            splice = self._listings[version] = ListingSplice(self.registry.api(METADATA), version, "Topics")
        return splice

    def _learning(self, action: Action) -> Action:
        """Metadata answers teach topic IDs (whatever else is done with them)."""
        learn = self.acls.learn_topics
        inner = action.patch if isinstance(action, Forward) else None

        def patch(answer: dict[str, Any]) -> dict[str, Any]:
            learn((topic_id, topic["Name"]) for topic in answer.get("Topics") or ()
                  if topic.get("Name") and isinstance(topic_id := topic.get("TopicId"), uuid.UUID))
            return inner(answer) if inner is not None else answer

        if isinstance(action, Forward):
            return Forward(action.body, patch)
        if action is PASS:
            return Forward(None, patch)
        return action

    def _names_ids(self, key: int, version: int) -> bool:
        found = self._by_id.get((key, version))
        if found is None:
            found = self._by_id[(key, version)] = any(c.by_id for c in checks_for(key, version))
        return found

    def _log(self, context: Context, key: int, version: int, operation: str, resource_type: str, name: str) -> None:
        now = time.monotonic()
        mark = (context.principal, operation, resource_type, name)
        last = self._logged.get(mark)
        if last is not None and now - last < LOG_EVERY:
            return
        if len(self._logged) >= LOG_MEMORY:
            self._logged.clear()
        self._logged[mark] = now
        api = self.registry.get(key)
        log.warning("%s %s from %s: %s v%d needs %s on %s %r, which the ACLs do not allow%s",
                    "would refuse" if self.shadow else "refused", context.principal, context.peer[0],
                    api.name if api is not None else key, version, operation, resource_type, name,
                    " (shadow mode: served anyway)" if self.shadow else "")


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
