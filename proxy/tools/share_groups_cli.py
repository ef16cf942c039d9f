"""``ksidecar share-groups``: share groups (KIP-932) over the wire, shaped like kafka-share-groups.sh.

    ksidecar share-groups --bootstrap-server HOST:PORT --list [--state [STATE,...]]
    ksidecar share-groups --bootstrap-server HOST:PORT --describe (--group G ... | --all-groups)
        [--offsets | --members | --state] [--verbose]
    ksidecar share-groups --bootstrap-server HOST:PORT --reset-offsets --group G
        (--topic T[:P,P...] ... | --all-topics)
        (--to-earliest | --to-latest | --to-offset N | --to-datetime YYYY-MM-DDThh:mm:ss.sss)
        (--dry-run | --execute)
    ksidecar share-groups --bootstrap-server HOST:PORT --delete-offsets --group G --topic T ...
    ksidecar share-groups --bootstrap-server HOST:PORT --delete (--group G ... | --all-groups)

One action per command, as in Kafka's tool (``ShareGroupCommand``). What each asks:
``--list`` sends ListGroups v5 (type ``share``, the states if given) to every sidecar
Metadata names; ``--describe`` sends FindCoordinator, then ShareGroupDescribe to the
group's coordinator, and for offsets (the default view) DescribeShareGroupOffsets with
every topic (v1 adds the lag); ``--reset-offsets`` takes the target offsets from ListOffsets
(earliest, latest, or the first at a time; ``--to-offset`` is clamped to each partition's
[earliest, latest] range with a warning) and, with ``--execute``, writes them with
AlterShareGroupOffsets; ``--delete-offsets`` sends DeleteShareGroupOffsets; ``--delete``
checks in the listing that each group is a share group without members, then sends
DeleteGroups (which deletes a group of any type: the check keeps a consumer group safe).

Kafka's rules are kept: offsets are reset or deleted only while the group has no members
(the coordinator refuses otherwise, NON_EMPTY_GROUP); ``--reset-offsets`` needs
``--dry-run`` or ``--execute``. The share APIs are served while ``share.version`` is
finalized at 1 or more; below, the sidecar does not advertise them and this tool says so.

Tables are left-aligned columns one space apart (:func:`proxy.tools.groups_cli.table`),
with Kafka's headers in Kafka's order. Exit codes: 0 done, 1 the cluster refused or could
not be asked (the message says which request and why), 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import construct as c

from coordinator.errors import Code
from protocol.apis import (
    ALTER_SHARE_GROUP_OFFSETS,
    DEFAULT_REGISTRY,
    DELETE_SHARE_GROUP_OFFSETS,
    DESCRIBE_SHARE_GROUP_OFFSETS,
    SHARE_GROUP_DESCRIBE,
)
from protocol.errors import ProtocolError
from proxy.tools.admin_client import AdminError
from proxy.tools.groups_cli import (
    EARLIEST,
    LATEST,
    LIST_GROUPS,
    NO_VALUE,
    Broker,
    Cluster,
    GroupsError,
    UsageError,
    chosen_partitions,
    delete_groups,
    error_name,
    parse_topic,
    table,
)

#: Versions this tool speaks for the APIs it adds to :data:`proxy.tools.groups_cli.SPOKEN`.
SPOKEN: dict[int, tuple[int, int]] = {
    LIST_GROUPS: (5, 5),                   # v5: TypesFilter, GroupType
    SHARE_GROUP_DESCRIBE: (1, 1),
    DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),  # v1: Lag
    ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    DELETE_SHARE_GROUP_OFFSETS: (0, 0),
}
#: Share group states, as ListGroups and ShareGroupDescribe name them (Kafka's
#: ``GroupState.groupStatesForType(SHARE)``).
STATES = ("Empty", "Stable", "Dead")
#: States in which a group has no members: offsets may be reset.
INACTIVE = ("Empty", "Dead")
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
TARGETS = ("to_earliest", "to_latest", "to_offset", "to_datetime")
#: Which actions each option goes with (Kafka's ``checkInvalidArgs``).
USED_WITH: dict[str, tuple[str, ...]] = {
    "group": ("describe", "delete", "reset_offsets", "delete_offsets"),
    "all_groups": ("describe", "delete"),
    "topic": ("reset_offsets", "delete_offsets"),
    "all_topics": ("reset_offsets",),
    "to_earliest": ("reset_offsets",),
    "to_latest": ("reset_offsets",),
    "to_offset": ("reset_offsets",),
    "to_datetime": ("reset_offsets",),
    "dry_run": ("reset_offsets",),
    "execute": ("reset_offsets",),
    "members": ("describe",),
    "offsets": ("describe",),
    "verbose": ("describe",),
    "state": ("list", "describe"),
}
SHARE_HINT = (" (share groups need share.version at level 1: ksidecar features --bootstrap-server "
              "HOST:PORT upgrade --feature share.version=1)")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _either(dests: Sequence[str]) -> str:
    """``--a``, ``--a or --b``, ``--a, --b or --c``."""
    flags = [_flag(d) for d in dests]
    return flags[0] if len(flags) == 1 else f"{', '.join(flags[:-1])} or {flags[-1]}"


# -- the wire ------------------------------------------------------------------------------


class ShareCluster(Cluster):
    """:class:`~proxy.tools.groups_cli.Cluster` speaking the share-group APIs too."""

    def call(self, address: str, api_key: int, body: Mapping[str, Any]) -> tuple[int, c.Container]:
        """One request at the highest version both sides speak: ``(version, response)``."""
        if api_key not in SPOKEN:
            return super().call(address, api_key, body)
        client, ranges = self._client(address)
        name = DEFAULT_REGISTRY.api(api_key).name
        lo, hi = SPOKEN[api_key]
        theirs = ranges.get(api_key)
        if theirs is None or max(lo, theirs[0]) > min(hi, theirs[1]):
            offered = "not at all" if theirs is None else f"v{theirs[0]}-v{theirs[1]}"
            hint = " (is sidecar.coordinator=embedded?)" if api_key == LIST_GROUPS else SHARE_HINT
            raise GroupsError(f"{address} serves {name} {offered}; this tool needs v{lo}-v{hi}{hint}")
        version = min(hi, theirs[1])
        try:
            return version, client.call(api_key, version, body)
        except ProtocolError as exc:
            raise GroupsError(f"{name} to {address}: unreadable answer ({exc})") from None


@dataclass(frozen=True, kw_only=True, slots=True)
class ShareMember:
    """One member of a share group and the partitions assigned to it."""

    member_id: str
    client_id: str
    host: str
    member_epoch: int
    partitions: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class ShareGroup:
    """A share group as its coordinator describes it (state ``Dead``: it does not exist)."""

    group_id: str
    state: str
    coordinator: Broker
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: tuple[ShareMember, ...] = field(default=())


@dataclass(frozen=True, kw_only=True, slots=True)
class StartOffset:
    """A share-partition's start offset, leader epoch and lag (``None``: not known)."""

    start_offset: int | None
    leader_epoch: int | None = None
    lag: int | None = None


