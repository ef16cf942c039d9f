"""Share groups (KIP-932) served by the embedded coordinator: the shell around the cores.

Theory of operation. Three sans-IO cores decide everything; this module does their I/O:

* membership: :class:`~coordinator.share_group.ShareGroupCoordinator` (ShareGroupHeartbeat,
  ShareGroupDescribe, session timeouts, which share-partitions to initialize);
* share sessions: :class:`~coordinator.share_sessions.ShareSessions` (ShareFetch's and
  ShareAcknowledge's session epochs and partition sets);
* each share-partition's in-flight records: :class:`~coordinator.share_partition.SharePartition`
  (acquisition, acknowledgement, locks, delivery counts).

Records come from the broker (:class:`~proxy.control.share_reader.BrokerReader`): a
ShareFetch asks the broker for each session partition that can acquire, from the
partition's next fetch offset, waiting at the broker up to the request's ``MaxWaitMs``;
the fetched batches' offset ranges are acquired for the member and the batches that hold
acquired offsets go to it byte for byte, beside their ``AcquiredRecords``. When no
partition can acquire (every record in flight is held by others), the fetch waits, up to
``MaxWaitMs``, for records to be let go.

Lag (DescribeShareGroupOffsets v1): the group's coordinating sidecar answers for every
partition, whichever broker leads it. :mod:`coordinator.share_lag` groups the partitions by
leader (from the broker's Metadata, :meth:`~proxy.control.share_reader.BrokerReader.leaders`)
and computes each lag; this module asks every leader at once, each once for all its
partitions, the sidecar's own broker on the reader's connections and the others directly.
A leader that cannot be asked leaves its partitions' lag unknown (-1), with one warning.

Durability: group records and share-partition states are written to ZooKeeper
(:mod:`coordinator.share_store`) by one writer task that puts everything queued in one
transaction. An acknowledgement is answered only once a state written after it is
durable; a state that failed to write is written again (with what changed meanwhile).
The group's heartbeat is answered once its record is durable. A share-partition's state
is read back from ZooKeeper the first time this sidecar serves it, so a restarted sidecar
redelivers nothing acknowledged.

Time: wall-clock milliseconds from ``clock`` (injectable), deadlines slept on trio's clock,
so the whole service runs under ``trio.testing.MockClock``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol
from uuid import UUID

import trio
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from coordinator.group_configs import java_duration_nanos
from coordinator.messages.common import Client
from coordinator.share_group import (
    DescribedShareGroup,
    ShareGroup,
    ShareGroupConfig,
    ShareGroupCoordinator,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    ShareGroupSettings,
    ShareStep,
)
from coordinator.share_group_record import encode_group
from coordinator.share_lag import UNKNOWN_LAG, TopicPartition, latest_offsets, plan_lag, share_lag
from coordinator.share_partition import SharePartition
from coordinator.share_records import (
    AcknowledgementBatch,
    AcquireMode,
    Released,
    ShareSettings,
    initial_start_offset,
)
from coordinator.share_sessions import FetchContext, SessionError, ShareSessionKey, ShareSessions
from coordinator.share_state import RecordState, ShareState, encode_state
from coordinator.share_store import (
    ShareStore,
    ShareStoreConflict,
    ShareStoreError,
    share_group_path,
    share_partition_path,
    share_registry_path,
)
from coordinator.topics import TopicInfo, TopicsSnapshot
from protocol.apis import DEFAULT_REGISTRY
from protocol.errors import ErrorCode, ProtocolError
from protocol.framing import EOF, NEED_DATA, FrameDecoder, encode_frame
from protocol.headers import RequestHeader, decode_response_header, encode_request_header
from protocol.records import iter_batches
from proxy.control.share_reader import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    BrokerReader,
    FetchedPartition,
    FetchPosition,
)
from proxy.control.zk import ZooKeeper
from proxy.datapath.errors import UpstreamError

log = logging.getLogger(__name__)
#: The error message of a group request where the fleet's placement gives the group another sidecar.
NOT_HERE = "This sidecar does not coordinate the group."

#: A share-partition: ``(group id, topic id, partition index)``.
PartitionKey = tuple[str, UUID, int]
#: How long a failed ZooKeeper write waits before it is tried again (seconds).
WRITE_RETRY = 0.5
#: The most a ShareFetch waits, whatever its ``MaxWaitMs`` says (seconds).
MAX_WAIT = 30.0
#: How often ``share.version`` is looked at (seconds).
FEATURE_CHECK = 1.0
#: Fetch errors that say the broker does not lead the partition (any more).
MOVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                   ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.LEADER_NOT_AVAILABLE})


def wall_ms() -> int:
    """Milliseconds since the Unix epoch."""
    return int(time.time() * 1000)


class TopicSource(Protocol):
    """Where topic names, ids and partition counts come from (the broker)."""

    async def topics(self, names: set[str] | None) -> list[TopicInfo]:
        """The broker's topics: ``names`` only, or all of them (``None``)."""
        ...


class GroupSettingsSource(Protocol):
    """A group's effective ``share.*`` configs (:class:`proxy.control.group_configs.GroupConfigs`)."""

    def effective(self, group_id: str) -> Any:
        """The group's effective configs (``share_record_lock_duration_ms``, ...)."""
        ...


@dataclass(slots=True)
class _Served:
    """One share-partition this sidecar serves."""

    topic_name: str
    state: SharePartition
    #: Counted for the metrics.
    redeliveries: int = 0
    archived: int = 0


@dataclass(slots=True)
class _Fetched:
    """What one partition's fetch gave a member."""

    records: bytes = b""
    acquired: list[dict[str, int]] = field(default_factory=list)
    error: int = 0
    message: str | None = None


