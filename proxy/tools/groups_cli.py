"""``ksidecar groups``: consumer groups over the wire, shaped like kafka-consumer-groups.sh.

    ksidecar groups --bootstrap-server HOST:PORT list [--state [STATE,...]] [--type [TYPE,...]]
    ksidecar groups --bootstrap-server HOST:PORT describe --group G [--offsets | --members
        [--verbose] | --state]
    ksidecar groups --bootstrap-server HOST:PORT delete --group G [--group G2 ...]
    ksidecar groups --bootstrap-server HOST:PORT reset-offsets --group G
        (--topic T[:P,P...] ... | --all-topics)
        (--to-earliest | --to-latest | --to-offset N) [--dry-run | --execute]

Everything goes over the Kafka protocol, through the sidecars, as Kafka's own tool does
(``ConsumerGroupCommand``): Metadata names the sidecars (``list`` asks every one of them
with ListGroups) and each partition's leader (ListOffsets goes there, for the log end and
the earliest offset); FindCoordinator names the group's coordinator, which answers
DescribeGroups or ConsumerGroupDescribe (KIP-848 groups), OffsetFetch, OffsetCommit and
DeleteGroups. Versions are the highest both sides speak (ApiVersions first, per
connection), capped where a later version would change what the body means (topic ids in
OffsetCommit v10, multi-group OffsetFetch v8).

Kafka's rules are kept: ``reset-offsets`` refuses a group with members (its state must be
Empty, or the group unknown, which the commit then creates); without ``--execute`` it only
prints the plan, with a warning unless ``--dry-run`` says so; ``--to-offset`` is clamped
to each partition's [earliest, log end] range, with a warning. Exit codes: 0 done, 1 the
cluster refused or could not be asked (the message says which request and why), 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import construct as c

from coordinator.errors import Code
from protocol.apis import DEFAULT_REGISTRY
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages.generated import CONSUMER_PROTOCOL_ASSIGNMENT
from protocol.schema import decode
from proxy.tools.admin_client import AdminClient, AdminError

LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH = 2, 3, 8, 9
FIND_COORDINATOR, DESCRIBE_GROUPS, LIST_GROUPS, API_VERSIONS = 10, 15, 16, 18
DELETE_GROUPS, CONSUMER_GROUP_DESCRIBE = 42, 69

#: Versions this tool speaks: (lowest it can use, highest it writes bodies for).
SPOKEN: dict[int, tuple[int, int]] = {
    LIST_OFFSETS: (1, 7),          # v1: one Timestamp per partition, no MaxNumOffsets
    METADATA: (1, 12),             # v1: Topics=null means all topics
    OFFSET_COMMIT: (2, 8),         # v10 names topics by id; v9 refuses unknown groups
    OFFSET_FETCH: (2, 7),          # v2: Topics=null means all; v8 batches groups
    FIND_COORDINATOR: (0, 6),      # v4 batches keys (CoordinatorKeys)
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 5),           # v4 filters by state, v5 by type
    DELETE_GROUPS: (0, 2),
    CONSUMER_GROUP_DESCRIBE: (0, 1),
}
EARLIEST, LATEST = -2, -1
#: Group states in which offsets may be reset (Kafka: inactive groups only).
INACTIVE = ("Empty", "Dead")
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")
NO_VALUE = "-"


class GroupsError(Exception):
    """The cluster refused, or could not be asked; the message says which request and why."""


class UsageError(Exception):
    """A command that cannot run as given (exit code 2)."""


def error_name(code: int) -> str:
    """``NAME (code)`` for a Kafka error code."""
    for enum in (Code, ErrorCode):
        try:
            return f"{enum(code).name} ({code})"
        except ValueError:
            continue
    return f"error {code}"


# -- the wire ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Broker:
    """A sidecar as Metadata names it."""

    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Metadata:
    """The brokers (sidecars) and, for the topics asked about, each partition's leader."""

    brokers: dict[int, Broker]
    leaders: dict[str, dict[int, int]]  # topic -> partition -> leader node id


