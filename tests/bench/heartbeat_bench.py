"""Group scale: thousands of classic members heartbeating on one sidecar (issue 16).

    python -m tests.bench.heartbeat_bench [--members 5000] [--group-size 100]
                                          [--interval-ms 3000] [--seconds 30] [--workers 1]

Seed 000: "with a single coordinator we should support up to 5K consumers". A real Tansu
broker, a real ZooKeeper and one ``ksidecar run`` with the embedded coordinator, on
127.0.0.1. The load generator is this one process (one trio run): every member has its own
TCP connection, as real clients do, and speaks the protocol with raw frames (the
:class:`~tests.bench.group_bench.Conn` of the group bench).

The members form ``members / group-size`` classic groups on one topic (JoinGroup v9 with
MEMBER_ID_REQUIRED, a range assignment from each leader, SyncGroup v5), then heartbeat every
``--interval-ms`` (Kafka's default ``heartbeat.interval.ms`` is 3 s), each at its own phase,
and rejoin if a heartbeat says REBALANCE_IN_PROGRESS. Once every member has synced and the
groups have been quiet for 3 s, heartbeats are timed for ``--seconds``: from sending the
request until its answer is read, per heartbeat, on the member's connection. The sidecar's
CPU share (``/proc``) and RSS are read over the same window, over its whole process tree
(``--workers 2``: a supervisor, which owns the coordinator, and two workers that reach it
over their local channel for every group request). Prints a Markdown section for
``tests/bench/RESULTS.md`` and writes JSON to ``tests/bench/out/heartbeat-<members>.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from protocol.messages.generated import CONSUMER_PROTOCOL_ASSIGNMENT
from protocol.schema import decode
from proxy.tools.rig.sidecar import start_sidecar
from proxy.tools.rig.tansu import start_broker
from proxy.tools.rig.zookeeper import start_zookeeper
from tests.bench.group_bench import (
    DESCRIBE_GROUPS,
    HEARTBEAT,
    JOIN_GROUP,
    MEMBER_ID_REQUIRED,
    OUT,
    REBALANCE_IN_PROGRESS,
    SYNC_GROUP,
    ClassicMember,
    Conn,
    create_topic,
    percentile,
)
from tests.bench.procfs import cpu_seconds, tree_cpu_seconds, tree_rss_bytes

QUIET = 3.0  # seconds without a (re)join before the timed window starts
BUCKET = re.compile(r'^ksidecar_group_request_handling_seconds_bucket\{api="Heartbeat",le="([^"]+)"\} ([0-9.e+]+)$',
                    re.MULTILINE)


def handling_buckets(metrics_url: str) -> dict[float, float]:
    """The sidecar's cumulative Heartbeat handling-time histogram (the core's decision time)."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    return {float(le): float(n) for le, n in BUCKET.findall(text)}


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The upper bound of the bucket holding the ``q`` quantile of what was observed between."""
    delta = {le: after[le] - before.get(le, 0.0) for le in sorted(after)}
    total = delta.get(float("inf"), 0.0)
    for le, count in delta.items():
        if total and count >= q * total:
            return le
    return float("nan")


#: Seconds between the generator's last collection and the timed window.
SETTLE = 2.0


@dataclass
class Load:
    """What every member shares: the timed window and what was measured."""

    interval: float
    measuring: bool = False
    latencies: list[float] = field(default_factory=list)
    errors: dict[int, int] = field(default_factory=dict)
    rejoins: int = 0
    last_join: float = 0.0
    synced: int = 0
    last_sync: float = 0.0
    #: How late the load generator's own 10 ms ticks were, while timed (its event-loop lag).
    lags: list[float] = field(default_factory=list)


async def ticker(load: Load) -> None:
    """Measures the load generator's own lag: a heartbeat answered late because this
    process was busy (or not scheduled) is not the sidecar's latency."""
    while True:
        began = time.perf_counter()
        await trio.sleep(0.01)
        if load.measuring:
            load.lags.append(time.perf_counter() - began - 0.01)


