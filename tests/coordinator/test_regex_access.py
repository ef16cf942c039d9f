"""A KIP-848 member's regex resolves only to topics its principal may Describe (issue 22).

Kafka 4.0 resolves SubscribedTopicRegex per member and keeps only the topics the member's
principal is authorized to Describe; names subscribed explicitly are checked on the
request itself (ConsumerGroupHeartbeat needs Describe on each). Expected sets written by hand.
"""

from __future__ import annotations

import uuid

from coordinator.consumer_group import ConsumerGroup, ConsumerMember
from coordinator.messages.common import Client
from coordinator.topics import TopicInfo, TopicsSnapshot

TOPICS = TopicsSnapshot.of(
    TopicInfo(name=n, topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, n), partitions=p)
    for n, p in (("orders-eu", 3), ("orders-us", 2), ("orders-secret", 1), ("payroll", 1)))

#: alice may Describe every orders- topic but orders-secret; bob only orders-us.
RIGHTS = {"User:alice": {"orders-eu", "orders-us"}, "User:bob": {"orders-us"}}
asked: list[tuple[str, str, frozenset[str]]] = []


def access(principal: str, host: str, names: set[str]) -> set[str]:
    asked.append((principal, host, frozenset(names)))
    return names & RIGHTS.get(principal, set())


def member(member_id: str, principal: str, regex: str | None, names: tuple[str, ...] = ()) -> ConsumerMember:
    return ConsumerMember(member_id=member_id, subscribed_topic_regex=regex, subscribed_topic_names=names,
                          client=Client(client_id="c", client_host="/10.0.0.5", principal=principal))


def test_regex_filtered_by_the_members_rights() -> None:
    asked.clear()
    alice = member("a", "User:alice", "orders-.*")
    assert alice.subscribed_topics(TOPICS) == {"orders-eu", "orders-us", "orders-secret"}  # no ACLs
    assert alice.subscribed_topics(TOPICS, access) == {"orders-eu", "orders-us"}
    assert asked == [("User:alice", "10.0.0.5", frozenset({"orders-eu", "orders-us", "orders-secret"}))]


def test_explicit_names_are_not_filtered_here() -> None:
    bob = member("b", "User:bob", "orders-.*", ("payroll",))
    assert bob.subscribed_topics(TOPICS, access) == {"orders-us", "payroll"}


def test_group_metadata_is_the_union_of_what_each_member_may_see() -> None:
    group = ConsumerGroup(group_id="g")
    group.put(member("a", "User:alice", "orders-.*"))
    group.put(member("b", "User:bob", "orders-e.*"))
    metadata = group.compute_subscription_metadata(TOPICS, access)
    assert {n: count for n, (_id, count) in metadata.items()} == {"orders-eu": 3, "orders-us": 2}
    # bob's regex matches orders-eu, which he may not see; alice's brings it in for her.
    assert group.members["b"].subscribed_topics(TOPICS, access) == set()