class Cluster:
    """Blocking connections to the sidecars of one cluster, opened when first needed."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        self._clients: dict[str, tuple[AdminClient, dict[int, tuple[int, int]]]] = {}

    def close(self) -> None:
        """Close every connection."""
        for client, _ in self._clients.values():
            client.close()
        self._clients.clear()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _client(self, address: str) -> tuple[AdminClient, dict[int, tuple[int, int]]]:
        if address not in self._clients:
            client = AdminClient(address, timeout=self.timeout)
            try:
                answer = client.call(API_VERSIONS, 0, {})
            except AdminError:
                client.close()
                raise
            if answer.ErrorCode:
                client.close()
                raise GroupsError(f"ApiVersions to {address}: {error_name(answer.ErrorCode)}")
            ranges = {k.ApiKey: (k.MinVersion, k.MaxVersion) for k in answer.ApiKeys}
            self._clients[address] = (client, ranges)
        return self._clients[address]

    def serves(self, address: str, api_key: int) -> bool:
        """Whether the sidecar at ``address`` serves ``api_key`` at a version this tool speaks."""
        _, ranges = self._client(address)
        lo, hi = SPOKEN[api_key]
        theirs = ranges.get(api_key)
        return theirs is not None and max(lo, theirs[0]) <= min(hi, theirs[1])

    def call(self, address: str, api_key: int, body: Mapping[str, Any]) -> tuple[int, c.Container]:
        """One request at the highest version both sides speak: ``(version, response)``."""
        client, ranges = self._client(address)
        name = DEFAULT_REGISTRY.api(api_key).name
        lo, hi = SPOKEN[api_key]
        hi = min(hi, DEFAULT_REGISTRY.api(api_key).versions.hi or hi)
        theirs = ranges.get(api_key)
        if theirs is None or max(lo, theirs[0]) > min(hi, theirs[1]):
            offered = "not at all" if theirs is None else f"v{theirs[0]}-v{theirs[1]}"
            hint = (" (is sidecar.coordinator=embedded?)"
                    if api_key in (LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS) else "")
            raise GroupsError(f"{address} serves {name} {offered}; this tool needs "
                              f"v{lo}-v{hi}{hint}")
        version = min(hi, theirs[1])
        try:
            return version, client.call(api_key, version, body)
        except ProtocolError as exc:
            raise GroupsError(f"{name} to {address}: unreadable answer ({exc})") from None

    def metadata(self, topics: Iterable[str] | None) -> Metadata:
        """Brokers and partition leaders; ``topics=None``: every topic."""
        wanted = None if topics is None else [{"Name": t} for t in sorted(set(topics))]
        _, body = self.call(self.bootstrap, METADATA, {"Topics": wanted, "AllowAutoTopicCreation": False})
        brokers = {b.NodeId: Broker(node_id=b.NodeId, host=b.Host, port=b.Port) for b in body.Brokers}
        leaders: dict[str, dict[int, int]] = {}
        for topic in body.Topics:
            if topic.ErrorCode == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue
            if topic.ErrorCode:
                raise GroupsError(f"Metadata for topic '{topic.Name}': {error_name(topic.ErrorCode)}")
            leaders[topic.Name] = {p.PartitionIndex: p.LeaderId for p in topic.Partitions}
        return Metadata(brokers=brokers, leaders=leaders)

    def coordinator(self, group: str) -> Broker:
        """The sidecar that coordinates ``group`` (FindCoordinator)."""
        version, body = self.call(self.bootstrap, FIND_COORDINATOR,
                                  {"Key": group, "KeyType": 0, "CoordinatorKeys": [group]})
        found = body.Coordinators[0] if version >= 4 else body
        if found.ErrorCode:
            raise GroupsError(f"FindCoordinator for group '{group}': {error_name(found.ErrorCode)}")
        return Broker(node_id=found.NodeId, host=found.Host, port=found.Port)

    def list_offsets(self, partitions: Iterable[tuple[str, int]], timestamp: int, *,
                     strict: bool = True) -> dict[tuple[str, int], int]:
        """Each partition's offset at ``timestamp`` (EARLIEST, LATEST), from its leader.

        ``strict=False`` leaves out partitions without a leader or with an error (a topic
        deleted since the group committed to it) instead of failing."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        meta = self.metadata({t for t, _ in wanted})
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition in wanted:
            leader = meta.leaders.get(topic, {}).get(partition)
            if leader is None or leader not in meta.brokers:
                if not strict:
                    continue
                raise GroupsError(f"partition {topic}-{partition}: no leader known (does it exist?)")
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
        out: dict[tuple[str, int], int] = {}
        for leader, topics in sorted(by_leader.items()):
            address = meta.brokers[leader].address
            _, body = self.call(address, LIST_OFFSETS, {
                "ReplicaId": -1, "IsolationLevel": 0,
                "Topics": [{"Name": t, "Partitions": [{"PartitionIndex": p, "CurrentLeaderEpoch": -1,
                                                       "Timestamp": timestamp} for p in ps]}
                           for t, ps in topics.items()],
            })
            for topic in body.Topics:
                for p in topic.Partitions:
                    if p.ErrorCode and not strict:
                        continue
                    if p.ErrorCode:
                        raise GroupsError(f"ListOffsets for {topic.Name}-{p.PartitionIndex} at "
                                          f"{address}: {error_name(p.ErrorCode)}")
                    out[(topic.Name, p.PartitionIndex)] = p.Offset
        return out


