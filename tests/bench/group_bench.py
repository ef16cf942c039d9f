"""The embedded group coordinator: time to Stable for 100 members, OffsetCommit with ZooKeeper.

    python -m tests.bench.group_bench [--members 100] [--repeats 3] [--commit-seconds 10]

A real Tansu broker, a real ZooKeeper (its default ``forceSync=yes``: every transaction is
fsynced before ZooKeeper answers) and a real ``ksidecar run`` process with
``sidecar.coordinator=embedded``, all on 127.0.0.1. The load generator is this one
process: each member is one TCP connection speaking the protocol with raw frames
(``protocol.schema.encode``/``decode``), all members in one trio run.

1. **Classic group to Stable.** N members JoinGroup (v9: MEMBER_ID_REQUIRED first, then
   again with the id), the leader computes a range assignment and every member
   SyncGroups; members heartbeat every 200 ms and rejoin on REBALANCE_IN_PROGRESS. Timed
   from the first JoinGroup until every member holds a SyncGroup answer of the generation
   DescribeGroups reports Stable with N members. Includes
   ``group.initial.rebalance.delay.ms`` (set with ``--initial-delay-ms``).
2. **KIP-848 group to Stable.** N members ConsumerGroupHeartbeat (v1, client-made member
   ids) with epoch 0, then heartbeat at the interval the coordinator gives
   (``--heartbeat-ms`` sets ``group.consumer.heartbeat.interval.ms``), at once when their
   assignment changed (to acknowledge it, as Kafka's consumers do). Timed from the first
   heartbeat until ConsumerGroupDescribe (polled every 20 ms on another connection) says
   Stable with N members.
3. **OffsetCommit, one member.** A one-member classic group; the member commits one
   partition, waits for the answer, commits again (a consumer committing synchronously
   after every poll), for ``--commit-seconds``.
4. **OffsetCommit, N members together.** The N members of a Stable classic group each
   commit their two partitions in a loop, all at once, for ``--commit-seconds``.

Each commit is answered only after ZooKeeper has it; commits that arrive while a write is
in flight go into the next transaction. For 3 and 4 the sidecar's
``ksidecar_offset_commit_write*`` metrics give the ZooKeeper transactions and their mean
time, so commits per transaction shows the batching. Prints a Markdown section for
``tests/bench/RESULTS.md`` and writes JSON to ``tests/bench/out/group.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import construct as c
import trio

from protocol.apis import DEFAULT_REGISTRY
from protocol.framing import EOF, NEED_DATA, FrameDecoder, encode_frame
from protocol.headers import decode_response_header, encode_request_header
from protocol.messages.generated import CONSUMER_PROTOCOL_ASSIGNMENT, CONSUMER_PROTOCOL_SUBSCRIPTION
from protocol.schema import decode, encode
from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from proxy.tools.rig.tansu import start_broker
from proxy.tools.rig.zookeeper import start_zookeeper
from tests.bench.procfs import cpu_seconds

OUT = Path(__file__).parent / "out"
HOST = "127.0.0.1"

OFFSET_COMMIT, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS = 8, 11, 12, 13, 14, 15
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
VERSIONS = {OFFSET_COMMIT: 8, JOIN_GROUP: 9, HEARTBEAT: 4, LEAVE_GROUP: 5, SYNC_GROUP: 5, DESCRIBE_GROUPS: 5,
            CONSUMER_GROUP_HEARTBEAT: 1, CONSUMER_GROUP_DESCRIBE: 0}
MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS = 79, 27
#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: a client retries.
RETRIABLE = (14, 15, 16)
FORMATION_TIMEOUT = 120.0


class Conn:
    """One connection, one request at a time."""

    def __init__(self, stream: trio.SocketStream, name: str) -> None:
        self.stream, self.name = stream, name
        self.decoder = FrameDecoder()
        self.correlation = 0

    @classmethod
    async def open(cls, port: int, name: str) -> Conn:
        """Connect to the sidecar on loopback."""
        return cls(await trio.open_tcp_stream(HOST, port), name)

    async def call(self, api_key: int, body: Mapping[str, Any]) -> c.Container:
        """Send one request and return the decoded response body."""
        api, version = DEFAULT_REGISTRY.api(api_key), VERSIONS[api_key]
        self.correlation += 1
        head = encode_request_header(api_key, version, self.correlation, self.name,
                                     api.request_header_version(version))
        await self.stream.send_all(encode_frame(head + encode(api.request, version, body)))
        while True:
            frame = self.decoder.next_frame()
            if frame is NEED_DATA:
                self.decoder.receive_data(await self.stream.receive_some(65536))
                continue
            if frame is EOF:
                raise ConnectionError(f"{self.name}: closed")
            payload = frame[4:]
            correlation, size = decode_response_header(payload, api.response_header_version(version))
            assert correlation == self.correlation
            return decode(api.response, version, payload[size:])

    async def aclose(self) -> None:
        """Close the connection."""
        await trio.aclose_forcefully(self.stream)


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


# -- classic ----------------------------------------------------------------------------------


@dataclass
class ClassicMember:
    """One raw classic member: join, sync, heartbeat; what it synced and when."""

    conn: Conn
    group: str
    topic: str
    partitions: int
    member_id: str = ""
    generation: int = -1
    synced_at: float = 0.0
    assigned: list[int] = field(default_factory=list)
    rejoins: int = 0

    def subscription(self) -> bytes:
        return b"\x00\x00" + encode(CONSUMER_PROTOCOL_SUBSCRIPTION, 0, {"Topics": [self.topic], "UserData": None})

    def range_assignment(self, members: list[str]) -> list[dict[str, Any]]:
        ordered = sorted(members)
        per, extra = divmod(self.partitions, len(ordered))
        out, start = [], 0
        for i, member in enumerate(ordered):
            count = per + (1 if i < extra else 0)
            data = b"\x00\x00" + encode(CONSUMER_PROTOCOL_ASSIGNMENT, 0, {
                "AssignedPartitions": [{"Topic": self.topic, "Partitions": list(range(start, start + count))}],
                "UserData": None})
            out.append({"MemberId": member, "Assignment": data})
            start += count
        return out

    async def run(self, stop: trio.Event) -> None:
        """Join, sync and heartbeat until ``stop``; rejoin whenever the group rebalances."""
        while not stop.is_set():
            join = await self.conn.call(JOIN_GROUP, {
                "GroupId": self.group, "SessionTimeoutMs": 45000, "RebalanceTimeoutMs": 60000,
                "MemberId": self.member_id, "GroupInstanceId": None, "ProtocolType": "consumer",
                "Protocols": [{"Name": "range", "Metadata": self.subscription()}], "Reason": None})
            if join.ErrorCode == MEMBER_ID_REQUIRED:
                self.member_id = join.MemberId
                continue
            if join.ErrorCode:
                raise RuntimeError(f"JoinGroup: error {join.ErrorCode}")
            self.member_id = join.MemberId
            leader = join.Leader == self.member_id
            sync = await self.conn.call(SYNC_GROUP, {
                "GroupId": self.group, "GenerationId": join.GenerationId, "MemberId": self.member_id,
                "GroupInstanceId": None, "ProtocolType": "consumer", "ProtocolName": "range",
                "Assignments": self.range_assignment([m.MemberId for m in join.Members]) if leader else []})
            if sync.ErrorCode == REBALANCE_IN_PROGRESS:
                self.rejoins += 1
                continue
            if sync.ErrorCode:
                raise RuntimeError(f"SyncGroup: error {sync.ErrorCode}")
            data = bytes(sync.Assignment)
            assignment = decode(CONSUMER_PROTOCOL_ASSIGNMENT, 0, memoryview(data)[2:])
            self.assigned = [p for t in assignment.AssignedPartitions for p in t.Partitions]
            self.generation, self.synced_at = join.GenerationId, time.perf_counter()
            while not stop.is_set():
                with trio.move_on_after(0.2):
                    await stop.wait()
                if stop.is_set():
                    return
                beat = await self.conn.call(HEARTBEAT, {"GroupId": self.group, "GenerationId": self.generation,
                                                        "MemberId": self.member_id, "GroupInstanceId": None})
                if beat.ErrorCode == REBALANCE_IN_PROGRESS:
                    self.rejoins += 1
                    break
                if beat.ErrorCode:
                    raise RuntimeError(f"Heartbeat: error {beat.ErrorCode}")

    async def leave(self) -> None:
        """LeaveGroup and close: the group does not wait a session timeout for this member."""
        await self.conn.call(LEAVE_GROUP, {"GroupId": self.group, "Members": [
            {"MemberId": self.member_id, "GroupInstanceId": None, "Reason": None}]})
        await self.conn.aclose()


async def classic_stable(port: int, topic: str, partitions: int, count: int,
                         ) -> tuple[float, dict[str, Any], list[ClassicMember]]:
    """Form a classic group of ``count`` members; seconds to Stable, facts, and the members
    (still connected, heartbeats stopped) for the commit phase."""
    group = f"bench-classic-{uuid.uuid4().hex[:8]}"
    members = [ClassicMember(await Conn.open(port, f"m{i}"), group, topic, partitions) for i in range(count)]
    admin = await Conn.open(port, "admin")
    stop = trio.Event()
    facts: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        started = time.perf_counter()
        for member in members:
            nursery.start_soon(member.run, stop)
        with trio.fail_after(FORMATION_TIMEOUT):
            while True:
                await trio.sleep(0.02)
                generations = {m.generation for m in members}
                if len(generations) != 1 or -1 in generations:
                    continue
                described = (await admin.call(DESCRIBE_GROUPS, {"Groups": [group]})).Groups[0]
                if described.GroupState == "Stable" and len(described.Members) == count:
                    break
        elapsed = max(m.synced_at for m in members) - started
        stop.set()
    facts["generation"] = members[0].generation
    facts["rejoins"] = sum(m.rejoins for m in members)
    assert sorted(p for m in members for p in m.assigned) == list(range(partitions))
    await admin.aclose()
    return elapsed, facts, members


# -- KIP-848 ----------------------------------------------------------------------------------


@dataclass
class ConsumerMember:
    """One raw KIP-848 member: heartbeats, adopts each assignment at once and acknowledges it."""

    conn: Conn
    group: str
    topic: str
    #: Subscribe with this regex instead of ``topic``.
    regex: str | None = None
    member_id: str = field(default_factory=lambda: uuid.uuid4().hex[:22])
    epoch: int = 0
    owned: dict[Any, list[int]] = field(default_factory=dict)
    heartbeats: int = 0
    #: When its join was sent and answered (``perf_counter``).
    join_sent_at: float = 0.0
    joined_at: float = 0.0

    async def run(self, stop: trio.Event) -> None:
        """Heartbeat until ``stop``."""
        changed = True
        while not stop.is_set():
            joining = self.epoch == 0
            if joining:
                self.join_sent_at = time.perf_counter()
            # Unchanged fields are sent null (-1), as Kafka's consumer does after joining.
            answer = await self.conn.call(CONSUMER_GROUP_HEARTBEAT, {
                "GroupId": self.group, "MemberId": self.member_id, "MemberEpoch": self.epoch,
                "InstanceId": None, "RackId": None, "RebalanceTimeoutMs": 60000 if joining else -1,
                "SubscribedTopicNames": [self.topic] if joining and self.regex is None else None,
                "SubscribedTopicRegex": self.regex if joining else None, "ServerAssignor": None,
                "TopicPartitions": [{"TopicId": t, "Partitions": ps} for t, ps in self.owned.items()]
                if changed or joining else None})
            if answer.ErrorCode in RETRIABLE:  # the group's claim is still being made: as clients do
                await trio.sleep(0.1)
                continue
            if answer.ErrorCode:
                raise RuntimeError(f"ConsumerGroupHeartbeat: error {answer.ErrorCode} {answer.ErrorMessage}")
            self.heartbeats += 1
            if joining:
                self.joined_at = time.perf_counter()
            self.epoch = answer.MemberEpoch
            changed = answer.Assignment is not None
            if changed:
                self.owned = {t.TopicId: list(t.Partitions) for t in answer.Assignment.TopicPartitions}
                continue  # acknowledge at once
            with trio.move_on_after(answer.HeartbeatIntervalMs / 1000):
                await stop.wait()

    async def leave(self) -> None:
        """Heartbeat with epoch -1 (leave) and close."""
        await self.conn.call(CONSUMER_GROUP_HEARTBEAT, {
            "GroupId": self.group, "MemberId": self.member_id, "MemberEpoch": -1})
        await self.conn.aclose()


async def consumer_stable(port: int, topic: str, partitions: int, count: int,
                          poll: float = 0.02) -> tuple[float, dict[str, Any]]:
    """Form a KIP-848 group of ``count`` members; seconds to Stable and facts (when every
    member had its join answered, heartbeats sent). ``poll``: seconds between
    ConsumerGroupDescribe calls."""
    group = f"bench-848-{uuid.uuid4().hex[:8]}"
    members = [ConsumerMember(await Conn.open(port, f"k{i}"), group, topic) for i in range(count)]
    admin = await Conn.open(port, "admin")
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        started = time.perf_counter()
        for member in members:
            nursery.start_soon(member.run, stop)
        joined: float | None = None
        with trio.fail_after(FORMATION_TIMEOUT):
            while True:
                described = (await admin.call(CONSUMER_GROUP_DESCRIBE, {"GroupIds": [group]})).Groups[0]
                if joined is None and all(m.epoch > 0 for m in members):
                    joined = time.perf_counter() - started
                # Stable with every partition assigned: a group whose topic the coordinator
                # does not know yet is Stable too, with nothing assigned.
                if described.ErrorCode == 0 and described.GroupState == "Stable" and len(described.Members) == count \
                        and sum(len(tp.Partitions) for m in described.Members
                                for tp in m.Assignment.TopicPartitions) == partitions:
                    elapsed = time.perf_counter() - started
                    break
                await trio.sleep(poll)
        stop.set()
    owned = sorted(p for m in members for ps in m.owned.values() for p in ps)
    if owned != list(range(partitions)):
        seen = set(owned)
        raise AssertionError(f"not every partition owned once: {len(owned) - len(seen)} owned twice, "
                             f"{partitions - len(seen)} by nobody; group epoch {described.GroupEpoch}, "
                             f"member epochs {sorted({m.epoch for m in members})}")
    for member in members:
        await member.leave()
    await admin.aclose()
    joins = sorted(m.joined_at - started for m in members)
    return elapsed, {"epoch": described.GroupEpoch, "all_joined_s": round(joined or elapsed, 3),
                     "join_answered_p50_s": round(joins[len(joins) // 2], 3),
                     "join_answered_p90_s": round(joins[len(joins) * 9 // 10], 3),
                     "join_answered_p99_s": round(joins[len(joins) * 99 // 100], 3),
                     "join_sent_p99_s": round(sorted(m.join_sent_at - started for m in members)[
                         len(members) * 99 // 100], 3),
                     "heartbeats": sum(m.heartbeats for m in members)}


# -- offset commits ---------------------------------------------------------------------------


async def commit_loop(member: ClassicMember, until: float, latencies: list[float]) -> None:
    """Commit the member's partitions, answer by answer, until ``until`` (perf_counter)."""
    offset = 0
    while time.perf_counter() < until:
        offset += 1
        began = time.perf_counter()
        answer = await member.conn.call(OFFSET_COMMIT, {
            "GroupId": member.group, "GenerationIdOrMemberEpoch": member.generation,
            "MemberId": member.member_id, "GroupInstanceId": None,
            "Topics": [{"Name": member.topic, "Partitions": [
                {"PartitionIndex": p, "CommittedOffset": offset, "CommittedLeaderEpoch": -1,
                 "CommittedMetadata": ""} for p in member.assigned]}]})
        latencies.append(time.perf_counter() - began)
        bad = [p.ErrorCode for t in answer.Topics for p in t.Partitions if p.ErrorCode]
        if bad:
            raise RuntimeError(f"OffsetCommit: errors {bad}")


