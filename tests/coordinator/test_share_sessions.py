"""Share sessions (coordinator/share_sessions.py, KIP-932), sans-IO.

Every expectation is worked out by hand from the rules of Kafka's share session cache and
``SharePartitionManager.newContext`` / ``acknowledgeSessionUpdate``; the state machine at the
end checks the code against a small model of those rules written here, never against itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from coordinator.share_sessions import (
    DEFAULT_MAX_SESSIONS,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SHARE_SESSION_EPOCH,
    MAX_EPOCH,
    SHARE_SESSION_LIMIT_REACHED,
    SHARE_SESSION_NOT_FOUND,
    FetchContext,
    SessionError,
    SessionPartition,
    ShareSessionKey,
    ShareSessions,
    next_epoch,
)
from protocol.errors import ErrorCode

T1 = UUID(int=1)
T2 = UUID(int=2)
A0, A1, A2, B0 = (T1, 0), (T1, 1), (T1, 2), (T2, 0)
KEY = ShareSessionKey("g", "m1")
OTHER = ShareSessionKey("g", "m2")
NOT_FOUND = SessionError(SHARE_SESSION_NOT_FOUND)
BAD_EPOCH = SessionError(INVALID_SHARE_SESSION_EPOCH)
LIMIT = SessionError(SHARE_SESSION_LIMIT_REACHED)
INVALID_REQUEST = SessionError(ErrorCode.INVALID_REQUEST)


def fetch(s: ShareSessions, key: ShareSessionKey, epoch: int, add: list[SessionPartition] | None = None,
          forget: list[SessionPartition] | None = None, *, acks: bool = False,
          conn: object = "c1") -> FetchContext | SessionError:
    return s.open_fetch(key, epoch, to_add=add or [], to_forget=forget or [], has_acknowledgements=acks,
                        connection=conn)


def opened(add: list[SessionPartition], key: ShareSessionKey = KEY, **kwargs: int) -> ShareSessions:
    s = ShareSessions(**kwargs)
    assert isinstance(fetch(s, key, INITIAL_EPOCH, add), FetchContext)
    return s


# -- the codes and the epoch arithmetic ----------------------------------------------------------


def test_the_codes_are_kafkas() -> None:
    # Errors.java: SHARE_SESSION_NOT_FOUND 122, INVALID_SHARE_SESSION_EPOCH 123,
    # SHARE_SESSION_LIMIT_REACHED 133; INVALID_REQUEST 42.
    assert (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED) == (122, 123, 133)
    assert INVALID_REQUEST.code == 42
    # group.share.max.share.sessions defaults to 2000.
    assert DEFAULT_MAX_SESSIONS == 2000 and ShareSessions().max_sessions == 2000


@pytest.mark.parametrize(("epoch", "after"), [
    (0, 1), (1, 2), (41, 42), (MAX_EPOCH - 1, MAX_EPOCH),
    (MAX_EPOCH, 1),  # wraps past int32's largest to 1: never back to 0 (new) or -1 (final)
    (-1, -1), (-7, -1),  # after a negative epoch comes the final one
])
def test_next_epoch(epoch: int, after: int) -> None:
    assert next_epoch(epoch) == after


def test_the_limit_is_at_least_one() -> None:
    with pytest.raises(ValueError, match=r"group\.share\.max\.share\.sessions"):
        ShareSessions(0)


# -- ShareFetch: epoch 0 opens ---------------------------------------------------------------------


def test_initial_fetch_opens_a_session_expecting_epoch_1() -> None:
    s = ShareSessions()
    got = fetch(s, KEY, 0, [A1, B0, A0, A1])
    # The session is the request's partitions, in request order, once each; the next
    # request must carry epoch 1.
    assert got == FetchContext(key=KEY, partitions=(A1, B0, A0), full=True, final=False, next_epoch=1)
    assert KEY in s and len(s) == 1 and s.expected_epoch(KEY) == 1
    assert s.partitions(KEY) == (A1, B0, A0) and s.total_partitions == 3


def test_initial_fetch_replaces_the_session_and_ignores_forgotten_partitions() -> None:
    s = opened([A0, A1])
    assert isinstance(fetch(s, KEY, 1, [B0]), FetchContext)
    # A second epoch 0 drops the old session (whatever its epoch, 2 here) and starts one with
    # exactly the new request's partitions; forgotten partitions mean nothing in it.
    got = fetch(s, KEY, 0, [A2], [A2, A0])
    assert got == FetchContext(key=KEY, partitions=(A2,), full=True, final=False, next_epoch=1)
    assert len(s) == 1 and s.expected_epoch(KEY) == 1


def test_initial_fetch_with_acknowledgements_is_an_invalid_request() -> None:
    s = opened([A0])
    assert isinstance(fetch(s, KEY, 1, [A1]), FetchContext)
    # INVALID_REQUEST, no message; checked before the old session is dropped: it stays,
    # still expecting epoch 2 with both partitions.
    assert fetch(s, KEY, 0, [B0], acks=True) == INVALID_REQUEST
    assert INVALID_REQUEST.message is None
    assert s.expected_epoch(KEY) == 2 and s.partitions(KEY) == (A0, A1)
    # Without a session it is refused the same, and none is opened.
    assert fetch(s, OTHER, 0, [B0], acks=True) == INVALID_REQUEST and OTHER not in s


def test_an_empty_initial_fetch_still_opens_a_session() -> None:
    s = ShareSessions()
    assert fetch(s, KEY, 0) == FetchContext(key=KEY, partitions=(), full=True, final=False, next_epoch=1)


# -- ShareFetch: other epochs continue ---------------------------------------------------------------


def test_incremental_fetch_adds_at_the_end_and_forgets() -> None:
    s = opened([A0, A1])
    # A1 is already there and keeps its place; B0 and A2 join at the end in request order;
    # A0 is forgotten. The answer is the whole session; the epoch moves to 2.
    got = fetch(s, KEY, 1, [B0, A1, A2], [A0])
    assert got == FetchContext(key=KEY, partitions=(A1, B0, A2), full=False, final=False, next_epoch=2)
    # Adds come before forgets: a partition in both ends up out. Forgetting one the
    # session lacks changes nothing.
    got = fetch(s, KEY, 2, [A0], [A0, (T2, 9)])
    assert got == FetchContext(key=KEY, partitions=(A1, B0, A2), full=False, final=False, next_epoch=3)
    # A request that changes nothing fetches the whole session again.
    got = fetch(s, KEY, 3)
    assert got == FetchContext(key=KEY, partitions=(A1, B0, A2), full=False, final=False, next_epoch=4)
    assert s.total_partitions == 3


def test_incremental_fetch_without_a_session_is_not_found() -> None:
    s = opened([A0])
    # SHARE_SESSION_NOT_FOUND, no message; the session is looked for before its epoch.
    assert fetch(s, OTHER, 1, [A0]) == NOT_FOUND
    assert fetch(s, OTHER, 5) == NOT_FOUND
    assert fetch(s, ShareSessionKey("h", "m1"), 1) == NOT_FOUND  # the key is group and member
    assert NOT_FOUND.message is None and OTHER not in s


@pytest.mark.parametrize("epoch", [2, 7, -2, MAX_EPOCH])
def test_incremental_fetch_with_another_epoch_is_invalid(epoch: int) -> None:
    s = opened([A0])
    # The session expects 1; anything else but 0 and -1 is INVALID_SHARE_SESSION_EPOCH and
    # leaves it untouched.
    assert fetch(s, KEY, epoch, [B0], [A0]) == BAD_EPOCH
    assert s.expected_epoch(KEY) == 1 and s.partitions(KEY) == (A0,)


def test_a_repeated_request_is_invalid() -> None:
    s = opened([A0])
    assert isinstance(fetch(s, KEY, 1), FetchContext)
    # Epoch 1 was used: sending it again (a retry of a request the broker did see) is refused.
    assert fetch(s, KEY, 1) == BAD_EPOCH
    assert isinstance(fetch(s, KEY, 2), FetchContext)


def test_the_epoch_wraps_to_1() -> None:
    s = opened([A0])
    s._sessions[KEY].epoch = MAX_EPOCH - 1  # as if 2**31 - 3 requests had gone by
    assert fetch(s, KEY, MAX_EPOCH - 1) == FetchContext(key=KEY, partitions=(A0,), full=False, final=False,
                                                        next_epoch=MAX_EPOCH)
    assert s.acknowledge(KEY, MAX_EPOCH) is None
    # After int32's largest comes 1, not 0: 0 would open a new session.
    assert s.expected_epoch(KEY) == 1
    assert fetch(s, KEY, 1) == FetchContext(key=KEY, partitions=(A0,), full=False, final=False, next_epoch=2)


# -- ShareFetch: epoch -1 closes -----------------------------------------------------------------


def test_final_fetch_closes_the_session() -> None:
    s = opened([A0, B0])
    assert isinstance(fetch(s, KEY, 1), FetchContext)
    # The epoch of a final request is -1 itself, not checked against the session's (2 here).
    # Nothing is fetched; the member's remaining records are released in the session's
    # partitions; the session is gone.
    got = fetch(s, KEY, -1, acks=True)
    assert got == FetchContext(key=KEY, partitions=(), full=False, final=True, next_epoch=FINAL_EPOCH,
                               released=(A0, B0))
    assert KEY not in s and len(s) == 0 and s.expected_epoch(KEY) is None and s.partitions(KEY) == ()
    # A closed session is not found.
    assert fetch(s, KEY, 2) == NOT_FOUND
    assert fetch(s, KEY, -1) == NOT_FOUND
    assert s.acknowledge(KEY, 2) == NOT_FOUND


def test_final_fetch_may_name_partitions_for_their_acknowledgements() -> None:
    s = opened([A0])
    # Since KAFKA-18932 a final ShareFetch naming partitions is no INVALID_REQUEST: they are
    # there for their acknowledgements, and none is fetched nor added.
    got = fetch(s, KEY, -1, [A0, B0], [A0], acks=True)
    assert got == FetchContext(key=KEY, partitions=(), full=False, final=True, next_epoch=FINAL_EPOCH,
                               released=(A0,))


def test_final_fetch_without_a_session_is_not_found() -> None:
    s = ShareSessions()
    assert fetch(s, KEY, -1) == NOT_FOUND
    assert fetch(s, KEY, -1, [A0], acks=True) == NOT_FOUND


# -- ShareAcknowledge ----------------------------------------------------------------------------


def test_acknowledge_continues_the_same_epochs_as_fetch() -> None:
    s = opened([A0])
    # ShareFetch and ShareAcknowledge share one sequence: fetch 1, acknowledge 2, fetch 3.
    assert isinstance(fetch(s, KEY, 1), FetchContext)
    assert s.acknowledge(KEY, 2) is None and s.expected_epoch(KEY) == 3
    assert fetch(s, KEY, 2) == BAD_EPOCH
    assert isinstance(fetch(s, KEY, 3), FetchContext) and s.expected_epoch(KEY) == 4


def test_acknowledge_never_opens_a_session() -> None:
    s = opened([A0])
    # Epoch 0 is INVALID_SHARE_SESSION_EPOCH, before any lookup: with a session (left as it
    # was) and without one.
    assert s.acknowledge(KEY, 0) == BAD_EPOCH and s.expected_epoch(KEY) == 1
    assert s.acknowledge(OTHER, 0) == BAD_EPOCH and OTHER not in s


def test_acknowledge_errors() -> None:
    s = opened([A0])
    assert s.acknowledge(OTHER, 1) == NOT_FOUND
    assert s.acknowledge(OTHER, -1) == NOT_FOUND  # a final one needs a session too
    assert s.acknowledge(KEY, 2) == BAD_EPOCH
    assert s.acknowledge(KEY, -3) == BAD_EPOCH
    assert s.expected_epoch(KEY) == 1


def test_final_acknowledge_closes_the_session_whatever_its_epoch() -> None:
    s = opened([A0, A1])
    assert s.acknowledge(KEY, 1) is None
    assert s.partitions(KEY) == (A0, A1)  # where the shell releases the member's records
    assert s.acknowledge(KEY, -1) is None
    assert KEY not in s and s.acknowledge(KEY, 2) == NOT_FOUND and fetch(s, KEY, 2) == NOT_FOUND
    # The member starts over with epoch 0.
    assert fetch(s, KEY, 0, [B0]) == FetchContext(key=KEY, partitions=(B0,), full=True, final=False, next_epoch=1)


# -- the limit -----------------------------------------------------------------------------------


def test_the_limit() -> None:
    s = opened([A0], max_sessions=2)
    assert isinstance(fetch(s, OTHER, 0, [A1]), FetchContext)
    third = ShareSessionKey("g", "m3")
    # group.share.max.share.sessions reached: SHARE_SESSION_LIMIT_REACHED, no session opened.
    assert fetch(s, third, 0, [A2]) == LIMIT and third not in s and len(s) == 2
    # Reopening a kept session is no new one: the old is dropped first, so it fits.
    assert isinstance(fetch(s, KEY, 0, [B0]), FetchContext) and len(s) == 2
    # Once one closes there is room again.
    assert s.acknowledge(OTHER, -1) is None
    assert fetch(s, third, 0, [A2]) == FetchContext(key=third, partitions=(A2,), full=True, final=False,
                                                    next_epoch=1)


# -- connections ---------------------------------------------------------------------------------


def test_a_closed_connection_drops_the_sessions_it_opened() -> None:
    s = ShareSessions()
    k2 = ShareSessionKey("h", "m1")
    assert isinstance(fetch(s, KEY, 0, [A0], conn="a"), FetchContext)
    assert isinstance(fetch(s, OTHER, 0, [A1], conn="b"), FetchContext)
    assert isinstance(fetch(s, k2, 0, [B0], conn="a"), FetchContext)
    # A later request on another connection does not move a session.
    assert isinstance(fetch(s, KEY, 1, conn="b"), FetchContext)
    assert s.keys_on("a") == [KEY, k2] and s.keys_on("b") == [OTHER]
    # Connection a goes: its sessions are dropped and named, oldest first.
    assert s.close_connection("a") == [KEY, k2]
    assert KEY not in s and k2 not in s and OTHER in s and len(s) == 1
    assert fetch(s, KEY, 2, conn="b") == NOT_FOUND
    assert s.close_connection("a") == [] and s.close_connection("nobody") == []
    assert s.close_connection("b") == [OTHER] and len(s) == 0


def test_a_session_reopened_elsewhere_belongs_to_the_new_connection() -> None:
    s = opened([A0])  # on c1
    assert isinstance(fetch(s, KEY, 0, [A1], conn="c2"), FetchContext)
    # The client reconnected and opened the session again: the old connection closing
    # afterwards must not take the new session with it.
    assert s.close_connection("c1") == []
    assert s.partitions(KEY) == (A1,)
    assert s.close_connection("c2") == [KEY] and KEY not in s


def test_sessions_closed_by_the_client_are_not_named_again() -> None:
    s = opened([A0])
    assert s.acknowledge(KEY, -1) is None
    assert s.keys_on("c1") == [] and s.close_connection("c1") == []


def test_close() -> None:
    s = opened([A0, B0])
    assert s.close(KEY) == (A0, B0)
    assert s.close(KEY) is None and KEY not in s and s.keys_on("c1") == []


# -- a model of the rules, against random sequences ------------------------------------------------

GROUPS = ["g", "h"]
MEMBERS = ["m1", "m2", "m3"]
KEYS = [ShareSessionKey(g, m) for g in GROUPS for m in MEMBERS]
PARTS = [(t, p) for t in (T1, T2) for p in range(3)]
CONNS = ["c1", "c2", "c3"]
MODEL_LIMIT = 3


@dataclass
class Kept:
    """The model's session: the epoch last accepted for it (0 when opened), its partitions,
    its connection."""

    last: int
    parts: list[SessionPartition] = field(default_factory=list)
    conn: str = ""

    @property
    def expect(self) -> int:
        # One more than the last accepted, and 1 after 2**31 - 1 (written apart from next_epoch).
        return self.last % MAX_EPOCH + 1


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.s = ShareSessions(MODEL_LIMIT)
        self.kept: dict[ShareSessionKey, Kept] = {}
        self.closed: set[ShareSessionKey] = set()

    def _key(self, data: st.DataObject) -> ShareSessionKey:
        """Mostly a key with a session, when there is one."""
        kept = sorted(self.kept, key=KEYS.index)
        return data.draw(st.sampled_from(kept * 3 + KEYS if kept else KEYS))

    def _epoch(self, key: ShareSessionKey, data: st.DataObject) -> int:
        """Mostly the epoch Kafka's rules accept next, often 0 or -1, now and then a wrong one."""
        kept = self.kept.get(key)
        if kept is None:
            choices = [INITIAL_EPOCH] * 4 + [FINAL_EPOCH, 1]
        else:
            choices = [kept.expect] * 5 + [INITIAL_EPOCH, FINAL_EPOCH, kept.expect + 1, kept.last]
        return data.draw(st.one_of(st.sampled_from(choices), st.integers(-3, 9)))

    def _close(self, key: ShareSessionKey) -> Kept:
        self.closed.add(key)
        return self.kept.pop(key)

    @rule(add=st.lists(st.sampled_from(PARTS), max_size=4), forget=st.lists(st.sampled_from(PARTS), max_size=3),
          acks=st.sampled_from([False, False, False, True]), conn=st.sampled_from(CONNS), data=st.data())
    def share_fetch(self, add: list[SessionPartition], forget: list[SessionPartition], acks: bool, conn: str,
                    data: st.DataObject) -> None:
        key = self._key(data)
        self._fetch(key, self._epoch(key, data), add, forget, acks, conn)

    @rule(key=st.sampled_from(KEYS), add=st.lists(st.sampled_from(PARTS), max_size=4), conn=st.sampled_from(CONNS))
    def share_fetch_opens(self, key: ShareSessionKey, add: list[SessionPartition], conn: str) -> None:
        self._fetch(key, INITIAL_EPOCH, add, [], False, conn)

    def _fetch(self, key: ShareSessionKey, epoch: int, add: list[SessionPartition], forget: list[SessionPartition],
               acks: bool, conn: str) -> None:
        got = fetch(self.s, key, epoch, add, forget, acks=acks, conn=conn)
        kept = self.kept.get(key)
        expected: FetchContext | SessionError
        if epoch == FINAL_EPOCH:
            if kept is None:
                expected = NOT_FOUND
            else:
                expected = FetchContext(key=key, partitions=(), full=False, final=True, next_epoch=-1,
                                        released=tuple(self._close(key).parts))
        elif epoch == INITIAL_EPOCH:
            if acks:
                expected = INVALID_REQUEST
            else:
                if kept is not None:
                    self._close(key)
                if len(self.kept) >= MODEL_LIMIT:
                    expected = LIMIT
                else:
                    parts = [p for i, p in enumerate(add) if p not in add[:i]]
                    self.kept[key] = Kept(0, parts, conn)
                    self.closed.discard(key)
                    expected = FetchContext(key=key, partitions=tuple(parts), full=True, final=False, next_epoch=1)
        elif kept is None:
            expected = NOT_FOUND
        elif epoch != kept.expect:
            expected = BAD_EPOCH
        else:
            kept.parts += [p for i, p in enumerate(add) if p not in kept.parts and p not in add[:i]]
            kept.parts = [p for p in kept.parts if p not in forget]
            kept.last = epoch
            if epoch == MAX_EPOCH:
                event("wrapped")
            expected = FetchContext(key=key, partitions=tuple(kept.parts), full=False, final=False,
                                    next_epoch=kept.expect)
        event(f"fetch: {expected.code if isinstance(expected, SessionError) else 'accepted'}")
        assert got == expected, (key, epoch)

    @rule(data=st.data())
    def share_acknowledge(self, data: st.DataObject) -> None:
        key = self._key(data)
        epoch = self._epoch(key, data)
        kept = self.kept.get(key)
        expected: SessionError | None = None
        if epoch == INITIAL_EPOCH:
            expected = BAD_EPOCH
        elif kept is None:
            expected = NOT_FOUND
        elif epoch == FINAL_EPOCH:
            self._close(key)
        elif epoch != kept.expect:
            expected = BAD_EPOCH
        else:
            kept.last = epoch
            if epoch == MAX_EPOCH:
                event("wrapped")
        event(f"acknowledge: {'accepted' if expected is None else expected.code}")
        assert self.s.acknowledge(key, epoch) == expected, (key, epoch)

    @rule(conn=st.sampled_from(CONNS))
    def connection_closes(self, conn: str) -> None:
        gone = [key for key, kept in self.kept.items() if kept.conn == conn]
        for key in gone:
            self._close(key)
        event(f"connection closed, {len(gone)} dropped")
        assert sorted(self.s.close_connection(conn), key=KEYS.index) == sorted(gone, key=KEYS.index)

    @rule(data=st.data())
    def years_go_by(self, data: st.DataObject) -> None:
        """Bring a session's epoch near the end of int32, so that random sequences wrap it."""
        if not self.kept:
            return
        key = data.draw(st.sampled_from(sorted(self.kept, key=KEYS.index)))
        last = data.draw(st.integers(MAX_EPOCH - 3, MAX_EPOCH))
        self.kept[key].last = last
        event(f"epoch set to {last - MAX_EPOCH} from the end")
        self.s._sessions[key].epoch = next_epoch(last)

    @invariant()
    def agree(self) -> None:
        assert len(self.s) == len(self.kept) <= MODEL_LIMIT
        for key in KEYS:
            kept = self.kept.get(key)
            if kept is None:
                assert key not in self.s and self.s.expected_epoch(key) is None and self.s.partitions(key) == ()
            else:
                # The epoch a session expects is the last accepted plus one, wrapping to 1.
                assert self.s.expected_epoch(key) == kept.expect == next_epoch(kept.last)
                assert self.s.partitions(key) == tuple(kept.parts)
        for key in self.closed - set(self.kept):
            # A closed session is not found.
            assert key not in self.s
        for conn in CONNS:
            assert set(self.s.keys_on(conn)) == {k for k, kept in self.kept.items() if kept.conn == conn}
        assert self.s.total_partitions == sum(len(kept.parts) for kept in self.kept.values())


TestSessionMachine = SessionMachine.TestCase
TestSessionMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
