"""The topic metadata the shell supplies: names, ids, partition counts.

The core never asks the broker anything. The shell refreshes a :class:`TopicsSnapshot`
(from Metadata responses on its control connection, on a period and when subscriptions
change) and hands it to ``GroupCoordinator.update_topics``; KIP-848 groups whose
subscribed topics changed (partition count, creation, deletion, a new regex match) get a
new group epoch and a new target assignment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from uuid import UUID

from coordinator.errors import Code, GroupError

#: Kafka's internal topics never match a regex subscription (``Topic.isInternal``).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


@dataclass(frozen=True, kw_only=True, slots=True)
class TopicInfo:
    """One topic as the broker describes it."""

    name: str
    topic_id: UUID
    partitions: int


@dataclass(frozen=True, slots=True)
class TopicsSnapshot:
    """All topics the shell knows of, by name and by id."""

    by_name: Mapping[str, TopicInfo] = field(default_factory=dict)
    by_id: Mapping[UUID, TopicInfo] = field(default_factory=dict)

    @classmethod
    def of(cls, topics: Iterable[TopicInfo]) -> TopicsSnapshot:
        """A snapshot of ``topics``."""
        listed = list(topics)
        return cls({t.name: t for t in listed}, {t.topic_id: t for t in listed})

    def name_of(self, topic_id: UUID) -> str | None:
        """The name of a topic id, or ``None`` when unknown."""
        info = self.by_id.get(topic_id)
        return None if info is None else info.name

    def matching(self, pattern: re.Pattern[str]) -> set[str]:
        """Non-internal topic names the whole of which ``pattern`` matches (RE2J ``matches``)."""
        return {n for n in self.by_name if n not in INTERNAL_TOPICS and pattern.fullmatch(n)}


def compile_regex(regex: str) -> re.Pattern[str]:
    """Compile a SubscribedTopicRegex, or raise INVALID_REGULAR_EXPRESSION.

    Kafka evaluates these with RE2J; Python's ``re`` accepts a superset of RE2's syntax, so
    a regex Kafka accepts is accepted here (the reverse is not checked)."""
    try:
        return re.compile(regex)
    except re.error as exc:
        raise GroupError(Code.INVALID_REGULAR_EXPRESSION,
                         f"SubscribedTopicRegex {regex!r} is invalid: {exc}") from None