def write_metrics(sidecar: SidecarServer) -> tuple[float, float, float]:
    """``(ok transactions, write seconds sum, write count)`` from the sidecar's /metrics."""
    with urllib.request.urlopen(sidecar.metrics_url, timeout=5) as response:
        text = response.read().decode()

    def value(pattern: str) -> float:
        found = re.search(rf"^{pattern} ([0-9.e+]+)$", text, re.MULTILINE)
        return float(found.group(1)) if found else 0.0

    return (value(r'ksidecar_offset_commit_writes_total\{result="ok"\}'),
            value("ksidecar_offset_commit_write_seconds_sum"), value("ksidecar_offset_commit_write_seconds_count"))


def cpu(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process."""
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


async def commits(sidecar: SidecarServer, members: list[ClassicMember], seconds: float,
                  pids: Mapping[str, int]) -> dict[str, Any]:
    """Every member commits in a loop for ``seconds``; throughput, latency, transactions,
    and the CPU each process used (as a share of one core)."""
    before, cpu_before = write_metrics(sidecar), cpu(pids)
    latencies: list[float] = []
    began = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for member in members:
            nursery.start_soon(commit_loop, member, began + seconds, latencies)
    elapsed = time.perf_counter() - began
    after, cpu_after = write_metrics(sidecar), cpu(pids)
    transactions = after[0] - before[0]
    return {
        "members": len(members), "commits": len(latencies), "seconds": elapsed,
        "commits_per_s": len(latencies) / elapsed, "partitions_per_commit": len(members[0].assigned),
        "p50_ms": percentile(latencies, 0.50) * 1000, "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": max(latencies) * 1000, "transactions": transactions,
        "commits_per_transaction": len(latencies) / transactions if transactions else float("nan"),
        "write_ms_mean": (after[1] - before[1]) / (after[2] - before[2]) * 1000 if after[2] > before[2] else 0.0,
        "cpu": {name: (cpu_after[name] - cpu_before[name]) / elapsed for name in pids},
    }


# -- the run ----------------------------------------------------------------------------------


async def bench(sidecar: SidecarServer, topic: str, partitions: int, args: argparse.Namespace,
                pids: Mapping[str, int]) -> dict[str, Any]:
    """Every measurement against one running sidecar."""
    port = sidecar.port
    results: dict[str, Any] = {"classic": [], "consumer": []}
    commit_members: list[ClassicMember] = []
    for repeat in range(args.repeats):
        elapsed, facts, members = await classic_stable(port, topic, partitions, args.members)
        results["classic"].append({"seconds": elapsed, "load": os.getloadavg()[0], **facts})
        print(f"classic  #{repeat + 1}: {elapsed:.3f} s to Stable ({facts})", flush=True)
        if repeat == args.repeats - 1:
            commit_members = members
        else:
            for member in members:
                await member.leave()
        elapsed, facts = await consumer_stable(port, topic, partitions, args.members, args.describe_ms / 1000)
        results["consumer"].append({"seconds": elapsed, "load": os.getloadavg()[0], **facts})
        print(f"KIP-848  #{repeat + 1}: {elapsed:.3f} s to Stable ({facts})", flush=True)
    results["commit_many"] = await commits(sidecar, commit_members, args.commit_seconds, pids)
    results["commit_many"]["load"] = os.getloadavg()[0]
    print(f"commits, {args.members} members: {results['commit_many']}", flush=True)
    for member in commit_members:
        await member.leave()
    _, _, (single,) = await classic_stable(port, topic, 1, 1)
    single.assigned = [0]
    results["commit_one"] = await commits(sidecar, [single], args.commit_seconds, pids)
    results["commit_one"]["load"] = os.getloadavg()[0]
    print(f"commits, one member: {results['commit_one']}", flush=True)
    await single.leave()
    return results


def bare_transactions(connect: str, ops: int, count: int = 50) -> dict[str, float]:
    """ZooKeeper's own time for a transaction of ``ops`` offset writes (kazoo, no sidecar):
    median and p99 over ``count``, in ms; the reference for the sidecar's write times."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=connect, timeout=10)
    client.start(timeout=10)
    base = f"/bench-bare-{uuid.uuid4().hex[:8]}"
    try:
        client.ensure_path(base)
        for i in range(ops):
            client.create(f"{base}/p{i}", b"")
        value = json.dumps({"version": 1, "offset": 42, "leader_epoch": -1, "metadata": "",
                            "commit_timestamp": 1700000000000, "expire_timestamp": None}).encode()
        times = []
        for _ in range(count):
            began = time.perf_counter()
            txn = client.transaction()
            for i in range(ops):
                txn.set_data(f"{base}/p{i}", value)
            txn.commit()
            times.append(time.perf_counter() - began)
    finally:
        client.stop()
        client.close()
    return {"ops": ops, "median_ms": statistics.median(times) * 1000, "p99_ms": percentile(times, 0.99) * 1000}


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create the topic the groups subscribe to, directly on the broker."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def summarize(values: list[float]) -> str:
    """``median (min–max)`` of seconds."""
    return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f})"


