"""The coordinator core: one object the shell calls with typed requests and ``now``.

:class:`GroupCoordinator` owns every group of this sidecar (classic and KIP-848 share one
namespace, as in Kafka) and their committed offsets. It does no I/O and reads no clock:
``now`` is milliseconds since the Unix epoch (wall clock, because commit timestamps and
retention outlive the process). Every method returns a :class:`~coordinator.outcome.Step`
(see :mod:`coordinator.outcome` for the contract); the shell

1. sends ``step.response`` now if it is set, else remembers ``step.ticket``;
2. sends each ``step.answers`` entry to the request its ticket names;
3. gives ``step.writes`` to the store, in order; for a write set with a ticket it calls
   :meth:`GroupCoordinator.writes_done` once ZooKeeper holds it (or failed to);
4. sleeps until :meth:`GroupCoordinator.next_deadline` (re-read after every call) and then
   calls :meth:`GroupCoordinator.on_timer`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from coordinator.assignors import Assignment
from coordinator.classic import ClassicProtocol
from coordinator.classic_group import ClassicGroup, ClassicState
from coordinator.consumer import ConsumerProtocol
from coordinator.consumer_group import ConsumerGroup
from coordinator.context import Context, random_id
from coordinator.errors import Code
from coordinator.fleet import Fleet
from coordinator.messages.admin import (
    KEY_TYPE_GROUP,
    Coordinator,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)
from coordinator.messages.classic import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator.messages.common import Client, TopicAccess
from coordinator.messages.consumer import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
    DescribedConsumerMember,
    NamedTopicPartitions,
)
from coordinator.messages.offsets import (
    FetchGroup,
    FetchGroupResult,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionError,
    TopicErrors,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from coordinator.offsets import Offsets
from coordinator.outcome import GroupWrite, OffsetValue, R, Response, Step, Write
from coordinator.settings import CoordinatorSettings
from coordinator.topics import TopicsSnapshot
from protocol import apis

log = logging.getLogger(__name__)

#: API key -> (lowest, highest) version the core serves; ApiVersions advertises these when
#: the coordinator is embedded, whatever the broker supports. TxnOffsetCommit (28) is not
#: here: it is answered, but only with a refusal.
SERVED_API_VERSIONS: dict[int, tuple[int, int]] = {
    apis.OFFSET_COMMIT: (0, 10),
    apis.OFFSET_FETCH: (0, 10),
    apis.FIND_COORDINATOR: (0, 6),
    apis.JOIN_GROUP: (0, 9),
    apis.HEARTBEAT: (0, 4),
    apis.LEAVE_GROUP: (0, 5),
    apis.SYNC_GROUP: (0, 5),
    apis.DESCRIBE_GROUPS: (0, 6),
    apis.LIST_GROUPS: (0, 5),
    apis.DELETE_GROUPS: (0, 2),
    apis.OFFSET_DELETE: (0, 0),
    apis.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    apis.CONSUMER_GROUP_DESCRIBE: (0, 1),
}

RETENTION = ("offsets.retention",)
#: Write failures are answered with this: retriable, the client finds the coordinator again.
WRITE_FAILED = Code.COORDINATOR_NOT_AVAILABLE


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadedGroup:
    """A group as the store read it back: its registry record (``None`` if it only has
    offsets) and its committed offsets."""

    group_id: str
    record: dict[str, object] | None
    offsets: Mapping[tuple[str, int], OffsetValue]


@dataclass(frozen=True, kw_only=True, slots=True)
class _Held:
    writes: tuple[Write, ...]
    ok: Response | None
    failed: Response | None


class GroupCoordinator:
    """The sans-IO group coordinator (classic + KIP-848 + offsets)."""

    def __init__(self, settings: CoordinatorSettings | None = None, *, now: int,
                 new_id: Callable[[], str] = random_id, topic_access: TopicAccess | None = None,
                 fleet: Fleet | None = None, group_timeouts: Callable[[str], tuple[int, int]] | None = None) -> None:
        self.ctx = Context(settings=settings or CoordinatorSettings(), new_id=new_id, topic_access=topic_access,
                           group_timeouts=group_timeouts)
        self.classic = ClassicProtocol(self.ctx)
        self.consumer = ConsumerProtocol(self.ctx)
        self.offsets = Offsets(self.ctx)
        self._held: dict[int, _Held] = {}
        #: Which groups this sidecar serves among the fleet (``None``: every group it is
        #: asked about, the single-sidecar behaviour).
        self.fleet = fleet
        self.ctx.timers.set(RETENTION, now + self.ctx.settings.offsets_retention_check_interval_ms)

    @property
    def settings(self) -> CoordinatorSettings:
        """The settings this core runs with."""
        return self.ctx.settings

    def _step(self, result: R | int) -> Step[R]:
        if isinstance(result, int):
            return self.ctx.outbox.drain(ticket=result)
        return self.ctx.outbox.drain(response=result)

    def _refused(self, group_id: str, *, write: bool = False) -> Code | None:
        """The error for a request about a group this sidecar does not serve, else ``None``."""
        if self.fleet is None:
            return None
        code = self.fleet.code(group_id, write=write)
        return None if code is Code.NONE else code

    def _hold(self, writes: Iterable[Write], ok: R, failed: R) -> Step[R]:
        listed = tuple(writes)
        if not listed:
            return self.ctx.outbox.drain(response=ok)
        ticket = self.ctx.outbox.ticket()
        self._held[ticket] = _Held(writes=listed, ok=ok, failed=failed)
        self.ctx.outbox.write(*listed, ticket=ticket)
        return self.ctx.outbox.drain(ticket=ticket)

    # -- classic -------------------------------------------------------------------------

    def join_group(self, req: JoinGroupRequest, client: Client, now: int) -> Step[JoinGroupResponse]:
        """JoinGroup: usually parked until the join phase completes."""
        if (refused := self._refused(req.group_id)) is not None:
            return self._step(JoinGroupResponse(error=refused, member_id=req.member_id))
        return self._step(self.classic.join(req, client, now))

    def sync_group(self, req: SyncGroupRequest, now: int) -> Step[SyncGroupResponse]:
        """SyncGroup: parked in CompletingRebalance until the leader's assignment arrives."""
        if (refused := self._refused(req.group_id)) is not None:
            return self._step(SyncGroupResponse(error=refused))
        return self._step(self.classic.sync(req, now))

    def heartbeat(self, req: HeartbeatRequest, now: int) -> Step[HeartbeatResponse]:
        """Heartbeat: always answered now."""
        if (refused := self._refused(req.group_id)) is not None:
            return self._step(HeartbeatResponse(error=refused))
        return self._step(self.classic.heartbeat(req, now))

    def leave_group(self, req: LeaveGroupRequest, now: int) -> Step[LeaveGroupResponse]:
        """LeaveGroup: answered now (may answer other members' parked requests)."""
        if (refused := self._refused(req.group_id)) is not None:
            return self._step(LeaveGroupResponse(error=refused))
        return self._step(self.classic.leave(req, now))

    # -- KIP-848 -------------------------------------------------------------------------

    def consumer_group_heartbeat(self, req: ConsumerGroupHeartbeatRequest, client: Client,
                                 now: int) -> Step[ConsumerGroupHeartbeatResponse]:
        """ConsumerGroupHeartbeat: always answered now."""
        if (refused := self._refused(req.group_id)) is not None:
            return self._step(ConsumerGroupHeartbeatResponse(error=refused, member_id=req.member_id or None))
        return self._step(self.consumer.heartbeat(req, client, now))

    def consumer_group_describe(self, req: ConsumerGroupDescribeRequest) -> Step[ConsumerGroupDescribeResponse]:
        """ConsumerGroupDescribe."""
        out = []
        for group_id in req.group_ids:
            group = self.ctx.groups.get(group_id)
            if (refused := self._refused(group_id)) is not None:
                out.append(DescribedConsumerGroup(group_id=group_id, error=refused))
            elif group is None or (isinstance(group, ConsumerGroup) and group.dead):
                out.append(DescribedConsumerGroup(group_id=group_id, error=Code.GROUP_ID_NOT_FOUND,
                                                  error_message=f"Group {group_id} not found."))
            elif isinstance(group, ClassicGroup):
                out.append(DescribedConsumerGroup(group_id=group_id, error=Code.GROUP_ID_NOT_FOUND,
                                                  error_message=f"Group {group_id} is not a consumer group."))
            else:
                out.append(self._describe_consumer(group))
        return self.ctx.outbox.drain(response=ConsumerGroupDescribeResponse(groups=tuple(out)))

    def _describe_consumer(self, group: ConsumerGroup) -> DescribedConsumerGroup:
        topics = self.consumer.topics

        def named(a: Assignment) -> tuple[NamedTopicPartitions, ...]:
            return tuple(NamedTopicPartitions(topic_id=t, topic_name=topics.name_of(t) or "",
                                              partitions=tuple(sorted(ps)))
                         for t, ps in sorted(a.items(), key=lambda kv: str(kv[0])))

        members = tuple(DescribedConsumerMember(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client.client_id, client_host=m.client.client_host,
            subscribed_topic_names=m.subscribed_topic_names, subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=named(m.assignment.assigned), target_assignment=named(group.target.get(m.member_id, {})),
        ) for m in group.members.values())
        return DescribedConsumerGroup(group_id=group.group_id, group_state=group.state.value,
                                      group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                                      assignor_name=self.consumer.assignor_of(group), members=members)

    def update_topics(self, topics: TopicsSnapshot, now: int) -> Step[Response]:
        """New topic metadata from the broker: rebalances KIP-848 groups whose topics changed."""
        self.consumer.update_topics(topics, now)
        return self.ctx.outbox.drain()

    def install_topics(self, topics: TopicsSnapshot) -> list[str]:
        """:meth:`update_topics` in slices: install the metadata, and get the groups to pass
        to :meth:`recheck_topics` (a shell that must not stall does a few at a time)."""
        return self.consumer.install_topics(topics)

    def recheck_topics(self, group_ids: Iterable[str], now: int) -> Step[Response]:
        """Rebalance those of ``group_ids`` whose topics changed in the installed metadata."""
        self.consumer.recheck_topics(group_ids, now)
        return self.ctx.outbox.drain()

    def wanted_topics(self) -> tuple[set[str], bool]:
        """What the shell's Metadata refresh must cover for KIP-848 groups: the topic names
        members subscribe to, and whether some member subscribes by regex (then: all topics)."""
        names: set[str] = set()
        regex = False
        for group in self.ctx.groups.values():
            if isinstance(group, ConsumerGroup):
                for m in group.members.values():
                    names.update(m.subscribed_topic_names)
                    regex = regex or bool(m.subscribed_topic_regex)
        return names, regex

    @property
    def topics(self) -> TopicsSnapshot:
        """The last topic metadata the shell supplied."""
        return self.consumer.topics

    # -- offsets -------------------------------------------------------------------------

    def offset_commit(self, req: OffsetCommitRequest, now: int) -> Step[OffsetCommitResponse]:
        """OffsetCommit: parked until ZooKeeper holds the offsets (answered now if nothing
        is to be written)."""
        if (refused := self._refused(req.group_id, write=True)) is not None:
            return self._step(OffsetCommitResponse(topics=tuple(
                TopicErrors(name=t.name, topic_id=t.topic_id, partitions=tuple(
                    PartitionError(partition=p.partition, error=refused) for p in t.partitions))
                for t in req.topics)))
        response, writes = self.offsets.commit(req, self.topics, now)
        return self._hold(writes, response, response.with_error(WRITE_FAILED))

    def offset_fetch(self, req: OffsetFetchRequest) -> Step[OffsetFetchResponse]:
        """OffsetFetch (one group before v8, a batch from v8)."""
        def one(g: FetchGroup) -> FetchGroupResult:
            refused = self._refused(g.group_id)
            if refused is not None:
                return FetchGroupResult(group_id=g.group_id, error=refused)
            return self.offsets.fetch(g, req.version, self.topics)

        return self.ctx.outbox.drain(response=OffsetFetchResponse(groups=tuple(one(g) for g in req.groups)))

    def offset_delete(self, req: OffsetDeleteRequest) -> Step[OffsetDeleteResponse]:
        """OffsetDelete: parked until the deletions are durable."""
        if (refused := self._refused(req.group_id, write=True)) is not None:
            return self._step(OffsetDeleteResponse(error=refused))
        response, writes = self.offsets.delete(req)
        return self._hold(writes, response, OffsetDeleteResponse(error=WRITE_FAILED))

    def txn_offset_commit(self, req: TxnOffsetCommitRequest) -> Step[TxnOffsetCommitResponse]:
        """TxnOffsetCommit: refused (see :mod:`coordinator.offsets`)."""
        return self.ctx.outbox.drain(response=self.offsets.txn_commit(req))

    # -- administration ------------------------------------------------------------------

    def find_coordinator(self, req: FindCoordinatorRequest, *, node_id: int, host: str,
                         port: int, listener: str = "") -> Step[FindCoordinatorResponse]:
        """FindCoordinator for groups. Alone, this sidecar (``node_id``/``host``/``port``, as
        the client should see it) coordinates every group it is asked about; in a fleet each
        key names the sidecar the placement gives it, at its address on ``listener``.
        Transaction keys belong to the broker: the shell forwards those; here they are
        INVALID_REQUEST."""
        if req.key_type != KEY_TYPE_GROUP:
            entries = tuple(Coordinator(key=k, error=Code.INVALID_REQUEST,
                                        error_message="only group coordinators are served here")
                            for k in req.keys)
        else:
            entries = tuple(self._locate(k, listener, node_id, host, port) for k in req.keys)
        return self.ctx.outbox.drain(response=FindCoordinatorResponse(coordinators=entries))

    def _locate(self, key: str, listener: str, node_id: int, host: str, port: int) -> Coordinator:
        found = self.fleet.locate(key, listener) if self.fleet is not None else None
        if found is not None:
            node_id, host, port = found
        return Coordinator(key=key, node_id=node_id, host=host, port=port)

    def list_groups(self, req: ListGroupsRequest) -> Step[ListGroupsResponse]:
        """ListGroups with its state and type filters (case-insensitive)."""
        states = {s.lower() for s in req.states_filter}
        types = {t.lower() for t in req.types_filter}
        out = []
        for group_id, group in sorted(self.ctx.groups.items()):
            if isinstance(group, ClassicGroup):
                if group.is_(ClassicState.DEAD):
                    continue
                listed = ListedGroup(group_id=group_id, protocol_type=group.protocol_type or "",
                                     group_state=group.state.value, group_type="classic")
            else:
                if group.dead:
                    continue
                listed = ListedGroup(group_id=group_id, protocol_type="consumer",
                                     group_state=group.state.value, group_type="consumer")
            if (not states or listed.group_state.lower() in states) and (
                    not types or listed.group_type in types):
                out.append(listed)
        return self.ctx.outbox.drain(response=ListGroupsResponse(groups=tuple(out)))

    def describe_groups(self, req: DescribeGroupsRequest) -> Step[DescribeGroupsResponse]:
        """DescribeGroups (classic groups; KIP-848 groups are described by ConsumerGroupDescribe)."""
        out = []
        for group_id in req.groups:
            group = self.ctx.groups.get(group_id)
            if (refused := self._refused(group_id)) is not None:
                out.append(DescribedGroup(group_id=group_id, error=refused))
            elif isinstance(group, ConsumerGroup) and not group.dead:
                out.append(DescribedGroup(group_id=group_id, error=Code.GROUP_ID_NOT_FOUND,
                                          error_message=f"Group {group_id} is not a classic group."))
            elif not isinstance(group, ClassicGroup) or group.is_(ClassicState.DEAD):
                out.append(DescribedGroup(group_id=group_id, error=Code.GROUP_ID_NOT_FOUND,
                                          error_message=f"Group {group_id} not found."))
            else:
                stable = group.is_(ClassicState.STABLE) and group.protocol_name is not None
                protocol = group.protocol_name or ""
                out.append(DescribedGroup(
                    group_id=group_id, group_state=group.state.value, protocol_type=group.protocol_type or "",
                    protocol_data=protocol if stable else "",
                    members=tuple(DescribedMember(
                        member_id=m.member_id, group_instance_id=m.group_instance_id,
                        client_id=m.client.client_id, client_host=m.client.client_host,
                        metadata=m.metadata(protocol) if stable else b"",
                        assignment=m.assignment if stable else b"") for m in group.members.values())))
        return self.ctx.outbox.drain(response=DescribeGroupsResponse(groups=tuple(out)))

    def delete_groups(self, req: DeleteGroupsRequest, now: int) -> Step[DeleteGroupsResponse]:
        """DeleteGroups: empty groups only; parked until ZooKeeper has forgotten them."""
        results: list[tuple[str, Code]] = []
        writes: list[Write] = []
        for group_id in req.groups:
            group = self.ctx.groups.get(group_id)
            if (refused := self._refused(group_id, write=True)) is not None:
                results.append((group_id, refused))
            elif group is None or (isinstance(group, ClassicGroup) and group.is_(ClassicState.DEAD)) or (
                    isinstance(group, ConsumerGroup) and group.dead):
                results.append((group_id, Code.GROUP_ID_NOT_FOUND))
            elif not group.is_empty():
                results.append((group_id, Code.NON_EMPTY_GROUP))
            else:
                self._forget(group, now)
                writes.append(GroupWrite(group_id=group_id, record=None))
                results.append((group_id, Code.NONE))
        ok = DeleteGroupsResponse(results=tuple(results))
        failed = DeleteGroupsResponse(results=tuple((g, WRITE_FAILED if e is Code.NONE else e) for g, e in results))
        return self._hold(writes, ok, failed)

    def _forget(self, group: ClassicGroup | ConsumerGroup, now: int) -> None:
        if isinstance(group, ClassicGroup):
            self.classic.delete(group, now)
        else:
            self.consumer.delete(group)
        del self.ctx.groups[group.group_id]

    # -- time and the store --------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """When :meth:`on_timer` should next be called (ms since the epoch), if ever."""
        return self.ctx.timers.next_deadline()

    def on_timer(self, now: int) -> Step[Response]:
        """Handle every deadline due at ``now``: session expiry, join/sync/rebalance
        timeouts, offset retention."""
        # One key at a time: handling one may cancel or re-arm others, or arm one that is
        # already due (a zero delay). Bounded against a bug that would loop forever.
        for _ in range(100_000):
            key = self.ctx.timers.pop_next(now)
            if key is None:
                break
            assert isinstance(key, tuple)
            kind = str(key[0])
            if kind.startswith("classic."):
                self.classic.on_timer(key, now)
            elif kind.startswith("consumer."):
                self.consumer.on_timer(key, now)
            elif key == RETENTION:
                self._expire_offsets(now)
        return self.ctx.outbox.drain()

    def _expire_offsets(self, now: int) -> None:
        self.ctx.timers.set(RETENTION, now + self.ctx.settings.offsets_retention_check_interval_ms)
        writes = self.offsets.expired(now)
        for w in writes:
            if isinstance(w, GroupWrite) and w.group_id in self.ctx.groups:
                self._forget(self.ctx.groups[w.group_id], now)
        if writes:
            ticket = self.ctx.outbox.ticket()
            self._held[ticket] = _Held(writes=tuple(writes), ok=None, failed=None)
            self.ctx.outbox.write(*writes, ticket=ticket)

    def writes_done(self, ticket: int, now: int, *, ok: bool = True) -> Step[Response]:
        """The write set of ``ticket`` is durable (``ok``) or failed: answer what waited."""
        held = self._held.pop(ticket, None)
        if held is not None:
            if ok:
                self.offsets.apply(held.writes)
            answer = held.ok if ok else held.failed
            if answer is not None:
                self.ctx.outbox.answer(ticket, answer)
        return self.ctx.outbox.drain()

    def load(self, groups: Iterable[LoadedGroup], now: int) -> None:
        """Resume groups read back from the store (seed §5): members get one session
        timeout to heartbeat again, offsets are served at once."""
        for loaded in groups:
            try:
                self._load_one(loaded, now)
            except (KeyError, ValueError, TypeError) as exc:
                # A bad record must not keep the other groups from loading; its offsets
                # are still served.
                log.warning("group %r: registry record not loadable (%s); offsets only", loaded.group_id, exc)
                self.ctx.groups[loaded.group_id] = ClassicGroup(group_id=loaded.group_id, state_timestamp=now)
                self.offsets.committed[loaded.group_id] = dict(loaded.offsets)

    def _load_one(self, loaded: LoadedGroup, now: int) -> None:
        record = loaded.record
        if record is not None and record.get("type") == "consumer":
            cgroup = ConsumerGroup.from_record(loaded.group_id, dict(record))
            self.ctx.groups[loaded.group_id] = cgroup
            self.consumer.resume(cgroup, now)
        elif record is not None:
            group = ClassicGroup.from_record(loaded.group_id, dict(record))
            self.ctx.groups[loaded.group_id] = group
            self.classic.resume(group, now)
        elif loaded.offsets:
            self.ctx.groups[loaded.group_id] = ClassicGroup(group_id=loaded.group_id, state_timestamp=now)
        if loaded.offsets:
            self.offsets.committed[loaded.group_id] = dict(loaded.offsets)

    def adopt(self, loaded: LoadedGroup | None, group_id: str, now: int) -> None:
        """Start serving ``group_id`` after claiming it (hand-over, seed §5 step 2): bring
        back what the store holds of it (``loaded``; ``None`` if nothing), replacing any
        state left here from an earlier ownership. Its known members get one session
        timeout to heartbeat again before they are removed and the group rebalances."""
        self._drop(group_id)
        if loaded is not None:
            self.load([loaded], now)

    def release(self, group_id: str) -> Step[Response]:
        """Stop serving ``group_id`` (it moves to another sidecar, or the claim is lost):
        its parked JoinGroup/SyncGroup requests are answered NOT_COORDINATOR (the members
        look the coordinator up again), its timers and its state here are forgotten. Writes
        already handed to the store still complete (or fail) through :meth:`writes_done`."""
        self._drop(group_id)
        return self.ctx.outbox.drain()

    def _drop(self, group_id: str) -> None:
        group = self.ctx.groups.pop(group_id, None)
        if isinstance(group, ClassicGroup):
            self.classic.abandon(group, Code.NOT_COORDINATOR)
        self.consumer.abandon(group_id)
        self.ctx.timers.cancel_group(group_id)
        self.offsets.committed.pop(group_id, None)

    def statistics(self) -> dict[str, int]:
        """Counts for metrics: groups by ``<type>.<state>``, and ``members``."""
        stats: dict[str, int] = {"members": 0}
        for group in self.ctx.groups.values():
            kind = "classic" if isinstance(group, ClassicGroup) else "consumer"
            key = f"{kind}.{group.state.value}"
            stats[key] = stats.get(key, 0) + 1
            stats["members"] += len(group.members)
        return stats
