"""Which request needs which operation on which resource: Kafka's request-to-ACL table, as data.

Theory of operation. Each API key has a tuple of :class:`Check`s, transcribed from Kafka's
request handling (``KafkaApis``, ``AclApis``, ``ConfigHelper``, ``AuthHelper`` at 3.9/4.x).
A check names

* the resource type and the operation Kafka asks the authorizer about;
* where the resource names come from: a :class:`Path` into the *request* body
  (``Topics[].Name``: the ``Name`` of every element of ``Topics``; ``Groups[]``: every string
  of an array of strings; ``GroupId``: one field), or nowhere for the Cluster (its one name is
  ``kafka-cluster``; a Cluster check with a path says which request elements its outcome
  applies to, as DescribeConfigs' broker resources). ``by_id`` paths hold topic IDs the
  caller resolves to names (Produce v13, Fetch v13+, share APIs); ``phase=RESPONSE`` paths
  are read from the broker's *response* (Metadata for all topics, ListGroups,
  ListTransactions), where Kafka filters what it answers;
* what Kafka does when the check fails (:class:`OnDeny`) and with which error code;
* when it applies (:class:`When`: a field's value, ``min_version``/``max_version``) and what
  Kafka tries instead when it fails (``instead``: CreateTopics needs Cluster Create *or* Topic
  Create on each topic).

:mod:`proxy.auth.acl.evaluate` walks this table for one request (``Authorizer.decide``).
API keys absent from :data:`TABLE` are refused to everyone but super users (fail closed);
:data:`OPEN` lists the requests Kafka serves without any check.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from protocol.errors import ErrorCode
from proxy.auth.acl.model import Operation, ResourceType

# The error codes the table answers with, by their names in the one enum.
TOPIC_AUTHORIZATION_FAILED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_AUTHORIZATION_FAILED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
DELEGATION_TOKEN_AUTHORIZATION_FAILED = ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED


class OnDeny(Enum):
    """What Kafka does with a request, or a part of one, that fails a check."""

    #: The whole request is answered with the error; nothing of it is served.
    REFUSE = "refuse"
    #: Each refused name gets the error in its own response entry; the rest is served.
    PER_RESOURCE = "per-resource"
    #: Refused names are left out of the answer without an error (listings).
    FILTER = "filter"
    #: Topic auto-creation is not allowed (Metadata's ``AllowAutoTopicCreation`` is cleared).
    NO_AUTO_CREATE = "no-auto-create"


class Phase(Enum):
    """Where a check's names are read."""

    REQUEST = "request"
    RESPONSE = "response"


@dataclass(frozen=True, slots=True)
class Path:
    """A place in a message body: ``Topics[].Name``, ``Groups[]``, ``GroupId``."""

    text: str

    @property
    def steps(self) -> tuple[str, ...]:
        """The field names, an array marked by a trailing ``[]``."""
        return tuple(self.text.split("."))

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class When:
    """A check applies when the value at ``path`` passes ``test`` (``is_null``, ``not_null``,
    ``ge``, ``lt``, ``eq``) against ``value``; or, with ``element``, it applies to the
    array elements whose sibling field ``element`` is in ``value``."""

    path: Path | None = None
    test: str = "not_null"
    value: Any = None
    #: The value when the field is absent (a tagged field not sent, a version without it).
    default: Any = None
    element: str | None = None


@dataclass(frozen=True, slots=True)
class Check:
    """One authorization Kafka performs for a request (see the module docstring)."""

    resource_type: ResourceType
    operation: Operation
    on_deny: OnDeny
    error: int
    names: Path | None = None
    when: When | None = None
    instead: Check | None = None
    min_version: int = 0
    max_version: int | None = None
    by_id: bool = False
    phase: Phase = Phase.REQUEST
    #: Any resource of the type will do (``Authorizer.authorizeByResourceType``).
    any_resource: bool = False

    def applies_at(self, version: int) -> bool:
        """True when the check exists at ``version`` of the request."""
        return version >= self.min_version and (self.max_version is None or version <= self.max_version)


T, G, C, X = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
              ResourceType.TRANSACTIONAL_ID)