# -- what the coordinator says ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Member:
    """One member of a group and the partitions it holds."""

    member_id: str
    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Group:
    """A group as its coordinator describes it (state ``Dead``: it does not exist)."""

    group_id: str
    state: str
    kind: str  # "classic" or "consumer" (KIP-848)
    assignor: str
    coordinator: Broker
    members: tuple[Member, ...] = field(default=())


def consumer_assignment(data: bytes | None) -> tuple[tuple[str, int], ...]:
    """The partitions of a ``ConsumerProtocolAssignment`` (empty if there is none or it
    is unreadable: the group may not be a consumer group)."""
    if not data or len(data) < 2:
        return ()
    version = min(int.from_bytes(data[:2], "big", signed=True), CONSUMER_PROTOCOL_ASSIGNMENT.valid.hi or 3)
    if version < 0:
        return ()
    try:
        body = decode(CONSUMER_PROTOCOL_ASSIGNMENT, version, memoryview(data)[2:])
    except ProtocolError:
        return ()
    return tuple(sorted((t.Topic, p) for t in body.AssignedPartitions for p in t.Partitions))


def describe_group(cluster: Cluster, group_id: str) -> Group:
    """Describe ``group_id`` at its coordinator: ConsumerGroupDescribe for KIP-848 groups,
    DescribeGroups for classic ones (as Kafka's admin client falls back)."""
    coordinator = cluster.coordinator(group_id)
    address = coordinator.address
    if cluster.serves(address, CONSUMER_GROUP_DESCRIBE):
        _, body = cluster.call(address, CONSUMER_GROUP_DESCRIBE, {"GroupIds": [group_id]})
        described = body.Groups[0]
        if described.ErrorCode == 0:
            return Group(
                group_id=group_id, state=described.GroupState, kind="consumer",
                assignor=described.AssignorName, coordinator=coordinator,
                members=tuple(Member(
                    member_id=m.MemberId, client_id=m.ClientId, host=m.ClientHost,
                    partitions=tuple(sorted((t.TopicName, p) for t in m.Assignment.TopicPartitions
                                            for p in t.Partitions)),
                ) for m in described.Members))
        if described.ErrorCode != Code.GROUP_ID_NOT_FOUND:
            raise GroupsError(f"ConsumerGroupDescribe of '{group_id}': {error_name(described.ErrorCode)}")
    _, body = cluster.call(address, DESCRIBE_GROUPS, {"Groups": [group_id]})
    described = body.Groups[0]
    if described.ErrorCode == Code.GROUP_ID_NOT_FOUND:
        return Group(group_id=group_id, state="Dead", kind="classic", assignor="", coordinator=coordinator)
    if described.ErrorCode:
        raise GroupsError(f"DescribeGroups of '{group_id}': {error_name(described.ErrorCode)}")
    consumer = described.ProtocolType in ("consumer", "")
    return Group(
        group_id=group_id, state=described.GroupState, kind="classic", assignor=described.ProtocolData,
        coordinator=coordinator,
        members=tuple(Member(
            member_id=m.MemberId, client_id=m.ClientId, host=m.ClientHost,
            partitions=consumer_assignment(m.MemberAssignment) if consumer else (),
        ) for m in described.Members))