def list_share_groups(cluster: Cluster, states: Sequence[str] = ()) -> list[tuple[str, str]]:
    """``(group id, state)`` of every share group of every sidecar, sorted by group id."""
    meta = cluster.metadata(())
    found: dict[str, str] = {}
    for broker in sorted(meta.brokers.values(), key=lambda b: b.node_id):
        _, body = cluster.call(broker.address, LIST_GROUPS, {"StatesFilter": list(states), "TypesFilter": ["share"]})
        if body.ErrorCode:
            raise GroupsError(f"ListGroups at {broker.address}: {error_name(body.ErrorCode)}")
        for g in body.Groups:
            if (g.GroupType or "").lower() == "share":
                found[g.GroupId] = g.GroupState
    wanted = {s.lower() for s in states}
    return sorted((gid, state) for gid, state in found.items() if not wanted or state.lower() in wanted)


def describe_share_group(cluster: Cluster, group_id: str) -> ShareGroup:
    """Describe ``group_id`` at its coordinator (ShareGroupDescribe)."""
    coordinator = cluster.coordinator(group_id)
    _, body = cluster.call(coordinator.address, SHARE_GROUP_DESCRIBE,
                           {"GroupIds": [group_id], "IncludeAuthorizedOperations": False})
    described = body.Groups[0]
    if described.ErrorCode == Code.GROUP_ID_NOT_FOUND:
        if "not a share group" in (described.ErrorMessage or ""):
            raise GroupsError(f"Group '{group_id}' is not a share group.")
        return ShareGroup(group_id=group_id, state="Dead", coordinator=coordinator)
    if described.ErrorCode:
        detail = f": {described.ErrorMessage}" if described.ErrorMessage else ""
        raise GroupsError(f"ShareGroupDescribe of '{group_id}': {error_name(described.ErrorCode)}{detail}")
    return ShareGroup(
        group_id=group_id, state=described.GroupState, coordinator=coordinator,
        group_epoch=described.GroupEpoch, assignment_epoch=described.AssignmentEpoch,
        members=tuple(ShareMember(
            member_id=m.MemberId, client_id=m.ClientId, host=m.ClientHost, member_epoch=m.MemberEpoch,
            partitions=tuple(sorted((t.TopicName, p) for t in m.Assignment.TopicPartitions for p in t.Partitions)),
        ) for m in described.Members))


