"""The built-in ``policy`` request filter: traffic rules an operator sets with ``policy.*`` keys.

Theory of operation. Written against the same interface as an operator's filter
(:mod:`proxy.datapath.filters`); ``filter.class.names=policy`` turns it on. Each rule is off
until its key is set (docs/configuration.md, docs/filters.md):

* ``policy.client.id.pattern``: every request but ApiVersions and SASL carries a client id
  the whole of which the pattern matches, else POLICY_VIOLATION;
* ``policy.acks.all.topics.pattern``: a Produce naming such a topic has acks=all (-1); an
  acks=1 Produce is answered INVALID_REQUIRED_ACKS and none of its records are written; an
  acks=0 Produce has no answer, so its connection is closed, as Kafka closes one after a
  failed acks=0 write. A topic named by ID only (Produce v13) cannot be matched by name: the
  rule then holds for it too (fail closed);
* ``policy.produce.max.records`` / ``policy.produce.max.bytes``: the records and record bytes
  one Produce carries (POLICY_VIOLATION above either);
* ``policy.compression.types.refused``: batch compression a Produce may not use
  (UNSUPPORTED_COMPRESSION_TYPE);
* ``policy.create.topics.*``: a CreateTopics whose topics have too few or too many
  partitions, too low a replication factor, or a name the pattern does not match is refused
  (POLICY_VIOLATION, with the reason as each topic's message), as Kafka's
  ``create.topic.policy.class.name`` refuses it. Kafka decides per topic; here a request
  with one topic refused is refused whole, every topic answered with the reason. A count or
  factor of -1 (the broker's default, unknown here) is refused where a bound is set.

``policy.mode=shadow`` refuses nothing: would-be refusals are logged, counted in
``ksidecar_filter_refusals_total{filter="policy",mode="shadow"}`` and audited.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from protocol.apis import API_VERSIONS, CREATE_TOPICS, PRODUCE, SASL_AUTHENTICATE, SASL_HANDSHAKE
from protocol.errors import ErrorCode, ProtocolError
from protocol.records import summarize
from proxy.config.keys import KEYS, ConfigError
from proxy.datapath.filters import FilterContext, FilterRequest, Refuse

__all__ = ["PolicyFilter"]

#: Requests a client sends before it could know of a policy: never refused for their client id.
_EXEMPT = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
_DEFAULTS = {key.name: key for key in KEYS if key.name.startswith("policy.")}


class PolicyFilter:
    """The ``policy`` filter (see the module docstring)."""

    name = "policy"

    def __init__(self) -> None:
        self.shadow = False
        self.client_id: re.Pattern[str] | None = None
        self.acks_all: re.Pattern[str] | None = None
        self.max_records = 0
        self.max_bytes = 0
        self.compressions: frozenset[str] = frozenset()
        self.partitions_min = 0
        self.partitions_max = 0
        self.replication_min = 0
        self.topic_name: re.Pattern[str] | None = None
        self.api_keys: frozenset[int] | None = frozenset({PRODUCE, CREATE_TOPICS})

    def configure(self, config: Mapping[str, str]) -> None:
        """Read the ``policy.*`` keys (validated as the sidecar's configuration validates them)."""

        def value(name: str) -> Any:
            key = _DEFAULTS[name]
            return key.read(config.get(name, key.default or ""))

        def pattern(name: str) -> re.Pattern[str] | None:
            text: str = value(name)
            return re.compile(text) if text else None

        self.shadow = value("policy.mode") == "shadow"
        self.client_id = pattern("policy.client.id.pattern")
        self.acks_all = pattern("policy.acks.all.topics.pattern")
        self.max_records = value("policy.produce.max.records")
        self.max_bytes = value("policy.produce.max.bytes")
        self.compressions = value("policy.compression.types.refused")
        self.partitions_min = value("policy.create.topics.partitions.min")
        self.partitions_max = value("policy.create.topics.partitions.max")
        self.replication_min = value("policy.create.topics.replication.factor.min")
        self.topic_name = pattern("policy.create.topics.name.pattern")
        if self.partitions_max and self.partitions_min > self.partitions_max:
            raise ConfigError(f"policy.create.topics.partitions.min={self.partitions_min} is above "
                              f"policy.create.topics.partitions.max={self.partitions_max}")
        self.api_keys = None if self.client_id is not None else frozenset({PRODUCE, CREATE_TOPICS})

    def on_request(self, request: FilterRequest, context: FilterContext) -> Refuse | None:
        """The first rule the request breaks, as a refusal; ``None`` if it keeps them all."""
        if self.client_id is not None and request.api_key not in _EXEMPT \
                and not self.client_id.fullmatch(request.client_id or ""):
            return self._refuse(ErrorCode.POLICY_VIOLATION, "client.id",
                                f"client id {request.client_id!r} does not match policy.client.id.pattern "
                                f"{self.client_id.pattern!r}", (("ClientId", request.client_id or ""),))
        if request.api_key == PRODUCE:
            return self._produce(request)
        if request.api_key == CREATE_TOPICS:
            return self._create_topics(request)
        return None

    def _refuse(self, error: ErrorCode, rule: str, message: str,
                resources: tuple[tuple[str, str], ...] = ()) -> Refuse:
        return Refuse(error, f"policy: {message}", resources, rule=rule, shadow=self.shadow)

    def _produce(self, request: FilterRequest) -> Refuse | None:
        if not (self.acks_all or self.max_records or self.max_bytes or self.compressions):
            return None
        body = request.body
        acks = body["Acks"]
        records = size = 0
        for topic in body["TopicData"]:
            name = topic.get("Name") or ""
            if self.acks_all is not None and acks != -1 and (not name or self.acks_all.fullmatch(name)):
                shown = name or str(topic.get("TopicId"))
                return self._refuse(ErrorCode.INVALID_REQUIRED_ACKS, "acks.all",
                                    f"topic {shown!r} requires acks=all (-1), the producer sent acks={acks}",
                                    (("Topic", shown),))
            for partition in topic["PartitionData"]:
                data = partition.get("Records")
                if not data:
                    continue
                try:
                    summary = summarize(data)
                except ProtocolError:
                    continue  # the broker answers CORRUPT_MESSAGE for it
                records += summary.record_count
                size += summary.total_bytes
                refused = sorted(summary.compressions & self.compressions)
                if refused:
                    return self._refuse(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "compression",
                                        f"compression {refused[0]} is refused (policy.compression.types.refused)",
                                        (("Topic", name),))
        if self.max_records and records > self.max_records:
            return self._refuse(ErrorCode.POLICY_VIOLATION, "produce.max.records",
                                f"{records} records in one Produce, more than policy.produce.max.records="
                                f"{self.max_records}")
        if self.max_bytes and size > self.max_bytes:
            return self._refuse(ErrorCode.POLICY_VIOLATION, "produce.max.bytes",
                                f"{size} record bytes in one Produce, more than policy.produce.max.bytes="
                                f"{self.max_bytes}")
        return None

    def _create_topics(self, request: FilterRequest) -> Refuse | None:
        if not (self.partitions_min or self.partitions_max or self.replication_min or self.topic_name):
            return None
        problems: list[tuple[str, str, str]] = []
        for topic in request.body["Topics"]:
            name = topic["Name"]
            why = self._topic_problem(topic)
            if why is not None:
                problems.append((name, why[0], why[1]))
        if not problems:
            return None
        rule = problems[0][1]
        message = "; ".join(f"topic {name!r} {why}" for name, _, why in problems)
        return self._refuse(ErrorCode.POLICY_VIOLATION, rule, message,
                            tuple(("Topic", name) for name, _, _ in problems))

    def _topic_problem(self, topic: Mapping[str, Any]) -> tuple[str, str] | None:
        """``(rule, why)`` for the first rule a topic to create breaks."""
        name: str = topic["Name"]
        assignments = topic.get("Assignments") or ()
        partitions: int = len(assignments) if assignments else topic["NumPartitions"]
        replication: int = len(assignments[0]["BrokerIds"]) if assignments else topic["ReplicationFactor"]
        if self.topic_name is not None and not self.topic_name.fullmatch(name):
            return ("create.topics.name", f"does not match policy.create.topics.name.pattern "
                                          f"{self.topic_name.pattern!r}")
        if (self.partitions_min or self.partitions_max) and partitions < 0:
            return ("create.topics.partitions", "asks for the broker's default partition count, which the "
                                                "policy cannot check: give NumPartitions")
        if self.partitions_min and partitions < self.partitions_min:
            return ("create.topics.partitions", f"has {partitions} partition(s), fewer than "
                                                f"policy.create.topics.partitions.min={self.partitions_min}")
        if self.partitions_max and partitions > self.partitions_max:
            return ("create.topics.partitions", f"has {partitions} partitions, more than "
                                                f"policy.create.topics.partitions.max={self.partitions_max}")
        if self.replication_min and replication < 0:
            return ("create.topics.replication", "asks for the broker's default replication factor, which "
                                                 "the policy cannot check: give ReplicationFactor")
        if self.replication_min and replication < self.replication_min:
            return ("create.topics.replication", f"has replication factor {replication}, below "
                                                 "policy.create.topics.replication.factor.min="
                                                 f"{self.replication_min}")
        return None