def committed_offsets(cluster: Cluster, group: Group) -> dict[tuple[str, int], int]:
    """Every offset ``group`` has committed (OffsetFetch with Topics=null)."""
    _, body = cluster.call(group.coordinator.address, OFFSET_FETCH,
                           {"GroupId": group.group_id, "Topics": None, "RequireStable": False})
    if body.get("ErrorCode"):
        raise GroupsError(f"OffsetFetch of '{group.group_id}': {error_name(body.ErrorCode)}")
    out: dict[tuple[str, int], int] = {}
    for topic in body.Topics:
        for p in topic.Partitions:
            if p.ErrorCode:
                raise GroupsError(f"OffsetFetch of '{group.group_id}', {topic.Name}-{p.PartitionIndex}: "
                                  f"{error_name(p.ErrorCode)}")
            if p.CommittedOffset >= 0:
                out[(topic.Name, p.PartitionIndex)] = p.CommittedOffset
    return out


# -- the command line ------------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    """Register the ``groups`` subcommand on the main parser."""
    parser = sub.add_parser("groups", help="list, describe, delete consumer groups and reset their offsets")
    parser.add_argument("--bootstrap-server", required=True, help="a sidecar, host:port")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per request (default 10)")
    verbs = parser.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="every consumer group of every sidecar")
    listing.add_argument("--state", nargs="?", const="", metavar="STATE[,STATE...]",
                         help="show each group's state; with states, only groups in them")
    listing.add_argument("--type", nargs="?", const="", metavar="TYPE[,TYPE...]",
                         help="show each group's type (classic, consumer); with types, only those")
    describe = verbs.add_parser("describe", help="a group's offsets and lag, members or state")
    describe.add_argument("--group", required=True)
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="offsets and lag (the default)")
    view.add_argument("--members", action="store_true", help="members and how many partitions each holds")
    view.add_argument("--state", action="store_true", help="coordinator, assignor, state, member count")
    describe.add_argument("--verbose", action="store_true", help="with --members: each member's partitions")
    delete = verbs.add_parser("delete", help="delete groups without members, offsets included")
    delete.add_argument("--group", required=True, action="append")
    reset = verbs.add_parser("reset-offsets", help="set an inactive group's committed offsets")
    reset.add_argument("--group", required=True)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                       help="a topic, all its partitions or the ones listed (repeatable)")
    scope.add_argument("--all-topics", action="store_true", help="every partition the group has committed")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the new offsets only")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")