class ShareService:
    """Every share group this sidecar serves (see the module docstring)."""

    def __init__(self, zk: ZooKeeper, reader: BrokerReader, topics: TopicSource, registry: CollectorRegistry, *,
                 group_settings: ShareGroupSettings | None = None, share_settings: ShareSettings | None = None,
                 group_configs: GroupSettingsSource | None = None, foreign_group: Callable[[str], bool] | None = None,
                 clock: Callable[[], int] = wall_ms,
                 refresh_interval: float = 10.0, max_sessions: int = 2000,
                 coordinates: Callable[[str], bool] = lambda _group_id: True,
                 store: ShareStore | None = None, enabled: Callable[[], bool] = lambda: True,
                 peer: Callable[[str, str], tuple[str, int] | None] = lambda _group_id, _listener: None) -> None:
        self.zk = zk
        self.reader = reader
        self.topic_source = topics
        self.clock = clock
        self.refresh_interval = refresh_interval
        #: Whether the fleet's placement names this sidecar the group's coordinator.
        self.coordinates = coordinates
        #: Whether ``share.version`` is finalized at 1 or more (read every second).
        self.enabled = enabled
        #: ``(group, listener) -> address`` of the sidecar that serves the group's
        #: share-partitions when it is not this one (a fleet sharing one broker), else ``None``.
        self.peer = peer
        #: Connections to such sidecars, one per client connection and peer.
        self._links: dict[tuple[object, tuple[str, int]], PeerLink] = {}
        self.max_sessions = max_sessions
        self.core = ShareGroupCoordinator(group_settings or ShareGroupSettings(),
                                          foreign_group=foreign_group or (lambda _group_id: False))
        self.share_settings = share_settings or ShareSettings()
        self.group_configs = group_configs
        self.sessions = ShareSessions(max_sessions)
        self.store = store if store is not None else ShareStore(zk.client)
        self.partitions: dict[PartitionKey, _Served] = {}
        self._loaded_groups: set[str] = set()
        self._locks: dict[object, trio.Lock] = {}
        #: The newest bytes of every znode not yet durable, and the change count they hold.
        self._queued: dict[str, bytes | None] = {}
        self._queued_count = 0
        self._durable_count = 0
        self._queued_event = trio.Event()
        self._durable_event = trio.Event()
        #: Set when records are let go (a fetch waiting for acquirable records looks again).
        self._released = trio.Event()
        #: Share-partition znodes by path, and the change count up to which a path's write
        #: was given up (another sidecar wrote it: a conflict).
        self._paths: dict[str, PartitionKey] = {}
        self._failed: dict[str, int] = {}
        #: Share-partitions whose znode is watched, and the paths of the write in flight.
        self._watched: set[PartitionKey] = set()
        self._writing: frozenset[str] = frozenset()
        self._timer_changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        #: Records acknowledged (any type), for the metrics and the sizing guide.
        self.acknowledged = 0
        self.metrics = ShareMetrics(self)
        registry.register(self.metrics)

    # -- the tasks ---------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer, the timers, the topic refresh and the closing of the reader's idle
        connections to other brokers, until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._writer)
            nursery.start_soon(self._timers)
            nursery.start_soon(self._refresh_topics)
            nursery.start_soon(self._watch_feature)
            nursery.start_soon(self.reader.close_idle_forever)
            task_status.started()

    async def _writer(self) -> None:
        while True:
            await self._queued_event.wait()
            self._queued_event = trio.Event()
            batch, count = self._queued, self._queued_count
            self._queued = {}
            self._writing = frozenset(batch)
            try:
                await self.zk.call(self.store.write, batch)
            except ShareStoreConflict as exc:
                # Another sidecar serves this share-partition now (its leader moved): forget
                # ours, fail what waited for it, write the rest at once.
                log.warning("share groups: %s; this sidecar stops serving it", exc)
                key = self._paths.get(exc.path)
                if key is not None:
                    self.partitions.pop(key, None)
                self._failed[exc.path] = count
                batch.pop(exc.path, None)
                for path, data in batch.items():
                    self._queued.setdefault(path, data)
                self._queued_event.set()
                continue
            except ShareStoreError as exc:
                log.warning("share groups: writing %d znode(s) to ZooKeeper failed (%s); trying again", len(batch),
                            exc)
                for path, data in batch.items():
                    self._queued.setdefault(path, data)  # newer bytes queued meanwhile win
                await trio.sleep(WRITE_RETRY)
                self._queued_event.set()
                continue
            finally:
                self._writing = frozenset()
            self._durable_count = count
            self._durable_event.set()
            self._durable_event = trio.Event()

    def _queue(self, path: str, data: bytes | None) -> int:
        if data is None:  # a tree deleted: nothing under it is written after all
            for queued in [p for p in self._queued if p.startswith(path + "/")]:
                del self._queued[queued]
        self._queued[path] = data
        self._queued_count += 1
        self._queued_event.set()
        return self._queued_count

    async def _durable(self, count: int) -> None:
        while self._durable_count < count:
            await self._durable_event.wait()

    async def _timers(self) -> None:
        while True:
            self._timer_changed = trio.Event()
            now = self.clock()
            self._expire(now)
            deadlines = [d for d in (self.core.next_deadline(),
                                     *(s.state.next_deadline() for s in self.partitions.values())) if d is not None]
            wait = (min(deadlines) - now) / 1000 if deadlines else math.inf
            with trio.move_on_after(max(0.0, wait)):
                await self._timer_changed.wait()

    def _expire(self, now: int) -> None:
        """Locks that passed, members whose session expired."""
        for key, served in self.partitions.items():
            self._let_go_of(key, served, served.state.expire(now))
        self._apply(self.core.on_timer(now))

    def _let_go_of(self, key: PartitionKey, served: _Served, released: Released) -> None:
        """Records a share-partition let go (a lock expired, a member left): counted, written,
        and any fetch waiting for something to acquire looks again."""
        if released.available or released.archived:
            served.archived += released.archived
            self._queue_partition(key)
            self._let_go()

    async def _watch_feature(self) -> None:
        """``share.version`` turned off: every member is fenced, every share session ends and
        the records they held go back (the share APIs are refused from then on)."""
        was = self.enabled()
        while True:
            await trio.sleep(FEATURE_CHECK)
            now = self.enabled()
            if was and not now:
                step = self.core.fence_all("share.version disabled")
                log.warning("share groups: share.version is off: %d member(s) fenced, %d share session(s) ended",
                            len(step.departed), len(self.sessions))
                self._apply(step)
                self.sessions = ShareSessions(self.max_sessions)
            was = now

    async def _refresh_topics(self) -> None:
        while True:
            await trio.sleep(self.refresh_interval)
            names = {n for g in self.core.groups.values() for n in g.subscribed_names()}
            if names:
                try:
                    await self._learn(names)
                except UpstreamError as exc:
                    log.warning("share groups: topic refresh failed (%s)", exc)

    async def _learn(self, names: set[str] | None) -> None:
        found = await self.topic_source.topics(names)
        known = dict(self.core.topics.by_name)
        if names is not None:
            for name in names:
                known.pop(name, None)
        for info in found:
            known[info.name] = info
        self._apply(self.core.update_topics(TopicsSnapshot.of(known.values())))

    def _wake_timers(self) -> None:
        self._timer_changed.set()

    def _let_go(self) -> None:
        self._released.set()
        self._released = trio.Event()

    # -- membership --------------------------------------------------------------------------

    def _lock(self, key: object) -> trio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = trio.Lock()
        return lock

    async def _ensure_group(self, group_id: str) -> None:
        if group_id in self._loaded_groups:
            return
        async with self._lock(("group", group_id)):
            if group_id in self._loaded_groups:
                return
            record = await self.zk.call(self.store.load_group, group_id)
            if record is not None:
                self.core.load(group_id, record, self.clock())
                self._wake_timers()
            self._loaded_groups.add(group_id)

    def _elsewhere(self, group_id: str) -> bool:
        """True when the fleet's placement gives ``group_id`` to another sidecar: then what
        this one may hold of it is forgotten (read again from ZooKeeper should the group
        come back), and the group's requests are NOT_COORDINATOR here, as at a Kafka broker
        that is not the group's coordinator (the client asks FindCoordinator again)."""
        if not group_id or self.coordinates(group_id):
            return False
        self.core.unload(group_id)
        self._loaded_groups.discard(group_id)
        return True

    async def heartbeat(self, req: ShareGroupHeartbeatRequest, client: Client) -> ShareGroupHeartbeatResponse:
        """ShareGroupHeartbeat: the answer once what it changed is durable; NOT_COORDINATOR
        where the fleet's placement gives the group another sidecar (:meth:`_elsewhere`)."""
        if self._elsewhere(req.group_id):
            return ShareGroupHeartbeatResponse(error=ErrorCode.NOT_COORDINATOR, error_message=NOT_HERE)
        if req.group_id and req.member_id:  # else the core refuses it: no I/O first
            await self._ensure_group(req.group_id)
            await self._learn_names(set(req.subscribed_topic_names or ()))
        if self.group_configs is not None and req.group_id:
            effective = self.group_configs.effective(req.group_id)
            self.core.set_group_config(req.group_id, ShareGroupConfig(
                session_timeout_ms=effective.share_session_timeout_ms,
                heartbeat_interval_ms=effective.share_heartbeat_interval_ms))
        step = self.core.heartbeat(req, client, self.clock())
        count = self._apply(step)
        await self._durable(count)
        assert step.response is not None
        return step.response

    def describe(self, group_ids: Sequence[str]) -> tuple[DescribedShareGroup, ...]:
        """ShareGroupDescribe (groups loaded by an earlier call; others are not found); a
        group the fleet's placement gives another sidecar is NOT_COORDINATOR here."""
        described = iter(self.core.describe([g for g in group_ids if g and self.coordinates(g)]))
        invalid = self.core.describe([g for g in group_ids if not g])  # first, as Kafka orders them
        return invalid + tuple(next(described) if self.coordinates(g) else DescribedShareGroup(
            group_id=g, error=ErrorCode.NOT_COORDINATOR, error_message=NOT_HERE)
            for g in group_ids if g)

    async def load_groups(self, group_ids: Iterable[str]) -> None:
        """Load these groups from ZooKeeper if this sidecar coordinates them and has not yet."""
        for group_id in group_ids:
            if group_id and self.coordinates(group_id):
                await self._ensure_group(group_id)

    def _apply(self, step: ShareStep) -> int:
        """Queue the step's writes, start its initializations, release departed members'
        records; the change count to wait for."""
        count = self._durable_count
        for group_id, record in step.writes:
            count = self._queue(share_registry_path(group_id), encode_group(record))
        for request in step.initialize:
            if self._nursery is not None:
                self._nursery.start_soon(self._initialize, request.group_id, request.partitions)
        for departed in step.departed:
            log.info("share groups: member %s left group %r (%s); releasing its records", departed.member_id,
                     departed.group_id, departed.reason)
            self._release_member(departed.group_id, departed.member_id)
        if step.writes or step.departed:
            self._wake_timers()
        return count

    async def _initialize(self, group_id: str, partitions: Mapping[UUID, frozenset[int]]) -> None:
        """Make the share-partitions' state durable (start offset -1 where there is none),
        then tell the core they are initialized."""
        try:
            existing = await self.zk.call(self.store.load_partitions, group_id)
        except Exception as exc:  # a ZooKeeper failure: the core asks again later
            log.warning("share groups: initializing %r failed (%s)", group_id, exc)
            self._apply(self.core.initialize_failed(group_id, partitions))
            return
        count = self._durable_count
        for topic, parts in partitions.items():
            for index in parts:
                if (topic, index) not in existing and (group_id, topic, index) not in self.partitions:
                    count = self._queue(share_partition_path(group_id, topic, index),
                                        encode_state(ShareState(state_epoch=0, start_offset=-1, batches=())))
        await self._durable(count)
        self._apply(self.core.initialized(group_id, partitions, self.clock()))

    def _release_member(self, group_id: str, member_id: str) -> None:
        for key, served in self.partitions.items():
            if key[0] == group_id:
                self._let_go_of(key, served, served.state.release_member(member_id))

    # -- share-partitions --------------------------------------------------------------------

    def _settings(self, group_id: str) -> ShareSettings:
        base = self.share_settings
        if self.group_configs is None:
            return base
        effective = self.group_configs.effective(group_id)
        lock = int(effective.share_record_lock_duration_ms)
        return base if lock == base.record_lock_duration_ms else replace(base, record_lock_duration_ms=lock)

    def _group_config(self, group_id: str, name: str, default: str) -> str:
        if self.group_configs is None:
            return default
        return str(getattr(self.group_configs.effective(group_id), name))

    def _queue_partition(self, key: PartitionKey) -> int:
        served = self.partitions[key]
        path = share_partition_path(*key)
        self._paths[path] = key
        return self._queue(path, encode_state(served.state.snapshot()))

    def _lost(self, key: PartitionKey, count: int) -> bool:
        """Whether the write of ``key``'s state queued at ``count`` was given up (a conflict)."""
        return self._failed.get(share_partition_path(*key), -1) >= count

    async def _partition(self, key: PartitionKey, topic_name: str) -> _Served:
        """The share-partition, loaded (and placed by ``share.auto.offset.reset``) if need be."""
        served = self.partitions.get(key)
        if served is not None:
            served.state.settings = self._settings(key[0])  # a group config changed: from now on
            return served
        async with self._lock(key):
            served = self.partitions.get(key)
            if served is not None:
                return served
            group_id = key[0]
            settings = self._settings(group_id)
            state = await self.zk.call(self.store.load_partition, *key)
            if state is not None and state.start_offset >= 0:
                partition = SharePartition.restore(state, settings)
            else:
                start = await self._start_offset(group_id, topic_name, key[2])
                partition = SharePartition(settings, start_offset=start,
                                           state_epoch=state.state_epoch if state is not None else 0)
            served = self.partitions[key] = _Served(topic_name=topic_name, state=partition)
            if state is None or state.start_offset < 0:
                await self._durable(self._queue_partition(key))
            self._watch(key)
            return served

    def _watch(self, key: PartitionKey) -> None:
        """Watch the share-partition's znode: when another sidecar writes it (its leader
        moved here and back, or a fleet shares one broker), this one forgets what it holds in
        memory and reads the state again at the next request, instead of finding out at its
        next write."""
        client = self.zk.client
        if client is None or key in self._watched:
            return
        self._watched.add(key)
        path = share_partition_path(*key)

        def changed(_data: bytes | None, stat: Any) -> None:
            if key not in self.partitions or path in self._writing:
                return
            known = self.store.version_of(path)
            if stat is None or (known is not None and stat.version != known):
                log.info("share groups: %s changed in ZooKeeper (written elsewhere); reading it again", path)
                self.partitions.pop(key, None)
                self._let_go()

        deliver = self.zk.deliver(changed)

        def watch(data: bytes | None, stat: Any) -> bool:  # on kazoo's thread
            return bool(deliver(data, stat))

        client.DataWatch(path, watch)

    async def _start_offset(self, group_id: str, topic: str, partition: int) -> int:
        """Where a share-partition without state starts (``share.auto.offset.reset``)."""
        reset = self._group_config(group_id, "share_auto_offset_reset", "latest")
        committed = self._group_config(group_id, "share_isolation_level", "read_uncommitted") == "read_committed"
        key = (topic, partition)

        async def offset_at(timestamp: int) -> int:
            found = await self.reader.list_offsets({key: timestamp}, read_committed=committed)
            code, offset = found.get(key, (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1))
            if code:
                raise UpstreamError(f"ListOffsets for {topic}-{partition} answered error {code}")
            return offset

        log_start = await offset_at(EARLIEST_TIMESTAMP)
        if reset == "earliest":
            return initial_start_offset(reset, log_start_offset=log_start, high_watermark=-1)
        if reset.startswith("by_duration:"):
            nanos = java_duration_nanos(reset[len("by_duration:"):]) or 0
            found = await offset_at(self.clock() - nanos // 1_000_000)
            if found >= 0:  # else no record that recent: the log's end
                return initial_start_offset(reset, log_start_offset=log_start, high_watermark=-1,
                                            offset_for_duration=found)
        end_offset = await offset_at(LATEST_TIMESTAMP)
        return initial_start_offset("latest", log_start_offset=log_start, high_watermark=end_offset)

    # -- ShareFetch and ShareAcknowledge -------------------------------------------------------

    def _name(self, topic_id: UUID) -> str | None:
        info = self.core.topics.by_id.get(topic_id)
        return None if info is None else info.name

    async def _names(self, topic_ids: Iterable[UUID]) -> None:
        """Learn the topics of ids this sidecar does not know yet."""
        if any(self._name(t) is None for t in topic_ids):
            try:
                await self._learn(None)
            except UpstreamError as exc:
                log.warning("share groups: topics could not be read (%s)", exc)

    async def _acknowledge(self, group_id: str, member_id: str,
                           acks: Mapping[tuple[UUID, int], Sequence[AcknowledgementBatch]], *,
                           is_renew_ack: bool) -> dict[tuple[UUID, int], tuple[int, str | None]]:
        """Apply acknowledgements; ``{(topic, partition): (error, message)}`` once durable."""
        results: dict[tuple[UUID, int], tuple[int, str | None]] = {}
        count = self._durable_count
        queued: dict[tuple[UUID, int], int] = {}
        for (topic, index), batches in acks.items():
            name = self._name(topic)
            if name is None:
                results[(topic, index)] = (ErrorCode.UNKNOWN_TOPIC_ID, None)
                continue
            served = await self._partition((group_id, topic, index), name)
            error = served.state.acknowledge(member_id, batches, now=self.clock(), is_renew_ack=is_renew_ack)
            if error is not None:
                results[(topic, index)] = (error.code, error.message)
                continue
            results[(topic, index)] = (0, None)
            self.acknowledged += sum(b.last_offset - b.first_offset + 1 for b in batches)
            count = queued[(topic, index)] = self._queue_partition((group_id, topic, index))
            self._let_go()
        self._wake_timers()
        await self._durable(count)
        for (topic, index), at in queued.items():
            if self._lost((group_id, topic, index), at):
                results[(topic, index)] = (ErrorCode.NOT_LEADER_OR_FOLLOWER, "The share-partition moved to another "
                                           "sidecar before this acknowledgement was durable.")
        return results

    async def share_fetch(self, version: int, body: Mapping[str, Any], connection: object) -> dict[str, Any]:
        """ShareFetch: acknowledgements first, then records for the session's partitions."""
        group_id = body["GroupId"] or ""
        member_id = body["MemberId"] or ""
        epoch = int(body["ShareSessionEpoch"])
        topics = body["Topics"] or ()
        acks: dict[tuple[UUID, int], list[AcknowledgementBatch]] = {}
        to_add: list[tuple[UUID, int]] = []
        for topic in topics:
            for part in topic["Partitions"]:
                key = (topic["TopicId"], int(part["PartitionIndex"]))
                to_add.append(key)
                batches = part["AcknowledgementBatches"] or ()
                if batches:
                    acks[key] = [AcknowledgementBatch(b["FirstOffset"], b["LastOffset"],
                                                      tuple(b["AcknowledgeTypes"])) for b in batches]
        to_forget = [(t["TopicId"], int(p)) for t in (body["ForgottenTopicsData"] or ()) for p in t["Partitions"]]
        lock_ms = self._settings(group_id).record_lock_duration_ms
        if not group_id:
            return _fetch_error(ErrorCode.INVALID_GROUP_ID, None, lock_ms)
        context = self.sessions.open_fetch(ShareSessionKey(group_id, member_id), epoch, to_add=to_add,
                                           to_forget=to_forget, has_acknowledgements=bool(acks),
                                           connection=connection)
        if isinstance(context, SessionError):
            return _fetch_error(context.code, context.message, lock_ms)
        await self._names([t for t, _ in [*to_add, *acks]])
        ack_results = await self._acknowledge(group_id, member_id, acks, is_renew_ack=bool(body.get("IsRenewAck")))
        if context.final:
            self._close_session(context.key)
            fetched: dict[tuple[UUID, int], _Fetched] = {}
        else:
            fetched = await self._fetch(group_id, member_id, context, body)
        responses: dict[UUID, list[dict[str, Any]]] = {}
        for key in dict.fromkeys([*context.partitions, *ack_results]):
            got = fetched.get(key)
            acked = ack_results.get(key)
            if not context.full and got is None and acked is None:
                continue
            if not context.full and got is not None and not got.acquired and not got.error and acked is None:
                continue
            responses.setdefault(key[0], []).append({
                "PartitionIndex": key[1], "ErrorCode": got.error if got else 0,
                "ErrorMessage": got.message if got else None,
                "AcknowledgeErrorCode": acked[0] if acked else 0, "AcknowledgeErrorMessage": acked[1] if acked else None,
                "CurrentLeader": {"LeaderId": -1, "LeaderEpoch": -1},
                "Records": got.records if got else b"", "AcquiredRecords": got.acquired if got else []})
        return {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "AcquisitionLockTimeoutMs": lock_ms,
                "Responses": [{"TopicId": t, "Partitions": ps} for t, ps in responses.items()], "NodeEndpoints": []}

    async def _fetch(self, group_id: str, member_id: str, context: FetchContext,
                     body: Mapping[str, Any]) -> dict[tuple[UUID, int], _Fetched]:
        out: dict[tuple[UUID, int], _Fetched] = {}
        wanted: dict[PartitionKey, str] = {}
        for topic, index in context.partitions:
            name = self._name(topic)
            if name is None:
                out[(topic, index)] = _Fetched(error=ErrorCode.UNKNOWN_TOPIC_ID)
            else:
                wanted[(group_id, topic, index)] = name
        max_wait = min(max(0, int(body["MaxWaitMs"])) / 1000, MAX_WAIT)
        deadline = trio.current_time() + max_wait
        max_records = int(body.get("MaxRecords") or 500)
        batch_size = int(body.get("BatchSize") or 0) or None
        mode = AcquireMode(int(body.get("ShareAcquireMode") or 0))
        while True:
            # Each pass takes the share-partitions as served now: one dropped while this fetch
            # waited (written by another sidecar, or its leader moved) is read again.
            ready = []
            for key, name in list(wanted.items()):
                try:
                    served = await self._partition(key, name)
                except UpstreamError as exc:
                    log.warning("share groups: %s-%d could not be placed (%s)", name, key[2], exc)
                    out[(key[1], key[2])] = _Fetched(error=ErrorCode.UNKNOWN_SERVER_ERROR, message=str(exc))
                    del wanted[key]
                    continue
                if served.state.can_acquire():
                    ready.append((key, served))
            if ready:
                left = deadline - trio.current_time()
                got = await self._fetch_ready(member_id, ready, max_wait_ms=max(0, int(left * 1000)),
                                              max_bytes=int(body["MaxBytes"] or 0x7FFFFFFF), max_records=max_records,
                                              batch_size=batch_size, mode=mode)
                out.update(got)
                if any(f.acquired for f in got.values()) or trio.current_time() >= deadline:
                    return out
            if trio.current_time() >= deadline:
                return out
            with trio.move_on_at(deadline):
                await self._released.wait()

    async def _fetch_ready(self, member_id: str, ready: list[tuple[PartitionKey, _Served]], *, max_wait_ms: int,
                           max_bytes: int, max_records: int, batch_size: int | None,
                           mode: AcquireMode) -> dict[tuple[UUID, int], _Fetched]:
        out: dict[tuple[UUID, int], _Fetched] = {}
        positions = []
        for key, served in ready:
            positions.append(FetchPosition(topic=served.topic_name, partition=key[2],
                                           offset=served.state.next_fetch_offset()))
        committed = self._group_config(ready[0][0][0], "share_isolation_level", "read_uncommitted") == "read_committed"
        try:
            answer = await self.reader.fetch(positions, max_wait_ms=max_wait_ms, max_bytes=max_bytes,
                                             read_committed=committed)
        except UpstreamError as exc:
            log.warning("share groups: fetching from the broker failed (%s)", exc)
            return {(k[1], k[2]): _Fetched(error=ErrorCode.UNKNOWN_SERVER_ERROR, message=str(exc)) for k, _ in ready}
        left = max_records
        for (key, served), position in zip(ready, positions, strict=True):
            fetched = answer.get((served.topic_name, key[2]))
            if fetched is None:
                continue
            got = out[(key[1], key[2])] = _Fetched(error=fetched.error_code)
            if fetched.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                served.state.advance_log_start(max(fetched.log_start_offset, 0))
                got.error = 0
                continue
            if fetched.error_code in MOVED:
                # The broker no longer leads the partition: its sidecar stops serving the
                # share-partition (what members held here comes back from the durable state
                # on the new leader's sidecar); the member is told to look again.
                self.partitions.pop(key, None)
                continue
            if fetched.error_code or left <= 0 or not fetched.records:
                continue
            got.records, got.acquired, count = self._acquire(served, member_id, position.offset, fetched,
                                                             max_records=left, batch_size=batch_size, mode=mode)
            left -= count
        return out

    def _acquire(self, served: _Served, member_id: str, fetch_offset: int, fetched: FetchedPartition, *,
                 max_records: int, batch_size: int | None,
                 mode: AcquireMode) -> tuple[bytes, list[dict[str, int]], int]:
        state = served.state
        try:
            batches = [b for b in iter_batches(fetched.records) if b.last_offset >= fetch_offset]
        except ProtocolError as exc:
            log.warning("share groups: the broker's records for %s could not be read (%s)", served.topic_name, exc)
            return b"", [], 0
        if not batches:
            return b"", [], 0
        aborted = _aborted_ranges(batches, fetched.aborted)
        acquisition = state.acquire(member_id, [(b.base_offset, b.last_offset) for b in batches],
                                    max_records=max_records, fetch_offset=fetch_offset, now=self.clock(),
                                    batch_size=batch_size, mode=mode, aborted=aborted)
        if not acquisition.records:
            return b"", [], 0
        self._wake_timers()
        ranges = [(r.first_offset, r.last_offset) for r in acquisition.records]
        served.redeliveries += sum(r.last_offset - r.first_offset + 1 for r in acquisition.records
                                   if r.delivery_count > 1)
        view = memoryview(fetched.records)
        chosen = [bytes(view[b.position:b.position + b.size]) for b in batches
                  if any(lo <= b.last_offset and b.base_offset <= hi for lo, hi in ranges)]
        acquired = [{"FirstOffset": r.first_offset, "LastOffset": r.last_offset, "DeliveryCount": r.delivery_count}
                    for r in acquisition.records]
        return b"".join(chosen), acquired, acquisition.count

    async def share_acknowledge(self, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """ShareAcknowledge: the acknowledgements, answered once durable."""
        group_id = body["GroupId"] or ""
        member_id = body["MemberId"] or ""
        epoch = int(body["ShareSessionEpoch"])
        if not group_id:
            return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.INVALID_GROUP_ID, "ErrorMessage": None,
                    "Responses": [], "NodeEndpoints": []}
        key = ShareSessionKey(group_id, member_id)
        refused = self.sessions.acknowledge(key, epoch)
        if refused is not None:
            return {"ThrottleTimeMs": 0, "ErrorCode": refused.code, "ErrorMessage": refused.message,
                    "Responses": [], "NodeEndpoints": []}
        acks = {(t["TopicId"], int(p["PartitionIndex"])): [
            AcknowledgementBatch(b["FirstOffset"], b["LastOffset"], tuple(b["AcknowledgeTypes"]))
            for b in p["AcknowledgementBatches"]] for t in body["Topics"] for p in t["Partitions"]}
        await self._names([t for t, _ in acks])
        results = await self._acknowledge(group_id, member_id, acks, is_renew_ack=bool(body.get("IsRenewAck")))
        if epoch == -1:
            self._close_session(key)
        responses: dict[UUID, list[dict[str, Any]]] = {}
        for (topic, index), (code, message) in results.items():
            responses.setdefault(topic, []).append({
                "PartitionIndex": index, "ErrorCode": code, "ErrorMessage": message,
                "CurrentLeader": {"LeaderId": -1, "LeaderEpoch": -1}})
        return {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None,
                "Responses": [{"TopicId": t, "Partitions": ps} for t, ps in responses.items()], "NodeEndpoints": []}

    # -- the offsets APIs (kafka-share-groups.sh) ------------------------------------------

    async def _state_of(self, group_id: str, topic: UUID, index: int) -> ShareState | None:
        """A share-partition's durable state, as ZooKeeper holds it: the leader's sidecar may
        be another one, and what is not durable is not reported."""
        return await self.zk.call(self.store.load_partition, group_id, topic, index)

    async def describe_offsets(self, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """DescribeShareGroupOffsets: each share-partition's start offset and (v1) lag, the
        latest offsets asked of the partitions' leaders, one ListOffsets per leader."""
        groups = []
        lagging: list[tuple[dict[str, Any], TopicPartition, ShareState]] = []
        for wanted in body["Groups"]:
            group_id = wanted["GroupId"]
            if self._elsewhere(group_id):
                groups.append({"GroupId": group_id, "Topics": [], "ErrorCode": ErrorCode.NOT_COORDINATOR,
                               "ErrorMessage": NOT_HERE})
                continue
            await self._ensure_group(group_id)
            group = self.core.groups.get(group_id)
            if group is None:
                message = (f"Group {group_id} is not a share group." if self.core.foreign_group(group_id)
                           else f"Group {group_id} not found.")
                groups.append({"GroupId": group_id, "Topics": [], "ErrorCode": ErrorCode.GROUP_ID_NOT_FOUND,
                               "ErrorMessage": message})
                continue
            asked = wanted["Topics"]
            if asked is None:  # every topic the group has state for
                await self._names(group.initialized)
                asked = [{"TopicName": self._name(t), "Partitions": sorted(init.partitions)}
                         for t, init in group.initialized.items() if self._name(t) is not None]
            else:
                await self._learn_names({t["TopicName"] for t in asked})
            topics = []
            for topic in asked:
                info = self.core.topics.by_name.get(topic["TopicName"])
                partitions = []
                for index in topic["Partitions"]:
                    entry: dict[str, Any] = {"PartitionIndex": index, "StartOffset": -1, "LeaderEpoch": -1,
                                             "Lag": UNKNOWN_LAG, "ErrorCode": 0, "ErrorMessage": None}
                    if info is None or not 0 <= index < info.partitions:
                        entry["ErrorCode"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        entry["ErrorMessage"] = "This server does not host this topic-partition."
                    else:
                        state = await self._state_of(group_id, info.topic_id, index)
                        if state is not None and state.start_offset >= 0:
                            entry["StartOffset"] = state.start_offset
                            lagging.append((entry, (info.name, index), state))
                    partitions.append(entry)
                topics.append({"TopicName": topic["TopicName"],
                               "TopicId": info.topic_id if info is not None else UUID(int=0),
                               "Partitions": partitions})
            groups.append({"GroupId": group_id, "Topics": topics, "ErrorCode": 0, "ErrorMessage": None})
        if version >= 1 and lagging:  # (v0 has no Lag)
            latest = await self._latest_offsets([tp for _, tp, _ in lagging])
            for entry, tp, state in lagging:
                entry["Lag"] = share_lag(state, latest.get(tp))
        return {"ThrottleTimeMs": 0, "Groups": groups}

    async def _latest_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The latest offset of each of ``partitions`` its leader answered: the sidecar's own
        broker on the reader's connections, every other leader directly, all at once and
        each once for all its partitions. A leader that cannot be asked leaves its
        partitions out (their lag is unknown), with one warning naming it."""
        try:
            found = await self.reader.leaders({topic for topic, _ in partitions})
        except UpstreamError as exc:
            log.warning("share groups: the partitions' leaders could not be read (%s); their lag is unknown (-1)",
                        exc)
            return {}
        plan = plan_lag(partitions, found.leaders, found.brokers.keys())
        for leader, parts in plan.unaddressed.items():
            log.warning("share groups: broker %d leads %s but the broker's Metadata gives no address for it "
                        "(down?); their lag is unknown (-1)", leader, _partitions_text(parts))
        if plan.leaderless:
            log.warning("share groups: no leader for %s; their lag is unknown (-1)", _partitions_text(plan.leaderless))
        answers: dict[TopicPartition, tuple[int, int]] = {}

        async def ask(leader: int, parts: tuple[TopicPartition, ...]) -> None:
            wanted = dict.fromkeys(parts, LATEST_TIMESTAMP)
            try:
                if leader == found.own:
                    answers.update(await self.reader.list_offsets(wanted, read_committed=False))
                else:
                    answers.update(await self.reader.list_offsets_at(found.brokers[leader], wanted,
                                                                     read_committed=False))
            except UpstreamError as exc:
                log.warning("share groups: broker %d could not be asked for the latest offsets of %s (%s); "
                            "their lag is unknown (-1)", leader, _partitions_text(parts), exc)

        async with trio.open_nursery() as nursery:
            for leader, parts in plan.by_leader.items():
                nursery.start_soon(ask, leader, parts)
        return latest_offsets(answers)

    async def _learn_names(self, names: set[str]) -> None:
        if names - set(self.core.topics.by_name):
            try:
                await self._learn(names)
            except UpstreamError as exc:
                log.warning("share groups: topics %s could not be read (%s)", sorted(names), exc)

    async def _refused_unless_empty(self, group_id: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Alter/DeleteShareGroupOffsets' answer when the group is not an empty share group
        (else ``None``, the topics the request names learned)."""
        if self._elsewhere(group_id):
            return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.NOT_COORDINATOR, "ErrorMessage": NOT_HERE,
                    "Responses": []}
        await self._ensure_group(group_id)
        refused = self._refuse_unless_empty(group_id)
        if refused is not None:
            return {"ThrottleTimeMs": 0, "ErrorCode": refused[0], "ErrorMessage": refused[1], "Responses": []}
        await self._learn_names({t["TopicName"] for t in body["Topics"]})
        return None

    def _refuse_unless_empty(self, group_id: str) -> tuple[int, str | None] | None:
        group = self.core.groups.get(group_id)
        if group is None:
            message = (f"Group {group_id} is not a share group." if self.core.foreign_group(group_id)
                       else f"Group {group_id} not found.")
            return ErrorCode.GROUP_ID_NOT_FOUND, message
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, "The group is not empty."
        return None

    async def alter_offsets(self, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """AlterShareGroupOffsets: new start offsets for an empty group's share-partitions
        (their in-flight records are forgotten, as Kafka's persister writes a new state epoch)."""
        group_id = body["GroupId"]
        refused = await self._refused_unless_empty(group_id, body)
        if refused is not None:
            return refused
        responses = []
        written: list[tuple[UUID, int, int]] = []
        count = self._durable_count
        for topic in body["Topics"]:
            info = self.core.topics.by_name.get(topic["TopicName"])
            parts = []
            for part in topic["Partitions"]:
                index, start = part["PartitionIndex"], part["StartOffset"]
                if info is None or not 0 <= index < info.partitions:
                    parts.append({"PartitionIndex": index, "ErrorCode": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  "ErrorMessage": "This server does not host this topic-partition."})
                    continue
                old = await self._state_of(group_id, info.topic_id, index)
                epoch = old.state_epoch + 1 if old is not None else 0
                # Written whole; the leader's sidecar (this one or another) reads it again.
                self.partitions.pop((group_id, info.topic_id, index), None)
                count = self._queue(share_partition_path(group_id, info.topic_id, index), encode_state(
                    ShareState(state_epoch=epoch, start_offset=max(0, start), batches=())))
                written.append((info.topic_id, index, count))
                parts.append({"PartitionIndex": index, "ErrorCode": 0, "ErrorMessage": None})
            responses.append({"TopicName": topic["TopicName"],
                              "TopicId": info.topic_id if info is not None else UUID(int=0), "Partitions": parts})
        await self._durable(count)
        lost = {(t, i) for t, i, at in written if self._lost((group_id, t, i), at)}
        for response in responses:
            for part in response["Partitions"]:
                if (response["TopicId"], part["PartitionIndex"]) in lost:  # written elsewhere meanwhile
                    part.update(ErrorCode=ErrorCode.UNKNOWN_SERVER_ERROR, ErrorMessage=(
                        "The share-partition's state changed while it was being altered; try again."))
        return {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "Responses": responses}

    async def delete_offsets(self, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """DeleteShareGroupOffsets: an empty group forgets its state for whole topics (the
        next member to subscribe initializes them again)."""
        group_id = body["GroupId"]
        refused = await self._refused_unless_empty(group_id, body)
        if refused is not None:
            return refused
        group = self.core.groups[group_id]
        responses = []
        count = self._durable_count
        for topic in body["Topics"]:
            info = self.core.topics.by_name.get(topic["TopicName"])
            if info is None:
                responses.append({"TopicName": topic["TopicName"], "TopicId": UUID(int=0),
                                  "ErrorCode": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  "ErrorMessage": "This server does not host this topic-partition."})
                continue
            for index in range(info.partitions):
                self.partitions.pop((group_id, info.topic_id, index), None)
                count = self._queue(share_partition_path(group_id, info.topic_id, index), None)
            group.initialized.pop(info.topic_id, None)
            group.initializing.pop(info.topic_id, None)
            count = self._queue(share_registry_path(group_id), encode_group(group.to_record()))
            responses.append({"TopicName": info.name, "TopicId": info.topic_id, "ErrorCode": 0, "ErrorMessage": None})
        await self._durable(count)
        return {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "Responses": responses}

    async def group_ids(self) -> list[tuple[str, str]]:
        """``(group id, state)`` of every share group (ListGroups): a group this sidecar
        coordinates as it holds it, any other as ZooKeeper has it, read but not loaded (a
        copy loaded here would go stale, and be served stale should the group come here)."""
        stored = await self.zk.call(self.store.group_ids)
        out = []
        for group_id in sorted(set(stored) | set(self.core.groups)):
            group = self.core.groups.get(group_id)
            if group is None:
                record = await self.zk.call(self.store.load_group, group_id)
                if record is None:
                    continue
                group = ShareGroup.from_record(group_id, record)
            out.append((group_id, group.state.value))
        return out

    async def delete_group(self, group_id: str) -> tuple[int, str | None]:
        """DeleteGroups of a share group: only an empty one; its state goes from ZooKeeper."""
        if self._elsewhere(group_id):
            return ErrorCode.NOT_COORDINATOR, NOT_HERE
        await self._ensure_group(group_id)
        refused = self._refuse_unless_empty(group_id)
        if refused is not None:
            return refused
        for key in [k for k in self.partitions if k[0] == group_id]:
            del self.partitions[key]
        self.core.unload(group_id)
        await self._durable(self._queue(share_group_path(group_id), None))
        return 0, None

    def _close_session(self, key: ShareSessionKey) -> None:
        """A session ended: the member's records go back (Kafka releases them too)."""
        self.sessions.close(key)
        self._release_member(key.group_id, key.member_id)

    def connection_closed(self, connection: object) -> None:
        """A client connection ended: its sessions end, their members' records go back, and
        its connections to peer sidecars close (so do the sessions there)."""
        for key in self.sessions.close_connection(connection):
            self._release_member(key.group_id, key.member_id)
        for link_key in [k for k in self._links if k[0] == connection]:
            link = self._links.pop(link_key)
            if self._nursery is not None:
                self._nursery.start_soon(link.aclose)

    async def forward(self, address: tuple[str, int], connection: object, header: RequestHeader,
                      body: bytes) -> bytes | None:
        """Pass a share request to the sidecar at ``address`` on a connection of this client
        connection's own: its answer's body, or ``None`` when that sidecar cannot be reached
        or answers nothing (logged)."""
        link = self._links.get((connection, address))
        if link is None:
            link = self._links[(connection, address)] = PeerLink(address)
        try:
            return await link.exchange(header, body)
        except UpstreamError as exc:
            log.warning("share groups: passing %s to the sidecar that serves its group failed: %s",
                        DEFAULT_REGISTRY.name(header.api_key), exc)
            return None


class PeerLink:
    """One connection to another sidecar of the fleet for share requests passed to it, one
    request at a time, in the order they came (see :meth:`ShareService.forward`)."""

    def __init__(self, address: tuple[str, int], timeout: float = MAX_WAIT + 10) -> None:
        self.address = address
        self.timeout = timeout
        self._stream: trio.SocketStream | None = None
        self._lock = trio.Lock()

    async def exchange(self, header: RequestHeader, body: bytes) -> bytes:
        """The peer's answer body to ``header`` and ``body``."""
        api = DEFAULT_REGISTRY.api(header.api_key)
        version = header.api_version
        async with self._lock:
            try:
                with trio.fail_after(self.timeout):
                    if self._stream is None:
                        self._stream = await trio.open_tcp_stream(*self.address)
                    head = encode_request_header(header.api_key, version, header.correlation_id, header.client_id,
                                                 api.request_header_version(version))
                    await self._stream.send_all(encode_frame(head + body))
                    decoder = FrameDecoder()
                    while True:
                        frame = decoder.next_frame()
                        if frame is NEED_DATA:
                            decoder.receive_data(await self._stream.receive_some(65536))
                            continue
                        if frame is EOF:
                            raise UpstreamError(f"sidecar {self.address[0]}:{self.address[1]} closed the connection")
                        view = memoryview(frame)[4:]
                        _, size = decode_response_header(view, api.response_header_version(version))
                        return bytes(view[size:])
            except (OSError, trio.BrokenResourceError, trio.TooSlowError, ProtocolError) as exc:
                await self.aclose()
                raise UpstreamError(f"sidecar {self.address[0]}:{self.address[1]}: {exc!r}") from None
            except BaseException:
                await self.aclose()
                raise

    async def aclose(self) -> None:
        """Close the connection (the next exchange opens another)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            await trio.aclose_forcefully(stream)


def _partitions_text(parts: Sequence[TopicPartition]) -> str:
    """``t-0, t-1`` (the partitions a warning names), at most ten of them."""
    text = ", ".join(f"{topic}-{index}" for topic, index in parts[:10])
    return text if len(parts) <= 10 else f"{text} and {len(parts) - 10} more"


def _fetch_error(code: int, message: str | None, lock_ms: int) -> dict[str, Any]:
    return {"ThrottleTimeMs": 0, "ErrorCode": int(code), "ErrorMessage": message, "AcquisitionLockTimeoutMs": lock_ms,
            "Responses": [], "NodeEndpoints": []}


def _aborted_ranges(batches: Sequence[Any], aborted: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The offset ranges of aborted transactional batches (read_committed): each aborted
    producer's data batches from its transaction's first offset up to its abort marker."""
    if not aborted:
        return []
    open_from: dict[int, int] = {}
    pending = sorted(aborted, key=lambda a: a[1])
    out: list[tuple[int, int]] = []
    for batch in batches:
        while pending and pending[0][1] <= batch.base_offset:
            producer, first = pending.pop(0)
            open_from[producer] = first
        if not batch.transactional or batch.producer_id not in open_from:
            continue
        if batch.control:
            del open_from[batch.producer_id]  # the abort marker ends the transaction
            continue
        out.append((batch.base_offset, batch.last_offset))
    return out


class ShareMetrics:
    """Prometheus collector of the share groups (read at each scrape)."""

    def __init__(self, service: ShareService) -> None:
        self.service = service

    def describe(self) -> list[Any]:
        """No metrics at registration (the collector is read at each scrape)."""
        return []

    def collect(self) -> Any:
        """Members per group; in-flight and acquired records, redeliveries, archived records and
        lock expiries per group."""
        members = GaugeMetricFamily("ksidecar_share_group_members", "Members of each share group this sidecar "
                                    "coordinates.", labels=["group"])
        for group_id, group in self.service.core.groups.items():
            members.add_metric([group_id], len(group.members))
        in_flight = GaugeMetricFamily("ksidecar_share_records_in_flight", "Records in the share-partitions' "
                                      "in-flight windows, by group.", labels=["group"])
        acquired = GaugeMetricFamily("ksidecar_share_records_acquired", "Records held by a member, by group.",
                                     labels=["group"])
        redelivered = CounterMetricFamily("ksidecar_share_records_redelivered", "Records delivered again "
                                          "(delivery count above 1), by group.", labels=["group"])
        archived = CounterMetricFamily("ksidecar_share_records_archived", "Records archived by a lock "
                                       "expiry or a departing member at the delivery limit, by group.",
                                       labels=["group"])
        expiries = CounterMetricFamily("ksidecar_share_lock_expiries", "Acquisition locks that expired, by "
                                       "group.", labels=["group"])
        per_group: dict[str, list[int]] = {}
        for (group_id, _, _), served in self.service.partitions.items():
            totals = per_group.setdefault(group_id, [0, 0, 0, 0, 0])
            state = served.state
            totals[0] += state.in_flight_count()
            totals[1] += sum(1 for _, r in state.records() if r.state is RecordState.ACQUIRED)
            totals[2] += served.redeliveries
            totals[3] += served.archived
            totals[4] += state.lock_expiries
        for group_id, (flight, held, again, gone, expired) in sorted(per_group.items()):
            in_flight.add_metric([group_id], flight)
            acquired.add_metric([group_id], held)
            redelivered.add_metric([group_id], again)
            archived.add_metric([group_id], gone)
            expiries.add_metric([group_id], expired)
        yield from (members, in_flight, acquired, redelivered, archived, expiries)
        acknowledged = CounterMetricFamily("ksidecar_share_acknowledged_records", "Records whose "
                                           "acknowledgement (accept, release, reject) this sidecar applied.")
        acknowledged.add_metric([], self.service.acknowledged)
        writes = CounterMetricFamily("ksidecar_share_state_transactions", "ZooKeeper transactions that wrote "
                                     "share-group state (each holds every change queued while the last was written).")
        writes.add_metric([], self.service.store.transactions)
        yield from (acknowledged, writes)