Op = Operation
REFUSE, PER, FILTER = OnDeny.REFUSE, OnDeny.PER_RESOURCE, OnDeny.FILTER
TA, GA, CA, XA = (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED,
                  TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


def _p(text: str) -> Path:
    return Path(text)


def _cluster(operation: Operation, error: int = CA) -> tuple[Check, ...]:
    return (Check(C, operation, REFUSE, error),)


def _group_read() -> tuple[Check, ...]:
    return (Check(G, Op.READ, REFUSE, GA, _p("GroupId")),)


def _configs(operation: Operation) -> tuple[Check, ...]:
    """DescribeConfigs / AlterConfigs / IncrementalAlterConfigs (``ConfigHelper``, ``KafkaApis``):
    per resource, by its ConfigResource type (2 topic, 32 group; 4 broker, 8 broker logger and
    16 client metrics are the Cluster's)."""
    names = _p("Resources[].ResourceName")
    return (
        Check(T, operation, PER, TA, names, When(element="ResourceType", test="in", value=frozenset({2}))),
        Check(G, operation, PER, GA, names, When(element="ResourceType", test="in", value=frozenset({32}))),
        Check(C, operation, PER, CA, names, When(element="ResourceType", test="in", value=frozenset({4, 8, 16}))),
    )


#: Requests Kafka serves to anyone (the SASL exchange, version discovery, telemetry, our
#: BrokerMetadata) and DescribeCluster (it only asks when authorized operations are wanted).
OPEN = frozenset({17, 18, 36, 60, 71, 72})

#: API key → the checks Kafka performs, in Kafka's order.
TABLE: Mapping[int, tuple[Check, ...]] = {
    # Produce: a transactional producer needs Write on its transactional id (the whole
    # request refused); each topic needs Write (TOPIC_AUTHORIZATION_FAILED per partition).
    0: (Check(X, Op.WRITE, REFUSE, XA, _p("TransactionalId"), When(_p("TransactionalId"), "not_null"), min_version=3),
        Check(T, Op.WRITE, PER, TA, _p("TopicData[].Name"), max_version=12),
        Check(T, Op.WRITE, PER, TA, _p("TopicData[].TopicId"), min_version=13, by_id=True)),
    # Fetch: a follower (ReplicaId >= 0; in ReplicaState from v15) needs ClusterAction; a
    # consumer Read on each topic (by id from v13).
    1: (Check(C, Op.CLUSTER_ACTION, REFUSE, CA, when=When(_p("ReplicaId"), "ge", 0, -1), max_version=14),
        Check(C, Op.CLUSTER_ACTION, REFUSE, CA, when=When(_p("ReplicaState.ReplicaId"), "ge", 0, -1),
              min_version=15),
        Check(T, Op.READ, PER, TA, _p("Topics[].Topic"), When(_p("ReplicaId"), "lt", 0, -1), max_version=12),
        Check(T, Op.READ, PER, TA, _p("Topics[].TopicId"), When(_p("ReplicaId"), "lt", 0, -1),
              min_version=13, max_version=14, by_id=True),
        Check(T, Op.READ, PER, TA, _p("Topics[].TopicId"), When(_p("ReplicaState.ReplicaId"), "lt", 0, -1),
              min_version=15, by_id=True)),
    2: (Check(T, Op.DESCRIBE, PER, TA, _p("Topics[].Name")),),
    # Metadata: named topics need Describe (an error entry), all-topics answers leave out
    # what the principal may not Describe; auto-creation needs Cluster or Topic Create.
    3: (Check(T, Op.DESCRIBE, PER, TA, _p("Topics[].Name")),
        Check(T, Op.DESCRIBE, FILTER, TA, _p("Topics[].Name"), phase=Phase.RESPONSE),
        Check(C, Op.CREATE, OnDeny.NO_AUTO_CREATE, TA, when=When(_p("AllowAutoTopicCreation"), "eq", True, True),
              instead=Check(T, Op.CREATE, OnDeny.NO_AUTO_CREATE, TA, _p("Topics[].Name")))),
    8: (*_group_read(), Check(T, Op.READ, PER, TA, _p("Topics[].Name"), max_version=9),
        Check(T, Op.READ, PER, TA, _p("Topics[].TopicId"), min_version=10, by_id=True)),
    9: (Check(G, Op.DESCRIBE, REFUSE, GA, _p("GroupId"), max_version=7),
        Check(T, Op.DESCRIBE, PER, TA, _p("Topics[].Name"), max_version=7),
        Check(G, Op.DESCRIBE, PER, GA, _p("Groups[].GroupId"), min_version=8),
        Check(T, Op.DESCRIBE, PER, TA, _p("Groups[].Topics[].Name"), min_version=8, max_version=9),
        Check(T, Op.DESCRIBE, PER, TA, _p("Groups[].Topics[].TopicId"), min_version=10, by_id=True),
        # Offsets of topics the principal may not Describe are left out of the answer.
        Check(T, Op.DESCRIBE, FILTER, TA, _p("Topics[].Name"), phase=Phase.RESPONSE, max_version=7),
        Check(T, Op.DESCRIBE, FILTER, TA, _p("Groups[].Topics[].Name"), phase=Phase.RESPONSE,
              min_version=8, max_version=9),
        Check(T, Op.DESCRIBE, FILTER, TA, _p("Groups[].Topics[].TopicId"), phase=Phase.RESPONSE,
              min_version=10, by_id=True)),
    # FindCoordinator: KeyType 0 group, 1 transaction (2 share: broker-internal).
    10: (Check(G, Op.DESCRIBE, REFUSE, GA, _p("Key"), When(_p("KeyType"), "eq", 0, 0), max_version=3),
         Check(X, Op.DESCRIBE, REFUSE, XA, _p("Key"), When(_p("KeyType"), "eq", 1, 0), max_version=3),
         Check(G, Op.DESCRIBE, PER, GA, _p("CoordinatorKeys[]"), When(_p("KeyType"), "eq", 0, 0), min_version=4),
         Check(X, Op.DESCRIBE, PER, XA, _p("CoordinatorKeys[]"), When(_p("KeyType"), "eq", 1, 0), min_version=4),
         Check(C, Op.CLUSTER_ACTION, REFUSE, CA, when=When(_p("KeyType"), "eq", 2, 0))),
    11: _group_read(), 12: _group_read(), 13: _group_read(), 14: _group_read(),
    15: (Check(G, Op.DESCRIBE, PER, GA, _p("Groups[]")),),
    16: (Check(C, Op.DESCRIBE, FILTER, GA,
               instead=Check(G, Op.DESCRIBE, FILTER, GA, _p("Groups[].GroupId"), phase=Phase.RESPONSE)),),
    19: (Check(C, Op.CREATE, PER, TA, instead=Check(T, Op.CREATE, PER, TA, _p("Topics[].Name"))),),
    20: (Check(T, Op.DELETE, PER, TA, _p("TopicNames[]"), max_version=5),
         Check(T, Op.DELETE, PER, TA, _p("Topics[].Name"), min_version=6)),
    21: (Check(T, Op.DELETE, PER, TA, _p("Topics[].Name")),),
    # InitProducerId: Write on the transactional id; without one, IdempotentWrite on the
    # Cluster or Write on any topic.
    22: (Check(X, Op.WRITE, REFUSE, XA, _p("TransactionalId"), When(_p("TransactionalId"), "not_null")),
         Check(C, Op.IDEMPOTENT_WRITE, REFUSE, CA, when=When(_p("TransactionalId"), "is_null"),
               instead=Check(T, Op.WRITE, REFUSE, CA, any_resource=True))),
    23: (Check(C, Op.CLUSTER_ACTION, PER, TA, instead=Check(T, Op.DESCRIBE, PER, TA, _p("Topics[].Topic"))),),
    24: (Check(X, Op.WRITE, REFUSE, XA, _p("V3AndBelowTransactionalId"), max_version=3),
         Check(T, Op.WRITE, PER, TA, _p("V3AndBelowTopics[].Name"), max_version=3),
         Check(C, Op.CLUSTER_ACTION, REFUSE, CA, min_version=4)),
    25: (Check(X, Op.WRITE, REFUSE, XA, _p("TransactionalId")), *_group_read()),
    26: (Check(X, Op.WRITE, REFUSE, XA, _p("TransactionalId")),),
    27: (Check(C, Op.ALTER, REFUSE, CA, instead=Check(C, Op.CLUSTER_ACTION, REFUSE, CA)),),
    28: (Check(X, Op.WRITE, REFUSE, XA, _p("TransactionalId")), *_group_read(),
         Check(T, Op.READ, PER, TA, _p("Topics[].Name"))),
    29: _cluster(Op.DESCRIBE), 30: _cluster(Op.ALTER), 31: _cluster(Op.ALTER),
    32: _configs(Op.DESCRIBE_CONFIGS), 33: _configs(Op.ALTER_CONFIGS), 44: _configs(Op.ALTER_CONFIGS),
    34: _cluster(Op.ALTER), 35: _cluster(Op.DESCRIBE),
    37: (Check(T, Op.ALTER, PER, TA, _p("Topics[].Name")),),
    # Delegation tokens: one created through a sidecar that terminates SASL would belong to
    # the sidecar's own upstream identity, so only Cluster Alter (an administrator) may ask.
    38: _cluster(Op.ALTER, DELEGATION_TOKEN_AUTHORIZATION_FAILED),
    39: _cluster(Op.ALTER, DELEGATION_TOKEN_AUTHORIZATION_FAILED),
    40: _cluster(Op.ALTER, DELEGATION_TOKEN_AUTHORIZATION_FAILED),
    41: _cluster(Op.ALTER, DELEGATION_TOKEN_AUTHORIZATION_FAILED),
    42: (Check(G, Op.DELETE, PER, GA, _p("GroupsNames[]")),),
    43: _cluster(Op.ALTER), 45: _cluster(Op.ALTER), 46: _cluster(Op.DESCRIBE),
    47: (Check(G, Op.DELETE, REFUSE, GA, _p("GroupId")), Check(T, Op.READ, PER, TA, _p("Topics[].Name"))),
    48: _cluster(Op.DESCRIBE_CONFIGS), 49: _cluster(Op.ALTER_CONFIGS),
    50: _cluster(Op.DESCRIBE), 51: _cluster(Op.ALTER),
    55: _cluster(Op.DESCRIBE), 57: _cluster(Op.ALTER),
    61: (Check(T, Op.READ, PER, TA, _p("Topics[].Name")),),
    64: _cluster(Op.ALTER),
    65: (Check(X, Op.DESCRIBE, PER, XA, _p("TransactionalIds[]")),),
    66: (Check(X, Op.DESCRIBE, FILTER, XA, _p("TransactionStates[].TransactionalId"), phase=Phase.RESPONSE),),
    # KIP-848: Group Read, and Describe on every subscribed topic name (Kafka 4.0).
    68: (*_group_read(), Check(T, Op.DESCRIBE, REFUSE, TA, _p("SubscribedTopicNames[]"))),
    69: (Check(G, Op.DESCRIBE, PER, GA, _p("GroupIds[]")),),
    74: _cluster(Op.DESCRIBE_CONFIGS),
    75: (Check(T, Op.DESCRIBE, PER, TA, _p("Topics[].Name")),),
    76: (*_group_read(), Check(T, Op.DESCRIBE, REFUSE, TA, _p("SubscribedTopicNames[]"))),
    77: (Check(G, Op.DESCRIBE, PER, GA, _p("GroupIds[]")),),
    78: (*_group_read(), Check(T, Op.READ, PER, TA, _p("Topics[].TopicId"), by_id=True)),
    79: (*_group_read(), Check(T, Op.READ, PER, TA, _p("Topics[].TopicId"), by_id=True)),
    80: _cluster(Op.ALTER), 81: _cluster(Op.ALTER),
    83: _cluster(Op.CLUSTER_ACTION), 84: _cluster(Op.CLUSTER_ACTION), 85: _cluster(Op.CLUSTER_ACTION),
    86: _cluster(Op.CLUSTER_ACTION), 87: _cluster(Op.CLUSTER_ACTION),
    88: _group_read(),
    89: (Check(G, Op.DESCRIBE, PER, GA, _p("GroupIds[]")),),
    90: (Check(G, Op.DESCRIBE, PER, GA, _p("Groups[].GroupId")),
         Check(T, Op.DESCRIBE, PER, TA, _p("Groups[].Topics[].TopicName"))),
    91: (*_group_read(), Check(T, Op.READ, PER, TA, _p("Topics[].TopicName"))),
    92: (Check(G, Op.DELETE, REFUSE, GA, _p("GroupId")), Check(T, Op.READ, PER, TA, _p("Topics[].TopicName"))),
}


def checks_for(api_key: int, version: int) -> tuple[Check, ...]:
    """The checks of ``api_key`` at ``version`` (empty for :data:`OPEN` keys and unknown ones)."""
    return tuple(c for c in TABLE.get(api_key, ()) if c.applies_at(version))


def paths_for(api_key: int, version: int, phase: Phase = Phase.REQUEST) -> frozenset[Path]:
    """Every request (or response) path the checks of this request read: names and conditions.

    A caller that picks fields instead of decoding the body picks these.
    """
    found: set[Path] = set()
    for check in checks_for(api_key, version):
        for c in _chain(check):
            if c.phase is phase and c.names is not None:
                found.add(c.names)
            if phase is Phase.REQUEST and c.when is not None and c.when.path is not None:
                found.add(c.when.path)
    return frozenset(found)


def _chain(check: Check) -> Iterator[Check]:
    current: Check | None = check
    while current is not None:
        yield current
        current = current.instead


def values_at(body: Any, path: Path) -> list[Any]:
    """Every value at ``path`` in a decoded body (mappings and lists); nulls skipped.

    ``Topics[].Name`` gives each topic's name, ``Groups[]`` each string, ``GroupId`` the one
    value (``[]`` when absent or null).
    """
    current: list[Any] = [body]
    for step in path.steps:
        array = step.endswith("[]")
        name = step[:-2] if array else step
        following: list[Any] = []
        for item in current:
            value = item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)
            if value is None:
                continue
            if array:
                following.extend(v for v in value if v is not None)
            else:
                following.append(value)
        current = following
    return current


def elements_where(body: Any, path: Path, element: str, allowed: frozenset[Any]) -> list[Any]:
    """The values at ``path`` (``Array[].Field``) of the elements whose ``element`` field is allowed."""
    steps = path.steps
    parent = Path(".".join(steps[:-1]))
    out: list[Any] = []
    for item in values_at(body, parent):
        get = item.get if isinstance(item, Mapping) else (lambda k, i=item: getattr(i, k, None))
        if get(element) in allowed and get(steps[-1]) is not None:
            out.append(get(steps[-1]))
    return out