async def member(port: int, index: int, group: str, topic: str, partitions: int, load: Load,
                 connected: trio.Semaphore) -> None:
    """One member: connect, join and sync, then heartbeat every interval until cancelled."""
    async with connected:
        conn = await Conn.open(port, f"hb{index}")
        # One answered request while the slot is held: the connection has reached the
        # process that serves it (a supervisor hands it to a worker) before the next opens.
        await conn.call(DESCRIBE_GROUPS, {"Groups": [group], "IncludeAuthorizedOperations": False})
    raw = ClassicMember(conn, group, topic, partitions)
    first = True
    while True:
        load.last_join = time.perf_counter()
        join = await conn.call(JOIN_GROUP, {
            "GroupId": group, "SessionTimeoutMs": 45000, "RebalanceTimeoutMs": 60000,
            "MemberId": raw.member_id, "GroupInstanceId": None, "ProtocolType": "consumer",
            "Protocols": [{"Name": "range", "Metadata": raw.subscription()}], "Reason": None})
        if join.ErrorCode == MEMBER_ID_REQUIRED:
            raw.member_id = join.MemberId
            continue
        if join.ErrorCode:
            raise RuntimeError(f"JoinGroup: error {join.ErrorCode}")
        raw.member_id = join.MemberId
        leader = join.Leader == raw.member_id
        sync = await conn.call(SYNC_GROUP, {
            "GroupId": group, "GenerationId": join.GenerationId, "MemberId": raw.member_id,
            "GroupInstanceId": None, "ProtocolType": "consumer", "ProtocolName": "range",
            "Assignments": raw.range_assignment([m.MemberId for m in join.Members]) if leader else []})
        if sync.ErrorCode == REBALANCE_IN_PROGRESS:
            load.rejoins += 1
            continue
        if sync.ErrorCode:
            raise RuntimeError(f"SyncGroup: error {sync.ErrorCode}")
        decode(CONSUMER_PROTOCOL_ASSIGNMENT, 0, memoryview(bytes(sync.Assignment))[2:])
        load.last_sync = time.perf_counter()
        if first:
            load.synced += 1
            first = False
        await trio.sleep(random.uniform(0, load.interval))  # each member its own phase
        while True:
            began = time.perf_counter()
            beat = await conn.call(HEARTBEAT, {"GroupId": group, "GenerationId": join.GenerationId,
                                               "MemberId": raw.member_id, "GroupInstanceId": None})
            took = time.perf_counter() - began
            if load.measuring:
                load.latencies.append(took)
                if beat.ErrorCode:
                    load.errors[beat.ErrorCode] = load.errors.get(beat.ErrorCode, 0) + 1
            if beat.ErrorCode == REBALANCE_IN_PROGRESS:
                load.rejoins += 1
                break
            if beat.ErrorCode:
                raise RuntimeError(f"Heartbeat: error {beat.ErrorCode}")
            await trio.sleep(max(0.0, load.interval - took))


