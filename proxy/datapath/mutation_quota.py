"""``controller_mutation_rate`` on the data path: the request filter (KIP-599).

Theory of operation. A sidecar that enforces client quotas puts :class:`MutationQuotaFilter`
in every listener's chain for CreateTopics, DeleteTopics and CreatePartitions. For a client
with a ``controller_mutation_rate`` (resolved like every user and client-id quota, KIP-55),
each topic of the request costs the partitions it mutates, as Kafka counts them:

* CreateTopics: its assignments, else its ``NumPartitions``; ``-1`` (the broker's default)
  counts :data:`~quotas.mutations.DEFAULT_PARTITIONS` until the answer (v5+) says how many
  the broker made, and the difference is then settled;
* CreatePartitions: the new count less the current one;
* DeleteTopics: the topic's current partitions (by name, or by id from v6).

The current counts are the broker's: the request waits (:class:`~proxy.datapath.dispatch
.Refresh`) for a Metadata lookup of its topics over the control connection's settings, and
a topic the broker does not know is left to it, neither judged nor counted (the broker
refuses it before any quota, as Kafka validates before it records). A
``validateOnly`` request costs nothing, as in Kafka.

The bucket decides (:func:`quotas.mutations.admit`): strictly for the versions whose clients
know THROTTLING_QUOTA_EXCEEDED (topics refused with error 89 are taken out of the request
and answered in the broker's answer, the pattern of the ACLs' per-topic refusals in
:mod:`proxy.auth.acl.enforce`; a request refused whole is answered here), permissively for
older ones. The throttle goes in the answer's ``ThrottleTimeMs`` and mutes the connection
(:mod:`proxy.datapath.throttle`, KIP-219). Kafka records a topic only once it passes the
broker's validation: topics the broker answers with an error give their tokens back
(:class:`Settlement`).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from coordinator.topics import TopicInfo
from protocol.apis import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS, Api, ApiRegistry
from protocol.errors import ProtocolError
from protocol.leniency import QUIET, Leniency
from protocol.schema import encode, struct_defaults
from protocol.spec import FieldSpec
from proxy.datapath.client_quota import quota_user
from proxy.datapath.clock import now_ms
from proxy.datapath.dispatch import Answer, Refresh, Request
from proxy.datapath.throttle import THROTTLE_FIELD, Throttle
from proxy.local.api import Respond
from quotas.client_rates import ClientRates
from quotas.clients import CONTROLLER_MUTATION_RATE
from quotas.mutations import (
    DEFAULT_PARTITIONS,
    THROTTLING_MESSAGE,
    THROTTLING_QUOTA_EXCEEDED,
    is_strict,
    validate_only,
)

log = logging.getLogger(__name__)

#: Asks the broker for topics and their partition counts (``None``: all of them).
AskTopics = Callable[[set[str] | None], Awaitable[list[TopicInfo]]]

#: The answer's array of per-topic results, by API key.
RESULTS: Mapping[int, str] = {CREATE_TOPICS: "Topics", DELETE_TOPICS: "Responses", CREATE_PARTITIONS: "Results"}
_NIL_ID = uuid.UUID(int=0)


@dataclass(frozen=True, kw_only=True, slots=True)
class Target:
    """One topic of a mutation request."""

    #: Its place in the request's array.
    index: int
    name: str | None
    topic_id: uuid.UUID | None = None
    #: The partitions the request asks for (CreateTopics: the count made; CreatePartitions:
    #: the new total), or ``None`` for the broker's default (CreateTopics) or a deletion.
    count: int | None = None


def request_array(api_key: int, version: int) -> str:
    """The request's array of topics."""
    if api_key == DELETE_TOPICS:
        return "Topics" if version >= 6 else "TopicNames"
    return "Topics"


