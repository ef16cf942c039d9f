"""Applying an authorization verdict to one request and its answer, sans-IO.

Theory of operation. :meth:`Authorizer.decide <proxy.auth.acl.evaluate.Authorizer.decide>`
says *what* Kafka refuses; this module turns that into *what the sidecar does* with the
frame, in the shapes Kafka answers with:

* nothing refused and nothing to filter: the original bytes go on (:data:`PASS`);
* the whole request refused: a local answer (:class:`Answer`) built from the request, every
  resource it names answered with the error where the response has a place for one, and the
  top-level ``ErrorCode`` set where the response has one;
* some resources refused (``PER_RESOURCE``): they are removed from the request, the rest is
  forwarded re-encoded (:class:`Forward` with ``body``), and the refused entries are added to
  the broker's answer (:meth:`Forward.patch`); when nothing is left the whole answer is
  local. Metadata is always forwarded (its answer needs the broker list);
* auto-creation refused: Metadata's ``AllowAutoTopicCreation`` is cleared;
* listings Kafka filters (Metadata for all topics, ListGroups, OffsetFetch...): the broker's
  answer loses the entries the principal may not see (:meth:`Forward.patch`).

Where a refused name goes in the answer is data (:data:`MIRRORS`): per request path, the
request array that holds the resources, the response array that answers it, renamed key
fields, inner levels (partitions) and the level that carries the error. An API with a
per-resource refusal and no mirror is refused whole (fail closed). A test checks every
mirror against the schemas at every version its check applies to.

A Produce with ``acks=0`` expects no answer: any refusal closes the connection, as Kafka's
broker does (:class:`Refuse` with ``close``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from protocol.apis import METADATA, Api
from protocol.leniency import QUIET, Leniency
from protocol.pick import Picker, Unpickable
from protocol.schema import encode, struct_defaults
from protocol.spec import FieldSpec
from proxy.auth.acl.evaluate import Authorizer, Denial, DeniedPart, RequestFacts, Verdict
from proxy.auth.acl.model import Operation
from proxy.auth.acl.requests import Check, OnDeny, Path, checks_for, paths_for


@dataclass(frozen=True, slots=True)
class Level:
    """One array level of a mirror: request array → response array.

    ``renames`` maps a request field to the response field that echoes it (fields with the
    same name in both are copied without saying so). ``scalar`` is set when the request
    array holds plain values (``PartitionIndexes[]``, ``GroupsNames[]``): each becomes a
    response element with the value in that field. ``error`` marks the level whose
    ``ErrorCode`` carries the refusal; ``defaults`` overrides response defaults Kafka sets
    on an error entry (a high watermark of -1).
    """

    request: str
    response: str
    renames: Mapping[str, str] = field(default_factory=dict)
    scalar: str | None = None
    error: bool = False
    inner: Level | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)


def _topics(request: str, response: str, *, inner: Level | None = None, **renames: str) -> Level:
    return Level(request, response, renames, error=inner is None, inner=inner)


def _parts(request: str, response: str, *, scalar: str | None = None, defaults: Mapping[str, Any] | None = None,
           **renames: str) -> Level:
    return Level(request, response, renames, scalar=scalar, error=True, defaults=defaults or {})


def _names(request: str, response: str, key: str) -> Level:
    """A request array of names answered by elements holding ``key``."""
    return Level(request, response, scalar=key, error=True)


# What Kafka puts beside an error (ProduceResponse.PartitionResponse(error),
# FetchResponse.partitionResponse(error)): offsets unknown.
#: Kafka's default message of each authorization error (``Errors``), where a response has
#: a place for one.
MESSAGES: Mapping[int, str] = {
    29: "Topic authorization failed.", 30: "Group authorization failed.", 31: "Cluster authorization failed.",
    53: "Transactional Id authorization failed.", 65: "Delegation Token authorization failed.",
}

#: The path prefix of mirrors used only when a whole request is refused.
WHOLE = "whole:"

_PRODUCE_ERROR = {"BaseOffset": -1, "LogAppendTimeMs": -1, "LogStartOffset": -1}
_FETCH_ERROR = {"HighWatermark": -1, "LastStableOffset": -1, "LogStartOffset": -1}

#: ``(api key, request path of the refused names)`` → the levels from the request root down
#: to the resources (and below them, what is answered for each).
MIRRORS: Mapping[tuple[int, str], Level] = {
    (0, "TopicData[].Name"): _topics("TopicData", "Responses", inner=_parts(
        "PartitionData", "PartitionResponses", defaults=_PRODUCE_ERROR)),
    (0, "TopicData[].TopicId"): _topics("TopicData", "Responses", inner=_parts(
        "PartitionData", "PartitionResponses", defaults=_PRODUCE_ERROR)),
    (1, "Topics[].Topic"): _topics("Topics", "Responses", inner=_parts(
        "Partitions", "Partitions", Partition="PartitionIndex", defaults=_FETCH_ERROR)),
    (1, "Topics[].TopicId"): _topics("Topics", "Responses", inner=_parts(
        "Partitions", "Partitions", Partition="PartitionIndex", defaults=_FETCH_ERROR)),
    (2, "Topics[].Name"): _topics("Topics", "Topics", inner=_parts("Partitions", "Partitions")),
    (3, "Topics[].Name"): _topics("Topics", "Topics"),
    (8, "Topics[].Name"): _topics("Topics", "Topics", inner=_parts("Partitions", "Partitions")),
    (9, "Topics[].Name"): _topics("Topics", "Topics", inner=_parts(
        "PartitionIndexes", "Partitions", scalar="PartitionIndex", defaults={"CommittedOffset": -1})),
    (9, "Groups[].GroupId"): Level("Groups", "Groups", error=True),
    (9, "Groups[].Topics[].Name"): Level("Groups", "Groups", inner=_topics("Topics", "Topics", inner=_parts(
        "PartitionIndexes", "Partitions", scalar="PartitionIndex", defaults={"CommittedOffset": -1}))),
    (10, "CoordinatorKeys[]"): _names("CoordinatorKeys", "Coordinators", "Key"),
    (15, "Groups[]"): _names("Groups", "Groups", "GroupId"),
    (19, "Topics[].Name"): _topics("Topics", "Topics"),
    (20, "TopicNames[]"): _names("TopicNames", "Responses", "Name"),
    (20, "Topics[].Name"): _topics("Topics", "Responses"),
    (21, "Topics[].Name"): _topics("Topics", "Topics", inner=_parts("Partitions", "Partitions")),
    (23, "Topics[].Topic"): _topics("Topics", "Topics", inner=_parts("Partitions", "Partitions")),
    (24, "V3AndBelowTopics[].Name"): _topics("V3AndBelowTopics", "ResultsByTopicV3AndBelow", inner=_parts(
        "Partitions", "ResultsByPartition", scalar="PartitionIndex")),
    (28, "Topics[].Name"): _topics("Topics", "Topics", inner=_parts("Partitions", "Partitions")),
    (32, "Resources[].ResourceName"): _topics("Resources", "Results"),
    (33, "Resources[].ResourceName"): _topics("Resources", "Responses"),
    (44, "Resources[].ResourceName"): _topics("Resources", "Responses"),
    (37, "Topics[].Name"): _topics("Topics", "Results"),
    (42, "GroupsNames[]"): _names("GroupsNames", "Results", "GroupId"),
    (47, "Topics[].Name"): _topics("Topics", "Topics", inner=_parts("Partitions", "Partitions")),
    (61, "Topics[].Name"): _topics("Topics", "Topics", inner=_parts(
        "PartitionIndexes", "Partitions", scalar="PartitionIndex")),
    (65, "TransactionalIds[]"): _names("TransactionalIds", "TransactionStates", "TransactionalId"),
    (69, "GroupIds[]"): _names("GroupIds", "Groups", "GroupId"),
    (75, "Topics[].Name"): _topics("Topics", "Topics"),
    (77, "GroupIds[]"): _names("GroupIds", "Groups", "GroupId"),
    (89, "GroupIds[]"): _names("GroupIds", "Groups", "GroupId"),
    # Answers to a request refused whole, one entry per request element (no check names
    # these paths: the whole request is refused on the Cluster).
    (30, WHOLE + "Creations"): Level("Creations", "Results", error=True),
    (31, WHOLE + "Filters"): Level("Filters", "FilterResults", error=True),
    (43, WHOLE + "TopicPartitions"): _topics("TopicPartitions", "ReplicaElectionResults", inner=_parts(
        "Partitions", "PartitionResult", scalar="PartitionId")),
    (45, WHOLE + "Topics"): _topics("Topics", "Responses", inner=_parts("Partitions", "Partitions")),
    (49, WHOLE + "Entries"): Level("Entries", "Entries", error=True, inner=Level("Entity", "Entity")),
    (51, WHOLE + "Deletions"): Level("Deletions", "Results", {"Name": "User"}, error=True),
    (51, WHOLE + "Upsertions"): Level("Upsertions", "Results", {"Name": "User"}, error=True),
}


# -- what to do -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pass:
    """Forward (or answer) the request as it is."""


#: Nothing to do.
PASS = Pass()


@dataclass(frozen=True, slots=True)
class Answer:
    """Answer locally with this response body (a mapping for the API's response schema)."""

    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Refuse:
    """Close the connection: a Produce with ``acks=0`` that Kafka would not serve."""

    reason: str


@dataclass(frozen=True, slots=True)
class Forward:
    """Forward (``body``: a re-encoded request body, or ``None`` for the original bytes) and
    patch the answer with :meth:`patch` (``None`` when the answer goes as it is)."""

    body: bytes | None
    patch: Callable[[dict[str, Any]], dict[str, Any]] | None


Action = Pass | Answer | Refuse | Forward


@dataclass(frozen=True, slots=True)
class Enforcement:
    """The action for one request and the refusals behind it (for the audit and metrics)."""

    action: Action
    denials: tuple[Denial, ...] = ()


#: The enforcement of a request nobody objects to.
ALLOWED = Enforcement(PASS)


def needs_decoding(api_key: int, version: int) -> bool:
    """False when no check reads the request body (the decision needs no decoding)."""
    return any(check.names is not None or check.when is not None or check.instead is not None
               for check in checks_for(api_key, version))


def selection_for(paths: Iterable[Path]) -> dict[str, Any]:
    """A :mod:`protocol.pick` selection reading every field the ``paths`` name."""
    selection: dict[str, Any] = {}
    for path in paths:
        level = selection
        steps = path.steps
        for i, step in enumerate(steps):
            name = step[:-2] if step.endswith("[]") else step
            if i == len(steps) - 1:
                level.setdefault(name, None)
            else:
                inner = level.get(name)
                if inner is None:
                    inner = level[name] = {}
                level = inner
    return selection


def picked_body(fields: Sequence[FieldSpec], selection: Mapping[str, Any], values: Sequence[Any]) -> dict[str, Any]:
    """What :meth:`Picker.pick <protocol.pick.Picker.pick>` read, as a body of mappings:
    the values come in the fields' declaration order."""
    out: dict[str, Any] = {}
    i = 0
    for spec in fields:
        if spec.name not in selection:
            continue
        inner = selection[spec.name]
        value = values[i]
        i += 1
        if inner is not None:
            value = [picked_body(spec.fields, inner, element) for element in value or ()]
        out[spec.name] = value
    return out


class Enforcer:
    """Decides one request for one principal and shapes the outcome (module docstring).

    The decision reads only the fields the checks name, with a :class:`~protocol.pick.Picker`
    where the request's shape allows (no records, no other field is built); the request is
    decoded whole only when something must be refused, filtered or rewritten.
    """

    def __init__(self, api: Api, version: int) -> None:
        self.api = api
        self.version = version
        self._needs_body = needs_decoding(api.key, version)
        self._selection = selection_for(paths_for(api.key, version))
        self._picker: Picker | None = None
        if self._needs_body and self._selection:
            try:
                picker = Picker(api.request, self._selection)
                picker.program(version)
                self._picker = picker
            except (Unpickable, ValueError, KeyError):
                self._picker = None

    def enforce(self, authorizer: Authorizer, facts: RequestFacts, raw: bytes | memoryview | None,
                *, expects_response: bool = True, leniency: Leniency = QUIET) -> Enforcement:
        """The enforcement of a request whose body (after the header) is ``raw``
        (decoded, when it must be, by ``leniency``'s rule).

        ``facts.body`` is filled here from ``raw`` when a check needs it.
        """
        if facts.principal in authorizer.super_users:
            return ALLOWED
        body: dict[str, Any] | None = facts.body if isinstance(facts.body, dict) else None
        if raw is not None and facts.body is None and self._needs_body:
            if self._picker is not None:
                light = picked_body(self.api.request.fields, self._selection, self._picker.pick(self.version, raw))
                verdict = _existing_need_no_create(authorizer.decide(_with_body(facts, light)), facts)
                if verdict.allowed and not verdict.response_filters:
                    return ALLOWED
            body = leniency.request(self.api, self.version, raw)
            facts = _with_body(facts, body)
        verdict = _existing_need_no_create(authorizer.decide(facts), facts)
        if verdict.allowed and not verdict.response_filters:
            return ALLOWED
        return Enforcement(self._act(authorizer, facts, verdict, body, expects_response), verdict.denials)

    # -- shaping ---------------------------------------------------------------------------

    def _act(self, authorizer: Authorizer, facts: RequestFacts, verdict: Verdict, body: dict[str, Any] | None,
             expects_response: bool) -> Action:
        if not expects_response and (verdict.refuse is not None or any(
                p.on_deny is OnDeny.PER_RESOURCE for p in verdict.parts)):
            return Refuse(f"{self.api.name} with acks=0 refused by ACLs")
        if verdict.refuse is not None:
            return Answer(self.error_response(body, verdict.refuse))
        refused: list[tuple[Level, DeniedPart]] = []
        changed = False
        for part in verdict.parts:
            if part.on_deny is OnDeny.NO_AUTO_CREATE:
                assert body is not None
                if body.get("AllowAutoTopicCreation"):
                    body["AllowAutoTopicCreation"] = False
                    changed = True
                continue
            if part.on_deny is not OnDeny.PER_RESOURCE or part.path is None or body is None:
                return Answer(self.error_response(body, part.error))
            mirror = MIRRORS.get((facts.api_key, str(part.path)))
            if mirror is None:  # nowhere to say it per resource: refuse the whole (fail closed)
                return Answer(self.error_response(body, part.error))
            refused.append((mirror, part))
        entries: list[tuple[Level, list[dict[str, Any]]]] = []
        for mirror, part in refused:
            assert body is not None
            entries.append((mirror, self._remove(body, mirror, part)))
            changed = True
        filters = [(c, facts.topic_names) for c in verdict.response_filters]
        left = body is not None and self._anything_left(body, [m for m, _ in refused])
        if refused and not left and facts.api_key != METADATA:
            answer = self._defaults()
            for mirror, made in entries:
                _merge(answer, mirror, made)
            return Answer(answer)
        patch = self._patcher(authorizer, facts, entries, filters) if (entries or filters) else None
        new_body = encode(self.api.request, self.version, body) if changed and body is not None else None
        return Forward(new_body, patch)

    def error_response(self, body: Mapping[str, Any] | None, error: int) -> dict[str, Any]:
        """Kafka's answer to the whole request refused with ``error``: every resource the
        request names gets the error where the response has a place for it, and so does
        the top-level ``ErrorCode``."""
        answer = self._defaults()
        fields = {f.name for f in self.api.response.fields if f.present_in(self.version)}
        if "ErrorCode" in fields:
            answer["ErrorCode"] = error
            if "ErrorMessage" in fields:
                answer["ErrorMessage"] = MESSAGES.get(error)
        if body is not None:
            seen: set[str] = set()
            for (key, _path), mirror in MIRRORS.items():
                if key != self.api.key or mirror.request in seen or not self._mirror_fits(mirror):
                    continue
                seen.add(mirror.request)
                made = [self._convert(mirror, e, error, self.api.response.fields)
                        for e in body.get(mirror.request) or ()]
                _merge(answer, mirror, made)
        return answer

    def _mirror_fits(self, mirror: Level) -> bool:
        req = _field(self.api.request.fields, mirror.request, self.version)
        rsp = _field(self.api.response.fields, mirror.response, self.version)
        return req is not None and rsp is not None

    def _defaults(self) -> dict[str, Any]:
        return dict(struct_defaults(self.api.response.fields, self.version))

    def _remove(self, body: dict[str, Any], mirror: Level, part: DeniedPart) -> list[dict[str, Any]]:
        """Take the refused elements out of ``body``; the response entries answering them."""
        assert part.path is not None
        return self._remove_at(body, mirror, part.path.steps, part.values, part.error, self.api.response.fields)

    def _remove_at(self, holder: dict[str, Any], level: Level, steps: tuple[str, ...], values: frozenset[Any],
                   error: int, fields: Sequence[FieldSpec]) -> list[dict[str, Any]]:
        items = holder.get(level.request)
        if not items:
            return []
        rest = steps[1:]
        if not rest:  # an array of names: the names themselves
            holder[level.request] = [v for v in items if v not in values]
            return [self._convert(level, v, error, fields) for v in items if v in values]
        if len(rest) == 1:  # Array[].Name: elements by name
            name = rest[0]
            holder[level.request] = [e for e in items if _value(e, name) not in values]
            return [self._convert(level, e, error, fields) for e in items if _value(e, name) in values]
        # Deeper (Groups[].Topics[].Name): the outer element stays, answered inside.
        inner = level.inner
        assert inner is not None
        spec = self._response_field(fields, level)
        out = []
        for element in items:
            made = self._remove_at(element, inner, rest, values, error, spec.fields)
            if made:
                shell = self._convert(level, element, error, fields, with_inner=False)
                shell[inner.response] = made
                out.append(shell)
        return out

    def _response_field(self, fields: Sequence[FieldSpec], level: Level) -> FieldSpec:
        spec = _field(fields, level.response, self.version)
        assert spec is not None, f"{self.api.name} v{self.version} has no {level.response}"
        return spec

    def _convert(self, level: Level, element: Any, error: int, fields: Sequence[FieldSpec], *,
                 with_inner: bool = True) -> dict[str, Any]:
        """The response element (of array ``level.response`` among ``fields``) answering
        request element ``element`` with ``error``."""
        spec = self._response_field(fields, level)
        out = dict(struct_defaults(spec.fields, self.version))
        if level.scalar is not None:
            out[level.scalar] = element
        else:
            for key, value in _items(element):
                target = level.renames.get(key, key)
                if target in out and not isinstance(value, list):
                    out[target] = value
        for key, value in level.defaults.items():
            if key in out:
                out[key] = value
        if level.error and "ErrorCode" in out:
            out["ErrorCode"] = error
            if "ErrorMessage" in out:
                out["ErrorMessage"] = MESSAGES.get(error)
        inner = level.inner
        if with_inner and inner is not None and level.scalar is None:
            out[inner.response] = [self._convert(inner, e, error, spec.fields)
                                   for e in _value(element, inner.request) or ()]
        return out

    @staticmethod
    def _anything_left(body: Mapping[str, Any], mirrors: Sequence[Level]) -> bool:
        return any(body.get(mirror.request) for mirror in mirrors)

    def _patcher(self, authorizer: Authorizer, facts: RequestFacts,
                 entries: Sequence[tuple[Level, list[dict[str, Any]]]],
                 filters: Sequence[tuple[Check, Mapping[Any, str]]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def patch(answer: dict[str, Any]) -> dict[str, Any]:
            for check, names in filters:
                _filter(answer, check.names, partial(authorizer.permitted, facts.principal, facts.host, check,
                                                     topic_names=names))
            for mirror, made in entries:
                _merge(answer, mirror, made)
            return answer
        return patch


# -- helpers --------------------------------------------------------------------------------


def _existing_need_no_create(verdict: Verdict, facts: RequestFacts) -> Verdict:
    """Kafka asks for Create only for topics that do not exist: auto-creation refused for
    topics known to exist (named in ``facts.topic_names``) is no refusal at all."""
    if not facts.topic_names or not any(p.on_deny is OnDeny.NO_AUTO_CREATE for p in verdict.parts):
        return verdict
    existing = set(facts.topic_names.values())
    dropped: set[tuple[str, Operation]] = set()
    parts = []
    for part in verdict.parts:
        if part.on_deny is OnDeny.NO_AUTO_CREATE and part.values and set(map(str, part.values)) <= existing:
            dropped.update((str(v), part.operation) for v in part.values)
            continue
        parts.append(part)
    if not dropped:
        return verdict
    denials = tuple(d for d in verdict.denials if (d.name, d.operation) not in dropped)
    return Verdict(refuse=verdict.refuse, parts=tuple(parts), response_filters=verdict.response_filters,
                   denials=denials)


def _with_body(facts: RequestFacts, body: Any) -> RequestFacts:
    return RequestFacts(principal=facts.principal, host=facts.host, api_key=facts.api_key,
                        api_version=facts.api_version, body=body, topic_names=facts.topic_names)


def _value(element: Any, name: str) -> Any:
    if isinstance(element, Mapping):
        return element.get(name)
    return getattr(element, name, None)


def _items(element: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(element, Mapping):
        return [(k, v) for k, v in element.items() if not k.startswith("_")]
    return []


def _field(fields: Sequence[FieldSpec], name: str, version: int) -> FieldSpec | None:
    """The field ``name`` among ``fields`` if present at ``version``."""
    for spec in fields:
        if spec.present_in(version) and spec.name == name:
            return spec
    return None


def _merge(answer: dict[str, Any], level: Level, made: list[dict[str, Any]]) -> None:
    """Add response entries to ``answer`` (nested entries join the element with equal keys)."""
    if not made:
        return
    existing = answer.get(level.response)
    if existing is None:
        existing = answer[level.response] = []
    elif not isinstance(existing, list):
        existing = answer[level.response] = list(existing)
    if level.inner is None or level.error:
        existing.extend(made)
        return
    inner = level.inner
    for entry in made:
        keys = {k: v for k, v in entry.items() if not isinstance(v, list) and k not in ("ErrorCode", "ErrorMessage")}
        at = next((i for i, e in enumerate(existing) if all(_value(e, k) == v for k, v in keys.items() if k in e)),
                  None)
        if at is None:
            existing.append(entry)
            continue
        twin = existing[at]
        if not isinstance(twin, dict):  # decoded answers are dicts; anything else is copied in place
            twin = existing[at] = dict(twin)
        _merge(twin, inner, entry.get(inner.response) or [])


def _filter(answer: dict[str, Any], path: Path | None, keep: Callable[[list[Any]], list[Any]]) -> None:
    """Leave out of ``answer`` the elements whose value at ``path`` ``keep`` does not keep."""
    if path is None:
        return
    steps = path.steps
    holders: list[Any] = [answer]
    for step in steps[:-2]:
        name = step[:-2] if step.endswith("[]") else step
        holders = [e for h in holders for e in (_value(h, name) or ())]
    array, name = steps[-2][:-2], steps[-1]
    for holder in holders:
        items = _value(holder, array)
        if not items:
            continue
        allowed = set(map(_hashable, keep([_value(e, name) for e in items])))
        holder[array] = [e for e in items if _hashable(_value(e, name)) in allowed]


def _hashable(value: Any) -> Any:
    return bytes(value) if isinstance(value, (bytearray, memoryview)) else value


__all__ = [
    "ALLOWED", "MIRRORS", "PASS", "WHOLE", "Action", "Answer", "Enforcement", "Enforcer", "Forward", "Level", "Pass",
    "Refuse", "needs_decoding", "picked_body", "selection_for",
]
