"""Rendezvous placement of groups over sidecar ids (coordinator/placement.py).

The owners below were computed outside Python, with coreutils:
``printf '%s\\0%s' orders 2 | sha256sum`` and the first 16 hex digits compared as
unsigned numbers (the highest wins):

=========  ================  ================  ================  ================
group      node 1            node 2            node 3            node 4
=========  ================  ================  ================  ================
orders     708a9f81e5cafcaf  d2dbf2a307ace39e  b8a51cd6826350d4  1d9e8071b9723a28
payments   8a219f61787e0080  68a823bc49a6ce21  43b7f5e053d66ecc  d443bde3965c3546
g-0        2399a21e6405191f  1d0e62b321b83eb0  29d5d794bb2d53c5  b5a4045904f81184
grüße      cd03f7fec9877796  28710a2cff8ee489  9a828858e5c1f7cc  1096c3b1112d394a
=========  ================  ================  ================  ================
"""

from __future__ import annotations

import pytest

from coordinator.placement import owner, spread, weight


def test_weight_is_the_first_eight_bytes_of_sha256() -> None:
    assert weight("orders", 1) == 0x708A9F81E5CAFCAF
    assert weight("grüße", 3) == 0x9A828858E5C1F7CC


@pytest.mark.parametrize(("group", "live", "expected"), [
    ("orders", [1, 2, 3], 2),
    ("orders", [1, 2, 3, 4], 2),     # node 4 is lowest: stays
    ("orders", [1, 3], 3),           # node 2 gone: its runner-up, 3 (b8a5 > 708a)
    ("payments", [1, 2, 3], 1),
    ("payments", [1, 2, 3, 4], 4),   # node 4 wins: moves to the newcomer
    ("payments", [2, 3], 2),
    ("g-0", [1, 2, 3], 3),
    ("g-0", [3, 2, 1, 4], 4),
    ("grüße", [1, 2, 3], 1),
    ("grüße", [4, 1], 1),
])
def test_owner_by_hand(group: str, live: list[int], expected: int) -> None:
    assert owner(group, live) == expected


def test_no_live_sidecar_no_owner() -> None:
    assert owner("orders", []) is None


def test_order_of_the_live_set_does_not_matter() -> None:
    groups = [f"g-{i}" for i in range(200)]
    assert [owner(g, [1, 2, 3]) for g in groups] == [owner(g, [3, 1, 2]) for g in groups]


@pytest.mark.parametrize(("count", "low", "high"), [
    # Each owner count is Binomial(count, 1/3): for 30 groups mean 10, sd 2.6; for 3,000
    # mean 1,000, sd 25.8. The bounds are about 3.5 sd either side.
    (30, 1, 19),
    (3000, 910, 1090),
])
def test_groups_spread_over_three_sidecars(count: int, low: int, high: int) -> None:
    owned = spread([f"group-{i}" for i in range(count)], [1, 2, 3])
    sizes = {node: len(groups) for node, groups in owned.items()}
    assert set(sizes) == {1, 2, 3}
    assert sum(sizes.values()) == count
    assert all(low <= size <= high for size in sizes.values()), sizes


def test_a_joining_sidecar_takes_only_the_groups_it_wins() -> None:
    groups = [f"group-{i}" for i in range(3000)]
    before = {g: owner(g, [1, 2, 3]) for g in groups}
    after = {g: owner(g, [1, 2, 3, 4]) for g in groups}
    moved = {g for g in groups if before[g] != after[g]}
    # Every moved group went to the newcomer, and every group it owns moved to it.
    assert {after[g] for g in moved} == {4}
    assert moved == {g for g in groups if after[g] == 4}
    # About a quarter move: Binomial(3000, 1/4), mean 750, sd 23.7.
    assert 670 <= len(moved) <= 830


def test_a_leaving_sidecar_hands_only_its_own_groups_to_their_runners_up() -> None:
    groups = [f"group-{i}" for i in range(3000)]
    before = {g: owner(g, [1, 2, 3]) for g in groups}
    after = {g: owner(g, [1, 3]) for g in groups}
    moved = {g for g in groups if before[g] != after[g]}
    assert moved == {g for g in groups if before[g] == 2}
    for g in moved:
        # The runner-up: the higher weight of the two that are left.
        expected = 1 if weight(g, 1) > weight(g, 3) else 3
        assert after[g] == expected