def start_offsets(cluster: Cluster, group: ShareGroup) -> dict[tuple[str, int], StartOffset]:
    """Every share-partition ``group`` has state for (DescribeShareGroupOffsets, Topics=null)."""
    version, body = cluster.call(group.coordinator.address, DESCRIBE_SHARE_GROUP_OFFSETS,
                                 {"Groups": [{"GroupId": group.group_id, "Topics": None}]})
    answered = body.Groups[0]
    if answered.ErrorCode:
        detail = f": {answered.ErrorMessage}" if answered.ErrorMessage else ""
        raise GroupsError(f"DescribeShareGroupOffsets of '{group.group_id}': "
                          f"{error_name(answered.ErrorCode)}{detail}")
    out: dict[tuple[str, int], StartOffset] = {}
    for topic in answered.Topics:
        for p in topic.Partitions:
            if p.ErrorCode:
                raise GroupsError(f"DescribeShareGroupOffsets of '{group.group_id}', {topic.TopicName}-"
                                  f"{p.PartitionIndex}: {error_name(p.ErrorCode)}")
            if p.StartOffset < 0:  # initialized, never fetched: nothing known yet
                out[(topic.TopicName, p.PartitionIndex)] = StartOffset(start_offset=None)
                continue
            lag = p.Lag if version >= 1 and p.Lag >= 0 else None
            out[(topic.TopicName, p.PartitionIndex)] = StartOffset(
                start_offset=p.StartOffset, leader_epoch=p.LeaderEpoch if p.LeaderEpoch >= 0 else None, lag=lag)
    return out


