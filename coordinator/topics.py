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
    #: What each regex matched in this snapshot (:meth:`matching`): groups that subscribe
    #: with the same regex share one pass over the topics, and the next snapshot starts
    #: from it (:meth:`inherit`).
    _matched: dict[str, tuple[re.Pattern[str], frozenset[str]]] = field(
        default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, topics: Iterable[TopicInfo], previous: TopicsSnapshot | None = None) -> TopicsSnapshot:
        """A snapshot of ``topics``; a topic ``previous`` holds unchanged is its object there.

        A refresh of 5,000 unchanged topics then leaves no new long-lived objects behind
        (the new ones die young), and does not drive the garbage collector into full
        collections, which pause every connection of the sidecar.
        """
        listed = list(topics)
        if previous is None:
            return cls({t.name: t for t in listed}, {t.topic_id: t for t in listed})
        known = previous.by_name
        if len(listed) == len(known) and all(a is b for a, b in zip(listed, known.values(), strict=True)):
            # The same topics in the same order (a reader that remembers topics gives their
            # objects back): the previous snapshot's tables serve as they are.
            return cls(previous.by_name, previous.by_id)
        listed = [old if (old := known.get(t.name)) is t or old == t else t for t in listed]
        return cls({t.name: t for t in listed}, {t.topic_id: t for t in listed})

    def name_of(self, topic_id: UUID) -> str | None:
        """The name of a topic id, or ``None`` when unknown."""
        info = self.by_id.get(topic_id)
        return None if info is None else info.name

    def matching(self, pattern: re.Pattern[str]) -> set[str]:
        """Non-internal topic names the whole of which ``pattern`` matches (RE2J ``matches``)."""
        memo = self._matched.get(pattern.pattern)
        if memo is None:
            fullmatch = pattern.fullmatch
            memo = self._matched[pattern.pattern] = (pattern, frozenset(
                n for n in self.by_name if n not in INTERNAL_TOPICS and fullmatch(n)))
        return set(memo[1])

    def inherit(self, previous: TopicsSnapshot) -> None:
        """Start from what ``previous`` matched: each regex it knows is matched against the
        topics added since only (a refresh that finds the same 5,000 topics matches nothing
        again), and loses the topics removed."""
        if not previous._matched:
            return
        if previous.by_name is self.by_name:  # nothing added or removed
            for key, memo in previous._matched.items():
                self._matched.setdefault(key, memo)
            return
        old, new = previous.by_name.keys(), self.by_name.keys()
        added = [n for n in new if n not in old and n not in INTERNAL_TOPICS]
        removed = old - new
        for key, memo in previous._matched.items():
            if key in self._matched:
                continue
            pattern, matched = memo
            fullmatch = pattern.fullmatch
            gained = {n for n in added if fullmatch(n)}
            lost = matched & removed
            # Unchanged: the same objects (nothing new for the garbage collector to keep).
            self._matched[key] = (pattern, (matched - lost) | gained) if gained or lost else memo


def compile_regex(regex: str) -> re.Pattern[str]:
    """Compile a SubscribedTopicRegex, or raise INVALID_REGULAR_EXPRESSION.

    Kafka evaluates these with RE2J; Python's ``re`` accepts a superset of RE2's syntax, so
    a regex Kafka accepts is accepted here (the reverse is not checked)."""
    try:
        return re.compile(regex)
    except re.error as exc:
        raise GroupError(Code.INVALID_REGULAR_EXPRESSION,
                         f"SubscribedTopicRegex {regex!r} is invalid: {exc}") from None
