"""KIP-932 share sessions, sans-IO: the sessions a broker keeps for ShareFetch and
ShareAcknowledge (Kafka's ``ShareSessionCache``, ``ShareSession``, ``ShareRequestMetadata``
and ``SharePartitionManager.newContext`` / ``acknowledgeSessionUpdate`` / ``releaseSession``).

**Theory of operation.** A share consumer keeps one session with each broker it fetches
from, named by its group and member id (:class:`ShareSessionKey`). The session remembers the
partitions the member fetches, so a request names only what changed; and it numbers the
requests, so a lost or repeated one is noticed. Every ShareFetch and ShareAcknowledge
carries a *share session epoch*:

* **0** (:data:`INITIAL_EPOCH`), ShareFetch only: start afresh. A session already kept for
  the key is dropped and a new one holds exactly the partitions of the request (its
  forgotten partitions mean nothing here). The new session expects epoch 1 next. A request
  that also acknowledges records is refused with INVALID_REQUEST (a first request has
  nothing to acknowledge yet), and the old session is left as it was. When the sidecar
  already keeps ``group.share.max.share.sessions`` other sessions, the answer is
  SHARE_SESSION_LIMIT_REACHED.
* **-1** (:data:`FINAL_EPOCH`): the member is done. The session must exist
  (SHARE_SESSION_NOT_FOUND), its epoch is not checked, and it ends: the request's
  acknowledgements are applied, nothing more is fetched, and the records the member still
  holds in the session's partitions are released. Before KAFKA-18932 (Kafka 4.1) a final
  ShareFetch naming partitions was refused with INVALID_REQUEST; now a partition in a final
  ShareFetch may be there for its acknowledgements only, and none is fetched.
* **anything else**: the session must exist (SHARE_SESSION_NOT_FOUND, checked first) and
  expect exactly this epoch (INVALID_SHARE_SESSION_EPOCH). A ShareFetch then adds its
  partitions that the session lacks (at the end, in request order) and removes its
  forgotten ones, adds before removes. Either request moves the expected epoch on by one;
  after 2**31 - 1 it wraps to 1, never 0 or -1 (:func:`next_epoch`).
* ShareAcknowledge never starts a session: epoch 0 is INVALID_SHARE_SESSION_EPOCH, asked
  before anything else.

Errors end the request: the answer carries the top-level error code and no message, as
Kafka's ``getErrorResponse`` of both requests writes only the code.

A session belongs to the client connection that opened it (epoch 0). When that connection
closes, :meth:`ShareSessions.close_connection` drops its sessions and names them, and the
shell releases the records those members hold, as Kafka's disconnect listener does through
``releaseSession``. A session opened again on another connection belongs to the new one, so
the old connection closing later leaves it alone. Reopening a session (epoch 0 with one
already kept) releases nothing: records belong to the member, not to its session.

What the shell does around this (``KafkaApis.handleShareFetchRequest`` /
``handleShareAcknowledgeRequest``): check ``share.version`` and group READ first; call
:meth:`ShareSessions.open_fetch` (``has_acknowledgements``: some partition of the request
carries a non-empty ``AcknowledgementBatches``) or :meth:`ShareSessions.acknowledge`; on a
:class:`SessionError` answer its code at once, except SHARE_SESSION_LIMIT_REACHED, which
Kafka answers only after the request's ``MaxWaitMs`` (``IdleShareFetchTimerTask``), so a
client retrying at once does not spin. Otherwise fetch :attr:`FetchContext.partitions` and
apply the acknowledgements; after a final request release the member's records in the
closed session's partitions (:attr:`FetchContext.released`; for ShareAcknowledge read
:meth:`ShareSessions.partitions` before the call).

Left to the shell or out of scope: Kafka keeps a final session until its acknowledgements
are done (``releaseSession`` runs after them); here it ends when the request is accepted,
which differs only for a concurrent request with the same key. Kafka maps a connection to
the one session last opened on it; here a connection owns every session opened on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from protocol.errors import ErrorCode

#: A ShareFetch with this epoch opens a session (``ShareRequestMetadata.INITIAL_EPOCH``).
INITIAL_EPOCH = 0
#: A request with this epoch closes the session (``ShareRequestMetadata.FINAL_EPOCH``).
FINAL_EPOCH = -1
#: The largest epoch; the one after it is 1 (epochs are int32).
MAX_EPOCH = 2**31 - 1
#: ``group.share.max.share.sessions``: the most share sessions one broker keeps.
DEFAULT_MAX_SESSIONS = 2000

#: Kafka's codes for what a session refuses (``Errors.java``).
SHARE_SESSION_NOT_FOUND = ErrorCode.SHARE_SESSION_NOT_FOUND
INVALID_SHARE_SESSION_EPOCH = ErrorCode.INVALID_SHARE_SESSION_EPOCH
SHARE_SESSION_LIMIT_REACHED = ErrorCode.SHARE_SESSION_LIMIT_REACHED

#: A partition of a session: its topic id and partition index.
SessionPartition = tuple[UUID, int]


def next_epoch(epoch: int) -> int:
    """The epoch that follows ``epoch`` (``ShareRequestMetadata.nextEpoch``): one more,
    1 after :data:`MAX_EPOCH`, and :data:`FINAL_EPOCH` after any negative epoch."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(frozen=True, slots=True)
