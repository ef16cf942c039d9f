"""A share-partition's lag and whom to ask for it (coordinator/share_lag.py). Every expected
value is counted by hand from the offsets written in the test."""

from __future__ import annotations

from coordinator.share_lag import (
    UNKNOWN_LAG,
    LagPlan,
    delivery_complete_count,
    latest_offsets,
    plan_lag,
    share_lag,
)
from coordinator.share_state import RecordState, ShareState, StateBatch
from protocol.errors import ErrorCode

AVAILABLE, ACKNOWLEDGED, ARCHIVED = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED


def test_partitions_are_grouped_by_leader_in_the_order_asked() -> None:
    leaders = {("a", 0): 1, ("a", 1): 2, ("b", 0): 1, ("a", 2): 3, ("c", 0): -1, ("b", 1): 2}
    plan = plan_lag([("a", 0), ("a", 1), ("b", 0), ("a", 2), ("c", 0), ("b", 1), ("d", 0), ("a", 0)],
                    leaders, brokers={1, 2})
    assert plan == LagPlan(
        by_leader={1: (("a", 0), ("b", 0)), 2: (("a", 1), ("b", 1))},
        # Broker 3 leads a-2 but the broker list has no address for it (it is down).
        unaddressed={3: (("a", 2),)},
        # c-0 has no leader; d-0 is not in the Metadata answer at all. a-0, asked twice, once.
        leaderless=(("c", 0), ("d", 0)))


def test_nothing_asked_plans_nothing() -> None:
    assert plan_lag([], {("a", 0): 1}, brokers={1}) == LagPlan(by_leader={}, unaddressed={}, leaderless=())


def test_only_answers_without_error_give_a_latest_offset() -> None:
    answers = {("a", 0): (0, 120), ("a", 1): (int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1), ("b", 0): (0, -1),
               ("b", 1): (0, 0)}
    assert latest_offsets(answers) == {("a", 0): 120, ("b", 1): 0}


def test_the_lag_leaves_out_acknowledged_and_archived_records_in_flight() -> None:
    # 100-104 available (delivered once, released), 105-109 acknowledged, 110 archived,
    # 111-119 available; the log ends at 130 (its next offset). From 100 to 129 are 30
    # records, 6 of them done with (105-110): 24 still to deliver.
    state = ShareState(state_epoch=0, start_offset=100, batches=(
        StateBatch(100, 104, AVAILABLE, 1), StateBatch(105, 109, ACKNOWLEDGED, 1),
        StateBatch(110, 110, ARCHIVED, 5), StateBatch(111, 119, AVAILABLE, 1)))
    assert delivery_complete_count(state) == 6
    assert share_lag(state, 130) == 24
    # Nothing past the in-flight window: the same records.
    assert share_lag(state, 120) == 14


def test_without_records_in_flight_the_lag_is_the_distance_to_the_end() -> None:
    state = ShareState(state_epoch=3, start_offset=200)
    assert delivery_complete_count(state) == 0
    assert share_lag(state, 200) == 0
    assert share_lag(state, 215) == 15


def test_the_lag_is_unknown_without_a_latest_offset_or_a_start_offset() -> None:
    state = ShareState(state_epoch=0, start_offset=10, batches=(StateBatch(10, 12, ACKNOWLEDGED, 1),))
    assert share_lag(state, None) == UNKNOWN_LAG == -1
    assert share_lag(state, -1) == -1
    assert share_lag(ShareState(state_epoch=0, start_offset=-1), 50) == -1


def test_a_start_offset_past_the_log_end_is_no_lag() -> None:
    assert share_lag(ShareState(state_epoch=1, start_offset=50), 40) == 0
