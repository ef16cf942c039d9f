"""A share-partition's in-flight records (coordinator/share_partition.py, KIP-932), sans-IO.

Every expected value is worked out by hand from Kafka 4.3's ``SharePartition``,
``InFlightState``, ``KafkaApis.validateAcknowledgementBatches`` and the error messages of
its exceptions; the state machine at the end checks the code against a small per-offset
model of those rules written here, never against itself.

States are written one letter per record: A available, Q acquired, K acknowledged (ACK'd),
X archived, then the delivery count and the member holding it: ``Q1m1`` is acquired by m1,
delivered once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from coordinator.share_partition import SharePartition
from coordinator.share_records import (
    AcknowledgementBatch,
    AcquireMode,
    RecordView,
    Released,
    ShareSettings,
    check_acknowledgements,
    initial_start_offset,
)
from coordinator.share_state import (
    MalformedShareState,
    RecordState,
    ShareState,
    StateBatch,
    decode_state,
    encode_state,
)

LOCK = 1_000
LETTER = {RecordState.AVAILABLE: "A", RecordState.ACQUIRED: "Q", RecordState.ACKNOWLEDGED: "K",
          RecordState.ARCHIVED: "X"}
ACCEPT, RELEASE, REJECT, RENEW, GAP = 1, 2, 3, 4, 0
RECORD_LIMIT = AcquireMode.RECORD_LIMIT
NOT_OWNER_BATCH = (121, "Member is not the owner of batch record")
NOT_ACQUIRED_BATCH = (121, "The batch cannot be acknowledged. The batch is not in the acquired state.")


def partition(start: int = 0, **settings: Any) -> SharePartition:
    values: dict[str, Any] = {"record_lock_duration_ms": LOCK, "delivery_count_limit": 5, "max_record_locks": 100}
    values.update(settings)
    return SharePartition(ShareSettings(**values), start_offset=start)


def acq(p: SharePartition, member: str, batches: list[tuple[int, int]], *, max_records: int = 500,
        fetch: int | None = None, now: int = 0, **kwargs: Any) -> list[tuple[int, int, int]]:
    got = p.acquire(member, batches, max_records=max_records, fetch_offset=batches[0][0] if fetch is None else fetch,
                    now=now, **kwargs)
    assert got.count == sum(r.last_offset - r.first_offset + 1 for r in got.records)
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in got.records]


def ack(p: SharePartition, member: str, *batches: tuple[int, int, list[int]], now: int = 0,
        renew: bool = False) -> tuple[int, str | None] | None:
    error = p.acknowledge(member, [AcknowledgementBatch(f, last, tuple(types)) for f, last, types in batches], now=now,
                          is_renew_ack=renew)
    return None if error is None else (int(error.code), error.message)


def row(p: SharePartition, lo: int, hi: int) -> str:
    out = []
    for offset in range(lo, hi + 1):
        r = p.record(offset)
        out.append("-" if r is None else f"{LETTER[r.state]}{r.delivery_count}{r.member_id}")
    return " ".join(out)


def window(p: SharePartition) -> tuple[int, int, int]:
    """Start offset, end offset, next fetch offset."""
    return p.start_offset, p.end_offset, p.next_fetch_offset()


# -- acquire ---------------------------------------------------------------------------------------


def test_a_new_partition_fetches_from_its_start_and_holds_nothing() -> None:
    p = partition(start=7)
    assert window(p) == (7, 7, 7) and p.in_flight_count() == 0 and p.next_deadline() is None and p.can_acquire()


def test_new_records_are_acquired_whole_with_delivery_count_one() -> None:
    p = partition()
    assert acq(p, "m1", [(0, 4), (5, 9)]) == [(0, 9, 1)]
    assert row(p, 0, 9) == " ".join(["Q1m1"] * 10)
    assert window(p) == (0, 9, 10) and p.in_flight_count() == 10
    assert p.next_deadline() == LOCK and p.record(3) is not None and p.record(3).deadline == LOCK  # type: ignore[union-attr]


def test_new_records_are_cut_into_batches_of_about_batch_size_at_fetched_batch_boundaries() -> None:
    fetched = [(0, 4), (5, 9), (10, 14)]
    assert acq(partition(), "m1", fetched, batch_size=5) == [(0, 4, 1), (5, 9, 1), (10, 14, 1)]
    # A cut only where a fetched batch starts at least batch_size records after the last cut.
    assert acq(partition(), "m1", fetched, batch_size=7) == [(0, 9, 1), (10, 14, 1)]


def test_max_records_is_a_soft_limit_of_whole_fetched_batches() -> None:
    p = partition()
    assert acq(p, "m1", [(0, 4), (5, 9)], max_records=3) == [(0, 4, 1)]
    assert window(p) == (0, 4, 5)


def test_record_limit_acquires_exactly_max_records_and_leaves_the_rest_of_the_batch_available() -> None:
    p = partition()
    assert acq(p, "m1", [(0, 4), (5, 9)], max_records=3, mode=RECORD_LIMIT) == [(0, 2, 1)]
    assert row(p, 0, 4) == "Q1m1 Q1m1 Q1m1 A0 A0"
    assert window(p) == (0, 4, 3)
    # The next fetch starts inside the batch: its available records, then new ones.
    assert acq(p, "m2", [(0, 4), (5, 9)], max_records=10, fetch=3, mode=RECORD_LIMIT) == [(3, 4, 1), (5, 9, 1)]
    assert row(p, 2, 6) == "Q1m1 Q1m2 Q1m2 Q1m2 Q1m2" and window(p) == (0, 9, 10)


def test_the_in_flight_limit_stops_new_records_but_not_records_taken_back() -> None:
    p = partition(max_record_locks=10)
    assert acq(p, "m1", [(0, 9)]) == [(0, 9, 1)]
    assert not p.can_acquire()
    assert acq(p, "m2", [(10, 19)]) == []  # full, and the fetch is past the window
    assert ack(p, "m1", (3, 3, [RELEASE])) is None
    assert p.can_acquire() and p.next_fetch_offset() == 3
    assert acq(p, "m2", [(0, 9), (10, 19)], fetch=3) == [(3, 3, 2)]  # within the window: allowed
    assert p.end_offset == 9


def test_below_the_in_flight_limit_a_whole_fetched_batch_may_overshoot_it() -> None:
    p = partition(max_record_locks=10)
    acq(p, "m1", [(0, 9)])
    assert ack(p, "m1", (0, 4, [ACCEPT])) is None
    assert window(p) == (5, 9, 10) and p.in_flight_count() == 5
    assert acq(p, "m2", [(10, 19)], max_records=500) == [(10, 19, 1)]  # room for 5, the batch is 10
    assert p.in_flight_count() == 15
    q = partition(max_record_locks=10)
    acq(q, "m1", [(0, 9)])
    ack(q, "m1", (0, 4, [ACCEPT]))
    assert acq(q, "m2", [(10, 19)], mode=RECORD_LIMIT) == [(10, 14, 1)]
    assert q.in_flight_count() == 15 and row(q, 14, 15) == "Q1m2 A0"


def test_nothing_is_acquired_for_no_records_or_a_fetch_below_the_start() -> None:
    p = partition(start=10)
    assert acq(p, "m1", [(0, 9)], max_records=5) == []
    assert acq(p, "m1", [(10, 19)], max_records=0) == []
    assert p.acquire("m1", [], max_records=5, fetch_offset=10, now=0).count == 0


def test_a_fetched_batch_starting_before_the_start_is_acquired_from_the_start() -> None:
    p = partition(start=7)
    assert acq(p, "m1", [(5, 9)], fetch=7) == [(7, 9, 1)]
    assert window(p) == (7, 9, 10)


# -- acknowledge -----------------------------------------------------------------------------------


def test_accepting_every_record_moves_the_start_past_them_and_empties_the_window() -> None:
    p = partition()
    acq(p, "m1", [(0, 9)])
    assert ack(p, "m1", (0, 9, [ACCEPT])) is None
    assert window(p) == (10, 10, 10) and list(p.records()) == [] and p.next_deadline() is None


def test_part_of_a_batch_is_acknowledged_per_offset_and_the_start_follows_the_head() -> None:
    p = partition()
    acq(p, "m1", [(0, 9)])
    assert ack(p, "m1", (0, 4, [ACCEPT])) is None
    assert row(p, 0, 9) == "K1 K1 K1 K1 K1 Q1m1 Q1m1 Q1m1 Q1m1 Q1m1"
    assert window(p) == (5, 9, 10)
    assert ack(p, "m1", (5, 9, [REJECT])) is None
    assert window(p) == (10, 10, 10)


def test_one_type_per_offset() -> None:
    p = partition()
    acq(p, "m1", [(0, 9)])
    assert ack(p, "m1", (0, 4, [ACCEPT, RELEASE, REJECT, GAP, ACCEPT])) is None
    assert row(p, 0, 5) == "K1 A1 X1 X1 K1 Q1m1"
    assert window(p) == (1, 9, 1)


def test_released_records_come_back_with_their_delivery_count() -> None:
    p = partition()
    acq(p, "m1", [(0, 9)])
    assert ack(p, "m1", (0, 9, [RELEASE])) is None
    assert row(p, 0, 1) == "A1 A1" and window(p) == (0, 9, 0)
    assert acq(p, "m2", [(0, 9)]) == [(0, 9, 2)]


def test_at_the_delivery_limit_a_released_record_is_archived() -> None:
    p = partition(delivery_count_limit=2)
    acq(p, "m1", [(0, 9)])
    ack(p, "m1", (0, 9, [RELEASE]))
    assert acq(p, "m1", [(0, 9)]) == [(0, 9, 2)]
    assert ack(p, "m1", (0, 9, [RELEASE])) is None
    assert window(p) == (10, 10, 10)  # archived, hence done with


def test_later_batches_done_first_wait_for_the_head() -> None:
    p = partition()
    assert acq(p, "m1", [(0, 4), (5, 9), (10, 14)], batch_size=5) == [(0, 4, 1), (5, 9, 1), (10, 14, 1)]
    assert ack(p, "m1", (5, 9, [ACCEPT])) is None
    assert window(p) == (0, 14, 15)
    assert ack(p, "m1", (0, 4, [ACCEPT])) is None
    assert window(p) == (10, 14, 15) and next(p.records())[0] == 10  # the done batches left


def test_acknowledgement_refusals_carry_kafkas_codes_and_messages() -> None:
    p = partition()
    acq(p, "m1", [(0, 9)])
    assert ack(p, "m2", (0, 9, [ACCEPT])) == NOT_OWNER_BATCH
    assert ack(p, "m1", (12, 14, [ACCEPT])) == (
        42, "Batch record not found. The first offset in request is past acquired records.")
    assert ack(p, "m1", (5, 14, [ACCEPT])) == (
        42, "Batch record not found. The last offset in request is past acquired records.")
    assert ack(p, "m1", (2, 2, [RELEASE])) is None  # the batch is kept per offset from here
    assert ack(p, "m1", (2, 3, [ACCEPT])) == (121, "The offset cannot be acknowledged. The offset is not acquired.")
    assert ack(p, "m2", (5, 5, [ACCEPT])) == (121, "Member is not the owner of offset")
    assert row(p, 0, 4) == "Q1m1 Q1m1 A1 Q1m1 Q1m1"  # none of the refused ones changed anything
    q = partition()
    acq(q, "m1", [(0, 9)])
    ack(q, "m1", (0, 9, [RELEASE]))
    assert ack(q, "m1", (0, 9, [ACCEPT])) == NOT_ACQUIRED_BATCH


def test_offsets_before_the_first_batch_in_flight_are_not_found() -> None:
    p = SharePartition.restore(ShareState(state_epoch=0, start_offset=0, batches=(
        StateBatch(5, 9, RecordState.AVAILABLE, 1),)), ShareSettings(record_lock_duration_ms=LOCK))
    assert ack(p, "m1", (0, 3, [ACCEPT])) == (
        121, "Batch record not found. The request batch offsets are not found in the cache.")


def test_a_refused_acknowledgement_changes_nothing_even_where_it_was_valid() -> None:
    p = partition()
    acq(p, "m1", [(0, 4)])
    acq(p, "m2", [(5, 9)])
    assert ack(p, "m1", (0, 4, [ACCEPT]), (5, 9, [ACCEPT])) == NOT_OWNER_BATCH
    assert row(p, 0, 5) == "Q1m1 Q1m1 Q1m1 Q1m1 Q1m1 Q1m2" and p.start_offset == 0


def test_a_range_past_the_window_undoes_the_ranges_before_it() -> None:
    p = partition()
    acq(p, "m1", [(0, 9)])
    assert ack(p, "m1", (0, 4, [ACCEPT]), (8, 12, [ACCEPT])) == (
        42, "Batch record not found. The last offset in request is past acquired records.")
    assert row(p, 0, 0) == "Q1m1" and p.start_offset == 0


def test_ranges_below_the_start_are_skipped() -> None:
    p = partition(start=10)
    acq(p, "m1", [(10, 19)])
    assert ack(p, "m1", (5, 7, [ACCEPT])) is None and row(p, 10, 10) == "Q1m1"
    assert ack(p, "m1", (5, 12, [ACCEPT])) is None
    assert row(p, 10, 13) == "K1 K1 K1 Q1m1" and p.start_offset == 13


def test_kafkas_request_checks_before_the_partition() -> None:
    def check(*batches: tuple[int, int, list[int]], renew: bool = False, v2: bool = True) -> int | None:
        error = check_acknowledgements([AcknowledgementBatch(f, last, tuple(t)) for f, last, t in batches],
                                       is_renew_ack=renew, renew_supported=v2)
        return None if error is None else (int(error.code) if error.message is None else -1)

    assert check((0, 4, [ACCEPT]), (4, 6, [REJECT])) is None  # touching ranges pass, as in Kafka
    assert check((5, 4, [ACCEPT])) == 42
    assert check((0, 4, [ACCEPT]), (3, 6, [ACCEPT])) == 42
    assert check((0, 4, [])) == 42
    assert check((0, 4, [ACCEPT, ACCEPT])) == 42
    assert check((0, 1, [ACCEPT, 5])) == 42
    assert check((0, 1, [-1])) == 42
    assert check((0, 1, [RENEW])) == 42  # RENEW only in a renewal
    assert check((0, 1, [RENEW]), renew=True) is None
    assert check((0, 1, [RENEW]), renew=True, v2=False) == 42
    p = partition()
    acq(p, "m1", [(0, 9)])
    assert ack(p, "m1", (0, 9, [7])) == (42, None)


# -- locks -----------------------------------------------------------------------------------------


def test_a_lock_expires_at_its_deadline_and_the_record_comes_back() -> None:
    p = partition()
    acq(p, "m1", [(0, 9)], now=100)
    assert p.next_deadline() == 100 + LOCK
    assert p.expire(100 + LOCK - 1) == Released(0, 0)
    assert p.expire(100 + LOCK) == Released(available=10, archived=0)
    assert row(p, 0, 0) == "A1" and window(p) == (0, 9, 0) and p.next_deadline() is None


def test_an_acknowledgement_at_the_deadline_is_too_late() -> None:
    p = partition()
    acq(p, "m1", [(0, 9)], now=0)
    assert ack(p, "m1", (0, 9, [ACCEPT]), now=LOCK) == NOT_ACQUIRED_BATCH


def test_a_lock_expiring_at_the_delivery_limit_archives() -> None:
    p = partition(delivery_count_limit=2)
    acq(p, "m1", [(0, 9)], now=0)
    p.expire(LOCK)
    assert acq(p, "m2", [(0, 9)], now=LOCK) == [(0, 9, 2)]
    assert p.expire(2 * LOCK) == Released(available=0, archived=10)
    assert window(p) == (10, 10, 10)


def test_locks_per_offset_expire_each_at_its_own_time() -> None:
    p = partition()
    acq(p, "m1", [(0, 9)], max_records=3, mode=RECORD_LIMIT, now=0)
    acq(p, "m2", [(0, 9)], fetch=3, max_records=2, mode=RECORD_LIMIT, now=500)
    assert p.next_deadline() == LOCK
    assert p.expire(LOCK) == Released(3, 0)
    assert row(p, 0, 5) == "A1 A1 A1 Q1m2 Q1m2 A0" and p.next_deadline() == 500 + LOCK


def test_renew_extends_the_lock() -> None:
    p = partition()
    acq(p, "m1", [(0, 9)], now=0)
    assert ack(p, "m1", (0, 9, [RENEW]), now=600, renew=True) is None
    assert row(p, 0, 0) == "Q1m1" and p.next_deadline() == 600 + LOCK
    assert p.expire(LOCK) == Released(0, 0)
    assert p.expire(600 + LOCK) == Released(10, 0)
    q = partition(renew_acknowledge_enabled=False)
    acq(q, "m1", [(0, 9)])
    assert ack(q, "m1", (0, 9, [RENEW]), renew=True) == (121, "Renewing acquisition locks is not enabled for the group.")


def test_a_renewal_stands_when_a_later_range_is_refused() -> None:
    p = partition()
    acq(p, "m1", [(0, 4)], now=0)
    acq(p, "m2", [(5, 9)], now=0)
    assert ack(p, "m1", (0, 4, [RENEW]), (5, 9, [RENEW]), now=300, renew=True) == NOT_OWNER_BATCH
    assert p.record(0).deadline == 300 + LOCK and p.record(5).deadline == LOCK  # type: ignore[union-attr]


# -- members leaving, the log start moving ---------------------------------------------------------


def test_a_member_leaving_releases_only_its_records_keeping_their_count() -> None:
    p = partition(delivery_count_limit=2)
    acq(p, "m1", [(0, 4)])
    acq(p, "m2", [(5, 9)])
    assert p.release_member("m1") == Released(available=5, archived=0)
    assert row(p, 3, 6) == "A1 A1 Q1m2 Q1m2"
    assert acq(p, "m3", [(0, 4)]) == [(0, 4, 2)]
    assert p.release_member("m3") == Released(available=0, archived=5)  # at the limit
    assert window(p) == (5, 9, 10)


def test_the_log_start_moving_archives_available_records_below_it() -> None:
    p = partition()
    acq(p, "m1", [(0, 9)], now=0)
    ack(p, "m1", (5, 9, [RELEASE]))
    p.advance_log_start(7)
    assert row(p, 4, 9) == "Q1m1 X1 X1 A1 A1 A1" and window(p) == (7, 9, 7)
    assert ack(p, "m1", (0, 4, [ACCEPT])) is None  # below the start: skipped, still held
    assert row(p, 0, 0) == "Q1m1"
    assert p.expire(LOCK) == Released(available=0, archived=5)  # held ones below the start: archived
    q = partition()
    q.advance_log_start(5)
    assert window(q) == (5, 5, 5)


# -- read_committed, compaction ---------------------------------------------------------------------


def test_aborted_transactions_are_archived_and_left_out() -> None:
    p = partition()
    assert acq(p, "m1", [(0, 4), (5, 9), (10, 14)], aborted=[(5, 9)]) == [(0, 4, 1), (10, 14, 1)]
    assert row(p, 4, 10) == "Q1m1 X1 X1 X1 X1 X1 Q1m1"
    assert ack(p, "m1", (0, 4, [ACCEPT]), (10, 14, [ACCEPT])) is None
    assert window(p) == (15, 15, 15)


def test_records_compacted_away_are_archived_when_a_fetch_skips_them() -> None:
    p = partition()
    acq(p, "m1", [(0, 9)])
    ack(p, "m1", (0, 9, [RELEASE]))
    assert acq(p, "m2", [(5, 9)], fetch=0) == [(5, 9, 2)]
    assert row(p, 0, 5) == "X1 X1 X1 X1 X1 Q2m2"
    assert ack(p, "m2", (5, 9, [ACCEPT])) is None and window(p) == (10, 10, 10)


def test_a_gap_between_batches_is_skipped_by_the_start() -> None:
    p = partition()
    acq(p, "m1", [(0, 4)])
    assert acq(p, "m1", [(8, 9)], fetch=5) == [(8, 9, 1)]
    assert row(p, 4, 8) == "Q1m1 - - - Q1m1"
    assert ack(p, "m1", (0, 4, [ACCEPT])) is None
    assert window(p) == (8, 9, 10)


# -- near the delivery limit ----------------------------------------------------------------------


def test_records_near_the_limit_are_delivered_in_halving_numbers_then_alone() -> None:
    p = partition()  # limit 5: throttled from delivery count 3, alone on the 5th delivery
    for _ in range(3):
        acq(p, "m1", [(0, 9)])
        ack(p, "m1", (0, 9, [RELEASE]))
    assert row(p, 0, 0) == "A3"
    assert acq(p, "m1", [(0, 9)]) == [(0, 4, 4)]  # 10 >> 1
    ack(p, "m1", (0, 4, [RELEASE]))
    assert acq(p, "m1", [(0, 9)]) == [(0, 0, 5)]  # the last delivery: alone
    assert acq(p, "m1", [(0, 9)], fetch=1) == [(1, 1, 5)]
    assert acq(p, "m1", [(0, 9)], fetch=2) == [(2, 2, 5)]


def test_a_record_one_delivery_short_of_the_limit_waits_for_a_fetch_of_its_own() -> None:
    p = partition(delivery_count_limit=3)  # throttled from count 2; the 3rd delivery alone
    acq(p, "m1", [(0, 3)])
    ack(p, "m1", (2, 2, [RELEASE]))
    assert acq(p, "m1", [(0, 3)], fetch=2) == [(2, 2, 2)]
    ack(p, "m1", (0, 3, [RELEASE, RELEASE, RELEASE, ACCEPT]))
    assert row(p, 0, 3) == "A1 A1 A2 K1"
    assert acq(p, "m2", [(0, 3)]) == [(0, 1, 2)]  # offset 2 is one delivery short: not with others
    assert acq(p, "m2", [(0, 3)], fetch=2) == [(2, 2, 3)]


# -- durable state ---------------------------------------------------------------------------------


def test_the_snapshot_writes_held_records_as_available_before_this_delivery() -> None:
    p = partition()
    acq(p, "m1", [(0, 9)])
    ack(p, "m1", (0, 2, [ACCEPT]), (3, 3, [RELEASE]))
    state = p.snapshot()
    assert state == ShareState(state_epoch=0, start_offset=3, batches=(
        StateBatch(3, 3, RecordState.AVAILABLE, 1), StateBatch(4, 9, RecordState.AVAILABLE, 0)))
    assert encode_state(state) == (
        b'{"version":1,"state_epoch":0,"start_offset":3,"batches":[[3,3,0,1],[4,9,0,0]]}')
    restored = SharePartition.restore(decode_state(encode_state(state)), ShareSettings(record_lock_duration_ms=LOCK))
    assert window(restored) == (3, 9, 3) and row(restored, 3, 4) == "A1 A0"
    assert acq(restored, "m2", [(0, 9)], fetch=3) == [(3, 3, 2), (4, 9, 1)]


def test_restore_moves_past_a_done_head_and_an_empty_state_is_just_a_start() -> None:
    p = SharePartition.restore(ShareState(state_epoch=3, start_offset=10, batches=(
        StateBatch(10, 12, RecordState.ACKNOWLEDGED, 1), StateBatch(13, 13, RecordState.ARCHIVED, 5),
        StateBatch(14, 20, RecordState.AVAILABLE, 2))), ShareSettings())
    assert window(p) == (14, 20, 14) and p.state_epoch == 3
    empty = SharePartition.restore(ShareState(state_epoch=1, start_offset=42), ShareSettings())
    assert window(empty) == (42, 42, 42)
    assert empty.snapshot() == ShareState(state_epoch=1, start_offset=42)


@pytest.mark.parametrize(("raw", "why"), [
    (b'{"version":2,"state_epoch":0,"start_offset":0,"batches":[]}', "format version 2"),
    (b'{"version":1,"state_epoch":0,"start_offset":5,"batches":[[4,6,0,1]]}', "below the start offset"),
    (b'{"version":1,"state_epoch":0,"start_offset":0,"batches":[[0,4,0,1],[4,6,0,1]]}', "overlapping"),
    (b'{"version":1,"state_epoch":0,"start_offset":0,"batches":[[0,4,1,1]]}', "delivery state 1"),
    (b'{"version":1,"state_epoch":0,"start_offset":0,"batches":[[6,4,0,1]]}', "ends before it starts"),
    (b'{"version":1,"state_epoch":0,"start_offset":0,"batches":[[0,4,0]]}', "first, last, state, count"),
    (b'{"version":1,"state_epoch":true,"start_offset":0,"batches":[]}', "state_epoch"),
    (b"not json", "not JSON"),
    (b"[]", "not a JSON object"),
])
def test_a_malformed_state_is_refused_saying_why(raw: bytes, why: str) -> None:
    with pytest.raises(MalformedShareState, match=why):
        decode_state(raw)


def test_initial_start_offset_by_share_auto_offset_reset() -> None:
    assert initial_start_offset("earliest", log_start_offset=3, high_watermark=9) == 3
    assert initial_start_offset("latest", log_start_offset=3, high_watermark=9) == 9
    assert initial_start_offset("by_duration:PT1H", log_start_offset=3, high_watermark=9, offset_for_duration=5) == 5
    with pytest.raises(ValueError, match="needs the offset"):
        initial_start_offset("by_duration:PT1H", log_start_offset=3, high_watermark=9)
    with pytest.raises(ValueError, match="earliest, latest or by_duration"):
        initial_start_offset("none", log_start_offset=3, high_watermark=9)


def test_settings_are_positive_and_the_throttle_is_half_the_limit_rounded_up() -> None:
    assert [ShareSettings(delivery_count_limit=n).throttle_limit for n in (2, 3, 5, 6, 10)] == [2, 2, 3, 3, 5]
    with pytest.raises(ValueError, match="max_record_locks"):
        ShareSettings(max_record_locks=0)


# -- the state machine against a per-offset model ---------------------------------------------------

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED,
                                               RecordState.ARCHIVED)
MEMBERS = ("m1", "m2", "m3")


@dataclass
class Rec:
    """One offset in the model: state, delivery count, member, lock deadline."""

    state: RecordState
    count: int
    member: str = ""
    deadline: int | None = None


class Model:
    """KIP-932's rules one offset at a time, as Kafka 4.3 applies them, with none of the
    code's batches: the window ``start..end``, each offset's state, count, member and lock."""

    def __init__(self, lock: int, limit: int, max_locks: int, renew: bool) -> None:
        self.lock, self.limit, self.max_locks, self.renew = lock, limit, max_locks, renew
        self.start = self.end = 0
        self.cached = False
        self.recs: dict[int, Rec] = {}

    def next_fetch(self) -> int:
        if not self.cached:
            return self.end
        return next((o for o in range(self.start, self.end + 1) if self.recs[o].state is AVAILABLE), self.end + 1)

    def in_flight(self) -> int:
        return self.end - self.start + 1 if self.cached else 0

    def next_deadline(self) -> int | None:
        return min((r.deadline for r in self.recs.values() if r.state is ACQUIRED and r.deadline is not None),
                   default=None)

    def advance(self) -> None:
        """The start moves past acknowledged and archived records; all done: nothing in flight."""
        while self.cached and self.recs[self.start].state in (ACKNOWLEDGED, ARCHIVED):
            del self.recs[self.start]
            self.start += 1
            if self.start > self.end:
                self.cached, self.end = False, self.start

    def let_go(self, rec: Rec) -> RecordState:
        rec.state = ARCHIVED if rec.count >= self.limit else AVAILABLE
        rec.member, rec.deadline = "", None
        return rec.state

    def expire(self, now: int) -> tuple[int, int]:
        outcome = [self.let_go(r) for r in self.recs.values()
                   if r.state is ACQUIRED and r.deadline is not None and r.deadline <= now]
        if outcome:
            self.advance()
        return outcome.count(AVAILABLE), outcome.count(ARCHIVED)

    def release(self, member: str) -> tuple[int, int]:
        outcome = [self.let_go(r) for r in self.recs.values() if r.state is ACQUIRED and r.member == member]
        self.advance()
        return outcome.count(AVAILABLE), outcome.count(ARCHIVED)

    def acknowledge(self, member: str, acks: list[tuple[int, int, list[int]]], now: int, renew_ack: bool) -> int | None:
        """The error code Kafka answers (renewals before a refusal stay), or ``None``."""
        previous = -1
        for first, last, types in acks:
            if (first > last or first < previous or not types or (len(types) > 1 and len(types) != last - first + 1)
                    or any(t < 0 or t > 4 for t in types) or (4 in types and not renew_ack)):
                return 42
            previous = last
        scratch = {o: Rec(r.state, r.count, r.member, r.deadline) for o, r in self.recs.items()}
        for first, last, types in acks:
            if last < self.start:
                continue
            if not self.cached:
                return 121  # nothing in flight: not found
            if first > self.end or last > self.end:
                return 42  # past the acquired records
            for o in range(max(first, self.start), last + 1):
                rec = scratch[o]
                if rec.state is not ACQUIRED or rec.member != member:
                    return 121
                kind = types[o - first] if len(types) > 1 else types[0]
                if kind == RENEW:
                    if not self.renew:
                        return 121
                    rec.deadline = self.recs[o].deadline = now + self.lock  # kept even if refused later
                elif kind == ACCEPT:
                    rec.state, rec.member, rec.deadline = ACKNOWLEDGED, "", None
                elif kind == RELEASE:
                    self.let_go(rec)
                else:
                    rec.state, rec.member, rec.deadline = ARCHIVED, "", None
        self.recs = scratch
        self.advance()
        return None


class ShareMachine(RuleBasedStateMachine):
    """The code and the model take the same steps; after each, every offset, the window, the
    next fetch offset and the next lock deadline agree. An acquisition is the code's choice
    within Kafka's rules (which records, in how many ranges, depends on batches): the model
    checks it is allowed (each record AVAILABLE or new, its count one more, new records right
    after the window, none past the in-flight limit, at most ``max_records`` in record_limit
    mode) and that something is acquired exactly when something may be, then takes it."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.log: list[tuple[int, int]] = []

    @initialize(limit=st.integers(2, 5), max_locks=st.integers(3, 25), renew=st.booleans(),
                sizes=st.lists(st.integers(1, 6), min_size=1, max_size=8))
    def setup(self, limit: int, max_locks: int, renew: bool, sizes: list[int]) -> None:
        self.settings = ShareSettings(record_lock_duration_ms=100, delivery_count_limit=limit,
                                      max_record_locks=max_locks, renew_acknowledge_enabled=renew)
        self.p = SharePartition(self.settings, start_offset=0)
        self.model = Model(100, limit, max_locks, renew)
        self.produce(sizes)

    @rule(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4))
    def produce(self, sizes: list[int]) -> None:
        for size in sizes:
            base = self.log[-1][1] + 1 if self.log else 0
            self.log.append((base, base + size - 1))

    @rule(member=st.sampled_from(MEMBERS), k=st.integers(1, 3), max_records=st.integers(1, 12),
          batch_size=st.integers(1, 8), record_limit=st.booleans())
    def acquire(self, member: str, k: int, max_records: int, batch_size: int, record_limit: bool) -> None:
        m = self.model
        m.expire(self.now)
        fetch = m.next_fetch()
        at = next((i for i, (_, last) in enumerate(self.log) if last >= fetch), None)
        if at is None:
            return  # nothing in the log there yet
        fetched = self.log[at:at + k]
        got = self.p.acquire(member, fetched, max_records=max_records, fetch_offset=fetch, now=self.now,
                             batch_size=batch_size, mode=RECORD_LIMIT if record_limit else AcquireMode.BATCH_OPTIMIZED)
        acquired = [(o, r.delivery_count) for r in got.records for o in range(r.first_offset, r.last_offset + 1)]
        event(f"acquired {'some' if acquired else 'none'}, max count {max((c for _, c in acquired), default=0)}")
        offsets = [o for o, _ in acquired]
        assert offsets == sorted(set(offsets)) and got.count == len(acquired)
        has_available = m.cached and fetch <= m.end
        room = m.in_flight() < m.max_locks
        assert bool(acquired) == (has_available or room)
        if record_limit:
            assert got.count <= max_records
        first_new = m.end + 1 if m.cached else m.end
        new = [o for o in offsets if o >= first_new]
        assert new == list(range(first_new, first_new + len(new)))
        assert not new or room
        for o, count in acquired:
            assert fetched[0][0] <= o <= fetched[-1][1]
            before = m.recs.get(o)
            if o < first_new:
                assert before is not None and before.state is AVAILABLE and count == before.count + 1
            else:
                assert count == 1
            m.recs[o] = Rec(ACQUIRED, count, member, self.now + m.lock)
        if new:
            if not m.cached:
                m.start, m.cached = new[0], True
            assert new[-1] <= self.p.end_offset <= fetched[-1][1]
            for o in range(new[-1] + 1, self.p.end_offset + 1):
                m.recs[o] = Rec(AVAILABLE, 0)  # the rest of a batch split by record_limit
            m.end = self.p.end_offset

    @rule(data=st.data())
    def acknowledge_held(self, data: st.DataObject) -> None:
        """A run of records one member holds: always applied."""
        m = self.model
        m.expire(self.now)
        holders = sorted({r.member for r in m.recs.values() if r.state is ACQUIRED})
        if not holders:
            return
        member = data.draw(st.sampled_from(holders))
        held = sorted(o for o, r in m.recs.items() if r.state is ACQUIRED and r.member == member)
        first = data.draw(st.sampled_from(held))
        last = first
        while last + 1 in held and data.draw(st.booleans()):
            last += 1
        kinds = st.sampled_from([GAP, ACCEPT, RELEASE, REJECT, RENEW][:5 if m.renew else 4])
        types = data.draw(st.one_of(st.lists(kinds, min_size=1, max_size=1),
                                    st.lists(kinds, min_size=last - first + 1, max_size=last - first + 1)))
        assert self._acknowledge(member, [(first, last, types)], renew_ack=RENEW in types) is None

    @rule(member=st.sampled_from(MEMBERS), data=st.data())
    def acknowledge_any(self, member: str, data: st.DataObject) -> None:
        """Ranges anywhere near the window, of any member's records; one request in five
        breaks one of Kafka's request checks."""
        m = self.model
        m.expire(self.now)
        kinds = st.sampled_from([ACCEPT, RELEASE, REJECT, GAP, RENEW])
        acks: list[tuple[int, int, list[int]]] = []
        first = data.draw(st.integers(max(m.start - 3, 0), m.end + 3))
        for _ in range(data.draw(st.integers(1, 3))):
            if acks:
                first = acks[-1][1] + data.draw(st.integers(1, 3))
            last = first + data.draw(st.integers(0, 5))
            size = last - first + 1
            types = data.draw(st.one_of(st.lists(kinds, min_size=1, max_size=1),
                                        st.lists(kinds, min_size=size, max_size=size)))
            acks.append((first, last, types))
        renew_ack = any(RENEW in types for _, _, types in acks)
        flaw = data.draw(st.sampled_from(["none"] * 4 + ["reversed", "overlap", "no types", "count", "type",
                                                          "renew"]))
        first, last, types = acks[-1]
        if flaw == "reversed":
            acks[-1] = (first, first - 1, types)
        elif flaw == "overlap" and len(acks) > 1:
            acks[-1] = (acks[-2][1] - 1, last, types if len(types) == 1 else [ACCEPT])
        elif flaw == "no types":
            acks[-1] = (first, last, [])
        elif flaw == "count":
            acks[-1] = (first, last + 1, [ACCEPT] * (last - first + 3))
        elif flaw == "type":
            acks[-1] = (first, last, [data.draw(st.sampled_from([-1, 5, 7]))])
        elif flaw == "renew":
            acks[-1], renew_ack = (first, last, [RENEW]), False
        self._acknowledge(member, acks, renew_ack=renew_ack)

    def _acknowledge(self, member: str, acks: list[tuple[int, int, list[int]]], *, renew_ack: bool) -> int | None:
        expected = self.model.acknowledge(member, acks, self.now, renew_ack)
        event(f"acknowledgement answered {expected or 0}")
        error = self.p.acknowledge(member, [AcknowledgementBatch(f, last, tuple(t)) for f, last, t in acks],
                                   now=self.now, is_renew_ack=renew_ack)
        assert (None if error is None else int(error.code)) == expected, (acks, error)
        return expected

    @rule(member=st.sampled_from(MEMBERS))
    def member_leaves(self, member: str) -> None:
        assert self.p.release_member(member) == Released(*self.model.release(member))

    @rule(ms=st.integers(1, 60))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        assert self.p.expire(self.now) == Released(*self.model.expire(self.now))

    @rule()
    def until_the_next_lock_expiry(self) -> None:
        """Time reaches the next deadline exactly: the lock ends then, not a moment later."""
        deadline = self.model.next_deadline()
        assert self.p.next_deadline() == deadline
        if deadline is not None:
            self.now = max(self.now, deadline)
            assert self.p.expire(self.now) == Released(*self.model.expire(self.now))

    @rule()
    def restart(self) -> None:
        """The state goes through ZooKeeper's format and back: held records come back
        AVAILABLE with the count they had before this delivery, held by nobody."""
        state = self.p.snapshot()
        expanded = {o: (b.delivery_state, b.delivery_count) for b in state.batches
                    for o in range(b.first_offset, b.last_offset + 1)}
        m = self.model
        for rec in m.recs.values():
            if rec.state is ACQUIRED:
                rec.state, rec.count, rec.member, rec.deadline = AVAILABLE, rec.count - 1, "", None
        assert expanded == {o: (r.state, r.count) for o, r in m.recs.items()}
        for a, b in zip(state.batches, state.batches[1:], strict=False):  # maximal runs
            assert a.last_offset + 1 < b.first_offset or (a.delivery_state, a.delivery_count) != (
                b.delivery_state, b.delivery_count)
        assert state.start_offset == m.start
        self.p = SharePartition.restore(decode_state(encode_state(state)), self.settings)
        m.advance()

    @invariant()
    def agree(self) -> None:
        if not hasattr(self, "p"):
            return
        m = self.model
        assert (self.p.start_offset, self.p.end_offset) == (m.start, m.end)
        assert self.p.in_flight_count() == m.in_flight()
        assert self.p.next_fetch_offset() == m.next_fetch()
        assert self.p.next_deadline() == m.next_deadline()
        for o, rec in m.recs.items():
            assert self.p.record(o) == RecordView(rec.state, rec.count, rec.member, rec.deadline), o


TestShareMachine = ShareMachine.TestCase
TestShareMachine.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)


@given(st.integers(0, 3), st.integers(0, 10**12), st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 5), st.sampled_from([0, 2, 4]), st.integers(0, 10)), max_size=8))
def test_the_state_format_round_trips(epoch: int, start: int, shapes: list[tuple[int, int, int, int]]) -> None:
    batches, at = [], start
    for gap, length, state, count in shapes:
        batches.append(StateBatch(at + gap, at + gap + length, RecordState(state), count))
        at += gap + length + 1
    value = ShareState(state_epoch=epoch, start_offset=start, batches=tuple(batches))
    raw = encode_state(value)
    assert decode_state(raw) == value and encode_state(decode_state(raw)) == raw
