"""The sidecar's own reads of the brokers for share groups (KIP-932): Fetch, ListOffsets, leaders.

Theory of operation. A share group's records are the broker's: the sidecar fetches them
itself, from the offsets its share-partitions ask for, and hands them to members as the
broker wrote them. :class:`BrokerReader` keeps a few connections of its own to the broker
(a long-polling Fetch holds one for up to its ``MaxWaitMs``, so concurrent fetches take
one each; idle ones are kept for the next), asks with topic names (Fetch v4-v12, whichever
the broker and the sidecar share, highest first), and gives back, per partition, the error,
the offsets the answer states (high watermark, last stable offset, log start), the aborted
transactions and the ``records`` bytes, untouched. A connection that fails is closed; the
error is the caller's (:class:`~proxy.control.upstream.UpstreamError`).

A share-partition's lag needs its partition's latest offset, which only the partition's
leader knows (another broker answers NOT_LEADER_OR_FOLLOWER). :meth:`BrokerReader.leaders`
reads the leaders and the brokers' addresses from the sidecar's own broker's Metadata, and
:meth:`BrokerReader.list_offsets_at` asks another broker of the cluster at the address that
answer gives, with the sidecar's upstream TLS and login
(:meth:`~proxy.control.upstream.Upstream.sibling`) and that broker's own ApiVersions. At
most :data:`PEER_IDLE_CONNECTIONS` connection to each other broker is kept idle, and
:meth:`BrokerReader.close_idle_forever` closes it once unused for :data:`PEER_IDLE_SECONDS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from protocol.apis import FETCH, LIST_OFFSETS, METADATA
from protocol.errors import ProtocolError
from proxy.config import HostPort
from proxy.control.upstream import Upstream
from proxy.datapath.errors import UpstreamError
from proxy.local.ports import BrokerAddress

#: Fetch versions the reader speaks: 4 brought isolation levels, 12 is the last with names.
FETCH_VERSIONS = (4, 12)
#: ListOffsets versions: 2 brought isolation levels, 8 is the last before KIP-1005's tags
#: (the fields read here are the same through 11).
LIST_OFFSETS_VERSIONS = (2, 8)
#: ListOffsets' timestamps for the log's end and start.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
#: Connections kept idle for the next fetch.
IDLE_CONNECTIONS = 4
#: Connections kept idle to each broker other than the sidecar's own (lag reads only).
PEER_IDLE_CONNECTIONS = 1
#: How long a connection to another broker is kept unused before it is closed (seconds;
#: :meth:`BrokerReader.close_idle_forever` looks every half of it).
PEER_IDLE_SECONDS = 30.0


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchedPartition:
    """One partition of a Fetch answer."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    #: ``(producer id, first offset)`` of each aborted transaction (read_committed).
    aborted: tuple[tuple[int, int], ...]
    records: bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchPosition:
    """One partition to fetch: its topic's name, index and offset."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionLeaders:
    """Who leads which partitions, as the sidecar's own broker's Metadata answered."""

    #: The leader's broker id of each ``(topic, partition)`` (-1: none).
    leaders: Mapping[tuple[str, int], int]
    #: Every broker the answer names, by id, at its address on the sidecar's listener.
    brokers: Mapping[int, BrokerAddress]
    #: The sidecar's own broker's id among them (``None``: not known).
    own: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ReaderStatistics:
    """The reader's idle connections (trio's ``statistics()``)."""

    idle: int
    #: Idle connections to other brokers, by ``host:port``.
    peers_idle: Mapping[str, int]


class _Pool:
    """Connections to one broker, opened on demand (ApiVersions, then the login), at most
    ``keep`` of them kept idle for the next request."""

    def __init__(self, upstream: Upstream, keep: int, *, learn_versions: bool) -> None:
        self.upstream = upstream
        self.keep = keep
        #: Ask the broker its ApiVersions on each new connection (another broker's may
        #: differ); else the control connection's are used.
        self.learn_versions = learn_versions
        self.ranges: dict[int, tuple[int, int]] | None = None
        #: Idle connections and when each was last used (trio's clock).
        self.idle: list[tuple[trio.abc.Stream, float]] = []

    def _name(self, key: int) -> str:
        return self.upstream.registry.name(key)

    def _broker_failure(self, exc: BaseException, what: str) -> UpstreamError | None:
        """``exc``, raised while the broker was asked ``what``, as the caller's
        :class:`UpstreamError` (``None``: not the broker's failure, raised as it is)."""
        if isinstance(exc, trio.TooSlowError):
            return UpstreamError(f"broker {self.upstream.address} did not answer {what} in time")
        if isinstance(exc, ProtocolError | trio.BrokenResourceError | OSError):
            return UpstreamError(f"broker {self.upstream.address} {what} failed: {exc}")
        return None

    def version(self, key: int, ours: tuple[int, int]) -> int:
        """The highest version of ``key`` both the broker and ``ours`` speak."""
        upstream = self.upstream
        ranges = self.ranges if self.learn_versions else (
            upstream.info.api_versions if upstream.info is not None else None)
        if ranges is None:
            raise UpstreamError(f"broker {upstream.address} not reached yet")
        lo, hi = ranges.get(key, (0, -1))
        version = min(hi, ours[1])
        if version < max(lo, ours[0]):
            raise UpstreamError(f"broker {upstream.address} shares no {self._name(key)} version with the "
                                f"sidecar's share-group reader ({ours[0]}-{ours[1]})")
        return version

    async def _open(self) -> trio.abc.Stream:
        upstream = self.upstream
        stream = await upstream.connect()
        try:
            with trio.fail_after(upstream.connect_timeout):
                if self.learn_versions or upstream.login is not None:
                    versions = await upstream._api_versions(stream)
                    if self.learn_versions:
                        self.ranges = {k.ApiKey: (k.MinVersion, k.MaxVersion) for k in versions.ApiKeys}
                if upstream.login is not None:
                    await upstream._log_in(stream, upstream.login)
        except BaseException as exc:
            await trio.aclose_forcefully(stream)
            error = self._broker_failure(exc, "ApiVersions or the login")
            if error is None:
                raise
            raise error from None
        return stream

    async def exchange(self, key: int, ours: tuple[int, int], body: dict[str, Any], timeout: float) -> Any:
        """One request on an idle or a new connection, answered within ``timeout`` seconds."""
        # The control connection's versions are known before connecting; another broker's
        # once a connection asked it.
        known = None if self.learn_versions else self.version(key, ours)
        stream = self.idle.pop()[0] if self.idle else await self._open()
        try:
            version = self.version(key, ours) if known is None else known
            with trio.fail_after(timeout):
                answer = await self.upstream.call(stream, key, version, body)
        except BaseException as exc:
            await trio.aclose_forcefully(stream)
            error = self._broker_failure(exc, self._name(key))
            if error is None:
                raise
            raise error from None
        if len(self.idle) < self.keep:
            self.idle.append((stream, trio.current_time()))
        else:
            await trio.aclose_forcefully(stream)
        return answer

    async def close_idle(self, unused_for: float = 0.0) -> None:
        """Close the idle connections unused for ``unused_for`` seconds or more."""
        cutoff = trio.current_time() - unused_for
        closing = [stream for stream, since in self.idle if since <= cutoff]
        self.idle = [(stream, since) for stream, since in self.idle if since > cutoff]
        for stream in closing:
            await trio.aclose_forcefully(stream)


class BrokerReader:
    """Fetch, ListOffsets and Metadata on connections of the sidecar's own (see the module
    docstring)."""

    def __init__(self, upstream: Upstream, *, partition_max_bytes: int = 1024 * 1024,
                 peer_idle: float = PEER_IDLE_SECONDS) -> None:
        self.upstream = upstream
        self.partition_max_bytes = partition_max_bytes
        #: How long a connection to another broker is kept unused (seconds).
        self.peer_idle = peer_idle
        self._own = _Pool(upstream, IDLE_CONNECTIONS, learn_versions=False)
        #: Other brokers of the cluster, by ``(host, port)``.
        self._peers: dict[tuple[str, int], _Pool] = {}

    async def fetch(self, positions: Sequence[FetchPosition], *, max_wait_ms: int, max_bytes: int,
                    read_committed: bool) -> dict[tuple[str, int], FetchedPartition]:
        """The records at ``positions``, waiting up to ``max_wait_ms`` at the broker for one byte."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for p in positions:
            topics.setdefault(p.topic, []).append({
                "Partition": p.partition, "CurrentLeaderEpoch": -1, "FetchOffset": p.offset,
                "LastFetchedEpoch": -1, "LogStartOffset": -1, "PartitionMaxBytes": self.partition_max_bytes})
        body = {"ReplicaId": -1, "MaxWaitMs": max(0, max_wait_ms), "MinBytes": 1, "MaxBytes": max_bytes,
                "IsolationLevel": 1 if read_committed else 0, "SessionId": 0, "SessionEpoch": -1,
                "Topics": [{"Topic": name, "Partitions": parts} for name, parts in topics.items()],
                "ForgottenTopicsData": [], "RackId": ""}
        answer = await self._own.exchange(FETCH, FETCH_VERSIONS, body,
                                          max_wait_ms / 1000 + self.upstream.connect_timeout)
        if answer.get("ErrorCode", 0):
            raise UpstreamError(f"broker {self.upstream.address} refused the fetch (error {answer.ErrorCode})")
        out: dict[tuple[str, int], FetchedPartition] = {}
        for topic in answer.Responses:
            for part in topic.Partitions:
                aborted = tuple((a.ProducerId, a.FirstOffset) for a in (part.get("AbortedTransactions") or ()))
                out[(topic.Topic, part.PartitionIndex)] = FetchedPartition(
                    error_code=part.ErrorCode, high_watermark=part.HighWatermark,
                    last_stable_offset=part.get("LastStableOffset", -1),
                    log_start_offset=part.get("LogStartOffset", -1), aborted=aborted,
                    records=bytes(part.Records or b""))
        return out

    async def list_offsets(self, wanted: Mapping[tuple[str, int], int], *,
                           read_committed: bool) -> dict[tuple[str, int], tuple[int, int]]:
        """``{(topic, partition): (error code, offset)}`` for each ``{(topic, partition): timestamp}``,
        as the sidecar's own broker answers."""
        return await self._list_offsets(self._own, wanted, read_committed=read_committed)

    async def list_offsets_at(self, broker: BrokerAddress, wanted: Mapping[tuple[str, int], int], *,
                              read_committed: bool) -> dict[tuple[str, int], tuple[int, int]]:
        """:meth:`list_offsets` as another broker of the cluster answers (``broker``: its
        address in the Metadata of :meth:`leaders`)."""
        key = (broker.host, broker.port)
        pool = self._peers.get(key)
        if pool is None:
            pool = self._peers[key] = _Pool(self.upstream.sibling(HostPort(broker.host, broker.port)),
                                            PEER_IDLE_CONNECTIONS, learn_versions=True)
        return await self._list_offsets(pool, wanted, read_committed=read_committed)

    async def _list_offsets(self, pool: _Pool, wanted: Mapping[tuple[str, int], int], *,
                            read_committed: bool) -> dict[tuple[str, int], tuple[int, int]]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (name, partition), timestamp in wanted.items():
            topics.setdefault(name, []).append({"PartitionIndex": partition, "CurrentLeaderEpoch": -1,
                                                "Timestamp": timestamp})
        body = {"ReplicaId": -1, "IsolationLevel": 1 if read_committed else 0,
                "Topics": [{"Name": name, "Partitions": parts} for name, parts in topics.items()]}
        answer = await pool.exchange(LIST_OFFSETS, LIST_OFFSETS_VERSIONS, body, self.upstream.connect_timeout)
        return {(topic.Name, part.PartitionIndex): (part.ErrorCode, part.Offset)
                for topic in answer.Topics for part in topic.Partitions}

    async def leaders(self, topics: Iterable[str]) -> PartitionLeaders:
        """The leaders of ``topics``' partitions and the brokers' addresses: a Metadata
        request to the sidecar's own broker (topics it does not know are left out)."""
        ours = self.upstream.registry.api(METADATA).versions
        names = sorted(set(topics))
        answer = await self._own.exchange(
            METADATA, (ours.lo, ours.hi if ours.hi is not None else 0x7FFF),
            {"Topics": [{"Name": name} for name in names], "AllowAutoTopicCreation": False},
            self.upstream.connect_timeout)
        brokers = {b.NodeId: BrokerAddress(b.NodeId, b.Host, b.Port, b.get("Rack")) for b in answer.Brokers}
        leaders = {(topic.Name, part.PartitionIndex): part.LeaderId
                   for topic in answer.Topics if not topic.ErrorCode and topic.Name in names
                   for part in topic.Partitions}
        address = self.upstream.address
        info = self.upstream.info
        own = next((b.node_id for b in brokers.values() if (b.host, b.port) == (address.host, address.port)),
                   info.node_id if info is not None else None)
        return PartitionLeaders(leaders=leaders, brokers=brokers, own=own)

    async def close_idle_forever(self) -> None:
        """Close each connection to another broker once unused for :attr:`peer_idle`
        seconds (looking every half of it), until cancelled."""
        while True:
            await trio.sleep(self.peer_idle / 2)
            for pool in list(self._peers.values()):  # a broker asked meanwhile adds a pool
                await pool.close_idle(self.peer_idle)

    def statistics(self) -> ReaderStatistics:
        """How many connections are idle, to the sidecar's broker and to each other one."""
        return ReaderStatistics(idle=len(self._own.idle), peers_idle={
            f"{host}:{port}": len(pool.idle) for (host, port), pool in self._peers.items()})

    async def aclose(self) -> None:
        """Close the idle connections, to every broker."""
        for pool in (self._own, *self._peers.values()):
            await pool.close_idle()
