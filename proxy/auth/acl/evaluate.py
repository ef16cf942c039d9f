"""Kafka's authorization decision, sans-IO: one ACL question, and one whole request.

Theory of operation. :class:`AclIndex` is an immutable snapshot of every ACL, indexed the
way the question is asked: by (resource type, literal name), and by resource type then
prefix. :class:`Authorizer` answers with Kafka's rules (``AclAuthorizer.authorizeAction``;
``StandardAuthorizer`` agrees):

1. a principal in ``super.users`` is allowed everything;
2. the ACLs that *apply to the resource* are those of the LITERAL pattern with its name,
   the LITERAL wildcard ``*`` and every PREFIXED pattern its name starts with, whoever they
   name. If there are none, ``allow.everyone.if.no.acl.found`` decides (default false);
3. of those, the ACLs that *match the request* name the principal or ``User:*``, the
   client's host or ``*``;
4. a matching DENY of the operation or of ALL refuses, whatever allows (deny wins);
5. otherwise a matching ALLOW of the operation, of ALL, or of an operation implying it
   (Read/Write/Delete/Alter imply Describe, AlterConfigs implies DescribeConfigs) allows;
6. otherwise refused.

:meth:`Authorizer.decide` evaluates one request against Kafka's request-to-ACL table
(:mod:`proxy.auth.acl.requests`) and returns a :class:`Verdict`: refuse the whole request
with an error code, or the names to refuse per resource, or nothing to do. Answers are
cached per (principal, host, operation, resource) for the snapshot's life (bounded); a new
snapshot means a new :class:`Authorizer`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.auth.acl.model import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclEntry,
    BindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    denying,
    granting,
)
from proxy.auth.acl.requests import (
    CLUSTER_AUTHORIZATION_FAILED,
    OPEN,
    TABLE,
    Check,
    OnDeny,
    Path,
    Phase,
    When,
    checks_for,
    values_at,
)

#: Cached answers per authorizer before the cache starts over.
CACHE_LIMIT = 100_000


class AclIndex:
    """An immutable set of ACLs, indexed for :class:`Authorizer`."""

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        by_pattern: dict[ResourcePattern, set[AclEntry]] = {}
        for binding in bindings:
            by_pattern.setdefault(binding.pattern, set()).add(binding.entry)
        self._by_pattern: dict[ResourcePattern, tuple[AclEntry, ...]] = {
            pattern: tuple(sorted(entries)) for pattern, entries in by_pattern.items()
        }
        self._literal: dict[tuple[ResourceType, str], tuple[AclEntry, ...]] = {}
        self._prefixed: dict[ResourceType, dict[str, tuple[AclEntry, ...]]] = {}
        for pattern, entries in self._by_pattern.items():
            if pattern.pattern_type == PatternType.PREFIXED:
                self._prefixed.setdefault(pattern.resource_type, {})[pattern.name] = entries
            else:
                self._literal[(pattern.resource_type, pattern.name)] = entries
        #: Per resource type, the distinct prefix lengths (longest first): a lookup tries
        #: only these lengths of the name, not every one.
        self._lengths: dict[ResourceType, tuple[int, ...]] = {
            rtype: tuple(sorted({len(p) for p in prefixes}, reverse=True))
            for rtype, prefixes in self._prefixed.items()
        }

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._by_pattern.values())

    def patterns(self) -> Mapping[ResourcePattern, tuple[AclEntry, ...]]:
        """Every pattern with its entries."""
        return self._by_pattern

    def bindings(self) -> list[AclBinding]:
        """Every ACL, in a stable order."""
        return [AclBinding(p, e) for p in sorted(self._by_pattern) for e in self._by_pattern[p]]

    def matching(self, filter_: BindingFilter) -> list[AclBinding]:
        """The ACLs ``filter_`` matches (DescribeAcls, DeleteAcls)."""
        return [b for b in self.bindings() if filter_.matches(b)]

    def applying(self, resource_type: ResourceType, name: str) -> list[AclEntry]:
        """The entries of every pattern that applies to the resource (rule 2)."""
        found: list[AclEntry] = []
        found.extend(self._literal.get((resource_type, WILDCARD_RESOURCE), ()))
        if name != WILDCARD_RESOURCE:
            found.extend(self._literal.get((resource_type, name), ()))
        prefixes = self._prefixed.get(resource_type)
        if prefixes:
            for length in self._lengths[resource_type]:
                if length <= len(name):
                    found.extend(prefixes.get(name[:length], ()))
        return found

    def entries_of_type(self, resource_type: ResourceType) -> list[tuple[ResourcePattern, AclEntry]]:
        """Every (pattern, entry) of one resource type."""
        return [(p, e) for p, entries in self._by_pattern.items() if p.resource_type == resource_type
                for e in entries]


@dataclass(frozen=True, kw_only=True, slots=True)
class Denial:
    """One refused (resource, operation): what the audit and the metrics record."""

    resource_type: ResourceType
    name: str
    operation: Operation
    error: int


@dataclass(frozen=True, kw_only=True, slots=True)
class DeniedPart:
    """Names at one request path that a check refused, and what Kafka does with them."""

    path: Path | None
    on_deny: OnDeny
    error: int
    resource_type: ResourceType
    operation: Operation
    #: The values found at ``path`` that are refused (topic IDs on ``by_id`` paths).
    values: frozenset[Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """What to do with one request (see :meth:`Authorizer.decide`)."""

    #: Answer the whole request with this error code and forward nothing.
    refuse: int | None = None
    #: Parts of the request to refuse (per resource), filter out, or change (auto-creation).
    parts: tuple[DeniedPart, ...] = ()
    #: Checks to apply to names in the broker's response (:meth:`Authorizer.permitted`).
    response_filters: tuple[Check, ...] = ()
    #: Every refusal, for the audit and the metrics.
    denials: tuple[Denial, ...] = ()

    @property
    def allowed(self) -> bool:
        """True when the request passes as it is (response filters may still apply)."""
        return self.refuse is None and not self.parts


#: The verdict of a request nobody objects to.
ALLOWED = Verdict()


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestFacts:
    """One request, as :meth:`Authorizer.decide` needs it.

    Either ``body`` (the decoded request: mappings and lists, or a ``StructView``) or
    ``picked`` (``{path: values}`` for every path of ``requests.paths_for``; aligned lists
    for sibling fields of one array) is given. ``topic_names`` resolves topic IDs on
    ``by_id`` paths; an ID it does not know is refused (fail closed).
    """

    principal: str
    host: str
    api_key: int
    api_version: int
    body: Any = None
    picked: Mapping[Path, Sequence[Any]] | None = None
    topic_names: Mapping[Any, str] = field(default_factory=dict)


class Authorizer:
    """Kafka's authorization over one :class:`AclIndex` snapshot (see the module docstring)."""

    def __init__(
        self,
        acls: AclIndex,
        *,
        super_users: frozenset[str] = frozenset(),
        allow_if_no_acl: bool = False,
        open_keys: frozenset[int] = frozenset(),
    ) -> None:
        self.acls = acls
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        #: API keys served to anyone: Kafka's :data:`~proxy.auth.acl.requests.OPEN` and ours.
        self.open_keys = OPEN | open_keys
        self._cache: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}

    # -- one question -------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        """May ``principal`` from ``host`` perform ``operation`` on the resource?"""
        if principal in self.super_users:
            return True
        key = (principal, host, operation, resource_type, name)
        answer = self._cache.get(key)
        if answer is None:
            answer = self._evaluate(principal, host, operation, resource_type, name)
            if len(self._cache) >= CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = answer
        return answer

    def _evaluate(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        entries = self.acls.applying(resource_type, name)
        if not entries:
            return self.allow_if_no_acl
        deny_ops, allow_ops = denying(operation), granting(operation)
        allowed = False
        for entry in entries:
            if entry.principal not in (principal, WILDCARD_PRINCIPAL) or entry.host not in (host, WILDCARD_HOST):
                continue
            if entry.permission == Permission.DENY:
                if entry.operation in deny_ops:
                    return False
            elif entry.operation in allow_ops:
                allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: Operation, resource_type: ResourceType) -> bool:
        """May the principal perform ``operation`` on *some* resource of the type?

        Kafka's ``authorizeByResourceType`` (InitProducerId without a transactional id):
        an ALLOW of the operation (or ALL; no implication) on some literal or prefixed
        pattern that no DENY of the principal dominates (a literal DENY of ``*``, the same
        literal name, or a DENY prefix of the name).
        """
        if principal in self.super_users:
            return True
        deny_literals: set[str] = set()
        deny_prefixes: set[str] = set()
        allow_literals: set[str] = set()
        allow_prefixes: set[str] = set()
        ops = denying(operation)  # the operation itself and ALL, for both permissions here
        for pattern, entry in self.acls.entries_of_type(resource_type):
            if (entry.principal not in (principal, WILDCARD_PRINCIPAL) or entry.host not in (host, WILDCARD_HOST)
                    or entry.operation not in ops):
                continue
            prefixed = pattern.pattern_type == PatternType.PREFIXED
            if entry.permission == Permission.DENY:
                (deny_prefixes if prefixed else deny_literals).add(pattern.name)
            else:
                (allow_prefixes if prefixed else allow_literals).add(pattern.name)
        if WILDCARD_RESOURCE in deny_literals:
            return False
        if self.allow_if_no_acl:
            return True

        def dominated(name: str) -> bool:
            return any(name[:i] in deny_prefixes for i in range(len(name) + 1))

        if any(not dominated(prefix) for prefix in allow_prefixes):
            return True
        return any(name == WILDCARD_RESOURCE or (name not in deny_literals and not dominated(name))
                   for name in allow_literals)

    def permitted(self, principal: str, host: str, check: Check, values: Iterable[Any],
                  topic_names: Mapping[Any, str] | None = None) -> list[Any]:
        """The values the check allows (a response filter); IDs of ``by_id`` checks resolve
        through ``topic_names`` and an unknown one is left out."""
        out = []
        for value in values:
            name = (topic_names or {}).get(value) if check.by_id else value
            if name is not None and self.authorize(principal, host, check.operation, check.resource_type, str(name)):
                out.append(value)
        return out

    # -- one request --------------------------------------------------------------------

    def decide(self, facts: RequestFacts) -> Verdict:
        """What to do with one request: Kafka's checks for its API key and version, in order.

        A REFUSE check that fails ends the evaluation (Kafka answers the whole request
        with that error and looks no further); per-resource checks collect the refused
        names; checks with ``instead`` fall back to it when they fail.
        """
        principal = facts.principal
        if principal in self.super_users:
            return ALLOWED
        key = facts.api_key
        if key not in TABLE:
            if key in self.open_keys:
                return ALLOWED
            # Not in Kafka's table as we know it: fail closed.
            return Verdict(refuse=CLUSTER_AUTHORIZATION_FAILED, denials=(
                Denial(resource_type=ResourceType.CLUSTER, name=CLUSTER_NAME, operation=Operation.ALL,
                       error=CLUSTER_AUTHORIZATION_FAILED),))
        parts: list[DeniedPart] = []
        filters: list[Check] = []
        denials: list[Denial] = []
        for check in checks_for(key, facts.api_version):
            if check.phase is Phase.RESPONSE:
                filters.append(check)
                continue
            if not self._holds(check.when, facts):
                continue
            refused = self._apply(check, facts, parts, filters, denials)
            if refused is not None:
                return Verdict(refuse=refused, denials=tuple(denials))
        if not parts and not filters and not denials:
            return ALLOWED
        return Verdict(parts=tuple(parts), response_filters=tuple(filters), denials=tuple(denials))

    def _apply(self, check: Check, facts: RequestFacts, parts: list[DeniedPart], filters: list[Check],
               denials: list[Denial]) -> int | None:
        """Evaluate one check (and its fallbacks); the error code when the whole request is refused."""
        principal, host = facts.principal, facts.host
        if check.phase is Phase.RESPONSE:
            filters.append(check)
            return None
        if check.any_resource:
            if self.authorize_any(principal, host, check.operation, check.resource_type):
                return None
            return self._fail(check, facts, None, parts, filters, denials)
        if check.resource_type == ResourceType.CLUSTER:
            if self.authorize(principal, host, check.operation, ResourceType.CLUSTER, CLUSTER_NAME):
                return None
            applies_to = None if check.names is None else frozenset(self._names(check, facts))
            if applies_to is not None and not applies_to:
                return None
            return self._fail(check, facts, applies_to, parts, filters, denials)
        values = self._names(check, facts)
        refused: set[Any] = set()
        for value in values:
            name = facts.topic_names.get(value) if check.by_id else value
            if name is None or not self.authorize(principal, host, check.operation, check.resource_type, str(name)):
                refused.add(value)
        if not refused:
            return None
        return self._fail(check, facts, frozenset(refused), parts, filters, denials)

    def _fail(self, check: Check, facts: RequestFacts, values: frozenset[Any] | None,
              parts: list[DeniedPart], filters: list[Check], denials: list[Denial]) -> int | None:
        if check.instead is not None:
            return self._apply(check.instead, facts, parts, filters, denials)
        names: Iterable[Any] = [CLUSTER_NAME] if values is None or check.resource_type == ResourceType.CLUSTER \
            else values
        for value in names:
            shown = facts.topic_names.get(value, str(value)) if check.by_id else str(value)
            denials.append(Denial(resource_type=check.resource_type, name=shown, operation=check.operation,
                                  error=check.error))
        if check.on_deny is OnDeny.REFUSE:
            return check.error
        parts.append(DeniedPart(path=check.names, on_deny=check.on_deny, error=check.error,
                                resource_type=check.resource_type, operation=check.operation,
                                values=values if values is not None else frozenset()))
        return None

    # -- reading the request ------------------------------------------------------------

    @staticmethod
    def _values(facts: RequestFacts, path: Path) -> list[Any]:
        if facts.picked is not None:
            return list(facts.picked.get(path, ()))
        return values_at(facts.body, path)

    def _names(self, check: Check, facts: RequestFacts) -> list[Any]:
        assert check.names is not None or check.resource_type == ResourceType.CLUSTER
        if check.names is None:
            return []
        when = check.when
        if when is not None and when.element is not None:
            steps = check.names.steps
            sibling = Path(".".join((*steps[:-1], when.element)))
            pairs = zip(self._values(facts, check.names), self._values(facts, sibling), strict=False)
            return [name for name, kind in pairs if kind in when.value]
        return self._values(facts, check.names)

    def _holds(self, when: When | None, facts: RequestFacts) -> bool:
        if when is None or when.path is None:
            return True
        found = self._values(facts, when.path)
        value = found[0] if found else when.default
        if when.test == "not_null":
            return value is not None
        if when.test == "is_null":
            return value is None
        if when.test == "eq":
            return bool(value == when.value)
        if when.test == "ge":
            return value is not None and value >= when.value
        if when.test == "lt":
            return value is not None and value < when.value
        raise ValueError(f"unknown condition {when.test!r}")
