"""Keyed deadlines: what the core asks the shell to wake it for.

Every timeout of the group protocols (a member's session, a join phase, a pending sync, a
KIP-848 revocation, the offset-retention sweep) is one entry here, named by a key so that
re-arming replaces and cancelling forgets. The shell only ever sees :meth:`next_deadline`
and calls the core's ``on_timer(now)`` once that time has come; the core then pops the due
keys with :meth:`pop_due` and handles each.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable


class Deadlines:
    """A set of ``key -> deadline`` (milliseconds) with the earliest first."""

    def __init__(self) -> None:
        self._when: dict[Hashable, int] = {}
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._when)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._when

    def set(self, key: Hashable, when: int) -> None:
        """Arm ``key`` for ``when``, replacing any deadline it had.

        Moving a deadline later pushes nothing: the key's earlier heap entry, when it comes
        up, is pushed again for the new time. Every heartbeat moves its member's session
        deadline later, so this keeps the heap at about one entry per key instead of one
        per heartbeat (with 5,000 members, 75,000 entries each living a session timeout
        were what the garbage collector's full passes spent their time on).
        """
        before = self._when.get(key)
        self._when[key] = when
        if before is not None and before <= when:
            return
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, key))

    def cancel(self, key: Hashable) -> None:
        """Forget ``key`` (nothing happens if it is not armed)."""
        self._when.pop(key, None)

    def cancel_group(self, group_id: str) -> int:
        """Forget every key of ``group_id`` (keys are tuples ``(kind, group_id, ...)``);
        returns how many were armed."""
        doomed = [k for k in self._when if isinstance(k, tuple) and len(k) > 1 and k[1] == group_id]
        for key in doomed:
            del self._when[key]
        return len(doomed)

    def get(self, key: Hashable) -> int | None:
        """When ``key`` is due, or ``None``."""
        return self._when.get(key)

    def _clean(self) -> None:
        """Drop the top entries that are not a key's deadline any more; an entry whose key
        was moved later goes back in at the key's time."""
        while self._heap:
            when, _, key = self._heap[0]
            current = self._when.get(key)
            if current == when:
                return
            if current is not None and current > when:
                self._seq += 1
                heapq.heapreplace(self._heap, (current, self._seq, key))
            else:
                heapq.heappop(self._heap)

    def next_deadline(self) -> int | None:
        """The earliest deadline, or ``None`` when nothing is armed."""
        self._clean()
        return self._heap[0][0] if self._heap else None

    def pop_next(self, now: int) -> Hashable | None:
        """Remove and return the earliest key due at ``now``, or ``None``. Taking one key at
        a time lets handling it cancel or re-arm the others first."""
        self._clean()
        if not self._heap or self._heap[0][0] > now:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._when[key]
        return key

    def pop_due(self, now: int) -> list[Hashable]:
        """Remove and return the keys due at ``now``, earliest first."""
        due: list[Hashable] = []
        while True:
            self._clean()
            if not self._heap or self._heap[0][0] > now:
                return due
            _, _, key = heapq.heappop(self._heap)
            del self._when[key]
            due.append(key)
