"""Server-side assignors of KIP-848 groups: ``uniform`` and ``range``.

An assignor is a pure function from the members (what each subscribes to, what each is
assigned now) and the subscribed topics (partition counts) to a target assignment. Both
give every partition of every subscribed topic to exactly one member subscribed to that
topic, and nothing to anyone else.

* ``uniform`` (Kafka's ``UniformAssignor``): balanced and sticky. Members keep what they
  have where that stays balanced; partitions move only from a member holding at least two
  more than another member that could take them. In a group whose members all subscribe
  to the same topics, counts differ by at most one.
* ``range`` (Kafka's ``RangeAssignor``): per topic, the subscribed members in member-id order
  each get a contiguous range; the first ``partitions % members`` get one extra. Members
  subscribed to the same topics get the same partition numbers of each (co-partitioning).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from uuid import UUID

Assignment = dict[UUID, frozenset[int]]
"""Partitions by topic id."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MemberSpec:
    """What an assignor knows of one member."""

    subscribed: frozenset[UUID]
    current: Mapping[UUID, frozenset[int]] = field(default_factory=dict)


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[UUID, int]], dict[str, Assignment]]


def _pack(owned: dict[str, dict[UUID, set[int]]]) -> dict[str, Assignment]:
    return {m: {t: frozenset(ps) for t, ps in topics.items() if ps} for m, topics in owned.items()}


def range_assignor(members: Mapping[str, MemberSpec], topics: Mapping[UUID, int]) -> dict[str, Assignment]:
    """Contiguous ranges per topic over the subscribed members sorted by id."""
    owned: dict[str, dict[UUID, set[int]]] = {m: {} for m in members}
    for topic in sorted(topics, key=str):
        count = topics[topic]
        takers = sorted(m for m, spec in members.items() if topic in spec.subscribed)
        if not takers or count <= 0:
            continue
        quota, extra = divmod(count, len(takers))
        start = 0
        for i, m in enumerate(takers):
            size = quota + (1 if i < extra else 0)
            if size:
                owned[m][topic] = set(range(start, start + size))
            start += size
    return _pack(owned)


def uniform_assignor(members: Mapping[str, MemberSpec], topics: Mapping[UUID, int]) -> dict[str, Assignment]:
    """Balanced and sticky (see the module docstring)."""
    owned: dict[str, dict[UUID, set[int]]] = {m: {} for m in members}
    counts = dict.fromkeys(members, 0)
    owner: dict[tuple[UUID, int], str] = {}
    # 1. Keep what is still valid: the topic exists, the member subscribes, nobody else has it.
    for m in sorted(members):
        spec = members[m]
        for topic, parts in spec.current.items():
            if topic not in topics or topic not in spec.subscribed:
                continue
            for p in sorted(parts):
                if p < topics[topic] and (topic, p) not in owner:
                    owner[(topic, p)] = m
                    owned[m].setdefault(topic, set()).add(p)
                    counts[m] += 1
    eligible = {t: sorted(m for m, s in members.items() if t in s.subscribed) for t in topics}
    # 2. Shed excess: in a homogeneous group nobody keeps more than its fair share.
    subs = {frozenset(s.subscribed & topics.keys()) for s in members.values()}
    homogeneous = len(subs) == 1
    if homogeneous and members:
        total = sum(topics[t] for t in next(iter(subs)))
        quota, extra = divmod(total, len(members))
        # Members already holding more than the quota keep quota+1 while "extra" slots last.
        for m in sorted(members, key=lambda m: (-counts[m], m)):
            allowed = quota + 1 if extra > 0 and counts[m] > quota else quota
            if allowed == quota + 1:
                extra -= 1
            while counts[m] > allowed:
                topic = max(owned[m], key=lambda t: (len(owned[m][t]), str(t)))
                p = max(owned[m][topic])
                owned[m][topic].discard(p)
                del owner[(topic, p)]
                counts[m] -= 1
    # 3. Give out what nobody has, topics with the fewest takers first, to the least loaded.
    #    The least loaded is the smallest (count, member id): a heap of the topic's takers,
    #    built only for a topic with something to give (a join leaves a few partitions
    #    free among thousands; a scan of every taker for each would be quadratic).
    for topic in sorted(topics, key=lambda t: (len(eligible[t]), str(t))):
        takers = eligible[topic]
        free = [p for p in range(topics[topic]) if (topic, p) not in owner]
        if not takers or not free:
            continue
        heap = [(counts[m], m) for m in takers]
        heapq.heapify(heap)
        for p in free:
            _, m = heapq.heappop(heap)
            owner[(topic, p)] = m
            owned[m].setdefault(topic, set()).add(p)
            counts[m] += 1
            heapq.heappush(heap, (counts[m], m))
    # 4. Even out: move a partition from a member with two more than another eligible one.
    #    (Steps 2 and 3 already balance a homogeneous group.)
    for _ in range(0 if homogeneous else sum(topics.values()) * max(len(members), 1)):
        moved = False
        for (topic, p), m in sorted(owner.items(), key=lambda kv: (-counts[kv[1]], str(kv[0][0]), kv[0][1])):
            target = min(eligible[topic], key=lambda x: (counts[x], x))
            if counts[m] - counts[target] >= 2:
                owned[m][topic].discard(p)
                owned[target].setdefault(topic, set()).add(p)
                owner[(topic, p)] = target
                counts[m] -= 1
                counts[target] += 1
                moved = True
                break
        if not moved:
            break
    return _pack(owned)


#: The assignors by their Kafka names (``group.consumer.assignors``).
ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assignor, "range": range_assignor}