def markdown(results: dict[str, Any], args: argparse.Namespace, command: str) -> str:
    """The RESULTS.md section."""
    classic = [r["seconds"] for r in results["classic"]]
    consumer = [r["seconds"] for r in results["consumer"]]
    one, many = results["commit_one"], results["commit_many"]
    loads = [r["load"] for r in results["classic"] + results["consumer"]] + [one["load"], many["load"]]
    return f"""## Group coordinator

Command: `{command}`
({platform.python_implementation()} {platform.python_version()}; Tansu broker, ZooKeeper
(forceSync on, data on local disk) and `ksidecar run` with `sidecar.coordinator=embedded`, all
on 127.0.0.1; the load generator is one trio process, one connection per member, raw frames.
2 cores shared by all of them; 1-minute load {min(loads):.2f}–{max(loads):.2f} during the runs,
`uptime` at the end: {results['uptime']}.)

Topic of {results['partitions']} partitions; each group subscribes to it. Classic:
`group.initial.rebalance.delay.ms={args.initial_delay_ms}`, members heartbeat every 200 ms.
KIP-848: `group.consumer.heartbeat.interval.ms={args.heartbeat_ms}`, uniform assignor. Median
(min–max) of {args.repeats} groups, each new.

| measure | value |
|---|---|
| classic group of {args.members} members: first JoinGroup to Stable (every member synced) | {summarize(classic)} |
| KIP-848 group of {args.members} members: first heartbeat to Stable (ConsumerGroupDescribe) | {summarize(consumer)} |
| OffsetCommit, 1 member, synchronous, 1 partition: commits/s | {one['commits_per_s']:,.0f} |
| same: latency p50 / p99 / max | {one['p50_ms']:.2f} / {one['p99_ms']:.2f} / {one['max_ms']:.1f} ms |
| same: ZooKeeper transactions, commits per transaction, mean write | {one['transactions']:,.0f}, {one['commits_per_transaction']:.2f}, {one['write_ms_mean']:.2f} ms |
| OffsetCommit, {args.members} members at once, {many['partitions_per_commit']} partitions each: commits/s | {many['commits_per_s']:,.0f} ({many['commits_per_s'] * many['partitions_per_commit']:,.0f} offsets/s) |
| same: latency p50 / p99 / max | {many['p50_ms']:.2f} / {many['p99_ms']:.2f} / {many['max_ms']:.1f} ms |
| same: ZooKeeper transactions, commits per transaction, mean write | {many['transactions']:,.0f}, {many['commits_per_transaction']:.1f}, {many['write_ms_mean']:.2f} ms |
| the same transactions by kazoo alone (no sidecar), median / p99: 1 offset; {results['bare']['many']['ops']} offsets | {results['bare']['one']['median_ms']:.2f} / {results['bare']['one']['p99_ms']:.2f} ms; {results['bare']['many']['median_ms']:.2f} / {results['bare']['many']['p99_ms']:.2f} ms |
| CPU, share of one core, 1 member committing: sidecar / ZooKeeper / load generator | {one['cpu']['sidecar']:.2f} / {one['cpu']['zookeeper']:.2f} / {one['cpu']['load']:.2f} |
| same, {args.members} members committing | {many['cpu']['sidecar']:.2f} / {many['cpu']['zookeeper']:.2f} / {many['cpu']['load']:.2f} |

Each commit phase ran {args.commit_seconds:g} s. Every OffsetCommit is answered after the
ZooKeeper transaction holding it; with {args.members} members the commits that arrive during a
write share the next one, so the commits per transaction is the batching at work.
"""