def targets(api_key: int, version: int, body: Mapping[str, Any]) -> list[Target]:
    """The topics a mutation request names, in order."""
    out = []
    for index, element in enumerate(body.get(request_array(api_key, version)) or ()):
        if api_key == DELETE_TOPICS:
            if version < 6:
                out.append(Target(index=index, name=str(element)))
            else:
                topic_id = element.get("TopicId")
                out.append(Target(index=index, name=element.get("Name"),
                                  topic_id=None if topic_id in (None, _NIL_ID) else topic_id))
        elif api_key == CREATE_TOPICS:
            assignments = element.get("Assignments") or ()
            count = len(assignments) if assignments else int(element.get("NumPartitions", -1))
            out.append(Target(index=index, name=element.get("Name"), count=None if count < 0 else count))
        else:
            out.append(Target(index=index, name=element.get("Name"), count=int(element.get("Count", 0))))
    return out


class MutationQuotaFilter:
    """``controller_mutation_rate`` (see the module docstring)."""

    api_keys = frozenset({CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS})

    def __init__(self, rates: ClientRates, registry: ApiRegistry, topics: AskTopics | None = None,
                 leniency: Leniency = QUIET, clock: Callable[[], int] = now_ms) -> None:
        self.rates = rates
        self._registry = registry
        self._topics = topics
        self._leniency = leniency
        self._clock = clock
        #: Partition counts as the broker last said, by name and by id.
        self._counts: dict[str, int] = {}
        self._by_id: dict[uuid.UUID, int] = {}

    def on_request(self, request: Request) -> Request | Answer | Refresh | None:
        """The request as the quota leaves it: unchanged (``None``: no quota, or validate
        only), throttled, narrowed to its admitted topics, answered whole when none is, or a
        lookup of the current partition counts first."""
        rates = self.rates
        header = request.header
        if not rates.quotas:
            return None
        user, client_id = quota_user(request.context.principal), header.client_id or ""
        if not rates.limited(CONTROLLER_MUTATION_RATE, user, client_id):
            return None
        key, version = header.api_key, header.api_version
        api = self._registry.get(key)
        if api is None or version not in api.versions:
            return None
        body = self._body(request, api)
        if body is None or validate_only(key, body):
            return None
        named = targets(key, version, body)
        if key != CREATE_TOPICS and not request.refreshed and self._topics is not None and named:
            return Refresh(partial(self._learn, named))
        costs = [self._cost(key, target) for target in named]
        verdict = rates.mutate(user, client_id, costs, strict=is_strict(key, version), now_ms=self._clock())
        if verdict is None:
            return None
        refused = [named[i] for i in sorted(verdict.refused)]
        entries = [refusal(api, version, target) for target in refused]
        settle = Settlement(rates=rates, user=user, client_id=client_id, clock=self._clock, api_key=key,
                            results=RESULTS[key], taken={named[i]: cost for i, cost in verdict.taken.items()},
                            refused=entries)
        throttle = Throttle(verdict.throttle_ms, settle=settle)
        if not refused:
            return dataclasses.replace(request, throttle=throttle)
        if len(refused) == len(named):
            answer = dict(struct_defaults(api.response.fields, version))
            if THROTTLE_FIELD in answer:
                answer[THROTTLE_FIELD] = verdict.throttle_ms
            answer[RESULTS[key]] = entries
            if request.patch is not None:  # topics the ACLs refused before: their errors too
                answer = request.patch(answer)
            return Answer(Respond(body=answer), outcome="refused", denials=request.denials,
                          throttle=Throttle(verdict.throttle_ms))
        array = request_array(key, version)
        narrowed = dict(body)
        gone = {target.index for target in refused}
        narrowed[array] = [e for i, e in enumerate(body[array]) if i not in gone]
        changed = request.with_body(encode(api.request, version, narrowed))
        return dataclasses.replace(changed, throttle=throttle)

    def _body(self, request: Request, api: Api) -> Mapping[str, Any] | None:
        if request.decoded is not None:
            return request.decoded.value()
        try:
            decoded: Mapping[str, Any] = self._leniency.request(api, request.header.api_version, request.body)
        except ProtocolError:
            return None  # the broker answers what it cannot read; nothing to count
        return decoded

    def _cost(self, api_key: int, target: Target) -> float | None:
        if api_key == CREATE_TOPICS:
            return float(DEFAULT_PARTITIONS if target.count is None else target.count)
        current = self._current(target)
        if current is None:
            return None  # unknown to the broker: refused there, not judged here
        if api_key == CREATE_PARTITIONS:
            return float(max(0, (target.count or 0) - current))
        return float(current)

    def _current(self, target: Target) -> int | None:
        if target.topic_id is not None:
            return self._by_id.get(target.topic_id)
        return None if target.name is None else self._counts.get(target.name)

    async def _learn(self, named: Sequence[Target]) -> None:
        """Ask the broker for the current partition counts of ``named``."""
        assert self._topics is not None
        names = None if any(t.topic_id is not None for t in named) else {t.name for t in named if t.name}
        try:
            found = await self._topics(names)
        except Exception as exc:  # the control connection's UpstreamError, or worse: the client pays nothing
            log.warning("controller_mutation_rate: partition counts not read from the broker: %s", exc)
            return
        if names is None:
            self._counts.clear()
            self._by_id.clear()
        else:  # a topic gone since has no count any more
            for name in names:
                self._counts.pop(name, None)
        for info in found:
            self._counts[info.name] = info.partitions
            self._by_id[info.topic_id] = info.partitions


