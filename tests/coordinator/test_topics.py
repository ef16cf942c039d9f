"""Topic snapshots and regex subscriptions (coordinator/topics.py).

Expected matches come from Python's ``re.fullmatch`` over the names, one by one, never
from the snapshot's memo: a regex is matched once per snapshot, and a new snapshot starts
from the last one's matches, matching only the topics added since.
"""

from __future__ import annotations

import re
import uuid

from hypothesis import given
from hypothesis import strategies as st

from coordinator.topics import INTERNAL_TOPICS, TopicInfo, TopicsSnapshot


def snapshot(names: set[str]) -> TopicsSnapshot:
    return TopicsSnapshot.of(TopicInfo(name=n, topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, n), partitions=1)
                             for n in names)  # fmt: skip


def by_hand(pattern: str, names: set[str]) -> set[str]:
    return {n for n in names if n not in INTERNAL_TOPICS and re.fullmatch(pattern, n)}


def test_each_regex_is_matched_once_and_copies_are_handed_out() -> None:
    snap = snapshot({f"app{a:03d}-t{t:02d}" for a in range(5) for t in range(3)} | {"__consumer_offsets"})
    pattern = re.compile("app00[12]-t0[0-1]|__consumer_offsets")
    first = snap.matching(pattern)
    assert first == {"app001-t00", "app001-t01", "app002-t00", "app002-t01"}  # internal topics never match
    first.add("mine")
    assert snap.matching(re.compile(pattern.pattern)) == first - {"mine"}
    assert snapshot(set(snap.by_name)) == snap  # the memo takes no part in equality


NAMES = st.sets(st.text(alphabet="ab-_", min_size=1, max_size=4), max_size=12)
PATTERNS = st.lists(st.sampled_from(["a.*", ".*b", "a-?b", "[ab]+", "__consumer_offsets|a", ".*"]), max_size=3)


@given(old=NAMES, new=NAMES, seen=PATTERNS, later=PATTERNS)
def test_a_new_snapshot_inherits_matches_as_if_matched_afresh(
    old: set[str], new: set[str], seen: list[str], later: list[str]
) -> None:
    previous = snapshot(old | {"__consumer_offsets"})
    for pattern in seen:
        assert previous.matching(re.compile(pattern)) == by_hand(pattern, old)
    current = snapshot(new | {"__consumer_offsets"})
    current.inherit(previous)
    for pattern in seen + later:
        assert current.matching(re.compile(pattern)) == by_hand(pattern, new)


def test_inheriting_matches_only_the_topics_added() -> None:
    previous = snapshot({"a1", "a2", "b1"})
    previous.matching(re.compile("a.*"))
    current = snapshot({"a2", "b1", "a3"})
    tried: list[str] = []

    class Spy:
        pattern = "a.*"

        def fullmatch(self, name: str) -> bool:
            tried.append(name)
            return name.startswith("a")

    previous._matched["a.*"] = (Spy(), previous._matched["a.*"][1])  # type: ignore[assignment]
    current.inherit(previous)
    assert tried == ["a3"]
    assert current.matching(re.compile("a.*")) == {"a2", "a3"}


def test_a_snapshot_keeps_the_previous_objects_of_unchanged_topics() -> None:
    previous = snapshot({"a", "b"})
    changed = TopicInfo(name="b", topic_id=previous.by_name["b"].topic_id, partitions=2)
    fresh = [TopicInfo(name="a", topic_id=previous.by_name["a"].topic_id, partitions=1), changed,
             TopicInfo(name="c", topic_id=uuid.UUID(int=3), partitions=1)]
    current = TopicsSnapshot.of(fresh, previous=previous)
    assert current.by_name["a"] is previous.by_name["a"]
    assert current.by_name["b"] is changed and current.by_name["c"] is fresh[2]
    assert current == TopicsSnapshot.of(fresh)


def test_the_same_topics_in_the_same_order_share_the_previous_tables() -> None:
    previous = snapshot({"a", "b", "c"})
    listed = list(previous.by_name.values())
    same = TopicsSnapshot.of(listed, previous=previous)
    assert same.by_name is previous.by_name and same.by_id is previous.by_id
    assert same == TopicsSnapshot.of(listed)
    # Another order, a copy of one topic, or one topic twice: tables of their own, by hand.
    reordered = TopicsSnapshot.of(listed[::-1], previous=previous)
    assert reordered.by_name is not previous.by_name and reordered.by_name == previous.by_name
    copy = TopicInfo(name=listed[0].name, topic_id=listed[0].topic_id, partitions=1)
    assert TopicsSnapshot.of([copy, *listed[1:]], previous=previous).by_name[copy.name] is listed[0]
    twice = TopicsSnapshot.of([listed[0], listed[0], listed[1]], previous=previous)
    assert set(twice.by_name) == {listed[0].name, listed[1].name}


def test_a_snapshot_of_the_same_topics_inherits_every_match_as_it_was() -> None:
    previous = snapshot({"a1", "a2", "b1"})
    memo = previous.matching(re.compile("a.*"))
    assert memo == {"a1", "a2"}
    current = TopicsSnapshot.of(list(previous.by_name.values()), previous=previous)
    current.inherit(previous)
    assert current._matched["a.*"] is previous._matched["a.*"]
    assert current.matching(re.compile("a.*")) == {"a1", "a2"}