def run(args: argparse.Namespace) -> int:
    """Run one ``groups`` command; 0 on success, 1 on a refusal or failure, 2 on bad usage."""
    try:
        if args.verb == "reset-offsets":
            args.topic_specs = [parse_topic(spec) for spec in args.topic or ()]
        with Cluster(args.bootstrap_server, args.timeout) as cluster:
            if args.verb == "list":
                return _list(cluster, args)
            if args.verb == "describe":
                return _describe(cluster, args)
            if args.verb == "delete":
                return _delete(cluster, args.group)
            return _reset(cluster, args)
    except UsageError as exc:
        print(f"ksidecar groups: {exc}", file=sys.stderr)
        return 2
    except (GroupsError, AdminError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns one space apart, each as wide as its widest cell."""
    cells = [list(headers)] + [[str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(" ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


def _names(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _list(cluster: Cluster, args: argparse.Namespace) -> int:
    states, types = _names(args.state), _names(args.type)
    meta = cluster.metadata(())
    found: dict[str, tuple[str, str]] = {}
    for broker in sorted(meta.brokers.values(), key=lambda b: b.node_id):
        _, body = cluster.call(broker.address, LIST_GROUPS, {"StatesFilter": states, "TypesFilter": types})
        if body.ErrorCode:
            raise GroupsError(f"ListGroups at {broker.address}: {error_name(body.ErrorCode)}")
        for g in body.Groups:
            kind = g.get("GroupType") or "classic"
            if g.ProtocolType not in ("consumer", ""):
                continue  # Connect workers and the like: not consumer groups
            found[g.GroupId] = (kind, g.get("GroupState") or "")
    # Older ListGroups versions have no filters: apply them here too (case-insensitively).
    rows = sorted((gid, kind, state) for gid, (kind, state) in found.items()
                  if (not states or state.lower() in {s.lower() for s in states})
                  and (not types or kind.lower() in {t.lower() for t in types}))
    if args.state is None and args.type is None:
        for gid, _, _ in rows:
            print(gid)
        return 0
    headers = ["GROUP"] + (["TYPE"] if args.type is not None else []) + (["STATE"] if args.state is not None else [])
    print(table(headers, ([gid] + ([kind] if args.type is not None else []) + ([state] if args.state is not None else [])
                          for gid, kind, state in rows)))
    return 0


def _describe(cluster: Cluster, args: argparse.Namespace) -> int:
    group = describe_group(cluster, args.group)
    if group.state == "Dead":
        raise GroupsError(f"Consumer group '{group.group_id}' does not exist.")
    if args.state:
        print()
        print(table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                    [[group.group_id, f"{group.coordinator.address} ({group.coordinator.node_id})",
                      group.assignor or NO_VALUE, group.state, len(group.members)]]))
        return 0
    if group.state == "Empty":
        print(f"\nConsumer group '{group.group_id}' has no active members.")
    elif group.state in REBALANCING:
        print(f"\nWarning: Consumer group '{group.group_id}' is rebalancing.")
    if args.members:
        if group.members:
            headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
            rows = [[group.group_id, m.member_id, m.host, m.client_id, len(m.partitions)]
                    for m in sorted(group.members, key=lambda m: m.member_id)]
            if args.verbose:
                headers.append("ASSIGNMENT")
                for row, m in zip(rows, sorted(group.members, key=lambda m: m.member_id), strict=True):
                    row.append(_assignment(m.partitions))
            print()
            print(table(headers, rows))
        return 0
    committed = committed_offsets(cluster, group)
    owner = {tp: m for m in group.members for tp in m.partitions}
    partitions = sorted(set(committed) | set(owner))
    log_end = cluster.list_offsets(partitions, LATEST, strict=False)  # "-" where unknown
    rows = []
    for tp in partitions:
        current, end, member = committed.get(tp), log_end.get(tp), owner.get(tp)
        rows.append([group.group_id, tp[0], tp[1], NO_VALUE if current is None else current,
                     NO_VALUE if end is None else end,
                     NO_VALUE if current is None or end is None else max(0, end - current),
                     member.member_id if member else NO_VALUE, member.host if member else NO_VALUE,
                     member.client_id if member else NO_VALUE])
    print()
    print(table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                 "CONSUMER-ID", "HOST", "CLIENT-ID"], rows))
    return 0


def _assignment(partitions: Sequence[tuple[str, int]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in sorted(by_topic.items())) or NO_VALUE


def _delete(cluster: Cluster, groups: list[str]) -> int:
    return delete_groups(cluster, groups, "consumer")


def delete_groups(cluster: Cluster, groups: list[str], kind: str,
                  refused: Callable[[str], str | None] = lambda _group_id: None) -> int:
    """DeleteGroups of each of ``groups`` at its coordinator, kafka-consumer-groups.sh's
    lines (``kind``: "consumer" or "share"); ``refused(group)`` is why a group is not even
    asked for, if it is not."""
    failed: list[str] = []
    done: list[str] = []
    for group_id in dict.fromkeys(groups):
        reason = refused(group_id)
        if reason is not None:
            failed.append(f"* Group '{group_id}' could not be deleted due to: {reason}")
            continue
        coordinator = cluster.coordinator(group_id)
        _, body = cluster.call(coordinator.address, DELETE_GROUPS, {"GroupsNames": [group_id]})
        code = body.Results[0].ErrorCode
        if code:
            reason = {Code.GROUP_ID_NOT_FOUND: "the group does not exist",
                      Code.NON_EMPTY_GROUP: "the group has active members"}.get(code, "refused")
            failed.append(f"* Group '{group_id}' could not be deleted due to: {error_name(code)}: {reason}")
        else:
            done.append(group_id)
    if done:
        names = ", ".join(f"'{g}'" for g in done)
        print(f"Deletion of requested {kind} groups ({names}) was successful.")
    if failed:
        print(f"Deletion of some {kind} groups failed:\n" + "\n".join(failed), file=sys.stderr)
        return 1
    return 0


def parse_topic(spec: str) -> tuple[str, tuple[int, ...] | None]:
    """``orders`` -> every partition; ``orders:0,2`` -> partitions 0 and 2."""
    topic, sep, rest = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if not sep:
        return spec, None
    try:
        partitions = tuple(sorted({int(p) for p in rest.split(",") if p.strip()}))
    except ValueError:
        raise UsageError(f"--topic {spec!r}: partitions are numbers, as in {topic}:0,1,2") from None
    if not topic or not partitions or min(partitions) < 0:
        raise UsageError(f"--topic {spec!r}: expected TOPIC or TOPIC:P,P,...")
    return topic, partitions


def _reset_partitions(cluster: Cluster, group: Group, args: argparse.Namespace) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed_offsets(cluster, group))
    return chosen_partitions(cluster, args.topic_specs)


def chosen_partitions(cluster: Cluster, specs: list[tuple[str, tuple[int, ...] | None]]) -> list[tuple[str, int]]:
    """The ``(topic, partition)`` pairs ``--topic T[:P,P]`` names (every partition of a topic
    named alone), checked against the cluster's Metadata."""
    meta = cluster.metadata({t for t, _ in specs})
    chosen: set[tuple[str, int]] = set()
    for topic, partitions in specs:
        known = meta.leaders.get(topic)
        if known is None:
            raise GroupsError(f"topic '{topic}' does not exist")
        missing = sorted(set(partitions or ()) - set(known))
        if missing:
            raise GroupsError(f"topic '{topic}' has no partition {', '.join(map(str, missing))} "
                              f"(it has {len(known)})")
        chosen.update((topic, p) for p in (partitions if partitions is not None else known))
    return sorted(chosen)


def _reset(cluster: Cluster, args: argparse.Namespace) -> int:
    group = describe_group(cluster, args.group)
    if group.state not in INACTIVE:
        raise GroupsError(f"Assignments can only be reset if the group '{group.group_id}' is inactive, "
                          f"but the current state is {group.state}.")
    partitions = _reset_partitions(cluster, group, args)
    if not partitions:
        raise GroupsError(f"group '{group.group_id}' has no committed offsets to reset (name --topic)")
    if args.to_earliest:
        target = cluster.list_offsets(partitions, EARLIEST)
    elif args.to_latest:
        target = cluster.list_offsets(partitions, LATEST)
    else:
        earliest = cluster.list_offsets(partitions, EARLIEST)
        latest = cluster.list_offsets(partitions, LATEST)
        target = {}
        for tp in partitions:
            target[tp] = min(max(args.to_offset, earliest[tp]), latest[tp])
            if target[tp] != args.to_offset:
                side = "higher than the latest" if args.to_offset > latest[tp] else "lower than the earliest"
                print(f"Warning: new offset ({args.to_offset}) is {side} offset for {tp[0]}-{tp[1]}; "
                      f"it will be set to {target[tp]}.", file=sys.stderr)
    if not args.execute and not args.dry_run:
        print("Warning: no action is performed without --execute; add --dry-run to say that is "
              "what you want.", file=sys.stderr)
    if args.execute:
        _commit(cluster, group, target)
    print()
    print(table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                ([group.group_id, t, p, target[(t, p)]] for t, p in partitions)))
    return 0


def _commit(cluster: Cluster, group: Group, offsets: Mapping[tuple[str, int], int]) -> None:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append({
            "PartitionIndex": partition, "CommittedOffset": offset, "CommittedLeaderEpoch": -1,
            "CommittedMetadata": "", "CommitTimestamp": -1})
    # Generation -1 and no member id: an admin commit, accepted only by an inactive group.
    _, body = cluster.call(group.coordinator.address, OFFSET_COMMIT, {
        "GroupId": group.group_id, "GenerationIdOrMemberEpoch": -1, "MemberId": "",
        "GroupInstanceId": None, "RetentionTimeMs": -1,
        "Topics": [{"Name": t, "Partitions": ps} for t, ps in by_topic.items()],
    })
    refused = [f"{t.Name}-{p.PartitionIndex}: {error_name(p.ErrorCode)}"
               for t in body.Topics for p in t.Partitions if p.ErrorCode]
    if refused:
        raise GroupsError(f"OffsetCommit for group '{group.group_id}' refused: " + "; ".join(refused))
