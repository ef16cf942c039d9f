"""Share group membership (coordinator/share_group.py) and the ``simple`` assignor
(coordinator/share_assignor.py), KIP-932 as Kafka 4.3.1 runs it.

Where the expected values come from:

* the heartbeat rules, messages and epochs: Kafka 4.3.1's ``GroupMetadataManager`` and
  ``GroupCoordinatorService``, and the share cases of its ``GroupMetadataManagerTest`` (named
  at each test), worked through by hand;
* the assignor: small cases worked out by hand from ``SimpleHomogeneousAssignmentBuilder`` /
  ``SimpleHeterogeneousAssignmentBuilder`` (each test says how), and cases whose answer
  depends on Java's hash orders, taken from Kafka 4.3.1's own ``SimpleAssignor`` and
  ``TimelineHashMap`` (compiled from the release's sources and run on these inputs);
* Java's hash codes: the JDK's definitions, computed by hand.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.errors import Code
from coordinator.messages.common import Client, TopicPartitions
from coordinator.share_assignor import (
    AssignorMember,
    JavaHashMap,
    MemberTable,
    java_int_hash,
    java_string_hash,
    java_topic_partition_hash,
    java_uuid_hash,
    simple_assign,
)
from coordinator.share_group import (
    ShareGroupConfig,
    ShareGroupCoordinator,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    ShareGroupSettings,
    ShareStep,
)
from coordinator.share_group_record import (
    DurableMember,
    InitTopic,
    MalformedShareGroup,
    ShareGroupRecord,
    decode_group,
    encode_group,
)
from coordinator.topics import TopicInfo, TopicsSnapshot
from protocol.apis import ApiRegistry
from protocol.schema import decode, encode

#: A topic id whose Java hash is 0 (both halves 1): ``TopicIdPartition(FOO, p)`` hashes to p.
FOO = UUID(int=(1 << 64) | 1)
BAR = UUID(int=(2 << 64) | 7)
T0 = 1_700_000_000_000
CLIENT = Client(client_id="consumer-1", client_host="/10.0.0.5")
# Kafka-client-style member ids (22 characters of URL-safe base64).
M1, M2, M3, M4, M5 = ("wJ3CvAIUQEmXeUJ1Xx3Mzw", "4Fz0T3nCTfu0p4s6lwFb6A", "Rk0v5Vf5QJyK8ZcJm1zQbg",
                      "pQ7mN2xYRhCtL0sV9aE3Ww", "Zt8uH1bKQ6eJr4Xy2nM0cA")
ORDERS = UUID("5b0e7e1c-2f0f-4a8b-9d3c-1e2a4b5f6071")
PAYMENTS = UUID("0a1b2c3d-4e5f-6071-8192-a3b4c5d6e7f8")


def topics(*infos: tuple[str, UUID, int]) -> TopicsSnapshot:
    return TopicsSnapshot.of([TopicInfo(name=n, topic_id=i, partitions=c) for n, i, c in infos])


def coordinator(*infos: tuple[str, UUID, int], **settings_: Any) -> ShareGroupCoordinator:
    c = ShareGroupCoordinator(ShareGroupSettings(**settings_))
    c.update_topics(topics(*infos) if infos else topics(("orders", FOO, 3)))
    return c


def hb(c: ShareGroupCoordinator, member: str, epoch: int, now: int, names: tuple[str, ...] | None = None,
       group: str = "g", rack: str | None = None, client: Client = CLIENT) -> ShareStep:
    return c.heartbeat(ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                                  rack_id=rack, subscribed_topic_names=names), client, now)


def parts(step: ShareStep) -> dict[UUID, set[int]] | None:
    assert step.response is not None
    a = step.response.assignment
    return None if a is None else {t.topic_id: set(t.partitions) for t in a}


def error(step: ShareStep) -> tuple[Code, str | None]:
    assert step.response is not None
    return step.response.error, step.response.error_message


# -- Java's hashes and collection orders --------------------------------------------------------


def test_java_hash_codes() -> None:
    assert java_string_hash("foo") == 101574  # 102*31^2 + 111*31 + 111
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("\U0001f600") == 55357 * 31 + 56832  # two UTF-16 code units
    assert java_string_hash("polygenelubricants") == -(2**31)  # wraps to Integer.MIN_VALUE
    assert java_uuid_hash(FOO) == 0  # 1 ^ 1
    assert java_uuid_hash(UUID(int=(0xFFFF_FFFF_0000_0000 << 64))) == -1  # (int)(x >> 32) ^ (int) x
    assert java_topic_partition_hash((FOO, 7)) == 7  # record: 31 * 0 + 7
    assert java_topic_partition_hash((UUID(int=1), 2)) == 33
    assert java_int_hash(-5) == -5


def test_java_hash_map_order() -> None:
    # Default table of 16: 17, 1 and 33 share bin 1, in insertion order (put appends).
    m: JavaHashMap[int, int] = JavaHashMap(java_int_hash)
    for k in (33, 2, 17, 1):
        m.put(k, 0)
    assert m.ordered() == [33, 17, 1, 2]
    # computeIfAbsent puts a new key at the front of its bin.
    m.compute_if_absent(49, lambda: 0)
    assert m.ordered() == [49, 33, 17, 1, 2]
    # The 13th key passes the threshold (12): 32 slots, 16 moves to its own bin after 0..11.
    g: JavaHashMap[int, None] = JavaHashMap(java_int_hash)
    for k in [16, *range(12)]:
        g.put(k, None)
    assert g.ordered() == [*range(12), 16]
    # computeIfAbsent grows an over-full table before it looks, even for a key it has:
    # HashMap(1) takes two keys in 2 slots (threshold 1), and the next call makes it 4.
    h: JavaHashMap[int, int] = JavaHashMap(java_int_hash, 1)
    h.put(1, 0)
    h.compute_if_absent(2, lambda: 0)
    assert h.ordered() == [2, 1]
    h.compute_if_absent(2, lambda: 0)
    assert h.ordered() == [1, 2]
    # new HashSet<>(collection) of 13 keys sizes for 18 (JDK 19+): 32 slots, 16 after 15.
    assert JavaHashMap.copy_of(java_int_hash, [16, *range(16)][:13]).ordered() == [*range(12), 16]
    m.remove(17)
    assert m.ordered() == [49, 33, 1, 2]


def test_member_table_order_is_kafkas_timeline_hash_map() -> None:
    # Kafka 4.3.1's TimelineHashMap, fed the same puts and removes.
    ids = [M1, M2, M3, M4, M5]
    assert MemberTable(ids).order() == [M1, M5, M2, M3, M4]
    t = MemberTable(ids)
    t.remove(M2)
    t.add(M2)
    assert t.order() == [M1, M2, M5, M3, M4]
    assert MemberTable([f"m{i}" for i in range(1, 8)]).order() == ["m5", "m2", "m7", "m4", "m1", "m6", "m3"]
    assert MemberTable(list("abcde")).order() == ["c", "e", "b", "d", "a"]


# -- the simple assignor -----------------------------------------------------------------------------


def assign(members: list[tuple[str, tuple[str, ...], dict[UUID, tuple[int, ...]]]],
           infos: dict[str, tuple[UUID, int]], assignable: dict[UUID, frozenset[int]] | None = None,
           ) -> dict[str, dict[UUID, set[int]]]:
    table = MemberTable([m for m, _, _ in members])
    specs = {m: AssignorMember(member_id=m, subscribed_topic_names=names, target=target)
             for m, names, target in members}
    counts: dict[str, int] = {}
    for _, names, _ in members:
        for n in set(names):
            counts[n] = counts.get(n, 0) + 1
    homogeneous = all(c == len(members) for c in counts.values())
    if assignable is None:
        assignable = {i: frozenset(range(n)) for i, n in infos.values()}
    got = simple_assign([specs[m] for m in table.order()], homogeneous=homogeneous, topics=infos,
                        assignable=assignable)
    return {m: {t: set(ps) for t, ps in a.items()} for m, a in got.items()}


def test_members_outnumber_partitions_share_them() -> None:
    # 5 members, 3 partitions: desiredSharing = ceil(5/3) = 2, six assignments; quotas
    # ceil(1.2 (i+1)) - ceil(1.2 i) = 2,1,1,1,1. Members "a".."e" hash to bins 1..5 (that
    # order); TopicIdPartition(FOO, p) hashes to p. Round robin: p0 -> a, b; p1 -> c, d;
    # p2 -> e, then the unfilled ones again from the start: a.
    got = assign([(m, ("orders",), {}) for m in "abcde"], {"orders": (FOO, 3)})
    assert got == {"a": {FOO: {0, 2}}, "b": {FOO: {0}}, "c": {FOO: {1}}, "d": {FOO: {1}}, "e": {FOO: {2}}}


def test_fewer_members_than_partitions() -> None:
    # "m1" and "m2" hash to 3428 and 3429: bins 4 and 5. Quotas for 3 over 2: 2, 1.
    # p0 -> m1, p1 -> m2 (filled), p2 -> m1 again.
    assert assign([("m2", ("orders",), {}), ("m1", ("orders",), {})], {"orders": (FOO, 3)}) == {
        "m1": {FOO: {0, 2}}, "m2": {FOO: {1}}}


def test_sticky_rebalance_on_join() -> None:
    # m3 joins m1 {0, 2} and m2 {1}: quotas 1,1,1. m1 is over: it gives up the first of its
    # partitions in its set's order (p0), which goes to m3. m2 keeps p1.
    got = assign([("m1", ("orders",), {FOO: (0, 2)}), ("m2", ("orders",), {FOO: (1,)}), ("m3", ("orders",), {})],
                 {"orders": (FOO, 3)})
    assert got == {"m1": {FOO: {2}}, "m2": {FOO: {1}}, "m3": {FOO: {0}}}


def test_only_initialized_partitions_are_assigned() -> None:
    # GroupSpecImpl.isPartitionAssignable: partitions outside the initialized map are not targets.
    assert assign([("m1", ("orders",), {})], {"orders": (FOO, 3)}, {FOO: frozenset({0, 2})}) == {"m1": {FOO: {0, 2}}}
    assert assign([("m1", ("orders",), {})], {"orders": (FOO, 3)}, {}) == {"m1": {}}


def test_unsubscribed_and_unknown_topics() -> None:
    # Homogeneous: an old topic nobody subscribes to is dropped from the target; a subscribed
    # name missing from the metadata is skipped.
    got = assign([("m1", ("orders", "ghost"), {BAR: (0,)})], {"orders": (FOO, 2), "payments": (BAR, 1)})
    assert got == {"m1": {FOO: {0, 1}}}


def test_heterogeneous_balances_each_topic() -> None:
    # m1 subscribes orders and payments, m2 payments only. payments: both share 1 partition?
    # No: 1 partition, 2 subscribers -> sharing 2, quotas 1,1: both get payments-0. orders:
    # m1 alone takes both.
    got = assign([("m1", ("orders", "payments"), {}), ("m2", ("payments",), {})],
                 {"orders": (FOO, 2), "payments": (BAR, 1)})
    assert got == {"m1": {FOO: {0, 1}, BAR: {0}}, "m2": {BAR: {0}}}


KAFKA_CASES = [
    # (members in join order with their names and targets, topics, Kafka's answer)
    ([(M1, ("orders",), {}), (M2, ("orders",), {}), (M3, ("orders",), {}), (M4, ("orders",), {})],
     {"orders": (ORDERS, 3)},
     {M4: {ORDERS: {0, 2}}, M3: {ORDERS: {2}}, M2: {ORDERS: {0, 1}}, M1: {ORDERS: {1}}}),
    ([(M1, ("orders",), {ORDERS: (1,)}), (M2, ("orders",), {ORDERS: (0, 1)}), (M3, ("orders",), {ORDERS: (2,)}),
      (M4, ("orders",), {ORDERS: (0, 2)}), (M5, ("orders",), {})],
     {"orders": (ORDERS, 3)},
     {M4: {ORDERS: {0, 2}}, M3: {ORDERS: {2}}, M2: {ORDERS: {0}}, M1: {ORDERS: {1}}, M5: {ORDERS: {1}}}),
    ([(M1, ("orders",), {ORDERS: (1,)}), (M3, ("orders",), {ORDERS: (2,)}), (M4, ("orders",), {ORDERS: (0, 2)})],
     {"orders": (ORDERS, 7)},
     {M4: {ORDERS: {0, 3, 4}}, M3: {ORDERS: {2, 6}}, M1: {ORDERS: {1, 5}}}),
    ([(M1, ("orders", "payments"), {}), (M2, ("payments",), {}), (M3, ("orders", "payments"), {})],
     {"orders": (ORDERS, 4), "payments": (PAYMENTS, 2)},
     {M3: {PAYMENTS: {0, 1}, ORDERS: {0, 2}}, M2: {PAYMENTS: {0}}, M1: {PAYMENTS: {1}, ORDERS: {1, 3}}}),
]


@pytest.mark.parametrize(("members", "infos", "expected"), KAFKA_CASES)
def test_assignments_match_kafkas_simple_assignor(members: Any, infos: Any, expected: Any) -> None:
    assert assign(members, infos) == expected


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_assignor_invariants(data: st.DataObject) -> None:
    counts = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3), label="partitions")
    infos = {f"t{i}": (UUID(int=(i + 1) * 7919 << 70 | i), n) for i, n in enumerate(counts)}
    names = sorted(infos)
    homogeneous = data.draw(st.booleans(), label="homogeneous")
    common = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True), label="common")
    ops = data.draw(st.lists(st.integers(0, 9), min_size=1, max_size=8), label="joins and leaves")
    table = MemberTable()
    subs: dict[str, tuple[str, ...]] = {}
    targets: dict[str, dict[UUID, tuple[int, ...]]] = {}
    for n, op in enumerate(ops):
        if subs and op < 3:  # a member leaves
            gone = sorted(subs)[op % len(subs)]
            del subs[gone], targets[gone]
            table.remove(gone)
        else:
            m = f"m{n}"
            subs[m] = tuple(common) if homogeneous else tuple(sorted(data.draw(
                st.lists(st.sampled_from(names), min_size=1, unique=True), label="names")))
            targets[m] = {}
            table.add(m)
        specs = [AssignorMember(member_id=m, subscribed_topic_names=subs[m], target=targets[m]) for m in table.order()]
        homo = all(all(t in s for s in subs.values()) for t in set().union(*subs.values())) if subs else True
        got = simple_assign(specs, homogeneous=homo, topics=infos,
                            assignable={i: frozenset(range(c)) for i, c in infos.values()})
        targets.update(got)
        for name, (tid, count) in infos.items():
            takers = [m for m in subs if name in subs[m]]
            if not takers:
                continue
            sharing = -(-len(takers) // count)
            for p in range(count):
                holders = {m for m in subs if p in got[m].get(tid, ())}
                assert holders, f"{name}-{p} unassigned"  # every subscribed partition has a member
                assert holders <= set(takers) and len(holders) <= sharing
            if not homo:  # balance per topic among its subscribers
                per = [len(got[m].get(tid, ())) for m in takers]
                assert max(per) - min(per) <= 1
        if homo and subs and any(infos[n][1] for n in common):
            totals = [sum(len(ps) for ps in got[m].values()) for m in subs]
            assert max(totals) - min(totals) <= 1 and min(totals) >= 1


# -- ShareGroupHeartbeat ---------------------------------------------------------------------------


def test_join_gets_epoch_2_and_asks_initialization() -> None:
    # testShareGroupMemberIdGeneration: the member keeps its own id, gets epoch 2 (groups start
    # at 1 in 4.3), an empty assignment (nothing is initialized yet) and the initialization of
    # every subscribed partition at group epoch 2.
    c = coordinator(("foo", FOO, 1), ("bar", BAR, 1))
    step = hb(c, M1, 0, T0, ("foo", "bar"))
    assert step.response is not None
    assert (step.response.error, step.response.member_id, step.response.member_epoch,
            step.response.heartbeat_interval_ms, step.response.assignment) == (Code.NONE, M1, 2, 5000, ())
    assert len(step.initialize) == 1
    init = step.initialize[0]
    assert (init.group_id, init.group_epoch) == ("g", 2)
    assert {t: set(ps) for t, ps in init.partitions.items()} == {FOO: {0}, BAR: {0}}
    assert len(step.writes) == 1 and step.writes[0][1].group_epoch == 2


def test_a_whole_life() -> None:
    c = coordinator(("orders", FOO, 3))
    join = hb(c, "m1", 0, T0, ("orders",))
    assert (join.response and join.response.member_epoch, parts(join)) == (2, {})
    assert c.initialized("g", {FOO: [0, 1, 2]}, T0 + 10).writes
    # testShareGroupHeartbeatDoesNotBumpGroupEpochDuringAssignmentDelay: the initialized
    # partitions bump the group epoch to 3, but the last target is 500 ms old (interval 1 s):
    # the member stays at 2 and nothing is sent.
    step = hb(c, "m1", 2, T0 + 500)
    assert (step.response and step.response.member_epoch, parts(step), c.groups["g"].group_epoch) == (2, None, 3)
    step = hb(c, "m1", 2, T0 + 600)
    assert c.groups["g"].group_epoch == 3 and not step.writes
    # One second after the last target: computed, all three partitions.
    step = hb(c, "m1", 2, T0 + 1000)
    assert (step.response and step.response.member_epoch, parts(step)) == (3, {FOO: {0, 1, 2}})
    # testShareGroupAssignmentInterval: m2 joins 500 ms later, epoch 4; no target yet, so
    # it gets the assignment epoch (3) and nothing.
    step = hb(c, "m2", 0, T0 + 1500, ("orders",))
    assert (step.response and step.response.member_epoch, parts(step), c.groups["g"].group_epoch) == (3, {}, 4)
    # At T0 + 2000: quotas 2 (m1, bin 4) and 1 (m2, bin 5); m1 gives up p0 (first in its
    # set's order), which m2 takes.
    step = hb(c, "m2", 3, T0 + 2000)
    assert (step.response and step.response.member_epoch, parts(step)) == (4, {FOO: {0}})
    step = hb(c, "m1", 3, T0 + 2100)
    assert (step.response and step.response.member_epoch, parts(step)) == (4, {FOO: {1, 2}})
    # m1 leaves: epoch -1 answered, group epoch 5, its records to release.
    step = hb(c, "m1", -1, T0 + 2500)
    assert step.response is not None
    assert (step.response.member_id, step.response.member_epoch, step.response.heartbeat_interval_ms,
            step.response.assignment) == ("m1", -1, 0, None)
    assert [(d.member_id, d.reason) for d in step.departed] == [("m1", "left")]
    assert c.groups["g"].group_epoch == 5
    step = hb(c, "m2", 4, T0 + 3000)
    assert (step.response and step.response.member_epoch, parts(step)) == (5, {FOO: {0, 1, 2}})
    # m2's session ends 45 s after its last heartbeat: fenced, reported, group empty.
    assert c.next_deadline() == T0 + 3000 + 45_000
    assert not c.on_timer(T0 + 47_999).departed
    step = c.on_timer(T0 + 48_000)
    assert [(d.member_id, d.reason) for d in step.departed] == [("m2", "session timeout")]
    (group,) = c.describe(["g"])
    assert (group.group_state, group.group_epoch, group.assignment_epoch, group.members) == ("Empty", 6, 5, ())
    assert c.next_deadline() is None
    # A fenced member is unknown; it rejoins with epoch 0 under the same id.
    assert error(hb(c, "m2", 5, T0 + 50_000)) == (Code.UNKNOWN_MEMBER_ID, "Member m2 is not a member of group g.")
    assert hb(c, "m2", 0, T0 + 50_000, ("orders",)).response.member_epoch == 7  # type: ignore[union-attr]


def test_epoch_checks() -> None:
    c = coordinator()
    hb(c, "m1", 0, T0, ("orders",))
    c.initialized("g", {FOO: [0, 1, 2]}, T0)
    assert hb(c, "m1", 2, T0 + 1000).response.member_epoch == 3  # type: ignore[union-attr]
    # The previous epoch is accepted (a lost answer), others fenced.
    assert error(hb(c, "m1", 2, T0 + 1100)) == (Code.NONE, None)
    assert error(hb(c, "m1", 4, T0 + 1100)) == (
        Code.FENCED_MEMBER_EPOCH, "The share group member has a greater member epoch (4) than the one known by "
        "the group coordinator (3). The member must abandon all its partitions and rejoin.")
    assert error(hb(c, "m1", 1, T0 + 1100)) == (
        Code.FENCED_MEMBER_EPOCH, "The share group member has a smaller member epoch (1) than the one known by "
        "the group coordinator (3), and it does not match the previous member epoch (2). The member must "
        "abandon all its partitions and rejoin.")


def test_rejoin_with_epoch_zero_keeps_the_epoch() -> None:
    # testShareGroupMemberCanRejoinWithEpochZero: nothing changed, so no new epoch; the
    # assignment is sent (a join).
    c = coordinator()
    hb(c, "m1", 0, T0, ("orders",))
    c.initialized("g", {FOO: [0, 1, 2]}, T0)
    hb(c, "m1", 2, T0 + 1000)
    step = hb(c, "m1", 0, T0 + 2000, ("orders",))
    assert (step.response and step.response.member_epoch, parts(step), step.writes) == (3, {FOO: {0, 1, 2}}, ())


@pytest.mark.parametrize(("request_", "expected"), [
    # KafkaApis.isMemberIdValid (before the coordinator): no message in the answer.
    (dict(member_id="", member_epoch=0, subscribed_topic_names=("t",)), None),
    (dict(member_id="x" * 37, member_epoch=0, subscribed_topic_names=("t",)), None),
    (dict(member_id="\U0001f600" * 18 + "x", member_epoch=-1), None),  # 37 UTF-16 units
    (dict(member_id=" \t", member_epoch=0, subscribed_topic_names=("t",)), "MemberId can't be empty."),
    (dict(group_id=" ", member_epoch=0, subscribed_topic_names=("t",)), "GroupId can't be empty."),
    (dict(rack_id="", member_epoch=0, subscribed_topic_names=("t",)), "RackId can't be empty."),
    (dict(member_epoch=0), "SubscribedTopicNames must be set in first request."),
    (dict(member_epoch=0, subscribed_topic_names=()), "SubscribedTopicNames must be set in first request."),
    (dict(member_epoch=-2), "MemberEpoch is invalid."),
])
def test_invalid_requests(request_: dict[str, Any], expected: str | None) -> None:
    # GroupCoordinatorService.throwIfShareGroupHeartbeatRequestIsInvalid (String.trim: blank is empty).
    fields: dict[str, Any] = {"group_id": "g", "member_id": "m1", **request_}
    step = coordinator().heartbeat(ShareGroupHeartbeatRequest(**fields), CLIENT, T0)
    assert error(step) == (Code.INVALID_REQUEST, expected)


def test_unknown_groups_and_members() -> None:
    # testShareGroupUnknownGroupId / testShareGroupUnknownMemberIdJoins; a leave names the
    # group as ``shareGroup(groupId)`` does; a group of another type is refused.
    c = ShareGroupCoordinator(foreign_group=lambda g: g == "classic")
    assert error(hb(c, "m1", 100, T0, ("foo",), group="fooup")) == (
        Code.GROUP_ID_NOT_FOUND, "Share group fooup not found.")
    assert error(hb(c, "m1", -1, T0, group="fooup")) == (Code.GROUP_ID_NOT_FOUND, "Group fooup not found.")
    assert error(hb(c, "m1", 0, T0, ("foo",), group="classic")) == (
        Code.GROUP_ID_NOT_FOUND, "Group classic is not a share group.")
    hb(c, "m1", 0, T0, ("foo", "bar"), group="fooup")
    assert error(hb(c, "m9", 1, T0, ("foo", "bar"), group="fooup")) == (
        Code.UNKNOWN_MEMBER_ID, "Member m9 is not a member of group fooup.")
    assert error(hb(c, "m9", -1, T0, group="fooup")) == (
        Code.UNKNOWN_MEMBER_ID, "Member m9 is not a member of group fooup.")
    assert "classic" not in c.groups and error(hb(c, "m1", 1, T0, group="nope"))[0] is Code.GROUP_ID_NOT_FOUND


def test_group_max_size() -> None:
    # testShareGroupNewMemberIsRejectedWithMaximumMembersIsReached.
    c = coordinator(max_size=1)
    assert hb(c, "m1", 0, T0, ("orders",)).response.member_epoch == 2  # type: ignore[union-attr]
    assert error(hb(c, "m2", 0, T0, ("orders",))) == (
        Code.GROUP_MAX_SIZE_REACHED, "The share group has reached its maximum capacity of 1 members.")
    assert error(hb(c, "m1", 2, T0)) == (Code.NONE, None)  # members already in are served
    with pytest.raises(ValueError, match="between 1 and 1000"):
        ShareGroupSettings(max_size=1001)


def test_assignment_sent_only_when_full_or_changed() -> None:
    c = coordinator()
    hb(c, "m1", 0, T0, ("orders",))
    c.initialized("g", {FOO: [0, 1, 2]}, T0)
    hb(c, "m1", 2, T0 + 1000)
    assert parts(hb(c, "m1", 3, T0 + 2000)) is None
    assert parts(hb(c, "m1", 3, T0 + 3000, ("orders",))) == {FOO: {0, 1, 2}}  # a full request


def test_subscription_change() -> None:
    # A new subscription bumps the epoch; the member's assignment drops what it no longer
    # subscribes to at once (ShareGroupAssignmentBuilder with hasSubscriptionChanged), and
    # the new topic is asked to be initialized.
    c = coordinator(("orders", FOO, 2), ("payments", BAR, 1))
    hb(c, "m1", 0, T0, ("orders",))
    c.initialized("g", {FOO: [0, 1]}, T0)
    assert parts(hb(c, "m1", 2, T0 + 1000)) == {FOO: {0, 1}}
    step = hb(c, "m1", 3, T0 + 1500, ("payments",))
    assert (step.response and step.response.member_epoch, parts(step)) == (3, {})
    assert [dict(i.partitions) for i in step.initialize] == [{BAR: {0}}]
    assert c.groups["g"].group_epoch == 4
    # Initialized before the next target: that target (epoch 4) has it.
    c.initialized("g", {BAR: [0]}, T0 + 1600)
    step = hb(c, "m1", 3, T0 + 2000)
    assert (step.response and step.response.member_epoch, parts(step)) == (4, {BAR: {0}})


def test_new_partitions_are_initialized_and_assigned() -> None:
    # testShareGroupHeartbeatInitializeOnPartitionUpdate: after a partition is added, the next
    # heartbeat bumps the epoch and asks for the new partition only.
    c = coordinator(("orders", FOO, 2))
    hb(c, "m1", 0, T0, ("orders",))
    c.initialized("g", {FOO: [0, 1]}, T0)
    hb(c, "m1", 2, T0 + 1000)
    c.update_topics(topics(("orders", FOO, 3)))
    step = hb(c, "m1", 3, T0 + 2000)
    assert [dict(i.partitions) for i in step.initialize] == [{FOO: {2}}]
    assert c.groups["g"].group_epoch == 4 and step.response.member_epoch == 4  # type: ignore[union-attr]
    c.initialized("g", {FOO: [2]}, T0 + 2100)
    step = hb(c, "m1", 4, T0 + 3000)
    assert (step.response and step.response.member_epoch, parts(step)) == (5, {FOO: {0, 1, 2}})


def test_initialization_retries() -> None:
    c = coordinator(initialize_retry_interval_ms=30_000)
    assert hb(c, "m1", 0, T0, ("orders",)).initialize
    assert not hb(c, "m1", 2, T0 + 29_999).initialize  # still pending
    assert hb(c, "m1", 2, T0 + 30_000).initialize  # asked again
    c.initialize_failed("g", {FOO: [0, 1, 2]})
    assert dict(hb(c, "m1", 2, T0 + 30_001).initialize[0].partitions) == {FOO: {0, 1, 2}}
    c.initialized("g", {FOO: [0, 1, 2]}, T0 + 30_002)
    assert not hb(c, "m1", 2, T0 + 30_003).initialize


def test_deleted_topic_leaves_the_initialized_map() -> None:
    c = coordinator(("orders", FOO, 1), ("payments", BAR, 1))
    hb(c, "m1", 0, T0, ("orders", "payments"))
    c.initialized("g", {FOO: [0], BAR: [0]}, T0)
    step = c.update_topics(topics(("orders", FOO, 1)))
    assert [g for g, _ in step.writes] == ["g"] and set(c.groups["g"].initialized) == {FOO}
    step = hb(c, "m1", 2, T0 + 1000)
    assert (step.response and step.response.member_epoch, parts(step)) == (3, {FOO: {0}})


def test_group_configs_override_the_broker() -> None:
    c = coordinator()
    c.set_group_config("g", ShareGroupConfig(session_timeout_ms=60_000, heartbeat_interval_ms=7_000))
    assert hb(c, "m1", 0, T0, ("orders",)).response.heartbeat_interval_ms == 7_000  # type: ignore[union-attr]
    assert c.next_deadline() == T0 + 60_000
    c.set_group_config("g", None)
    assert hb(c, "m1", 2, T0 + 10).response.heartbeat_interval_ms == 5_000  # type: ignore[union-attr]
    assert c.next_deadline() == T0 + 10 + 45_000


def test_assignor_failure_is_unknown_server_error() -> None:
    # m2's target holds orders-1, which is no longer initialized (its state was deleted):
    # Kafka's homogeneous builder then runs out of unfilled members (NoSuchElementException),
    # answered UNKNOWN_SERVER_ERROR without a message; nothing changes.
    c = coordinator(("orders", FOO, 2))
    member = DurableMember(member_id="m1", rack_id=None, client_id="consumer-1", client_host="/10.0.0.5",
                           subscribed_topic_names=("orders",), member_epoch=4, previous_member_epoch=3,
                           assigned=(), target=())
    c.load("g", ShareGroupRecord(
        group_epoch=5, assignment_epoch=4, assignment_timestamp=0, subscribed_topics=(("orders", FOO, 2),),
        members=(member, replace(member, member_id="m2", assigned=((FOO, (1,)),), target=((FOO, (1,)),))),
        initialized=(InitTopic(topic_id=FOO, name="orders", partitions=frozenset({0}), timestamp=T0),)), T0)
    before = c.groups["g"].to_record()
    step = hb(c, "m1", 4, T0 + 1000)
    assert error(step) == (Code.UNKNOWN_SERVER_ERROR, None) and not step.writes
    assert c.groups["g"].to_record() == before


# -- ShareGroupDescribe ---------------------------------------------------------------------------------


def test_describe() -> None:
    c = coordinator(("orders", FOO, 3), ("payments", BAR, 1))
    c.foreign_group = lambda g: g == "classic"
    hb(c, "m1", 0, T0, ("payments", "orders"), rack="r1")
    c.initialized("g", {FOO: [0, 1, 2]}, T0)
    hb(c, "m1", 2, T0 + 1000)
    found = c.describe(["g", "", "nope", "classic"])
    assert [(d.group_id, d.error, d.error_message) for d in found] == [
        ("", Code.INVALID_GROUP_ID, None), ("g", Code.NONE, None),
        ("nope", Code.GROUP_ID_NOT_FOUND, "Group nope not found."),
        ("classic", Code.GROUP_ID_NOT_FOUND, "Group classic is not a share group.")]
    g = found[1]
    assert (g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == ("Stable", 3, 3, "simple")
    (m,) = g.members
    assert (m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host) == (
        "m1", "r1", 3, "consumer-1", "/10.0.0.5")
    # A HashSet of the sorted names: hashes 0xc3df62e5 and 0x526a0f2d, spread (h ^ h >>> 16)
    # into bins 10 and 7 of 16: "payments" first.
    assert m.subscribed_topic_names == ("payments", "orders")
    assert [(t.topic_id, t.topic_name, set(t.partitions)) for t in m.assignment] == [(FOO, "orders", {0, 1, 2})]
    wire = encode(REGISTRY.api(77).response, 1, {"ThrottleTimeMs": 0, "Groups": [d.to_wire() for d in found]})
    body = decode(REGISTRY.api(77).response, 1, wire)
    assert body["Groups"][1]["Members"][0]["Assignment"]["TopicPartitions"][0]["TopicName"] == "orders"
    assert body["Groups"][1]["AuthorizedOperations"] == -(2**31)


REGISTRY = ApiRegistry()


def test_heartbeat_wire_forms() -> None:
    api = REGISTRY.api(76)
    raw = encode(api.request, 1, {"GroupId": "g", "MemberId": "m1", "MemberEpoch": 0, "RackId": None,
                                   "SubscribedTopicNames": ["orders"]})
    req = ShareGroupHeartbeatRequest.from_wire(1, decode(api.request, 1, raw))
    assert (req.group_id, req.member_id, req.member_epoch, req.rack_id, req.subscribed_topic_names) == (
        "g", "m1", 0, None, ("orders",))
    step = coordinator().heartbeat(req, CLIENT, T0)
    assert step.response is not None
    body = decode(api.response, 1, encode(api.response, 1, step.response.to_wire(1)))
    assert (body["MemberId"], body["MemberEpoch"], body["Assignment"]) == ("m1", 2, {"TopicPartitions": []})
    refused = ShareGroupHeartbeatResponse(error=Code.FENCED_MEMBER_EPOCH, error_message="x")
    body = decode(api.response, 1, encode(api.response, 1, refused.to_wire(1)))
    assert (body["ErrorCode"], body["Assignment"]) == (110, None)
    assert TopicPartitions(topic_id=FOO, partitions=(1,)).to_wire() == {"TopicId": FOO, "Partitions": [1]}


# -- the durable form ---------------------------------------------------------------------------------


def test_durable_round_trip_and_load() -> None:
    c = coordinator(("orders", FOO, 3))
    for n, m in enumerate((M1, M2, M3)):
        hb(c, m, 0, T0 + n, ("orders",))
    c.initialized("g", {FOO: [0, 1, 2]}, T0)
    for m in (M1, M2, M3):
        hb(c, m, 2, T0 + 1000)
    record = c.groups["g"].to_record()
    raw = encode_group(record)
    assert decode_group(raw) == record
    body = json.loads(raw)
    assert body["version"] == 1 and [m["member_id"] for m in body["members"]] == [M1, M2, M3]
    # Another sidecar takes the group over: same answers, sessions from its ``now``.
    other = ShareGroupCoordinator()
    other.update_topics(topics(("orders", FOO, 3)))
    other.load("g", decode_group(raw), T0 + 5000)
    assert other.describe(["g"]) == c.describe(["g"])
    assert other.next_deadline() == T0 + 5000 + 45_000
    step = hb(other, M1, c.groups["g"].members[M1].member_epoch, T0 + 6000)
    assert step.response is not None and step.response.error is Code.NONE
    other.unload("g")
    assert "g" not in other.groups and other.next_deadline() is None


MEMBER = DurableMember(member_id="m", rack_id=None, client_id="c", client_host="/h", subscribed_topic_names=("t",),
                       member_epoch=3, previous_member_epoch=2, assigned=((FOO, (2, 0)),),
                       target=((FOO, (2, 0)), (BAR, ())))


@settings(max_examples=25, deadline=None)
@given(st.builds(
    ShareGroupRecord, group_epoch=st.integers(1, 2**31 - 1), assignment_epoch=st.integers(0, 2**31 - 1),
    assignment_timestamp=st.integers(0, 2**62),
    subscribed_topics=st.lists(st.tuples(st.text(max_size=5), st.uuids(), st.integers(0, 9)), max_size=3).map(tuple),
    members=st.lists(st.builds(
        DurableMember, member_id=st.text(min_size=1, max_size=6), rack_id=st.none() | st.text(max_size=3),
        client_id=st.text(max_size=4), client_host=st.text(max_size=4),
        subscribed_topic_names=st.lists(st.text(max_size=4), max_size=3).map(lambda x: tuple(sorted(set(x)))),
        member_epoch=st.integers(-1, 99), previous_member_epoch=st.integers(-1, 99),
        assigned=st.dictionaries(st.uuids(), st.lists(st.integers(0, 99), max_size=3).map(tuple),
                                 max_size=2).map(lambda d: tuple(d.items())),
        target=st.dictionaries(st.uuids(), st.lists(st.integers(0, 99), max_size=3).map(tuple),
                               max_size=2).map(lambda d: tuple(d.items()))),
        max_size=3, unique_by=lambda m: m.member_id).map(tuple),
    initialized=st.lists(st.builds(InitTopic, topic_id=st.uuids(), name=st.text(max_size=4),
                                   partitions=st.frozensets(st.integers(0, 9), max_size=3),
                                   timestamp=st.integers(0, 2**62)), max_size=2).map(tuple)))
def test_durable_round_trip(record: ShareGroupRecord) -> None:
    assert decode_group(encode_group(record)) == record


def base_body() -> dict[str, Any]:
    record = ShareGroupRecord(group_epoch=3, assignment_epoch=3, assignment_timestamp=T0,
                              subscribed_topics=(("t", FOO, 3),), members=(MEMBER,))
    body: dict[str, Any] = json.loads(encode_group(record))
    return body


@pytest.mark.parametrize(("change", "message"), [
    (lambda b: b.update(version=2), "format version 2, this release reads 1"),
    (lambda b: b.pop("group_epoch"), "group_epoch is not an integer: None"),
    (lambda b: b.update(assignment_epoch=True), "assignment_epoch is not an integer: True"),
    (lambda b: b.update(members={}), "members is not a list"),
    (lambda b: b["members"].append(b["members"][0]), "a member id appears twice"),
    (lambda b: b["members"][0].update(member_epoch="3"), "member 'm': member_epoch is not an integer"),
    (lambda b: b["members"][0].update(assigned=[["nope", [1]]]), "'nope' is not a topic id"),
    (lambda b: b["members"][0].update(target=[[str(FOO), [-1]]]), "partitions are not a list of partition numbers"),
    (lambda b: b["members"][0].update(target=[[str(FOO), [1]], [str(FOO), [2]]]), "a topic appears twice"),
    (lambda b: b["members"][0].update(rack_id=5), "rack_id is not a string"),
    (lambda b: b["subscribed_topics"].append(["t", str(FOO)]), "is not [name, topic id, partitions]"),
    (lambda b: b.update(initialized=[[str(FOO), "t", [0]]]), "is not [topic id, name, partitions, timestamp]"),
])
def test_malformed_durable_forms(change: Any, message: str) -> None:
    body = base_body()
    change(body)
    with pytest.raises(MalformedShareGroup, match=message.replace("[", r"\[").replace("(", r"\(")):
        decode_group(json.dumps(body).encode())


@pytest.mark.parametrize(("raw", "message"), [
    (b"\xff", "not JSON"), (b"{", "not JSON"), (b"[]", "not a JSON object"),
])
def test_unreadable_durable_forms(raw: bytes, message: str) -> None:
    with pytest.raises(MalformedShareGroup, match=message):
        decode_group(raw)


def test_fence_all_removes_every_member_and_reports_them() -> None:
    # share.version turned off: every member of every group is fenced at once (the group
    # epoch bumped once per member, as a session timeout fences one), the groups are written
    # without them, and a heartbeat of a fenced member is UNKNOWN_MEMBER_ID.
    c = coordinator(("orders", FOO, 3))
    hb(c, "m1", 0, T0, ("orders",))
    hb(c, "m2", 0, T0, ("orders",))
    hb(c, "n1", 0, T0, ("orders",), group="h")
    before = {g: c.groups[g].group_epoch for g in ("g", "h")}
    step = c.fence_all("share.version disabled")
    assert sorted((d.group_id, d.member_id, d.reason) for d in step.departed) == [
        ("g", "m1", "share.version disabled"), ("g", "m2", "share.version disabled"),
        ("h", "n1", "share.version disabled")]
    assert {g: r.group_epoch for g, r in step.writes} == {"g": before["g"] + 2, "h": before["h"] + 1}
    assert all(not r.members for _, r in step.writes)
    assert c.next_deadline() is None  # no session timers left
    assert error(hb(c, "m1", 2, T0 + 10))[0] is Code.UNKNOWN_MEMBER_ID
    assert c.fence_all("again").departed == ()  # nothing left to fence
