"""The group benchmarks run end to end at a toy size (not timed: structure and sanity).

``tests.bench.group_bench`` and ``tests.bench.heartbeat_bench`` drive a real Tansu, a real
ZooKeeper and a real ``ksidecar run`` with raw frames; here each forms a few small groups
so that neither rots between the runs RESULTS.md records. The core-only formation driver
is checked against counts worked out by hand.
"""

from __future__ import annotations

import json

import pytest

from tests.bench import group_bench, heartbeat_bench
from tests.bench.group_bench import OUT, core_formation


def test_core_formation_counts_targets_by_tick() -> None:
    # 10 members, a tick after every 5 calls: the first join computes the group's first
    # target at once; joins 2-5 arm a tick, taken after call 5; joins 6-10 one more after
    # call 10. Then heartbeats until Stable: no join, so no more targets.
    r = core_formation(10, 5)
    assert (r["group_epoch"], r["targets"]) == (10, 3)
    # Immediate mode: one target per group epoch.
    assert core_formation(10, 0)["targets"] == 10


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_heartbeat_bench_at_toy_size() -> None:
    assert heartbeat_bench.main(["--members", "20", "--group-size", "10", "--interval-ms", "200",
                                 "--seconds", "1"]) == 0
    result = json.loads((OUT / "heartbeat-20.json").read_text())
    assert result["errors"] == {} and result["rejoins_timed"] == 0
    # 20 members every 200 ms for about a second: about 100 heartbeats.
    assert 50 <= result["heartbeats"] <= 150
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_group_bench_at_toy_size() -> None:
    assert group_bench.main(["--members", "4", "--repeats", "1", "--commit-seconds", "0.5"]) == 0
    result = json.loads((OUT / "group.json").read_text())
    (classic,) = result["classic"]
    (consumer,) = result["consumer"]
    assert classic["generation"] == 1 and classic["rejoins"] == 0
    assert consumer["epoch"] >= 4  # one group epoch per join at least
    assert result["commit_one"]["commits"] > 0 and result["commit_many"]["commits"] > 0