def refusal(api: Api, version: int, target: Target) -> dict[str, Any]:
    """The answer's entry for a topic refused with THROTTLING_QUOTA_EXCEEDED."""
    spec = _field(api.response.fields, RESULTS[api.key], version)
    assert spec is not None
    entry = dict(struct_defaults(spec.fields, version))
    entry["Name"] = target.name
    if "TopicId" in entry and target.topic_id is not None:
        entry["TopicId"] = target.topic_id
    entry["ErrorCode"] = THROTTLING_QUOTA_EXCEEDED
    if "ErrorMessage" in entry:
        entry["ErrorMessage"] = THROTTLING_MESSAGE
    return entry


def _field(fields: Sequence[FieldSpec], name: str, version: int) -> FieldSpec | None:
    return next((f for f in fields if f.name == name and f.present_in(version)), None)


@dataclass(kw_only=True, slots=True)
class Settlement:
    """Applied to the broker's decoded answer (by :class:`~proxy.datapath.throttle.ThrottlePatch`):
    the tokens of topics the broker refused are given back, a default partition count is
    corrected to the one the broker made, and the topics the quota refused are answered."""

    rates: ClientRates
    user: str
    client_id: str
    clock: Callable[[], int]
    api_key: int
    results: str
    #: The tokens each admitted topic took.
    taken: dict[Target, float]
    #: The answer's entries for the refused topics.
    refused: list[dict[str, Any]]

    def __call__(self, answer: dict[str, Any]) -> dict[str, Any]:
        """See the class docstring."""
        owed = 0.0
        pending = list(self.taken.items())
        for entry in answer.get(self.results) or ():
            match = next((i for i, (t, _) in enumerate(pending) if _same(t, entry)), None)
            if match is None:
                continue
            target, cost = pending.pop(match)
            if entry.get("ErrorCode"):
                owed -= cost
            elif self.api_key == CREATE_TOPICS and target.count is None and (entry.get("NumPartitions") or -1) > 0:
                owed += entry["NumPartitions"] - cost
        if owed:
            self.rates.settle(self.user, self.client_id, owed, self.clock())
        if self.refused:
            answer[self.results] = [*(answer.get(self.results) or ()), *self.refused]
        return answer


def _same(target: Target, entry: Mapping[str, Any]) -> bool:
    if target.name is not None:
        return bool(entry.get("Name") == target.name)
    return target.topic_id is not None and entry.get("TopicId") == target.topic_id