def core_formation(members: int, tick: int) -> dict[str, float]:
    """The core alone, no I/O: ``members`` KIP-848 members join one group subscribed to a
    topic of ``2 * members`` partitions, one call each, then heartbeat in turn (owning
    what they were last told) until the group is Stable. ``tick``: the shell's tick (the
    timer call that computes the next target, and the writer taking what is queued)
    comes after every ``tick`` calls, in batched mode; 0: immediate mode (the heartbeat
    that finds the group epoch ahead computes the target), writes taken after every call."""
    from coordinator.batching import flatten
    from coordinator.consumer_group import ConsumerGroup, ConsumerState
    from coordinator.core import GroupCoordinator
    from coordinator.messages import (
        Client,
        ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse,
        TopicPartitions,
    )
    from coordinator.outcome import GroupWrite, Step, WriteSet
    from coordinator.settings import CoordinatorSettings
    from coordinator.topics import TopicInfo, TopicsSnapshot

    core = GroupCoordinator(CoordinatorSettings(consumer_assignment_batching=tick > 0), now=0)
    topic_id = uuid.UUID(int=1)
    core.update_topics(TopicsSnapshot.of([TopicInfo(name="t", topic_id=topic_id, partitions=2 * members)]), 0)
    client = Client(client_id="bench", client_host="/127.0.0.1")
    epochs: dict[str, int] = {}
    owned: dict[str, tuple[TopicPartitions, ...]] = {}
    tickets: dict[int, str] = {}
    queued: list[WriteSet] = []
    records = 0
    calls = 0

    def take(name: str, resp: object) -> None:
        assert isinstance(resp, ConsumerGroupHeartbeatResponse) and resp.error == 0, resp
        epochs[name] = resp.member_epoch
        if resp.assignment is not None:
            owned[name] = tuple(resp.assignment)

    def absorb(step: Step[Any], member: str) -> None:
        nonlocal calls
        queued.extend(step.writes)
        for answer in step.answers:
            take(tickets.pop(answer.ticket), answer.response)
        if step.response is not None:
            take(member, step.response)
        elif step.ticket is not None:
            tickets[step.ticket] = member
        calls += 1
        if tick == 0 or calls % tick == 0:
            flush()

    def flush() -> None:
        nonlocal records
        if tick:
            ticked = core.on_timer(0)
            queued.extend(ticked.writes)
            for answer in ticked.answers:
                take(tickets.pop(answer.ticket), answer.response)
        records += sum(1 for w in flatten(queued) if isinstance(w, GroupWrite))
        queued.clear()

    started = time.perf_counter()
    for i in range(members):
        name = f"member-{i:05d}"
        absorb(core.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
            version=1, group_id="g", member_id=name, member_epoch=0, rebalance_timeout_ms=30_000,
            subscribed_topic_names=("t",), topic_partitions=()), client, 0), name)
    flush()
    joined = time.perf_counter()
    group = core.ctx.groups["g"]
    assert isinstance(group, ConsumerGroup)
    rounds = 0
    while group.state is not ConsumerState.STABLE:
        rounds += 1
        assert rounds < 20, "no Stable group after 20 rounds of heartbeats"
        for name in list(epochs):
            absorb(core.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(
                version=1, group_id="g", member_id=name, member_epoch=epochs[name],
                topic_partitions=owned.get(name, ())), client, 0), name)
        flush()
    stable = time.perf_counter()
    return {"members": members, "tick": tick, "joins_s": joined - started, "to_stable_s": stable - joined,
            "total_s": stable - started, "rounds": rounds, "targets": core.consumer.target_computations,
            "records": records, "group_epoch": group.group_epoch}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks and print the RESULTS.md section."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench.group_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="groups formed per protocol")
    parser.add_argument("--commit-seconds", type=float, default=10.0)
    parser.add_argument("--initial-delay-ms", type=int, default=100)
    parser.add_argument("--heartbeat-ms", type=int, default=500)
    parser.add_argument("--describe-ms", type=int, default=20,
                        help="KIP-848 formation: ConsumerGroupDescribe poll interval")
    parser.add_argument("--core", type=str, default="",
                        help="instead: the core alone, group sizes like 200,500,1000 (see core_formation)")
    parser.add_argument("--tick", type=int, default=50,
                        help="with --core: calls per tick in batched mode, 0 for immediate mode")
    args = parser.parse_args(argv)
    if args.core:
        for size in (int(n) for n in args.core.split(",")):
            r = core_formation(size, args.tick)
            print(f"{r['members']} members, tick {r['tick']}: joins {r['joins_s']:.2f} s, then Stable after "
                  f"{r['to_stable_s']:.2f} s ({r['rounds']} rounds); total {r['total_s']:.2f} s; group epoch "
                  f"{r['group_epoch']}, {r['targets']} target assignments, {r['records']} records written")
        return 0
    if not (1 <= args.members <= 1000 and 1 <= args.repeats <= 20 and 0 < args.commit_seconds <= 120):
        parser.error("bounds: 1-1000 members, 1-20 repeats, commit seconds in (0, 120]")
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m tests.bench.group_bench", *given])
    partitions = 2 * args.members
    topic = f"bench-groups-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp, start_broker(Path(tmp)) as broker, \
            start_zookeeper(Path(tmp)) as zookeeper:
        create_topic(broker.bootstrap, topic, partitions)
        with start_sidecar(Path(tmp), broker.bootstrap, keys={
            "zookeeper.connect": f"{zookeeper.connect}/bench-{uuid.uuid4().hex[:8]}",
            "sidecar.coordinator": "embedded",
            "group.initial.rebalance.delay.ms": str(args.initial_delay_ms),
            "group.consumer.heartbeat.interval.ms": str(args.heartbeat_ms),
            "sidecar.coordinator.metadata.refresh.ms": "1000",
            "sidecar.log.level": "warning",
        }) as sidecar:
            assert sidecar.process.pid is not None and zookeeper.process.pid is not None
            pids = {"sidecar": sidecar.process.pid, "zookeeper": zookeeper.process.pid,
                    "broker": broker.process.pid or 0, "load": os.getpid()}
            results = trio.run(bench, sidecar, topic, partitions, args, pids)
        many = results["commit_many"]
        ops = max(1, round(many["commits_per_transaction"] * many["partitions_per_commit"]))
        results["bare"] = {"one": bare_transactions(zookeeper.connect, 1),
                           "many": bare_transactions(zookeeper.connect, ops)}
    results["partitions"] = partitions
    results["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    OUT.mkdir(exist_ok=True)
    (OUT / "group.json").write_text(json.dumps(results, indent=2))
    print()
    print(markdown(results, args, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
