"""The sidecar's own reads of its broker for share groups (KIP-932): Fetch and ListOffsets.

Theory of operation. A share group's records are the broker's: the sidecar fetches them
itself, from the offsets its share-partitions ask for, and hands them to members as the
broker wrote them. :class:`BrokerReader` keeps a few connections of its own to the broker
(a long-polling Fetch holds one for up to its ``MaxWaitMs``, so concurrent fetches take
one each; idle ones are kept for the next), asks with topic names (Fetch v4-v12, whichever
the broker and the sidecar share, highest first), and gives back, per partition, the error,
the offsets the answer states (high watermark, last stable offset, log start), the aborted
transactions and the ``records`` bytes, untouched. A connection that fails is closed; the
error is the caller's (:class:`~proxy.control.upstream.UpstreamError`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from protocol.apis import FETCH, LIST_OFFSETS
from protocol.errors import ProtocolError
from proxy.control.upstream import Upstream
from proxy.datapath.errors import UpstreamError

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


class BrokerReader:
    """Fetch and ListOffsets on connections of the sidecar's own (see the module docstring)."""

    def __init__(self, upstream: Upstream, *, partition_max_bytes: int = 1024 * 1024) -> None:
        self.upstream = upstream
        self.partition_max_bytes = partition_max_bytes
        self._idle: list[trio.abc.Stream] = []

    def _version(self, key: int, ours: tuple[int, int]) -> int:
        info = self.upstream.info
        if info is None:
            raise UpstreamError(f"broker {self.upstream.address} not reached yet")
        lo, hi = info.api_versions.get(key, (0, -1))
        version = min(hi, ours[1])
        if version < max(lo, ours[0]):
            raise UpstreamError(f"broker {self.upstream.address} shares no {self.upstream.registry.name(key)} "
                                f"version with the sidecar's share-group reader ({ours[0]}-{ours[1]})")
        return version

    async def _exchange(self, key: int, version: int, body: dict[str, Any], timeout: float) -> Any:
        stream = self._idle.pop() if self._idle else None
        if stream is None:
            stream = await self.upstream.connect()
            try:
                with trio.fail_after(self.upstream.connect_timeout):
                    if self.upstream.login is not None:
                        await self.upstream._api_versions(stream)
                        await self.upstream._log_in(stream, self.upstream.login)
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
        try:
            with trio.fail_after(timeout):
                answer = await self.upstream.call(stream, key, version, body)
        except BaseException as exc:
            await trio.aclose_forcefully(stream)
            if isinstance(exc, trio.TooSlowError):
                raise UpstreamError(f"broker {self.upstream.address} did not answer "
                                    f"{self.upstream.registry.name(key)} in time") from None
            if isinstance(exc, ProtocolError | trio.BrokenResourceError | OSError):
                raise UpstreamError(f"broker {self.upstream.address} {self.upstream.registry.name(key)} "
                                    f"failed: {exc}") from None
            raise
        if len(self._idle) < IDLE_CONNECTIONS:
            self._idle.append(stream)
        else:
            await trio.aclose_forcefully(stream)
        return answer

    async def fetch(self, positions: Sequence[FetchPosition], *, max_wait_ms: int, max_bytes: int,
                    read_committed: bool) -> dict[tuple[str, int], FetchedPartition]:
        """The records at ``positions``, waiting up to ``max_wait_ms`` at the broker for one byte."""
        version = self._version(FETCH, FETCH_VERSIONS)
        topics: dict[str, list[dict[str, Any]]] = {}
        for p in positions:
            topics.setdefault(p.topic, []).append({
                "Partition": p.partition, "CurrentLeaderEpoch": -1, "FetchOffset": p.offset,
                "LastFetchedEpoch": -1, "LogStartOffset": -1, "PartitionMaxBytes": self.partition_max_bytes})
        body = {"ReplicaId": -1, "MaxWaitMs": max(0, max_wait_ms), "MinBytes": 1, "MaxBytes": max_bytes,
                "IsolationLevel": 1 if read_committed else 0, "SessionId": 0, "SessionEpoch": -1,
                "Topics": [{"Topic": name, "Partitions": parts} for name, parts in topics.items()],
                "ForgottenTopicsData": [], "RackId": ""}
        answer = await self._exchange(FETCH, version, body, max_wait_ms / 1000 + self.upstream.connect_timeout)
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
        """``{(topic, partition): (error code, offset)}`` for each ``{(topic, partition): timestamp}``."""
        version = self._version(LIST_OFFSETS, LIST_OFFSETS_VERSIONS)
        topics: dict[str, list[dict[str, Any]]] = {}
        for (name, partition), timestamp in wanted.items():
            topics.setdefault(name, []).append({"PartitionIndex": partition, "CurrentLeaderEpoch": -1,
                                                "Timestamp": timestamp})
        body = {"ReplicaId": -1, "IsolationLevel": 1 if read_committed else 0,
                "Topics": [{"Name": name, "Partitions": parts} for name, parts in topics.items()]}
        answer = await self._exchange(LIST_OFFSETS, version, body, self.upstream.connect_timeout)
        return {(topic.Name, part.PartitionIndex): (part.ErrorCode, part.Offset)
                for topic in answer.Topics for part in topic.Partitions}

    async def aclose(self) -> None:
        """Close the idle connections."""
        idle, self._idle = self._idle, []
        for stream in idle:
            await trio.aclose_forcefully(stream)
