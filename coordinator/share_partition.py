"""One share-partition's in-flight records (KIP-932), sans-IO: Kafka's ``SharePartition``.

Theory of operation. A share group reads a partition through a window of *in-flight*
records: from the share-partition start offset (SPSO, :attr:`SharePartition.start_offset`)
to the end offset (SPEO, :attr:`SharePartition.end_offset`, the last offset fetched).
Below the window every record is done with; above it nothing was fetched yet. Each record
in the window is AVAILABLE, ACQUIRED by one member (until its acquisition lock expires),
ACKNOWLEDGED or ARCHIVED, and has a delivery count::

    AVAILABLE ──acquire (count + 1)──▶ ACQUIRED ──ACCEPT──▶ ACKNOWLEDGED
        ▲                                 │ ──REJECT, GAP──▶ ARCHIVED
        └── RELEASE, lock expiry, ────────┘
            the member leaving (ARCHIVED instead once the count reached the limit)

As Kafka does, records are kept as the batches they were fetched in, each with one state
for all its records, and split into a state per offset only when something treats part of
a batch differently (an acknowledgement of part of it, one type per offset, the start
offset moving into it, a limit on how many records to acquire). The start offset moves
past the head of the window as soon as it is acknowledged or archived; a batch leaves the
window once every record of it has.

The shell fetches from :meth:`SharePartition.next_fetch_offset` (the first AVAILABLE record,
else the offset after the window) and hands the fetched batches' offset ranges to
:meth:`~SharePartition.acquire`, which answers the ranges the member now holds, with their
delivery counts; the records themselves go to the member as the broker wrote them.
:meth:`~SharePartition.acknowledge` applies a member's acknowledgements, all or nothing,
answering Kafka's error codes and messages. :meth:`~SharePartition.expire` releases the
records whose lock passed; :meth:`~SharePartition.next_deadline` says when to call it.
Every call that takes ``now`` expires due locks first, so a lock lasts exactly
``share.record.lock.duration.ms``. Time is integer milliseconds, given by the caller.

Isolation (``share.isolation.level``) is the shell's: with read_committed it fetches up to
the last stable offset and passes the ranges of aborted transactional batches to
:meth:`~SharePartition.acquire` (``aborted``), which archives them and leaves them out of
what it answers, as Kafka's ``SharePartition`` does with the fetch's aborted transactions.
With read_uncommitted it passes none.

Durability is the shell's too. After :meth:`~SharePartition.acknowledge`,
:meth:`~SharePartition.release_member`, :meth:`~SharePartition.expire` and
:meth:`~SharePartition.advance_log_start` (where Kafka writes to its share coordinator), it
writes :meth:`~SharePartition.snapshot` (:mod:`coordinator.share_state`), and answers an
acknowledgement only once a snapshot taken after it is durable. If that write fails, the
shell drops this object and :meth:`~SharePartition.restore` s the last durable state, as
Kafka fences a share-partition whose state write failed and loads it again.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from coordinator.share_records import (
    ACK_STATE,
    NO_MEMBER,
    AcknowledgementBatch,
    AcknowledgeType,
    AcquiredRecords,
    AcquireMode,
    Acquisition,
    RecordView,
    Released,
    ShareError,
    ShareSettings,
    check_acknowledgements,
)
from coordinator.share_state import RecordState, ShareState, StateBatch
from protocol.errors import ErrorCode

# -- the in-flight records ----------------------------------------------------------------------


@dataclass(slots=True)
class _Record:
    """One record's state, or a whole batch's (Kafka's ``InFlightState``)."""

    state: RecordState
    delivery_count: int
    member: str = NO_MEMBER
    deadline: int | None = None

    def copy(self) -> _Record:
        return _Record(self.state, self.delivery_count, self.member, self.deadline)


@dataclass(slots=True)
class _Batch:
    """Fetched offsets ``first..last`` with one state (``whole``) or one per offset
    (Kafka's ``InFlightBatch``)."""

    first: int
    last: int
    whole: _Record | None
    offsets: list[_Record] | None = None

    def split(self) -> list[_Record]:
        """The per-offset states, made from the batch's at the first call."""
        if self.offsets is None:
            assert self.whole is not None
            whole = self.whole
            self.offsets = [whole.copy() for _ in range(self.last - self.first + 1)]
            self.whole = None
        return self.offsets

    def each(self, lo: int, hi: int) -> Iterator[tuple[int, _Record]]:
        """``(offset, state)`` of the split batch's offsets within ``lo..hi``."""
        assert self.offsets is not None
        for offset in range(max(lo, self.first), min(hi, self.last) + 1):
            yield offset, self.offsets[offset - self.first]

    def at(self, offset: int) -> _Record:
        """The state of ``offset`` (within the batch)."""
        return self.whole if self.whole is not None else self.split()[offset - self.first]


@dataclass(slots=True)
class _Undo:
    """States an acknowledgement changed, to put back if a later part of it is refused."""

    before: list[tuple[_Record, _Record]] = field(default_factory=list)

    def keep(self, record: _Record) -> None:
        self.before.append((record, record.copy()))

    def roll_back(self) -> None:
        for record, previous in reversed(self.before):
            record.state, record.delivery_count = previous.state, previous.delivery_count
            record.member, record.deadline = previous.member, previous.deadline


class SharePartition:
    """The in-flight records of one share group on one partition (see the module's text)."""

    def __init__(self, settings: ShareSettings, *, start_offset: int, state_epoch: int = 0) -> None:
        #: The limits; replaced whole when the group's configuration changes.
        self.settings = settings
        self.state_epoch = state_epoch
        #: The share-partition start offset (SPSO).
        self.start_offset = start_offset
        #: The share-partition end offset (SPEO): the last offset in flight, or the next
        #: offset to fetch while nothing is (then equal to the start offset).
        self.end_offset = start_offset
        self._batches: list[_Batch] = []
        self._firsts: list[int] = []
        #: ``(deadline, first, last)`` of each lock taken, earliest first; an entry whose
        #: records no longer hold that lock is dropped when it comes up.
        self._locks: list[tuple[int, int, int]] = []
        #: Records whose lock expired, since this object was made (a metric's count).
        self.lock_expiries = 0

    # -- state in and out ---------------------------------------------------------------------

    @classmethod
    def restore(cls, state: ShareState, settings: ShareSettings) -> SharePartition:
        """The partition as a durable state left it: its batches in flight, held by nobody."""
        partition = cls(settings, start_offset=state.start_offset, state_epoch=state.state_epoch)
        for batch in state.batches:
            partition._insert(_Batch(batch.first_offset, batch.last_offset,
                                     _Record(batch.delivery_state, batch.delivery_count)))
        if partition._batches:
            partition.end_offset = partition._batches[-1].last
            partition._advance()
        return partition

    def snapshot(self) -> ShareState:
        """The durable state: every offset from the start offset in flight, runs of the same
        state and count as one batch. A held record is written AVAILABLE with the count it had
        before this delivery: Kafka persists no acquisition, so after a restore the delivery
        that was under way is not counted, as after a Kafka leader change."""
        runs: list[list[int]] = []

        def add(lo: int, hi: int, record: _Record) -> None:
            state, count = record.state, record.delivery_count
            if state is RecordState.ACQUIRED:
                state, count = RecordState.AVAILABLE, count - 1
            if runs and runs[-1][1] == lo - 1 and runs[-1][2] == state and runs[-1][3] == count:
                runs[-1][1] = hi
            else:
                runs.append([lo, hi, int(state), count])

        for batch in self._batches:
            lo = max(batch.first, self.start_offset)
            if lo > batch.last:
                continue
            if batch.whole is not None:
                add(lo, batch.last, batch.whole)
                continue
            for offset, record in batch.each(lo, batch.last):
                add(offset, offset, record)
        return ShareState(state_epoch=self.state_epoch, start_offset=self.start_offset,
                          batches=tuple(StateBatch(lo, hi, RecordState(state), count) for lo, hi, state, count in runs))

    # -- what the shell asks ------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where the next fetch for this partition starts: the first AVAILABLE record in
        flight, else the offset after the window."""
        if not self._batches or self.start_offset > self._batches[-1].last:
            return self.end_offset
        for batch in self._batches:
            if batch.whole is not None:
                if batch.whole.state is RecordState.AVAILABLE:
                    return batch.first
                continue
            for offset, record in batch.each(batch.first, batch.last):
                if record.state is RecordState.AVAILABLE:
                    return offset
        return self.end_offset + 1

    def in_flight_count(self) -> int:
        """Records in the window (Kafka counts every offset from start to end)."""
        return self.end_offset - self.start_offset + 1 if self._batches else 0

    def can_acquire(self) -> bool:
        """A fetch could acquire something: a record is AVAILABLE again, or the window is
        below ``max_record_locks``."""
        if self.next_fetch_offset() != self.end_offset + 1:
            return True
        return self.in_flight_count() < self.settings.max_record_locks

    def next_deadline(self) -> int | None:
        """The earliest lock expiry (ms), or ``None`` when no record is held."""
        while self._locks:
            deadline, first, last = self._locks[0]
            for batch in self._span(self._stale_floor(first), last):
                held = [batch.whole] if batch.whole is not None else [r for _, r in batch.each(first, last)]
                if any(r.state is RecordState.ACQUIRED and r.deadline == deadline for r in held):
                    return deadline
            heapq.heappop(self._locks)
        return None

    def record(self, offset: int) -> RecordView | None:
        """The state of one offset in flight, or ``None``."""
        i = self._floor(offset)
        if i < 0 or offset > self._batches[i].last:
            return None
        r = self._batches[i].at(offset)
        return RecordView(r.state, r.delivery_count, r.member, r.deadline)

    def records(self) -> Iterator[tuple[int, RecordView]]:
        """Every offset in flight (from the first batch kept, which may start below the
        start offset) with its state."""
        for offset, r in self._each(self._firsts[0] if self._firsts else self.start_offset):
            yield offset, RecordView(r.state, r.delivery_count, r.member, r.deadline)

    # -- acquire ------------------------------------------------------------------------------

    def acquire(self, member_id: str, batches: Sequence[tuple[int, int]], *, max_records: int,
                fetch_offset: int, now: int, batch_size: int | None = None,
                mode: AcquireMode = AcquireMode.BATCH_OPTIMIZED,
                aborted: Sequence[tuple[int, int]] = ()) -> Acquisition:
        """Acquire for ``member_id`` the records of the fetched ``batches`` (each
        ``(base_offset, last_offset)``, in log order, read from ``fetch_offset``) that may be
        delivered, as Kafka's ``SharePartition.acquire``: whole cached batches where they are
        AVAILABLE, per offset where only part is; new records as new batches (of about
        ``batch_size``), each delivered for the first time; at most ``max_records`` (a soft
        limit in BATCH_OPTIMIZED mode: whole fetched batches); never more in flight than
        ``max_record_locks``, but records already in flight may be acquired again; a record
        near the delivery limit in a smaller acquisition, on its last delivery alone.
        ``aborted``: offset ranges of aborted transactional batches (read_committed), archived
        and left out of the answer."""
        self.expire(now)
        if max_records <= 0 or not batches or batches[-1][1] < self.start_offset:
            return Acquisition()
        last_to_acquire, most = self._acquire_limits(fetch_offset, max_records, batches[-1][1])
        if most <= 0:
            return Acquisition()
        record_limit = mode is AcquireMode.RECORD_LIMIT
        size = batch_size if batch_size is not None and batch_size > 0 else max_records
        deadline = now + self.settings.record_lock_duration_ms
        first_base = batches[0][0]
        if fetch_offset < first_base:
            # Cached records the fetch no longer returns (compacted away) are archived.
            self._archive_range(fetch_offset, first_base - 1,
                                self._span(self._stale_floor(fetch_offset), first_base - 1), RecordState.AVAILABLE)
        base = first_base
        i = self._floor(base)
        if i < 0:
            base = max(base, self.start_offset)
        elif self._batches[i].last >= base:
            base = self._batches[i].first
        cached = self._span(min(first_base, base), last_to_acquire)
        if not cached:
            got, count = self._acquire_new(member_id, batches, record_limit, base, last_to_acquire, size, most,
                                           deadline)
            return self._leave_out_aborted(got, count, aborted)
        result: list[AcquiredRecords] = []
        acquired = 0
        for batch in cached:
            if acquired >= most:
                break
            remaining = most - acquired
            full = batch.first >= first_base and batch.last <= last_to_acquire
            partial_limit = record_limit and batch.last - batch.first + 1 > remaining
            throttle = self._should_throttle(batch, first_base, last_to_acquire)
            if throttle and acquired > 0:
                most = 0  # the near-limit records wait for a fetch of their own
                break
            if not full or batch.offsets is not None or partial_limit or throttle:
                if batch.whole is not None:
                    if batch.whole.state is not RecordState.AVAILABLE:
                        continue
                    batch.split()
                got = self._acquire_offsets(member_id, record_limit, remaining, first_base, last_to_acquire, batch,
                                            deadline)
                result.extend(got)
                count = sum(r.last_offset - r.first_offset + 1 for r in got)
                acquired += count
                if throttle and count > 0:
                    most = 0
                    break
                continue
            whole = batch.whole
            assert whole is not None
            if whole.state is not RecordState.AVAILABLE:
                continue
            self._acquired(whole, member_id, deadline)
            self._lock(deadline, batch.first, batch.last)
            result.append(AcquiredRecords(batch.first, batch.last, whole.delivery_count))
            acquired += batch.last - batch.first + 1
        if acquired < most and cached[-1].last < last_to_acquire:
            got, count = self._acquire_new(member_id, batches, record_limit, cached[-1].last + 1, last_to_acquire,
                                           size, most - acquired, deadline)
            result.extend(got)
            acquired += count
        if result:
            return self._leave_out_aborted(result, acquired, aborted)
        return Acquisition(tuple(result), acquired)

    def _acquire_limits(self, fetch_offset: int, max_records: int, last_fetched: int) -> tuple[int, int]:
        """The last offset to acquire and how many records at most (the in-flight limit):
        at the limit, a fetch from within the window may still take records back."""
        most = min(max_records, self.settings.max_record_locks - self.in_flight_count())
        last = last_fetched
        if most <= 0 and fetch_offset <= self.end_offset:
            most = min(max_records, self.end_offset - fetch_offset + 1)
            last = min(last_fetched, self.end_offset)
        return last, most

    def _acquire_new(self, member_id: str, batches: Sequence[tuple[int, int]], record_limit: bool, first: int,
                     last: int, size: int, most: int, deadline: int) -> tuple[list[AcquiredRecords], int]:
        """Records not in flight yet, as new batches of delivery count 1."""
        if not self._batches and self.end_offset > first:
            first = self.end_offset
        if first > last:
            return [], 0
        last_acquired = last
        if most < last_acquired - first + 1:
            # Up to the end of the fetched batch holding the last record allowed (soft limit).
            last_acquired = _batch_end(batches, first + most - 1)
        ranges = []
        current = first
        if not record_limit and last_acquired - first + 1 > size:
            for base, _ in batches:
                if base > last_acquired:
                    break
                if base - current >= size:
                    ranges.append((current, base - 1))
                    current = base
        ranges.append((current, last_acquired))
        if record_limit and last_acquired - first + 1 > most:
            # One batch in flight, its first ``most`` records held, the rest never delivered.
            held = first + most - 1
            offsets = [_Record(RecordState.ACQUIRED, 1, member_id, deadline) if offset <= held
                       else _Record(RecordState.AVAILABLE, 0) for offset in range(first, last_acquired + 1)]
            self._insert(_Batch(first, last_acquired, None, offsets))
            self._lock(deadline, first, held)
            got = [AcquiredRecords(first, held, 1)]
        else:
            got = []
            for lo, hi in ranges:
                self._insert(_Batch(lo, hi, _Record(RecordState.ACQUIRED, 1, member_id, deadline)))
                self._lock(deadline, lo, hi)
                got.append(AcquiredRecords(lo, hi, 1))
        if self._firsts[0] == first:
            self.start_offset = first
        if last_acquired > self.end_offset:
            self.end_offset = last_acquired
        if record_limit:
            last_acquired = got[0].last_offset
        return got, last_acquired - first + 1

    def _acquire_offsets(self, member_id: str, record_limit: bool, most: int, first: int, last: int,
                         batch: _Batch, deadline: int) -> list[AcquiredRecords]:
        """AVAILABLE offsets of a split batch within ``first..last`` (Kafka's
        ``acquireSubsetBatchRecords``), consecutive ones of one count as one range."""
        limit, throttle_limit = self.settings.delivery_count_limit, self.settings.throttle_limit
        assert batch.offsets is not None
        size = len(batch.offsets)
        acquired, throttled_most = 0, -1
        taken: list[tuple[int, int]] = []
        for offset, record in batch.each(first, last):
            if record.state is not RecordState.AVAILABLE:
                continue
            count = record.delivery_count
            if limit > 2 and count == limit - 1 and acquired > 0:
                break  # its last delivery: alone, in the next fetch
            if count >= throttle_limit and throttled_most < 0:
                # Near the limit: halve what one fetch takes for each delivery past the throttle.
                throttled_most = max(1, size >> (count - throttle_limit + 1))
            self._acquired(record, member_id, deadline)
            taken.append((offset, record.delivery_count))
            acquired += 1
            if record.delivery_count == limit and limit > 2:
                break
            if record_limit and acquired == most:
                break
            if throttled_most >= 0 and acquired == throttled_most:
                break
        if taken:
            self._lock(deadline, taken[0][0], taken[-1][0])
        got: list[AcquiredRecords] = []
        for offset, count in taken:
            if got and got[-1].last_offset == offset - 1 and got[-1].delivery_count == count:
                got[-1] = AcquiredRecords(got[-1].first_offset, offset, count)
            else:
                got.append(AcquiredRecords(offset, offset, count))
        return got

    def _should_throttle(self, batch: _Batch, first: int, last: int) -> bool:
        """The batch's AVAILABLE records within ``first..last`` reached the throttle count."""
        limit = self.settings.throttle_limit
        if batch.whole is not None:
            return batch.whole.state is RecordState.AVAILABLE and batch.whole.delivery_count >= limit
        counts = [r.delivery_count for _, r in batch.each(first, last) if r.state is RecordState.AVAILABLE]
        return max(counts, default=0) >= limit

    def _leave_out_aborted(self, got: list[AcquiredRecords], count: int,
                           aborted: Sequence[tuple[int, int]]) -> Acquisition:
        """Archive the acquired records of aborted transactions and leave them out."""
        if not aborted:
            return Acquisition(tuple(got), count)
        for lo, hi in sorted(aborted):
            i = self._floor(lo)
            self._archive_range(lo, hi, self._span(self._batches[i].first if i >= 0 else lo, hi),
                                RecordState.ACQUIRED)
        kept: list[AcquiredRecords] = []
        for records in got:
            pieces = [(records.first_offset, records.last_offset)]
            for lo, hi in aborted:
                pieces = [piece for first, last in pieces for piece in ((first, min(last, lo - 1)),
                                                                        (max(first, hi + 1), last))
                          if piece[0] <= piece[1]]
            kept.extend(AcquiredRecords(first, last, records.delivery_count) for first, last in pieces)
        return Acquisition(tuple(kept), sum(r.last_offset - r.first_offset + 1 for r in kept))

    def _stale_floor(self, fetch_offset: int) -> int:
        i = self._floor(fetch_offset)
        return self._batches[i].first if i >= 0 and self._batches[i].last >= fetch_offset else fetch_offset

    # -- acknowledge --------------------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: Sequence[AcknowledgementBatch], *, now: int,
                    is_renew_ack: bool = False) -> ShareError | None:
        """Apply ``member_id``'s acknowledgements, all or nothing, as Kafka's
        ``SharePartition.acknowledge`` (after :func:`check_acknowledgements`): each record
        must be ACQUIRED by that member; ACCEPT acknowledges it, RELEASE makes it AVAILABLE
        (ARCHIVED at the delivery limit), REJECT and GAP archive it, RENEW extends its lock
        (and is kept even when a later part of the request is refused, as in Kafka). Ranges
        below the start offset are skipped. ``None`` when applied, else the partition's error."""
        self.expire(now)
        refused = check_acknowledgements(batches, is_renew_ack=is_renew_ack)
        if refused is not None:
            return refused
        undo = _Undo()
        for ack in batches:
            if ack.last_offset < self.start_offset:
                continue
            found = self._ack_span(ack)
            if isinstance(found, ShareError):
                undo.roll_back()
                return found
            for batch in found:
                error = self._acknowledge_batch(member_id, ack, batch, now, undo)
                if error is not None:
                    undo.roll_back()
                    return error
        self._advance()
        return None

    def _ack_span(self, ack: AcknowledgementBatch) -> list[_Batch] | ShareError:
        """The cached batches an acknowledgement covers (Kafka's
        ``fetchSubMapForAcknowledgementBatch``), or why there are none."""
        i = self._floor(ack.first_offset)
        if i < 0 and ack.first_offset < self.start_offset <= ack.last_offset:
            i = self._floor(self.start_offset)  # the start moved into the range
        if i < 0:
            return ShareError(ErrorCode.INVALID_RECORD_STATE,
                              "Batch record not found. The request batch offsets are not found in the cache.")
        found = self._span(self._batches[i].first, ack.last_offset)
        if found[-1].last < ack.first_offset:
            return ShareError(ErrorCode.INVALID_REQUEST,
                              "Batch record not found. The first offset in request is past acquired records.")
        if ack.last_offset > found[-1].last:
            return ShareError(ErrorCode.INVALID_REQUEST,
                              "Batch record not found. The last offset in request is past acquired records.")
        return found

    def _acknowledge_batch(self, member_id: str, ack: AcknowledgementBatch, batch: _Batch, now: int,
                           undo: _Undo) -> ShareError | None:
        if batch.last < self.start_offset:
            return None
        whole = batch.whole
        if whole is not None:
            if whole.member == NO_MEMBER:
                return ShareError(ErrorCode.INVALID_RECORD_STATE,
                                  "The batch cannot be acknowledged. The batch is not in the acquired state.")
            if whole.member != member_id:
                return ShareError(ErrorCode.INVALID_RECORD_STATE, "Member is not the owner of batch record")
        types = ack.acknowledge_types
        full = batch.first >= ack.first_offset and batch.last <= ack.last_offset
        start_within = batch.first < self.start_offset <= batch.last
        if whole is None or not full or len(types) > 1 or start_within:
            if whole is not None:
                if whole.state is not RecordState.ACQUIRED:
                    return ShareError(ErrorCode.INVALID_RECORD_STATE, "The batch cannot be acknowledged. The subset "
                                      "batch is not in the acquired state.")
                batch.split()
            for offset, record in batch.each(ack.first_offset, ack.last_offset):
                if offset < self.start_offset:
                    continue
                if record.state is not RecordState.ACQUIRED:
                    return ShareError(ErrorCode.INVALID_RECORD_STATE,
                                      "The offset cannot be acknowledged. The offset is not acquired.")
                if record.member != member_id:
                    return ShareError(ErrorCode.INVALID_RECORD_STATE, "Member is not the owner of offset")
                kind = types[offset - ack.first_offset] if len(types) > 1 else types[0]
                error = self._apply_ack(record, kind, offset, offset, now, undo)
                if error is not None:
                    return error
            return None
        if whole.state is not RecordState.ACQUIRED:
            return ShareError(ErrorCode.INVALID_RECORD_STATE,
                              "The batch cannot be acknowledged. The batch is not in the acquired state.")
        return self._apply_ack(whole, types[0], batch.first, batch.last, now, undo)

    def _apply_ack(self, record: _Record, kind: int, first: int, last: int, now: int,
                   undo: _Undo) -> ShareError | None:
        if kind == AcknowledgeType.RENEW:
            if not self.settings.renew_acknowledge_enabled:
                return ShareError(ErrorCode.INVALID_RECORD_STATE,
                                  "Renewing acquisition locks is not enabled for the group.")
            record.deadline = now + self.settings.record_lock_duration_ms
            self._lock(record.deadline, first, last)
            return None
        undo.keep(record)
        self._release(record, ACK_STATE[AcknowledgeType(kind)])
        return None

    # -- release: lock expiry, a member leaving, the log start moving ------------------------

    def expire(self, now: int) -> Released:
        """Release the records whose lock expired by ``now``: AVAILABLE again with their
        delivery count, or ARCHIVED once it reached the limit (or below the start offset)."""
        released = Released(0, 0)
        while self._locks and self._locks[0][0] <= now:
            _, first, last = heapq.heappop(self._locks)
            for batch in self._span(self._stale_floor(first), last):
                released = released + self._let_go_where(
                    batch, first, last, lambda r: r.state is RecordState.ACQUIRED and r.deadline is not None
                    and r.deadline <= now)
        available, archived = released.available, released.archived
        if available or archived:
            self.lock_expiries += available + archived
            self._advance()
        return Released(available, archived)

    def release_member(self, member_id: str) -> Released:
        """Release every record ``member_id`` holds (it left the group, or closed its share
        session), as lock expiry does: the delivery count is kept, and a record at the limit
        is archived (Kafka's ``releaseAcquiredRecords``)."""
        released = Released(0, 0)
        for batch in self._batches:
            released = released + self._let_go_where(
                batch, batch.first, batch.last,
                lambda r: r.member in (member_id, NO_MEMBER) and r.state is RecordState.ACQUIRED)
        available, archived = released.available, released.archived
        self._advance()
        return Released(available, archived)

    def advance_log_start(self, log_start_offset: int) -> None:
        """The log's start moved to ``log_start_offset`` (retention, DeleteRecords): the
        window starts there, and the AVAILABLE records below it are archived (held ones are
        archived when let go). Kafka's ``updateCacheAndOffsets``."""
        if log_start_offset <= self.start_offset:
            return
        if not self._batches:
            self.start_offset = self.end_offset = log_start_offset
            return
        self._archive_range(self.start_offset, log_start_offset - 1, list(self._batches), RecordState.AVAILABLE)
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, self.start_offset)

    def _let_go_where(self, batch: _Batch, first: int, last: int, held: Callable[[_Record], bool]) -> Released:
        """Let go (:meth:`_let_go`) the records of ``batch`` in ``[first, last]`` that
        ``held`` picks: a batch in one state as a whole, unless the start offset lies
        inside it (then record by record, as it is split)."""
        whole = batch.whole
        if whole is not None:
            if not held(whole):
                return Released(0, 0)
            if not batch.first < self.start_offset <= batch.last:
                size = batch.last - batch.first + 1
                kept = self._let_go(whole, batch.last) is RecordState.AVAILABLE
                return Released(size if kept else 0, 0 if kept else size)
            batch.split()
        available = archived = 0
        for offset, record in batch.each(first, last):
            if held(record):
                if self._let_go(record, offset) is RecordState.AVAILABLE:
                    available += 1
                else:
                    archived += 1
        return Released(available, archived)

    def _let_go(self, record: _Record, offset: int) -> RecordState:
        """An acquired record let go without an acknowledgement."""
        return self._release(record, RecordState.ARCHIVED if offset < self.start_offset else RecordState.AVAILABLE)

    def _release(self, record: _Record, state: RecordState) -> RecordState:
        """Kafka's ``tryUpdateState`` away from ACQUIRED: AVAILABLE becomes ARCHIVED once the
        delivery count reached the limit; the member and the lock are let go."""
        if state is RecordState.AVAILABLE and record.delivery_count >= self.settings.delivery_count_limit:
            state = RecordState.ARCHIVED
        record.state, record.member, record.deadline = state, NO_MEMBER, None
        return state

    def _acquired(self, record: _Record, member_id: str, deadline: int) -> None:
        record.state, record.member, record.deadline = RecordState.ACQUIRED, member_id, deadline
        record.delivery_count += 1

    def _archive_range(self, lo: int, hi: int, batches: list[_Batch], initial: RecordState) -> None:
        """Archive the records in ``initial`` state within ``lo..hi`` (Kafka's ``archiveRecords``)."""
        for batch in batches:
            if batch.first > hi:
                break
            whole = batch.whole
            if whole is not None and batch.first >= lo and batch.last <= hi:
                if whole.state is initial:
                    whole.state, whole.member, whole.deadline = RecordState.ARCHIVED, NO_MEMBER, None
                continue
            if whole is not None:
                if whole.state is not initial:
                    continue
                batch.split()
            for _, record in batch.each(lo, hi):
                if record.state is initial:
                    record.state, record.member, record.deadline = RecordState.ARCHIVED, NO_MEMBER, None

    # -- the start offset -----------------------------------------------------------------------

    def _advance(self) -> None:
        """Move the start offset past the acknowledged and archived head of the window, and
        drop the batches that are done with (Kafka's ``maybeUpdateCachedStateAndOffsets``)."""
        if not self._batches:
            return
        i = self._floor(self.start_offset)
        if i < 0:
            return  # an offset before the first batch is still to be fetched
        at_start = self._batches[i].at(min(self.start_offset, self._batches[i].last))
        if not at_start.state.terminal:
            return
        done, done_index = -1, -1
        for index, batch in enumerate(self._batches):
            if batch.whole is not None:
                if not batch.whole.state.terminal:
                    break
                done, done_index = batch.last, index
                continue
            stop = next((offset for offset, r in batch.each(batch.first, batch.last) if not r.state.terminal), None)
            if stop is not None:
                if stop > batch.first:
                    done, done_index = stop - 1, index
                break
            done, done_index = batch.last, index
        if done < 0:
            return
        if done == self._batches[-1].last:
            self.start_offset = self.end_offset = max(self.start_offset, done + 1)
            self._batches.clear()
            self._firsts.clear()
            return
        if done == self._batches[done_index].last:
            self.start_offset = max(self.start_offset, self._batches[done_index + 1].first)
            keep_from = done_index + 1
        else:
            self.start_offset = max(self.start_offset, done + 1)
            keep_from = done_index
        del self._batches[:keep_from]
        del self._firsts[:keep_from]

    # -- the batches ----------------------------------------------------------------------------

    def _insert(self, batch: _Batch) -> None:
        at = bisect_left(self._firsts, batch.first)
        insort(self._firsts, batch.first)
        self._batches.insert(at, batch)

    def _floor(self, offset: int) -> int:
        """The index of the last batch starting at or before ``offset``, else -1."""
        return bisect_right(self._firsts, offset) - 1

    def _span(self, lo: int, hi: int) -> list[_Batch]:
        """The batches starting within ``lo..hi``."""
        return self._batches[bisect_left(self._firsts, lo):bisect_right(self._firsts, hi)]

    def _each(self, lo: int, hi: int | None = None) -> Iterator[tuple[int, _Record]]:
        """``(offset, state)`` of every cached offset within ``lo..hi`` (to the end without ``hi``)."""
        end = self._batches[-1].last if hi is None and self._batches else hi
        if end is None:
            return
        start = max(self._floor(lo), 0)
        for batch in self._batches[start:]:
            if batch.first > end:
                break
            for offset in range(max(lo, batch.first), min(end, batch.last) + 1):
                yield offset, batch.at(offset)

    def _lock(self, deadline: int, first: int, last: int) -> None:
        heapq.heappush(self._locks, (deadline, first, last))


def _batch_end(batches: Sequence[tuple[int, int]], offset: int) -> int:
    """The last offset of the fetched batch holding ``offset``, else ``offset`` (Kafka's
    ``lastOffsetFromBatchWithRequestOffset``)."""
    holding = None
    for base, last in batches:
        if offset < base:
            break
        holding = (base, last)
    return holding[1] if holding is not None and offset <= holding[1] else offset
