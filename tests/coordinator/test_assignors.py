"""The server-side assignors: examples worked out by hand, and properties over any group."""

from __future__ import annotations

from uuid import UUID

from hypothesis import given
from hypothesis import strategies as st

from coordinator.assignors import MemberSpec, range_assignor, uniform_assignor

A, B = UUID(int=1), UUID(int=2)


def test_range_gives_contiguous_ranges_in_member_order() -> None:
    members = {m: MemberSpec(subscribed=frozenset({A, B})) for m in ("c", "a", "b")}
    out = range_assignor(members, {A: 7, B: 3})
    assert out == {"a": {A: frozenset({0, 1, 2}), B: frozenset({0})},
                   "b": {A: frozenset({3, 4}), B: frozenset({1})},
                   "c": {A: frozenset({5, 6}), B: frozenset({2})}}


def test_range_only_to_subscribers() -> None:
    out = range_assignor({"a": MemberSpec(subscribed=frozenset({A})),
                          "b": MemberSpec(subscribed=frozenset({B}))}, {A: 2, B: 1})
    assert out == {"a": {A: frozenset({0, 1})}, "b": {B: frozenset({0})}}


def test_uniform_is_sticky_when_a_member_joins() -> None:
    members = {"a": MemberSpec(subscribed=frozenset({A}), current={A: frozenset(range(6))}),
               "b": MemberSpec(subscribed=frozenset({A}))}
    assert uniform_assignor(members, {A: 6}) == {"a": {A: frozenset({0, 1, 2})}, "b": {A: frozenset({3, 4, 5})}}


def test_uniform_keeps_everything_when_a_member_leaves_but_for_the_orphans() -> None:
    before = {"a": frozenset({0, 1}), "b": frozenset({2, 3}), "c": frozenset({4, 5})}
    members = {m: MemberSpec(subscribed=frozenset({A}), current={A: before[m]}) for m in ("a", "b")}
    out = uniform_assignor(members, {A: 6})
    assert out["a"][A] >= before["a"] and out["b"][A] >= before["b"]
    assert out["a"][A] | out["b"][A] == frozenset(range(6))


GROUPS = st.dictionaries(
    st.sampled_from("abcdef"),
    st.tuples(st.sets(st.sampled_from([A, B]), min_size=1), st.sets(st.integers(0, 9), max_size=4)),
    min_size=1)
COUNTS = st.fixed_dictionaries({A: st.integers(0, 9), B: st.integers(0, 5)})


@given(GROUPS, COUNTS)
def test_every_partition_once_to_a_subscriber(group: dict[str, tuple[set[UUID], set[int]]],
                                              counts: dict[UUID, int]) -> None:
    members = {m: MemberSpec(subscribed=frozenset(subs), current={A: frozenset(cur)})
               for m, (subs, cur) in group.items()}
    for assignor in (range_assignor, uniform_assignor):
        out = assignor(members, counts)
        owned = [(t, p) for m, a in out.items() for t, ps in a.items() for p in ps]
        assert len(owned) == len(set(owned))
        wanted = {(t, p) for t, n in counts.items() for p in range(n)
                  if any(t in s.subscribed for s in members.values())}
        assert set(owned) == wanted
        for m, a in out.items():
            assert set(a) <= members[m].subscribed


@given(st.integers(1, 6), st.integers(0, 20), st.data())
def test_uniform_balances_a_homogeneous_group(n: int, partitions: int, data: st.DataObject) -> None:
    members = {str(i): MemberSpec(subscribed=frozenset({A}), current={A: frozenset(
        data.draw(st.sets(st.integers(0, 25), max_size=8)))}) for i in range(n)}
    out = uniform_assignor(members, {A: partitions})
    sizes = [len(out[m].get(A, frozenset())) for m in members]
    assert max(sizes) - min(sizes) <= 1