async def bench(port: int, pid: int, metrics_url: str, topic: str, partitions: int,
                args: argparse.Namespace) -> dict[str, Any]:
    """Form the groups, wait until quiet, time the heartbeats; the results."""
    load = Load(interval=args.interval_ms / 1000)
    groups = [f"hb-{uuid.uuid4().hex[:6]}-{g}" for g in range((args.members + args.group_size - 1) // args.group_size)]
    connected = trio.Semaphore(args.connect_concurrency)
    out: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        began = time.perf_counter()
        nursery.start_soon(ticker, load)
        for i in range(args.members):
            nursery.start_soon(member, port, i, groups[i // args.group_size], topic, partitions, load, connected)
        with trio.fail_after(600):
            while load.synced < args.members or time.perf_counter() - load.last_join < QUIET:
                await trio.sleep(0.1)
        out["formed_s"] = load.last_sync - began
        out["rejoins_forming"] = load.rejoins
        buckets0 = handling_buckets(metrics_url)
        cpu0, wall0, self0 = tree_cpu_seconds(pid), time.perf_counter(), cpu_seconds(os.getpid())
        # The generator holds 5,000 connections too: its own full garbage-collector passes
        # (100-300 ms) would be timed as the sidecar's latency. Its collector stays off
        # while timed (30 s of its garbage is a few MB); the sidecar's runs as shipped.
        gc.collect()
        gc.disable()
        # That collection held every heartbeat due meanwhile (100-300 ms of them): they
        # leave together once it ends. The sidecar's catching up with a burst the generator
        # made is not its latency at this rate: time from when it has drained.
        await trio.sleep(SETTLE)
        load.measuring = True
        counted = time.perf_counter()
        try:
            await trio.sleep(args.seconds)
        finally:
            load.measuring = False
            gc.enable()
        # The heartbeats counted are those of the timed seconds only (not the settle before).
        out["counted_s"] = time.perf_counter() - counted
        wall = time.perf_counter() - wall0
        out["sidecar_cpu_share"] = (tree_cpu_seconds(pid) - cpu0) / wall
        out["load_cpu_share"] = (cpu_seconds(os.getpid()) - self0) / wall
        out["sidecar_rss_mb"] = tree_rss_bytes(pid) / 2**20
        out["window_s"] = wall
        buckets1 = handling_buckets(metrics_url)
        out["core_p50_us"] = bucket_quantile(buckets0, buckets1, 0.50) * 1e6
        out["core_p99_us"] = bucket_quantile(buckets0, buckets1, 0.99) * 1e6
        nursery.cancel_scope.cancel()
    lat = load.latencies
    out.update({
        "heartbeats": len(lat), "heartbeats_per_s": len(lat) / out["counted_s"],
        "p50_ms": percentile(lat, 0.50) * 1000, "p99_ms": percentile(lat, 0.99) * 1000,
        "max_ms": max(lat) * 1000,
        "lag_p99_ms": percentile(load.lags, 0.99) * 1000, "lag_max_ms": max(load.lags) * 1000,
        "errors": load.errors, "rejoins_timed": load.rejoins - out["rejoins_forming"],
    })
    return out


def markdown(results: dict[str, Any], args: argparse.Namespace, command: str) -> str:
    """The RESULTS.md section."""
    r = results
    return "\n".join([
        f"### {args.members:,} members heartbeating on one sidecar"
        + (f" of {args.workers} workers" if args.workers != 1 else ""),
        "",
        f"`{command}` — {args.members:,} classic members in groups of {args.group_size}, one TCP "
        f"connection each, heartbeat every {args.interval_ms} ms, timed for {r['window_s']:.0f} s. "
        f"`uptime` at the end: `{r['uptime']}`.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| groups formed: first connection to the last member synced | {r['formed_s']:.1f} s, "
        f"{r['rejoins_forming']} rejoin(s) |",
        f"| heartbeats answered, per second | {r['heartbeats']:,}, {r['heartbeats_per_s']:.0f}/s |",
        f"| heartbeat latency p50 / p99 / max (target p99 <= 50 ms) | {r['p50_ms']:.2f} / {r['p99_ms']:.2f} / "
        f"{r['max_ms']:.1f} ms |",
        f"| heartbeat errors, rejoins while timed | {r['errors'] or 'none'}, {r['rejoins_timed']} |",
        f"| the coordinator core's decision per Heartbeat (ksidecar_group_request_handling_seconds), "
        f"p50 / p99 at most | {r['core_p50_us']:.0f} / {r['core_p99_us']:.0f} us |",
        f"| sidecar CPU (share of one core), RSS (its process tree) | {r['sidecar_cpu_share']:.2f}, {r['sidecar_rss_mb']:.0f} MB |",
        f"| load generator CPU (share of one core); its own event-loop lag p99 / max | "
        f"{r['load_cpu_share']:.2f}; {r['lag_p99_ms']:.1f} / {r['lag_max_ms']:.1f} ms |",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the RESULTS.md section."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench.heartbeat_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=5000)
    parser.add_argument("--group-size", type=int, default=100)
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=1, help="the sidecar's sidecar.workers")
    parser.add_argument("--connect-concurrency", type=int, default=200,
                        help="connections being opened (and answered once) at a time")
    args = parser.parse_args(argv)
    if not (1 <= args.members <= 20000 and 1 <= args.group_size <= args.members and 0 < args.seconds <= 600
            and 0 <= args.workers <= 16):
        parser.error("bounds: 1-20000 members, group size 1..members, seconds in (0, 600], workers 0-16")
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m tests.bench.heartbeat_bench", *given])
    partitions = 2 * args.group_size
    topic = f"bench-hb-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp, start_broker(Path(tmp)) as broker, \
            start_zookeeper(Path(tmp)) as zookeeper:
        create_topic(broker.bootstrap, topic, partitions)
        with start_sidecar(Path(tmp), broker.bootstrap, keys={
            "zookeeper.connect": f"{zookeeper.connect}/bench-{uuid.uuid4().hex[:8]}",
            "sidecar.coordinator": "embedded",
            "group.initial.rebalance.delay.ms": "1000",
            "sidecar.coordinator.metadata.refresh.ms": "10000",
            "sidecar.log.level": "warning",
            "sidecar.workers": str(args.workers),
        }) as sidecar:
            assert sidecar.process.pid is not None
            results = trio.run(bench, sidecar.port, sidecar.process.pid, sidecar.metrics_url, topic,
                               partitions, args)
    results["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    OUT.mkdir(exist_ok=True)
    (OUT / f"heartbeat-{args.members}.json").write_text(json.dumps(results, indent=2))
    print()
    print(markdown(results, args, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