class ShareSessionKey:
    """What names a share session (Kafka's ``ShareSessionKey``): the group and the member."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class SessionError:
    """Why a request's session was refused: the response's top-level error code and message
    (Kafka sends none)."""

    code: ErrorCode
    message: str | None = None


_NOT_FOUND = SessionError(SHARE_SESSION_NOT_FOUND)
_BAD_EPOCH = SessionError(INVALID_SHARE_SESSION_EPOCH)
_LIMIT = SessionError(SHARE_SESSION_LIMIT_REACHED)
_ACKS_IN_INITIAL = SessionError(ErrorCode.INVALID_REQUEST)


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchContext:
    """What an accepted ShareFetch does (Kafka's ``ShareSessionContext`` or ``FinalContext``)."""

    key: ShareSessionKey
    #: The partitions to fetch now: the whole session after the request's changes, in the
    #: order they joined it; none in a final request.
    partitions: tuple[SessionPartition, ...]
    #: A new session (epoch 0): Kafka's ``ShareSessionContext`` that is not subsequent.
    full: bool
    #: The session ended (epoch -1): Kafka's ``FinalContext``.
    final: bool
    #: The epoch the session expects next (:data:`FINAL_EPOCH` once it ended).
    next_epoch: int
    #: In a final request, the partitions the session had: where the member's remaining
    #: records are released once the acknowledgements are done.
    released: tuple[SessionPartition, ...] = ()


@dataclass(slots=True)
class _Session:
    """One session: the epoch it expects next, its partitions (a dict as an ordered set),
    the connection that opened it."""

    epoch: int
    partitions: dict[SessionPartition, None]
    connection: object


class ShareSessions:
    """The share sessions of one sidecar (Kafka's ``ShareSessionCache``), at most
    ``max_sessions`` (``group.share.max.share.sessions``) at a time."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        if max_sessions < 1:
            raise ValueError("group.share.max.share.sessions must be at least 1")
        self._max_sessions = max_sessions
        self._sessions: dict[ShareSessionKey, _Session] = {}
        #: Each connection's sessions, in the order they were opened.
        self._by_connection: dict[object, dict[ShareSessionKey, None]] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: object) -> bool:
        return key in self._sessions

    @property
    def max_sessions(self) -> int:
        """The most sessions kept at once."""
        return self._max_sessions

    @property
    def total_partitions(self) -> int:
        """How many partitions all sessions hold (Kafka's ``SharePartitionsCount``)."""
        return sum(len(s.partitions) for s in self._sessions.values())

    def partitions(self, key: ShareSessionKey) -> tuple[SessionPartition, ...]:
        """The session's partitions in the order they joined it; none if there is no session."""
        session = self._sessions.get(key)
        return () if session is None else tuple(session.partitions)

    def expected_epoch(self, key: ShareSessionKey) -> int | None:
        """The epoch the session expects next, ``None`` if there is no session."""
        session = self._sessions.get(key)
        return None if session is None else session.epoch

    def keys_on(self, connection: object) -> list[ShareSessionKey]:
        """The sessions ``connection`` opened and that are still kept, oldest first."""
        return list(self._by_connection.get(connection, ()))

    def open_fetch(self, key: ShareSessionKey, epoch: int, *, to_add: Sequence[SessionPartition],
                   to_forget: Sequence[SessionPartition], has_acknowledgements: bool,
                   connection: object) -> FetchContext | SessionError:
        """Apply a ShareFetch's session part (``SharePartitionManager.newContext``).

        ``to_add`` are the request's partitions, ``to_forget`` its ``ForgottenTopicsData``,
        ``has_acknowledgements`` whether it acknowledges anything, ``connection`` the client
        connection it came on (any hashable; only a new session keeps it)."""
        if epoch == FINAL_EPOCH:
            released = self.close(key)
            if released is None:
                return _NOT_FOUND
            return FetchContext(key=key, partitions=(), full=False, final=True,
                                next_epoch=FINAL_EPOCH, released=released)
        if epoch == INITIAL_EPOCH:
            if has_acknowledgements:
                return _ACKS_IN_INITIAL
            self.close(key)
            if len(self._sessions) >= self._max_sessions:
                return _LIMIT
            session = _Session(next_epoch(INITIAL_EPOCH), dict.fromkeys(to_add), connection)
            self._sessions[key] = session
            self._by_connection.setdefault(connection, {})[key] = None
            return FetchContext(key=key, partitions=tuple(session.partitions), full=True,
                                final=False, next_epoch=session.epoch)
        found = self._session(key, epoch)
        if isinstance(found, SessionError):
            return found
        for partition in to_add:
            found.partitions.setdefault(partition, None)
        for partition in to_forget:
            found.partitions.pop(partition, None)
        found.epoch = next_epoch(found.epoch)
        return FetchContext(key=key, partitions=tuple(found.partitions), full=False, final=False,
                            next_epoch=found.epoch)

    def acknowledge(self, key: ShareSessionKey, epoch: int) -> SessionError | None:
        """Apply a ShareAcknowledge's session part (``acknowledgeSessionUpdate``): ``None``
        when the request goes on. A final one (-1) ends the session; read
        :meth:`partitions` first for where to release the member's records."""
        if epoch == INITIAL_EPOCH:
            return _BAD_EPOCH
        if epoch == FINAL_EPOCH:
            return None if self.close(key) is not None else _NOT_FOUND
        found = self._session(key, epoch)
        if isinstance(found, SessionError):
            return found
        found.epoch = next_epoch(found.epoch)
        return None

    def close(self, key: ShareSessionKey) -> tuple[SessionPartition, ...] | None:
        """Drop the session; answer its partitions, ``None`` if there was none."""
        session = self._sessions.pop(key, None)
        if session is None:
            return None
        owned = self._by_connection[session.connection]
        del owned[key]
        if not owned:
            del self._by_connection[session.connection]
        return tuple(session.partitions)

    def close_connection(self, connection: object) -> list[ShareSessionKey]:
        """The client connection went away: drop the sessions it opened and name them,
        oldest first, so the shell releases the records those members hold."""
        keys = self.keys_on(connection)
        for key in keys:
            self.close(key)
        return keys

    def _session(self, key: ShareSessionKey, epoch: int) -> _Session | SessionError:
        """The session a request with a regular epoch continues, or why there is none."""
        session = self._sessions.get(key)
        if session is None:
            return _NOT_FOUND
        if session.epoch != epoch:
            return _BAD_EPOCH
        return session