def alter_start_offsets(cluster: Cluster, group: ShareGroup, offsets: Mapping[tuple[str, int], int]) -> None:
    """Set the start offsets of an empty group (AlterShareGroupOffsets)."""
    by_topic: dict[str, list[dict[str, int]]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append({"PartitionIndex": partition, "StartOffset": offset})
    _, body = cluster.call(group.coordinator.address, ALTER_SHARE_GROUP_OFFSETS, {
        "GroupId": group.group_id, "Topics": [{"TopicName": t, "Partitions": ps} for t, ps in by_topic.items()]})
    if body.ErrorCode:
        detail = f": {body.ErrorMessage}" if body.ErrorMessage else ""
        raise GroupsError(f"AlterShareGroupOffsets of '{group.group_id}': {error_name(body.ErrorCode)}{detail}")
    refused = [f"{t.TopicName}-{p.PartitionIndex}: {error_name(p.ErrorCode)}"
               for t in body.Responses for p in t.Partitions if p.ErrorCode]
    if refused:
        raise GroupsError(f"AlterShareGroupOffsets of '{group.group_id}' refused: " + "; ".join(refused))


# -- what is printed -----------------------------------------------------------------------


def assignment_text(partitions: Iterable[tuple[str, int]]) -> str:
    """Kafka's ASSIGNMENT cell: ``orders:0,2;audit:1`` sorted, ``-`` when none."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return ";".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items())) or NO_VALUE


def _cell(value: int | None) -> object:
    return NO_VALUE if value is None else value


def offsets_table(group_id: str, offsets: Mapping[tuple[str, int], StartOffset], verbose: bool = False) -> str:
    """GROUP TOPIC PARTITION [LEADER-EPOCH] START-OFFSET LAG, by topic and partition."""
    headers = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if verbose else []) + ["START-OFFSET", "LAG"]
    rows = [[group_id, t, p] + ([_cell(o.leader_epoch)] if verbose else []) + [_cell(o.start_offset), _cell(o.lag)]
            for (t, p), o in sorted(offsets.items())]
    return table(headers, rows)


def members_table(group: ShareGroup, verbose: bool = False) -> str:
    """GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS [MEMBER-EPOCH] ASSIGNMENT, by member id."""
    headers = (["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["MEMBER-EPOCH"] if verbose else [])
               + ["ASSIGNMENT"])
    rows = [[group.group_id, m.member_id, m.host, m.client_id, len(m.partitions)]
            + ([m.member_epoch] if verbose else []) + [assignment_text(m.partitions)]
            for m in sorted(group.members, key=lambda m: m.member_id)]
    return table(headers, rows)


def state_table(group: ShareGroup, verbose: bool = False) -> str:
    """GROUP COORDINATOR (ID) STATE [GROUP-EPOCH ASSIGNMENT-EPOCH] #MEMBERS."""
    coordinator = f"{group.coordinator.address} ({group.coordinator.node_id})"
    headers = (["GROUP", "COORDINATOR (ID)", "STATE"] + (["GROUP-EPOCH", "ASSIGNMENT-EPOCH"] if verbose else [])
               + ["#MEMBERS"])
    row = ([group.group_id, coordinator, group.state] + ([group.group_epoch, group.assignment_epoch] if verbose else [])
           + [len(group.members)])
    return table(headers, [row])


def parse_datetime(value: str) -> int:
    """``--to-datetime``: milliseconds since the epoch. Kafka's format,
    ``YYYY-MM-DDThh:mm:ss.sss``, with an optional zone (``Z``, ``+hh``, ``+hhmm``,
    ``+hh:mm``); without one, UTC (as Kafka reads it)."""
    try:
        if "T" not in value:
            raise ValueError(value)
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"--to-datetime {value!r}: expected YYYY-MM-DDThh:mm:ss.sss, optionally with a "
                         "zone (Z, +hh:mm)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


# -- the command line ------------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    """Register the ``share-groups`` subcommand on the main parser."""
    parser = sub.add_parser("share-groups", help="list, describe, delete share groups and reset or delete "
                                                 "their offsets (like kafka-share-groups.sh)")
    parser.add_argument("--bootstrap-server", required=True, help="a sidecar, host:port")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per request (default 10)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="every share group of every sidecar")
    action.add_argument("--describe", action="store_true", help="groups' start offsets and lag, members or state")
    action.add_argument("--delete", action="store_true", help="delete share groups without members")
    action.add_argument("--reset-offsets", action="store_true", help="set an empty group's start offsets")
    action.add_argument("--delete-offsets", action="store_true",
                        help="make an empty group forget whole topics")
    parser.add_argument("--group", action="append", help="a share group (repeatable with --describe, --delete)")
    parser.add_argument("--all-groups", action="store_true", help="with --describe or --delete: every share group")
    parser.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                        help="with --reset-offsets: a topic, all its partitions or those listed; "
                             "with --delete-offsets: a topic (repeatable)")
    parser.add_argument("--all-topics", action="store_true",
                        help="with --reset-offsets: every partition the group has a start offset for")
    parser.add_argument("--to-earliest", action="store_true", help="reset to the log start")
    parser.add_argument("--to-latest", action="store_true", help="reset to the log end")
    parser.add_argument("--to-offset", type=int, metavar="N", help="reset to N (within the log's range)")
    parser.add_argument("--to-datetime", metavar="YYYY-MM-DDThh:mm:ss.sss",
                        help="reset to the first record at or after this time (UTC unless a zone is given)")
    parser.add_argument("--dry-run", action="store_true", help="with --reset-offsets: print the new offsets only")
    parser.add_argument("--execute", action="store_true", help="with --reset-offsets: write them")
    parser.add_argument("--offsets", action="store_true", help="with --describe: start offsets and lag (default)")
    parser.add_argument("--members", action="store_true", help="with --describe: members and their partitions")
    parser.add_argument("--state", nargs="?", const="", metavar="STATE[,STATE...]",
                        help="with --describe: coordinator, state, member count; with --list: each "
                             "group's state, and with states only groups in them (Empty, Stable, Dead)")
    parser.add_argument("--verbose", action="store_true",
                        help="with --describe: leader epochs, member epochs, group epochs")


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse option combinations Kafka's tool refuses (:class:`UsageError`); parse what
    needs parsing (``args.states``, ``args.topic_specs``, ``args.timestamp``)."""
    action = next(a for a in ACTIONS if getattr(args, a))
    for dest, actions in USED_WITH.items():
        value = getattr(args, dest)
        if value not in (None, False) and action not in actions:
            raise UsageError(f"{_flag(dest)} goes with {_either(actions)} only")
    groups: list[str] = args.group or []
    if action in ("describe", "delete"):
        if not groups and not args.all_groups:
            raise UsageError(f"{_flag(action)} needs --group or --all-groups")
        if groups and args.all_groups:
            raise UsageError(f"{_flag(action)} takes --group or --all-groups, not both")
    if action == "describe":
        views = [v for v in ("offsets", "members") if getattr(args, v)] + (["state"] if args.state is not None else [])
        if len(views) > 1:
            raise UsageError(f"--describe takes at most one of --offsets, --members, --state (got "
                             f"{', '.join(_flag(v) for v in views)})")
        if args.state:
            raise UsageError("--describe --state takes no value")
    args.states = []
    if action == "list" and args.state:
        args.states = [s.strip() for s in args.state.split(",") if s.strip()]
        unknown = [s for s in args.states if s.lower() not in {v.lower() for v in STATES}]
        if unknown:
            raise UsageError(f"--state {args.state!r}: unknown state {', '.join(unknown)}; share groups are "
                             f"{', '.join(STATES)}")
    if action in ("reset_offsets", "delete_offsets") and len(groups) != 1:
        raise UsageError(f"{_flag(action)} works on one group: name it with one --group")
    if action == "delete_offsets":
        if not args.topic:
            raise UsageError("--delete-offsets needs --topic (repeatable)")
        partial = [t for t in args.topic if ":" in t]
        if partial:
            raise UsageError(f"--delete-offsets works on whole topics, not partitions ({partial[0]!r})")
    args.topic_specs = []
    args.timestamp = None
    if action == "reset_offsets":
        if bool(args.topic) == args.all_topics:
            raise UsageError("--reset-offsets takes --topic or --all-topics (one of them)")
        targets = [t for t in TARGETS if getattr(args, t) not in (None, False)]
        if len(targets) != 1:
            raise UsageError("--reset-offsets takes one of --to-earliest, --to-latest, --to-offset, --to-datetime")
        if args.dry_run == args.execute:
            raise UsageError("--reset-offsets takes --dry-run or --execute (one of them)")
        args.topic_specs = [parse_topic(spec) for spec in args.topic or ()]
        if args.to_datetime is not None:
            args.timestamp = parse_datetime(args.to_datetime)


def run(args: argparse.Namespace) -> int:
    """Run one ``share-groups`` command; 0 on success, 1 on a refusal or failure, 2 on bad usage."""
    try:
        check_arguments(args)
        with ShareCluster(args.bootstrap_server, args.timeout) as cluster:
            if args.list:
                return _list(cluster, args)
            if args.describe:
                return _describe(cluster, args)
            if args.delete:
                return _delete(cluster, args)
            if args.reset_offsets:
                return _reset(cluster, args)
            return _delete_offsets(cluster, args)
    except UsageError as exc:
        print(f"ksidecar share-groups: {exc}", file=sys.stderr)
        return 2
    except (GroupsError, AdminError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


def _list(cluster: Cluster, args: argparse.Namespace) -> int:
    found = list_share_groups(cluster, args.states)
    if args.state is None:
        for gid, _ in found:
            print(gid)
        return 0
    print(table(["GROUP", "STATE"], found))
    return 0


def _existing(cluster: Cluster, group_id: str) -> ShareGroup:
    group = describe_share_group(cluster, group_id)
    if group.state == "Dead":
        raise GroupsError(f"Share group '{group_id}' does not exist.")
    return group


def _describe(cluster: Cluster, args: argparse.Namespace) -> int:
    names = [gid for gid, _ in list_share_groups(cluster)] if args.all_groups else sorted(set(args.group))
    for group in [_existing(cluster, g) for g in names]:
        if args.state is not None:
            if group.state == "Empty":
                print(f"\nShare group '{group.group_id}' has no active members.")
            print()
            print(state_table(group, args.verbose))
        elif args.members:
            if not group.members:
                print(f"\nShare group '{group.group_id}' has no active members.")
                continue
            print()
            print(members_table(group, args.verbose))
        else:
            offsets = start_offsets(cluster, group)
            if not offsets:
                print(f"\nShare group '{group.group_id}' has no offset information.")
                continue
            print()
            print(offsets_table(group.group_id, offsets, args.verbose))
    return 0


def _delete(cluster: Cluster, args: argparse.Namespace) -> int:
    listed = dict(list_share_groups(cluster))
    wanted = list(listed) if args.all_groups else list(dict.fromkeys(args.group))

    def refused(group_id: str) -> str | None:
        # DeleteGroups deletes a group of any type: only an empty share group is asked for.
        state = listed.get(group_id)
        if state is None:
            return "no share group has this name"
        if state != "Empty":
            return f"{error_name(Code.NON_EMPTY_GROUP)}: the group has active members"
        return None

    return delete_groups(cluster, wanted, "share", refused)


def _reset_partitions(cluster: Cluster, group: ShareGroup, args: argparse.Namespace) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(start_offsets(cluster, group)) if group.state != "Dead" else []
    return chosen_partitions(cluster, args.topic_specs)


def _targets(cluster: Cluster, partitions: list[tuple[str, int]], args: argparse.Namespace) -> dict[tuple[str, int], int]:
    if args.to_earliest:
        return cluster.list_offsets(partitions, EARLIEST)
    if args.to_latest:
        return cluster.list_offsets(partitions, LATEST)
    if args.timestamp is not None:
        found = cluster.list_offsets(partitions, args.timestamp)
        empty = [tp for tp in partitions if found.get(tp, -1) < 0]
        if empty:
            latest = cluster.list_offsets(empty, LATEST)
            for tp in empty:
                print(f"Warning: {tp[0]}-{tp[1]} has no record at or after {args.to_datetime}; its latest "
                      f"offset ({latest[tp]}) is used.", file=sys.stderr)
                found[tp] = latest[tp]
        return found
    earliest = cluster.list_offsets(partitions, EARLIEST)
    latest = cluster.list_offsets(partitions, LATEST)
    target: dict[tuple[str, int], int] = {}
    for tp in partitions:
        target[tp] = min(max(args.to_offset, earliest[tp]), latest[tp])
        if target[tp] != args.to_offset:
            side = "higher than the latest" if args.to_offset > latest[tp] else "lower than the earliest"
            print(f"Warning: new offset ({args.to_offset}) is {side} offset for {tp[0]}-{tp[1]}; "
                  f"it will be set to {target[tp]}.", file=sys.stderr)
    return target


def _reset(cluster: Cluster, args: argparse.Namespace) -> int:
    group = describe_share_group(cluster, args.group[0])
    if group.state not in INACTIVE:
        raise GroupsError(f"Share group '{group.group_id}' is not empty (state {group.state}, "
                          f"{len(group.members)} member(s)): its offsets can be reset only without members.")
    partitions = _reset_partitions(cluster, group, args)
    if not partitions:
        raise GroupsError(f"Share group '{group.group_id}' has no start offsets to reset; name the "
                          "partitions with --topic")
    target = _targets(cluster, partitions, args)
    if args.execute:
        alter_start_offsets(cluster, group, target)
    print()
    print(table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                ([group.group_id, t, p, target[(t, p)]] for t, p in partitions)))
    return 0


def _delete_offsets(cluster: Cluster, args: argparse.Namespace) -> int:
    group_id = args.group[0]
    topics = list(dict.fromkeys(args.topic))
    coordinator = cluster.coordinator(group_id)
    _, body = cluster.call(coordinator.address, DELETE_SHARE_GROUP_OFFSETS,
                           {"GroupId": group_id, "Topics": [{"TopicName": t} for t in topics]})
    if body.ErrorCode:
        detail = f": {body.ErrorMessage}" if body.ErrorMessage else ""
        raise GroupsError(f"DeleteShareGroupOffsets of '{group_id}': {error_name(body.ErrorCode)}{detail}")
    answered = {t.TopicName: (t.ErrorCode, t.ErrorMessage) for t in body.Responses}
    rows = []
    for topic in sorted(topics):
        code, message = answered.get(topic, (None, None))
        if code is None:
            rows.append([topic, "Error: not in the answer"])
        elif code:
            rows.append([topic, f"Error: {error_name(code)}" + (f": {message}" if message else "")])
        else:
            rows.append([topic, "Successful"])
    print()
    print(table(["TOPIC", "STATUS"], rows))
    return 0 if all(status == "Successful" for _, status in rows) else 1
