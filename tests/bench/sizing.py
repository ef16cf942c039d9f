"""``python -m tests.bench.sizing``: every figure of docs/sizing.md, measured in one command.

    python -m tests.bench.sizing                    # the full run (about 8 minutes on 2 cores)
    python -m tests.bench.sizing --quick            # a smoke run (about a minute): checks the
                                                    # command works; its figures are not for sizing
    python -m tests.bench.sizing --out /tmp/sizing.md
    python -m tests.bench.sizing --parts memory cluster   # some parts only: printed, doc untouched

It writes the table section of ``--out`` (default docs/sizing.md) between the
``<!-- sizing:begin ... -->`` and ``<!-- sizing:end -->`` markers, the prose around them
untouched, and every run's numbers as JSON to ``tests/bench/out/sizing.json``. It measures
with what the other benchmarks already measure with:

* **rates** (requests/s and MB/s per core): raw pipelined clients that saturate the sidecar
  (:func:`tests.bench.workers_bench.measure` over :func:`tests.bench.pipeline.run_spread`),
  against ``sidecar.workers=1`` and ``2`` (and the broker itself, and a one-process sidecar
  with the audit observer on), in turns, the order rotated per repeat. CPU is the sidecar's
  whole process tree (``/proc``); per core = 1e6 / (µs of CPU per request). The batched
  Produce runs on a fresh broker per repeat (Tansu keeps every record in memory).
* **latency**: open-loop round trips (:func:`tests.bench.workloads.open_loop`) through a
  fresh broker and a one-process sidecar, at a low rate (one request in flight) and at half
  the lower of the saturation rates measured for direct and the sidecar, minus direct's.
* **memory**: :func:`tests.bench.workers_bench.memory` (idle RSS/PSS per process, RSS per
  idle connection), and the RSS growth while large Produce requests are held in flight.
* **cluster**: CPU per full Metadata request the sidecar rewrites, at two cluster sizes,
  without and with ``sidecar.authorizer=acls`` (:func:`tests.bench.stack.seed_acls`, 100
  ACLs hiding about half the topics), one request at a time
  (:func:`tests.bench.workloads._full_metadata`).
* **coordinator**: heartbeats (:func:`tests.bench.heartbeat_bench.bench`) and offset commits
  (:func:`tests.bench.group_bench.commits`) per core of the sidecar's CPU.

Then it works the sizing example of docs/sizing.md out of the figures of the same run.
Loopback only; every load loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from proxy.tools.rig.tansu import TansuServer, start_broker
from proxy.tools.rig.zookeeper import ZooKeeperServer, start_zookeeper
from tests.bench import procfs
from tests.bench.kafka import (
    RawConnection,
    create_topic,
    produce_request,
    record_batch,
    request,
    response_body,
)
from tests.bench.pipeline import reap
from tests.bench.report import machine, update_results_md
from tests.bench.runner import hidden_half, rotated
from tests.bench.stack import BENCH_ACLS, SIDECAR_KEYS, seed_acls
from tests.bench.workers_bench import (
    API_VERSIONS,
    BROKER_METADATA,
    PARTITIONS,
    TOPIC,
    Load,
    _check_api_versions,
    _check_broker_metadata,
    _check_produce,
    measure,
    sidecar,
    worker_pids,
)
from tests.bench.workloads import (
    CLUSTER_DIGITS,
    CLUSTER_PREFIX,
    CREATE_BATCH,
    _full_metadata,
    open_loop,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = HERE / "out"
DOC = ROOT / "docs" / "sizing.md"
BEGIN = "<!-- sizing:begin (written by python -m tests.bench.sizing; edit tests/bench/sizing.py, not this) -->"
END = "<!-- sizing:end -->"
PARTS = ("rates", "latency", "memory", "cluster", "coordinator")

FETCH_VERSION = 12
#: Topics the Fetch loads read, each partition filled once: one 1 KiB record (small), and
#: :data:`LARGE_BATCHES` batches of 100 × 1 KiB (large: each answer is ``FETCH_MAX_BYTES``).
FETCH_SMALL, FETCH_LARGE, FETCH_PARTITIONS = "bench-sizing-fetch-1", "bench-sizing-fetch-100", 4
LARGE_BATCHES = 12
#: A consumer's default ``max.partition.fetch.bytes``; Tansu rounds up to whole batches.
FETCH_MAX_BYTES = 1 << 20
#: Records per request of the batched Produce.
BATCH_RECORDS = 100
MIB = 1 << 20

#: The worked example: what its broker takes, and the client connections assumed.
EXAMPLE_REQUESTS, EXAMPLE_IN_MB, EXAMPLE_OUT_MB, EXAMPLE_CONNECTIONS = 30_000, 200.0, 400.0, 1_000
#: Busy share of the sidecar's cores the example sizes for (the rest is headroom).
EXAMPLE_BUSY = 0.7
#: ``queued.max.request.bytes``'s default, and the eighth kept beside it for small frames.
REQUEST_POOL = 256 * MIB * 9 // 8


@dataclass(frozen=True)
class Plan:
    """How long and how much: the full run and ``--quick`` differ only here."""

    seconds: float = 3.0
    warmup: float = 0.5
    repeats: int = 3
    batched_seconds: float = 2.0
    latency_repeats: int = 2
    low_rate: float = 200.0
    low_seconds: float = 4.0
    half_seconds: float = 3.0
    latency_connections: int = 8
    idle_connections: int = 1000
    inflight_connections: int = 8
    inflight_mib: int = 16
    cluster_topics: tuple[int, int] = (100, 1000)
    cluster_partitions: int = 10
    metadata_seconds: float = 2.0
    cluster_repeats: int = 2
    members: int = 2000
    group_size: int = 100
    heartbeat_ms: int = 1000
    heartbeat_seconds: float = 10.0
    commit_members: int = 50
    commit_seconds: float = 5.0


QUICK = Plan(seconds=0.3, warmup=0.1, repeats=1, batched_seconds=0.3, latency_repeats=1, low_seconds=0.5,
             half_seconds=0.5, idle_connections=100, inflight_connections=4, inflight_mib=4,
             cluster_topics=(10, 100), metadata_seconds=0.3, cluster_repeats=1, members=20, group_size=10,
             heartbeat_ms=200, heartbeat_seconds=1.0, commit_members=4, commit_seconds=0.5)


# -- requests -------------------------------------------------------------------------------------


def fetch_request(correlation: int, topic: str, partition: int, max_bytes: int) -> bytes:
    """A Fetch v12 of ``partition`` of ``topic`` from offset 0, as a consumer sends it
    (``MaxWaitMs`` 500: Tansu answers an empty Fetch at once when it is 0, even with data)."""
    return request(1, FETCH_VERSION, correlation, {
        "ReplicaId": -1, "MaxWaitMs": 500, "MinBytes": 1, "MaxBytes": max_bytes, "IsolationLevel": 0,
        "SessionId": 0, "SessionEpoch": -1,
        "Topics": [{"Topic": topic, "Partitions": [{
            "Partition": partition, "CurrentLeaderEpoch": -1, "FetchOffset": 0, "LastFetchedEpoch": -1,
            "LogStartOffset": -1, "PartitionMaxBytes": max_bytes}]}],
        "ForgottenTopicsData": [], "RackId": ""})  # fmt: skip


def _check_fetch(frame: bytes) -> None:
    body = response_body(1, FETCH_VERSION, frame)
    if body.ErrorCode:
        raise RuntimeError(f"Fetch failed: error {body.ErrorCode}")
    for topic in body.Responses:
        for partition in topic.Partitions:
            if partition.ErrorCode or not partition.Records:
                raise RuntimeError(f"Fetch answered error {partition.ErrorCode} with "
                                   f"{len(partition.Records or b'')} record bytes")


METADATA_ONE_TOPIC = {"Topics": [{"TopicId": uuid.UUID(int=0), "Name": TOPIC}], "AllowAutoTopicCreation": False,
                      "IncludeTopicAuthorizedOperations": False}


def _check_metadata(frame: bytes) -> None:
    body = response_body(3, 12, frame)
    if not body.Topics or body.Topics[0].ErrorCode:
        raise RuntimeError("Metadata answered an error")


def _same(make: Callable[[int], bytes], window: int) -> Callable[[], list[bytes]]:
    """Every connection keeps ``make(0..window-1)`` in flight."""
    return lambda: [make(i) for i in range(window)]


def _per_partition(make: Callable[[int, int], bytes], window: int,
                   partitions: int) -> Callable[[], Callable[[int], list[bytes]]]:
    """Connection ``c`` keeps ``make(i, c % partitions)`` in flight (one partition for all
    would measure the broker's lock on it, not the sidecar)."""
    def frames() -> Callable[[int], list[bytes]]:
        rings = [[make(i, p) for i in range(window)] for p in range(partitions)]
        return lambda connection: rings[connection % partitions]

    return frames


def _produce_frame(records: int) -> Callable[[int, int], bytes]:
    batch = record_batch(records)
    return lambda i, p: produce_request(i, TOPIC, batch, 1, partition=p)


@dataclass(frozen=True)
class Rate:
    """One saturation workload of the rates table: what it loads, against which targets,
    and what a request carries (``bytes``: ``"in"`` a request's size, ``"out"`` its answer's)."""

    load: Load
    targets: tuple[str, ...]
    bytes: str = ""
    #: Run on a fresh broker per repeat (it fills the broker's memory).
    fresh: bool = False


RATES = (
    Rate(Load("api-versions", "ApiVersions v3 (answered by the sidecar), 64 connections × 16 in flight",
              _same(lambda i: request(18, 3, i, API_VERSIONS[2]), 16), 64, (), _check_api_versions),
         ("w1", "w2")),
    Rate(Load("broker-metadata", "BrokerMetadata v0 (key 10035, answered by the sidecar), 64 × 16",
              _same(lambda i: request(10035, 0, i, BROKER_METADATA[2]), 16), 64, (), _check_broker_metadata),
         ("w1", "w2")),
    Rate(Load("metadata", "Metadata v12 of one topic (forwarded, broker addresses rewritten), 16 × 16",
              _same(lambda i: request(3, 12, i, METADATA_ONE_TOPIC), 16), 16, (), _check_metadata),
         ("w1", "w2")),
    Rate(Load("produce-1", "Produce v10, 1 record × 1 KiB, acks=1, 16 connections × 16",
              _per_partition(_produce_frame(1), 16, PARTITIONS), 16, (), _check_produce),
         ("direct", "w1", "w2", "audit"), bytes="in"),
    Rate(Load("fetch-1", "Fetch v12 of one 1 KiB record, 16 connections × 16",
              _per_partition(lambda i, p: fetch_request(i, FETCH_SMALL, p, FETCH_MAX_BYTES), 16, FETCH_PARTITIONS),
              16, (), _check_fetch),
         ("direct", "w1", "w2", "audit"), bytes="out"),
    Rate(Load("consume", "Fetch v12 answering 1 MiB (12 batches of 100 × 1 KiB), 8 connections × 2",
              _per_partition(lambda i, p: fetch_request(i, FETCH_LARGE, p, FETCH_MAX_BYTES), 2, FETCH_PARTITIONS),
              8, (), _check_fetch),
         ("w1", "w2"), bytes="out"),
    Rate(Load("produce-100", "Produce v10, batches of 100 × 1 KiB, acks=1, 16 connections × 4",
              _per_partition(_produce_frame(BATCH_RECORDS), 4, PARTITIONS), 16, (), _check_produce),
         ("w1", "w2"), bytes="in", fresh=True),
)


# -- the rig --------------------------------------------------------------------------------------


def _fill(broker: TansuServer) -> dict[str, int]:
    """Create the topics the loads use and fill the Fetch topics; each answer's size."""
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    sizes: dict[str, int] = {}
    for topic, records, batches in ((FETCH_SMALL, 1, 1), (FETCH_LARGE, BATCH_RECORDS, LARGE_BATCHES)):
        create_topic(broker.bootstrap, topic, FETCH_PARTITIONS)
        batch = record_batch(records)
        with RawConnection(broker.bootstrap) as conn:
            for p in range(FETCH_PARTITIONS):
                for i in range(batches):
                    conn.send(produce_request(i, topic, batch, 1, partition=p))
                    _check_produce(conn.read_frame())
            conn.send(fetch_request(1, topic, 0, FETCH_MAX_BYTES))
            answer = conn.read_frame()
            _check_fetch(answer)
            sizes[topic] = len(answer) + 4
    return sizes


def _serving(server: SidecarServer, workers: int) -> list[int]:
    """The PIDs :func:`measure` reads: the tree's root, then each worker (none for one process)."""
    assert server.process.pid is not None
    pids = worker_pids(server) if workers > 1 else {}
    return [server.process.pid, *(pids[i] for i in sorted(pids))]


def _audit_keys(directory: Path) -> dict[str, str]:
    return {"observer.class.names": "audit", "observer.audit.dir": str(directory),
            "observer.audit.overflow": "block"}


@contextlib.contextmanager
def _sidecars(logs: Path, broker: TansuServer, targets: Sequence[str]) -> Iterator[dict[str, SidecarServer]]:
    """The sidecars ``targets`` name (``w1``, ``w2``, ``audit``) in front of ``broker``."""
    with contextlib.ExitStack() as stack:
        servers: dict[str, SidecarServer] = {}
        for target in targets:
            if target in ("w1", "w2"):
                servers[target] = stack.enter_context(sidecar(logs, broker, int(target[1])))
            elif target == "audit":
                servers[target] = stack.enter_context(
                    sidecar(logs, broker, 1, **_audit_keys(logs / f"audit-{uuid.uuid4().hex[:6]}")))
        yield servers


def _run_once(rate: Rate, target: str, broker: TansuServer, servers: dict[str, SidecarServer],
              plan: Plan, seconds: float) -> dict[str, float]:
    assert broker.process.pid is not None
    if target == "direct":
        return measure(broker.bootstrap, rate.load, [], broker.process.pid, 1, seconds, plan.warmup)
    server = servers[target]
    return measure(server.address, rate.load, _serving(server, 2 if target == "w2" else 1),
                   broker.process.pid, 1, seconds, plan.warmup)


def rates(plan: Plan, logs: Path) -> dict[str, Any]:
    """Every :data:`RATES` workload, in turns; the batched Produce on fresh brokers."""
    out: dict[str, Any] = {}
    steady = [rate for rate in RATES if not rate.fresh]
    wanted = sorted({t for rate in steady for t in rate.targets} - {"direct"})
    with start_broker(logs) as broker, _sidecars(logs, broker, wanted) as servers:
        sizes = _fill(broker)
        for rate in steady:
            runs: dict[str, list[dict[str, float]]] = {t: [] for t in rate.targets}
            for repeat in range(plan.repeats):
                for target in rotated(rate.targets, repeat):
                    runs[target].append(_run_once(rate, target, broker, servers, plan, plan.seconds))
            out[rate.load.name] = _entry(rate, runs, sizes)
            print(_progress(rate.load.name, runs), flush=True)
    for rate in (r for r in RATES if r.fresh):
        runs = {t: [] for t in rate.targets}
        for repeat in range(plan.repeats):
            with start_broker(logs) as broker, _sidecars(logs, broker, rate.targets) as servers:
                create_topic(broker.bootstrap, TOPIC, PARTITIONS)
                for target in rotated(rate.targets, repeat):
                    runs[target].append(_run_once(rate, target, broker, servers, plan, plan.batched_seconds))
        out[rate.load.name] = _entry(rate, runs, {})
        print(_progress(rate.load.name, runs), flush=True)
    return out


def _entry(rate: Rate, runs: dict[str, list[dict[str, float]]], sizes: dict[str, int]) -> dict[str, Any]:
    per_request = 0
    if rate.bytes == "in":
        frames = rate.load.frames()
        per_request = len((frames(0) if callable(frames) else frames)[0])
    elif rate.bytes == "out":
        per_request = sizes[FETCH_LARGE if rate.load.name == "consume" else FETCH_SMALL]
    return {"title": rate.load.title, "bytes": rate.bytes, "bytes_per_request": per_request, "runs": runs}


def _median(runs: Sequence[dict[str, float]], key: str) -> float:
    values = [r[key] for r in runs if key in r and math.isfinite(r[key])]
    return statistics.median(values) if values else float("nan")


def _progress(name: str, runs: dict[str, list[dict[str, float]]]) -> str:
    return f"{name:16} " + "  ".join(
        f"{t}={_median(r, 'requests_per_s'):,.0f}/s" + (f" {_median(r, 'us_per_request'):.1f}µs"
                                                         if t != "direct" else "") for t, r in runs.items())


# -- latency --------------------------------------------------------------------------------------


def _open_loop_child(pipe: Any, address: str, frame_for: Callable[[int], bytes], rate: float,
                     seconds: float) -> None:
    try:
        # A connection's first round trip is not counted: through the sidecar it also dials the broker.
        pipe.send(("ok", open_loop(address, frame_for, rate, seconds)[1:]))
    except BaseException as exc:  # reported to the parent, which raises it
        pipe.send(("error", repr(exc)))
    finally:
        pipe.close()


def open_loop_spread(address: str, frames: Callable[[int], Callable[[int], bytes]], rate: float,
                     seconds: float, connections: int) -> list[float]:
    """:func:`open_loop` on ``connections`` connections at once, each in a forked process
    of its own at ``rate / connections`` (connection ``c`` sends ``frames(c)(i)``); every
    round trip, in seconds. A child that has not reported 30 s after its end is killed."""
    context = multiprocessing.get_context("fork")
    children = []
    for c in range(connections):
        ours, theirs = context.Pipe(duplex=False)
        child = context.Process(target=_open_loop_child, args=(theirs, address, frames(c), rate / connections,
                                                               seconds), daemon=True)
        child.start()
        theirs.close()
        children.append((child, ours))
    rtts: list[float] = []
    try:
        deadline = time.monotonic() + seconds + 30
        for _child, pipe in children:
            if not pipe.poll(max(0.1, deadline - time.monotonic())):
                raise TimeoutError("an open-loop client did not report")
            status, value = pipe.recv()
            if status != "ok":
                raise RuntimeError(f"open-loop client failed: {value}")
            rtts.extend(value)
    finally:
        reap(children)
    return rtts


def _percentiles(rtts: list[float]) -> dict[str, float]:
    ordered = sorted(rtts)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "samples": float(len(ordered))}


def latency(plan: Plan, logs: Path, saturation: dict[str, Any]) -> dict[str, Any]:
    """Produce and small Fetch round trips, direct and through a one-process sidecar, at
    a low rate and at half the lower saturation rate of the two (from ``saturation``)."""
    out: dict[str, Any] = {}
    batch = record_batch(1)

    def produce(c: int) -> Callable[[int], bytes]:
        return lambda i: produce_request(i, TOPIC, batch, 1, partition=c % PARTITIONS)

    def fetch(c: int) -> Callable[[int], bytes]:
        return lambda i: fetch_request(i, FETCH_SMALL, c % FETCH_PARTITIONS, FETCH_MAX_BYTES)

    kinds = {"produce-1": produce, "fetch-1": fetch}
    with start_broker(logs) as broker, sidecar(logs, broker, 1) as server:
        _fill(broker)
        addresses = {"direct": broker.bootstrap, "w1": server.address}
        for name, frames in kinds.items():
            runs = saturation.get(name, {}).get("runs", {})
            ceiling = min(_median(runs.get("direct", []), "requests_per_s"), _median(runs.get("w1", []), "requests_per_s"))
            if not math.isfinite(ceiling):
                raise RuntimeError(f"latency of {name} needs its saturation rates (part 'rates')")
            points = {"one in flight": (plan.low_rate, 1, plan.low_seconds),
                      "half of saturation": (ceiling / 2, plan.latency_connections, plan.half_seconds)}
            entry: dict[str, Any] = {}
            for point, (rate, connections, seconds) in points.items():
                samples: dict[str, list[dict[str, float]]] = {"direct": [], "w1": []}
                for repeat in range(plan.latency_repeats):
                    for target in rotated(list(samples), repeat):
                        samples[target].append(_percentiles(
                            open_loop_spread(addresses[target], frames, rate, seconds, connections)))
                entry[point] = {"rate": rate, "connections": connections, "seconds": seconds, "runs": samples}
                print(f"latency {name:10} {point:20} {rate:,.0f}/s: " + "  ".join(
                    f"{t} p50 {_median(s, 'p50_ms'):.3f} p99 {_median(s, 'p99_ms'):.3f} ms"
                    for t, s in samples.items()), flush=True)
            out[name] = entry
    return out


# -- memory ---------------------------------------------------------------------------------------


def in_flight(plan: Plan, logs: Path) -> dict[str, Any]:
    """RSS growth of a fresh one-process sidecar while ``inflight_connections`` clients each
    hold one Produce request of ``inflight_mib`` MiB in flight: sent whole but its last KiB
    (the sidecar reads a frame into memory as it arrives and holds it until it is whole)."""
    records = plan.inflight_mib * MIB // 1024 - 1
    frame = produce_request(1, TOPIC, record_batch(records), 1)
    part = memoryview(frame)[: len(frame) - 1024]
    with start_broker(logs) as broker, sidecar(logs, broker, 1) as server:
        root = server.process.pid
        assert root is not None
        time.sleep(1.0)
        before = procfs.tree_rss_bytes(root)
        held: list[RawConnection] = []
        try:
            for _ in range(plan.inflight_connections):
                conn = RawConnection(server.address)
                held.append(conn)
                conn.send(part)
            rss, settled = before, time.monotonic() + 10
            while time.monotonic() < settled:  # until the sidecar has read what was sent
                time.sleep(0.3)
                now = procfs.tree_rss_bytes(root)
                if now - rss < MIB // 2 and now - before > len(part) * len(held) // 2:
                    rss = now
                    break
                rss = now
        finally:
            for conn in held:
                conn.close()
    held_mib = len(part) * plan.inflight_connections / MIB
    return {"connections": plan.inflight_connections, "frame_mib": len(frame) / MIB, "held_mib": held_mib,
            "rss_growth_mib": (rss - before) / MIB, "growth_per_mib": (rss - before) / MIB / held_mib}


def memory_part(plan: Plan, logs: Path) -> dict[str, Any]:
    """Idle memory per process and per idle connection (workers_bench.memory), and in flight."""
    from tests.bench.workers_bench import memory

    idle = memory(argparse.Namespace(connections=plan.idle_connections), logs)
    print(f"memory: w1 idle PSS {idle['w1']['idle_pss_total'] / MIB:.1f} MiB, "
          f"{idle['w1']['kb_per_connection']:.1f} kB/connection; w2 idle PSS {idle['w2']['idle_pss_total'] / MIB:.1f} MiB",
          flush=True)
    held = in_flight(plan, logs)
    print(f"memory in flight: {held['rss_growth_mib']:.1f} MiB of RSS for {held['held_mib']:.1f} MiB held", flush=True)
    return {"idle": idle, "in_flight": held}


# -- cluster size ---------------------------------------------------------------------------------


def _create_cluster(address: str, first: int, last: int, partitions: int) -> None:
    """Topics ``first`` .. ``last - 1`` of the cluster-size names, ``partitions`` each."""
    names = [f"{CLUSTER_PREFIX}-{t:0{CLUSTER_DIGITS}d}" for t in range(first, last)]
    with RawConnection(address) as conn:
        for at in range(0, len(names), CREATE_BATCH):
            body = conn.call(19, 4, {
                "Topics": [{"Name": n, "NumPartitions": partitions, "ReplicationFactor": 1, "Assignments": [],
                            "Configs": []} for n in names[at : at + CREATE_BATCH]],
                "TimeoutMs": 30000, "ValidateOnly": False})
            failed = [t.ErrorCode for t in body.Topics if t.ErrorCode not in (0, 36)]
            if failed:
                raise RuntimeError(f"CreateTopics: errors {failed[:3]}")


def _metadata_run(address: str, pid: int | None, seconds: float) -> dict[str, float]:
    """Full Metadata v12 requests one at a time for ``seconds``: round trips, and the CPU per
    request of ``pid``'s tree (``None``: not read)."""
    _full_metadata(address, 3, time.perf_counter() + 30)
    cpu0 = procfs.tree_cpu_seconds(pid) if pid else 0.0
    last: list[bytes] = []
    rtts = _full_metadata(address, 100_000, time.perf_counter() + seconds, last)
    cpu = (procfs.tree_cpu_seconds(pid) - cpu0) if pid else float("nan")
    out = _percentiles(rtts)
    out["us_per_request"] = cpu / len(rtts) * 1e6
    out["topics_seen"] = float(sum(1 for t in response_body(3, 12, last[0]).Topics
                                   if (t.Name or "").startswith(CLUSTER_PREFIX)))
    out["answer_bytes"] = float(len(last[0]) + 4)
    return out


def cluster(plan: Plan, logs: Path, zookeeper: ZooKeeperServer) -> dict[str, Any]:
    """CPU per full Metadata the sidecar rewrites, at two sizes, ACLs off and on."""
    small, large = plan.cluster_topics
    hidden = (*hidden_half(small), *hidden_half(large))
    kazoo = logging.getLogger("kazoo")
    level = kazoo.level
    # seed_acls stops its client while the store's own watch still reads the ACLs it just
    # wrote: kazoo logs the ConnectionLoss of that read (harmless) with a traceback.
    kazoo.setLevel(logging.CRITICAL)
    try:
        seed_acls(zookeeper.connect, hidden=hidden)
    finally:
        kazoo.setLevel(level)
    out: dict[str, Any] = {"acls": BENCH_ACLS, "partitions_per_topic": plan.cluster_partitions}
    with start_broker(logs) as broker, sidecar(logs, broker, 1) as plain, \
            sidecar(logs, broker, 1, **{"sidecar.authorizer": "acls", "zookeeper.connect": zookeeper.connect}) as acls:
        targets = {"direct": (broker.bootstrap, None), "w1": (plain.address, plain.process.pid),
                   "acls": (acls.address, acls.process.pid)}
        made = 0
        for topics in (small, large):
            _create_cluster(broker.bootstrap, made, topics, plan.cluster_partitions)
            made = topics
            runs: dict[str, list[dict[str, float]]] = {t: [] for t in targets}
            for repeat in range(plan.cluster_repeats):
                for target in rotated(list(targets), repeat):
                    address, pid = targets[target]
                    runs[target].append(_metadata_run(address, pid, plan.metadata_seconds))
            out[str(topics)] = {"topics": topics, "partitions": topics * plan.cluster_partitions, "runs": runs}
            print(f"cluster {topics * plan.cluster_partitions:,} partitions: " + "  ".join(
                f"{t} p50 {_median(r, 'p50_ms'):.2f} ms {_median(r, 'us_per_request'):,.0f}µs/req"
                for t, r in runs.items()), flush=True)
    return out


# -- the embedded coordinator ---------------------------------------------------------------------


def _coordinator_keys(zookeeper: ZooKeeperServer, workers: int) -> dict[str, str]:
    return {**SIDECAR_KEYS, "zookeeper.connect": f"{zookeeper.connect}/sizing-{uuid.uuid4().hex[:8]}",
            "sidecar.coordinator": "embedded", "group.initial.rebalance.delay.ms": "500",
            "sidecar.coordinator.metadata.refresh.ms": "10000", "sidecar.log.level": "warning",
            "sidecar.workers": str(workers)}


def coordinator(plan: Plan, logs: Path, zookeeper: ZooKeeperServer) -> dict[str, Any]:
    """Offset commits (one-process sidecar), then heartbeats (``workers=1`` and ``2``)."""
    import trio

    from tests.bench import group_bench, heartbeat_bench

    out: dict[str, Any] = {}
    commit_topic, beat_topic = f"bench-sizing-commits-{uuid.uuid4().hex[:6]}", f"bench-sizing-hb-{uuid.uuid4().hex[:6]}"
    commit_partitions, beat_partitions = 2 * plan.commit_members, 2 * plan.group_size
    beats = argparse.Namespace(members=plan.members, group_size=plan.group_size, interval_ms=plan.heartbeat_ms,
                               seconds=plan.heartbeat_seconds, connect_concurrency=200)
    assert zookeeper.process.pid is not None
    with start_broker(logs) as broker:
        create_topic(broker.bootstrap, commit_topic, commit_partitions)
        create_topic(broker.bootstrap, beat_topic, beat_partitions)
        for workers in (1, 2):
            with start_sidecar(logs, broker.bootstrap, name=f"ksidecar-coordinator-w{workers}",
                               keys=_coordinator_keys(zookeeper, workers)) as server:
                assert server.process.pid is not None
                if workers == 1:
                    pids = {"sidecar": server.process.pid, "zookeeper": zookeeper.process.pid, "load": os.getpid()}

                    async def commit_phase(server: SidecarServer = server, pids: dict[str, int] = pids) -> dict[str, Any]:
                        _, _, members = await group_bench.classic_stable(server.port, commit_topic, commit_partitions,
                                                                         plan.commit_members)
                        try:
                            return await group_bench.commits(server, members, plan.commit_seconds, pids)
                        finally:
                            for member in members:
                                await member.leave()

                    out["commits"] = trio.run(commit_phase)
                    print(f"commits: {out['commits']['commits_per_s']:,.0f}/s at "
                          f"{out['commits']['cpu']['sidecar']:.2f} sidecar cores", flush=True)
                out[f"heartbeats_w{workers}"] = trio.run(heartbeat_bench.bench, server.port, server.process.pid,
                                                         server.metrics_url, beat_topic, beat_partitions, beats)
                r = out[f"heartbeats_w{workers}"]
                print(f"heartbeats w{workers}: {r['heartbeats_per_s']:,.0f}/s at {r['sidecar_cpu_share']:.2f} "
                      f"sidecar cores, p99 {r['p99_ms']:.2f} ms", flush=True)
    out.update(members=plan.members, group_size=plan.group_size, heartbeat_ms=plan.heartbeat_ms,
               commit_members=plan.commit_members)
    return out


# -- the document ---------------------------------------------------------------------------------


def _num(value: float, digits: int = 0) -> str:
    if not math.isfinite(value):
        return "–"
    return f"{value:,.{digits}f}"


def _per_core(us: float) -> float:
    return 1e6 / us if us > 0 else float("nan")


def _rate_figures(entry: dict[str, Any], target: str) -> dict[str, float]:
    runs = entry["runs"][target]
    us = _median(runs, "us_per_request")
    out = {"requests_per_s": _median(runs, "requests_per_s"), "us_per_request": us,
           "sidecar_cores": _median(runs, "sidecar_cores"), "broker_cores": _median(runs, "broker_cores"),
           "generator_cores": _median(runs, "generator_cores"), "per_core": _per_core(us)}
    workers = sorted(k for k in runs[0] if k.startswith("worker") and k.endswith("_cores")) if runs else []
    if workers:
        out["supervisor_cores"] = statistics.median(
            r["sidecar_cores"] - sum(r[k] for k in workers) for r in runs)
        out["worker_cores"] = statistics.median(sum(r[k] for k in workers) for r in runs)
    if entry["bytes"]:
        out["mb_per_s"] = out["requests_per_s"] * entry["bytes_per_request"] / 1e6
        out["mb_per_core"] = entry["bytes_per_request"] / us if us > 0 else float("nan")
    return out


#: What each part of the run measures with (the "produced by" columns name the part and the
#: workload: the code is :func:`rates`, :func:`latency` ... in this module).
PRODUCED = {
    "rates": "`tests.bench.workers_bench.measure` (raw pipelined clients: `tests.bench.pipeline.run_spread`)",
    "latency": "`tests.bench.workloads.open_loop`, on several connections at once (`open_loop_spread`)",
    "memory": "`tests.bench.workers_bench.memory`",
    "in-flight": "`in_flight` (half-sent large Produce requests)",
    "cluster": "`tests.bench.workloads._full_metadata`; ACLs by `tests.bench.stack.seed_acls`",
    "commits": "`tests.bench.group_bench.commits`",
    "heartbeats": "`tests.bench.heartbeat_bench.bench`",
}


def _by(part: str, detail: str = "") -> str:
    return f"`{part}`" + (f" {detail}" if detail else "")


def _bottleneck(f: dict[str, float], target: str) -> str:
    if target == "w1" and f["sidecar_cores"] >= 0.9:
        return "the sidecar (1 core)"
    if target == "w2" and f["sidecar_cores"] >= 1.7:
        return "the sidecar (2 cores)"
    if f["broker_cores"] >= 1.0:
        return f"the broker ({f['broker_cores']:.2f} cores)"
    return "the machine (cores shared)"


def rates_markdown(results: dict[str, Any], plan: Plan) -> list[str]:
    lines = ["### Requests per second per core", "",
             "| request | sidecar.workers | requests/s | sidecar cores used | µs CPU per request | "
             "**requests/s per core** | limited by | produced by |",
             "|---|---|---:|---:|---:|---:|---|---|"]
    names = ("api-versions", "broker-metadata", "metadata", "produce-1", "fetch-1")
    for name in names:
        entry = results.get(name)
        if entry is None:
            continue
        first = True
        for target in ("direct", "w1", "w2"):
            if target not in entry["runs"]:
                continue
            f = _rate_figures(entry, target)
            title = entry["title"] if first else ""
            first = False
            if target == "direct":
                lines.append(f"| {title} | the broker alone | {_num(f['requests_per_s'])} | – | – | – | "
                             f"the broker ({f['broker_cores']:.2f} cores) | {_by('rates', name)} |")
                continue
            extra = (f"; supervisor {max(0.0, f['supervisor_cores']):.2f} of them" if "supervisor_cores" in f else "")
            lines.append(f"| {title} | {target[1]} | {_num(f['requests_per_s'])} | {f['sidecar_cores']:.2f}{extra} | "
                         f"{f['us_per_request']:.1f} | **{_num(f['per_core'])}** | {_bottleneck(f, target)} | "
                         f"{_by('rates', name)} |")
    lines += ["", "### Bytes per second per core", "",
              "| traffic | sidecar.workers | requests/s | MB/s through the sidecar | sidecar cores used | "
              "µs CPU per request | **MB/s per core** | limited by | produced by |",
              "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for name, what in (("produce-100", "in (Produce, 100 × 1 KiB per request)"),
                       ("consume", "out (Fetch, 1 MiB per answer)")):
        entry = results.get(name)
        if entry is None:
            continue
        for i, target in enumerate(t for t in ("w1", "w2") if t in entry["runs"]):
            f = _rate_figures(entry, target)
            lines.append(f"| {what if i == 0 else ''} | {target[1]} | {_num(f['requests_per_s'])} | "
                         f"{_num(f['mb_per_s'])} | {f['sidecar_cores']:.2f} | {f['us_per_request']:.0f} | "
                         f"**{_num(f['mb_per_core'])}** | {_bottleneck(f, target)} | {_by('rates', name)} |")
    lines += ["", f"Each figure is the median of {plan.repeats} run{'s' if plan.repeats > 1 else ''} of "
              f"{plan.seconds:g} s "
              f"({plan.batched_seconds:g} s for the batched Produce, each repeat on a fresh broker) after "
              f"{plan.warmup:g} s of warm-up; targets in turns, the order rotated per repeat. "
              "MB = 10⁶ bytes: request bytes in (Produce), answer bytes out (Fetch).", ""]
    audit = [(n, results[n]) for n in ("produce-1", "fetch-1") if n in results and "audit" in results[n]["runs"]]
    if audit:
        lines += ["### The audit observer", "",
                  "| request | µs CPU per request, audit off | audit on | **added by the audit** | "
                  "requests/s on / off | produced by |", "|---|---:|---:|---:|---:|---|"]
        for name, entry in audit:
            off, on = _rate_figures(entry, "w1"), _rate_figures(entry, "audit")
            lines.append(f"| {entry['title']} | {off['us_per_request']:.1f} | {on['us_per_request']:.1f} | "
                         f"**{on['us_per_request'] - off['us_per_request']:+.1f} µs** | "
                         f"{on['requests_per_s'] / off['requests_per_s']:.2f} | {_by('rates', name)} |")
        lines += ["", "Audit on: a one-process sidecar with `observer.class.names=audit`, "
                  "`observer.audit.overflow=block` (every row written, the cost paid in full), measured in the "
                  "same turns as the one-process sidecar without it.", ""]
    return lines


def latency_markdown(results: dict[str, Any]) -> list[str]:
    lines = ["### Latency added", "",
             "| request | load | direct p50 / p99 | through the sidecar p50 / p99 | **added p50 / p99** | "
             "produced by |", "|---|---|---:|---:|---:|---|"]
    titles = {"produce-1": "Produce, 1 × 1 KiB, acks=1", "fetch-1": "Fetch of one 1 KiB record"}
    for name, entry in results.items():
        for i, (point, p) in enumerate(entry.items()):
            d, s = p["runs"]["direct"], p["runs"]["w1"]
            dp50, dp99, sp50, sp99 = (_median(d, "p50_ms"), _median(d, "p99_ms"), _median(s, "p50_ms"),
                                      _median(s, "p99_ms"))
            load = (f"{point}: {p['rate']:,.0f}/s on {p['connections']} connection"
                    + ("s" if p["connections"] > 1 else ""))
            lines.append(f"| {titles[name] if i == 0 else ''} | {load} | {dp50:.3f} / {dp99:.3f} ms | "
                         f"{sp50:.3f} / {sp99:.3f} ms | **{sp50 - dp50:+.3f} / {sp99 - dp99:+.3f} ms** | "
                         f"{_by('latency', name)} |")
    lines += ["", "Open loop (a late answer does not delay the next request, so queueing shows in the tail); "
              "the sidecar has `sidecar.workers=1`, in front of a fresh broker; \"half of saturation\" is half "
              "the lower of the saturation rates measured above for the broker alone and the one-process "
              "sidecar, one client process per connection (spread over several connections: the broker "
              "serves one connection's requests one at a time, and on one or two connections its queue per "
              "connection would be measured). Medians of the runs' percentiles; direct and the "
              "sidecar in turns; a connection's first round trip is not counted. The clients, the broker and "
              "the sidecar share the machine's cores: at half load the tail includes waiting for one.", ""]
    return lines


def memory_markdown(results: dict[str, Any]) -> list[str]:
    idle, held = results["idle"], results["in_flight"]
    w1, w2 = idle["w1"], idle["w2"]
    workers = [p for p in w2["idle"] if p["role"].startswith("worker")]
    rest = [p for p in w2["idle"] if not p["role"].startswith("worker")]
    lines = ["### Memory", "", "| what | RSS | PSS | produced by |", "|---|---:|---:|---|",
             f"| one-process sidecar (`sidecar.workers=1`), idle | {w1['idle_rss_total'] / MIB:.1f} MiB | "
             f"{w1['idle_pss_total'] / MIB:.1f} MiB | {_by('memory')} |",
             f"| `sidecar.workers=2`, idle, whole tree | {w2['idle_rss_total'] / MIB:.1f} MiB | "
             f"{w2['idle_pss_total'] / MIB:.1f} MiB | {_by('memory')} |",
             f"| of which supervisor and fork server | {sum(p['rss'] for p in rest) / MIB:.1f} MiB | "
             f"{sum(p['pss'] for p in rest) / MIB:.1f} MiB | {_by('memory')} |"]
    if workers:
        lines.append(f"| **per worker**, idle (mean of {len(workers)}) | "
                     f"{statistics.fmean(p['rss'] for p in workers) / MIB:.1f} MiB | "
                     f"**{statistics.fmean(p['pss'] for p in workers) / MIB:.1f} MiB** | {_by('memory')} |")
    by_connections = _by("memory", f"{w1['connections']:,} connections")
    by_held = _by("in-flight", f"{held['rss_growth_mib']:.1f} MiB of RSS for {held['held_mib']:.1f} MiB held")
    lines += [f"| **per idle connection** (after one ApiVersions), `workers=1` / `2` | "
              f"**{w1['kb_per_connection']:.1f} / {w2['kb_per_connection']:.1f} kB** | – | "
              f"{by_connections} |",
              f"| **per MiB of requests in flight** | **{held['growth_per_mib']:.2f} MiB** | – | "
              f"{by_held} |", "",
              f"In flight: {held['connections']} clients each send a {held['frame_mib']:.0f} MiB Produce request "
              "but its last KiB, to a fresh one-process sidecar; the sidecar reads each frame into memory as "
              "it arrives and holds it until it is whole (and forwarded), so the growth of its RSS over the "
              "bytes held is what a MiB of requests in flight costs. PSS divides pages shared between "
              "processes (the fork server's with its workers) among them: the sum of PSS is what a "
              "container's memory accounting charges.", ""]
    return lines


def cluster_markdown(results: dict[str, Any]) -> list[str]:
    lines = ["### Metadata against cluster size", "",
             "| partitions (topics × partitions) | ACLs | answer | topics seen | **CPU per Metadata** | "
             "Metadata/s per core | p50 direct / through the sidecar (added) | produced by |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for key, entry in results.items():
        if not isinstance(entry, dict):
            continue
        direct = _median(entry["runs"]["direct"], "p50_ms")
        for target, acl in (("w1", "none"), ("acls", f"{results['acls']}, about half the topics refused")):
            runs = entry["runs"][target]
            us = _median(runs, "us_per_request")
            lines.append(f"| {entry['partitions']:,} ({int(key):,} × {results['partitions_per_topic']}) | {acl} | "
                         f"{_median(runs, 'answer_bytes') / 1e3:,.0f} kB | {_median(runs, 'topics_seen'):,.0f} | "
                         f"**{us / 1000:.2f} ms** | {_num(_per_core(us))} | {direct:.2f} / "
                         f"{_median(runs, 'p50_ms'):.2f} ms ({_median(runs, 'p50_ms') - direct:+.2f}) | "
                         f"{_by('cluster')} |")
    lines += ["", "Full Metadata v12 (every topic), one request at a time through a one-process sidecar; CPU "
              "of the sidecar's process over the run divided by the requests. The ACLs are "
              "`sidecar.authorizer=acls` with 100 ACLs in ZooKeeper (`stack.seed_acls`): the clients may "
              "do anything but see the topics of a few prefixes, so the sidecar reads every topic of the "
              "answer and drops the refused ones.", ""]
    return lines


def coordinator_markdown(results: dict[str, Any]) -> list[str]:
    lines = ["### The embedded coordinator", "",
             "| what | sidecar.workers | rate | sidecar cores used | **per core** | latency p50 / p99 | produced by |",
             "|---|---|---:|---:|---:|---:|---|"]
    for workers in (1, 2):
        r = results.get(f"heartbeats_w{workers}")
        if r is None:
            continue
        per_core = r["heartbeats_per_s"] / r["sidecar_cpu_share"] if r["sidecar_cpu_share"] else float("nan")
        lines.append(f"| heartbeats, {results['members']:,} classic members in groups of {results['group_size']} "
                     f"every {results['heartbeat_ms']} ms | {workers} | {_num(r['heartbeats_per_s'])}/s | "
                     f"{r['sidecar_cpu_share']:.2f} | **{_num(per_core)} heartbeats/s = {_num(per_core * 3)} "
                     f"members at Kafka's 3 s interval** | {r['p50_ms']:.2f} / {r['p99_ms']:.2f} ms | "
                     f"{_by('heartbeats')} |")
    c = results.get("commits")
    if c is not None:
        share = c["cpu"]["sidecar"]
        per_core = c["commits_per_s"] / share if share else float("nan")
        lines.append(f"| OffsetCommit, {results['commit_members']} members at once, {c['partitions_per_commit']} "
                     f"partitions each, answered after ZooKeeper has them | 1 | {_num(c['commits_per_s'])}/s | "
                     f"{share:.2f} | **{_num(per_core)} commits/s** | {c['p50_ms']:.2f} / {c['p99_ms']:.2f} ms | "
                     f"{_by('commits')} |")
    lines += ["", "The coordinator lives in the supervisor: with `workers=2` each group request crosses from "
              "a worker to it and back. Commits are limited by ZooKeeper's fsynced writes, not by the "
              "sidecar's CPU: per core is what the sidecar spent per commit, not a ceiling it reached.", ""]
    return lines


def example(results: dict[str, Any]) -> dict[str, Any]:
    """The worked example's arithmetic from this run's figures (also returned as numbers)."""
    rates_ = results["rates"]
    small = {(n, t): _rate_figures(rates_[n], t)["us_per_request"] for n in ("produce-1", "fetch-1")
             for t in ("w1", "w2")}
    (req_name, req_target), us = max(small.items(), key=lambda kv: kv[1])
    mb_in = {t: _rate_figures(rates_["produce-100"], t)["mb_per_core"] for t in ("w1", "w2")}
    mb_out = {t: _rate_figures(rates_["consume"], t)["mb_per_core"] for t in ("w1", "w2")}
    in_target, out_target = min(mb_in, key=lambda t: mb_in[t]), min(mb_out, key=lambda t: mb_out[t])
    cores_req = EXAMPLE_REQUESTS * us / 1e6
    cores_in, cores_out = EXAMPLE_IN_MB / mb_in[in_target], EXAMPLE_OUT_MB / mb_out[out_target]
    busy = cores_req + cores_in + cores_out
    workers = max(1, math.ceil(busy / EXAMPLE_BUSY))
    idle = results["memory"]["idle"]
    held = results["memory"]["in_flight"]
    w2_procs = idle["w2"]["idle"]
    worker_pss = statistics.fmean(p["pss"] for p in w2_procs if p["role"].startswith("worker")) / MIB
    base_pss = sum(p["pss"] for p in w2_procs if not p["role"].startswith("worker")) / MIB
    if workers == 1:
        idle_mib, per_conn = idle["w1"]["idle_pss_total"] / MIB, idle["w1"]["kb_per_connection"]
    else:
        idle_mib, per_conn = base_pss + workers * worker_pss, idle["w2"]["kb_per_connection"]
    conn_mib = EXAMPLE_CONNECTIONS * per_conn * 1e3 / MIB
    pool_mib = REQUEST_POOL / MIB * held["growth_per_mib"]
    total = idle_mib + conn_mib + pool_mib
    limit = math.ceil(total * 1.25 / 64) * 64
    return {"req": (req_name, req_target, us), "mb_in": (in_target, mb_in[in_target]),
            "mb_out": (out_target, mb_out[out_target]), "cores_req": cores_req, "cores_in": cores_in,
            "cores_out": cores_out, "busy": busy, "workers": workers, "idle_mib": idle_mib, "base_pss": base_pss,
            "worker_pss": worker_pss, "per_conn_kb": per_conn, "conn_mib": conn_mib,
            "growth_per_mib": held["growth_per_mib"], "pool_mib": pool_mib, "total_mib": total, "limit_mib": limit}


def example_markdown(e: dict[str, Any]) -> list[str]:
    req_name, req_target, us = e["req"]
    titles = {"produce-1": "a one-record Produce", "fetch-1": "a one-record Fetch"}
    w = e["workers"]
    idle_line = (f"one process idle: {e['idle_mib']:.0f} MiB" if w == 1 else
                 f"supervisor and fork server {e['base_pss']:.0f} MiB + {w} workers × {e['worker_pss']:.0f} MiB "
                 f"= {e['idle_mib']:.0f} MiB")
    return [
        "### Worked example, from the figures above", "",
        f"A broker takes {EXAMPLE_REQUESTS:,} requests/s, {EXAMPLE_IN_MB:.0f} MB/s in and "
        f"{EXAMPLE_OUT_MB:.0f} MB/s out; its clients hold {EXAMPLE_CONNECTIONS:,} connections.", "",
        "CPU, each part at the dearer of its `workers=1` and `workers=2` figures:", "",
        f"* requests: {EXAMPLE_REQUESTS:,}/s × {us:.1f} µs ({titles[req_name]}, `workers={req_target[1]}`, the "
        f"dearest small forwarded request above) = **{e['cores_req']:.2f} cores**",
        f"* bytes in: {EXAMPLE_IN_MB:.0f} MB/s ÷ {e['mb_in'][1]:,.0f} MB/s per core (batched Produce, "
        f"`workers={e['mb_in'][0][1]}`) = **{e['cores_in']:.2f} cores**",
        f"* bytes out: {EXAMPLE_OUT_MB:.0f} MB/s ÷ {e['mb_out'][1]:,.0f} MB/s per core (1 MiB Fetch answers, "
        f"`workers={e['mb_out'][0][1]}`) = **{e['cores_out']:.2f} cores**",
        f"* busy: {e['cores_req']:.2f} + {e['cores_in']:.2f} + {e['cores_out']:.2f} = {e['busy']:.2f} cores "
        "(the requests that carry the bytes are counted twice, once as requests: this errs high); kept at "
        f"{EXAMPLE_BUSY:.0%} busy for headroom: {e['busy']:.2f} ÷ {EXAMPLE_BUSY} = {e['busy'] / EXAMPLE_BUSY:.2f} "
        f"→ **{w} core{'s' if w > 1 else ''}**", "",
        "Memory:", "",
        f"* idle: {idle_line} (PSS)",
        f"* connections: {EXAMPLE_CONNECTIONS:,} × {e['per_conn_kb']:.1f} kB = {e['conn_mib']:.0f} MiB",
        f"* requests in flight, at most: `queued.max.request.bytes` (256 MiB) and the eighth kept for small "
        f"frames = 288 MiB × {e['growth_per_mib']:.2f} = {e['pool_mib']:.0f} MiB",
        f"* sum {e['total_mib']:.0f} MiB, + 25% → **{e['limit_mib']:,} MiB**", "",
        f"So: **`sidecar.workers=0` with `limits.cpu: \"{w}\"`** (or `sidecar.workers={w}`) and "
        f"**`limits.memory: {e['limit_mib']}Mi`**" + (" — one process: no CPU limit is needed either"
                                                      if w == 1 else "") + ".", ""]


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def document(results: dict[str, Any], plan: Plan, quick: bool) -> str:
    """The generated block (markers excluded)."""
    m = results["machine"]
    others = [r.get("others_cores", 0.0) for e in results.get("rates", {}).values() if isinstance(e, dict)
              for runs in e["runs"].values() for r in runs]
    lines: list[str] = []
    if quick:
        lines += ["> **Smoke run** (`--quick`: runs of a fraction of a second, one repeat): this block only "
                  "shows that the command works. Its figures are not for sizing; regenerate them with the "
                  "full command on a quiet machine.", ""]
    lines += [f"Measured {results['when']} on {m['nproc']} × {m['cpu']}, {m['memory_gb']} GB of memory, Linux "
              f"{m['kernel']}; Python {m['python']}, {m['tansu']} (the broker); commit {m['commit']}. "
              f"The run took {_duration(results['seconds'])}"
              + (f"; the rest of the machine (other processes, and the kernel's loopback networking, which "
                 f"no process is charged for) was busy {statistics.median(others):.2f} cores during the rate "
                 f"runs (median; max {max(others):.2f})" if others else "") + ".", "",
              "```", results["command"], "```", "",
              "The \"produced by\" columns name the part of `tests/bench/sizing.py` that measured the row "
              "(and its workload): " + "; ".join(f"`{k}`: {v}" for k, v in PRODUCED.items()) + ".", ""]
    sections: list[tuple[str, Callable[[Any], list[str]]]] = [
        ("rates", lambda r: rates_markdown(r, plan)), ("latency", latency_markdown), ("memory", memory_markdown),
        ("cluster", cluster_markdown), ("coordinator", coordinator_markdown)]
    for part, render in sections:
        if part in results:
            lines += render(results[part])
        elif part in results.get("failed", {}):
            lines += [f"### {part}: not measured", "", f"This part failed: `{results['failed'][part]}`.", ""]
    try:
        e = example(results)
    except (KeyError, ValueError, ZeroDivisionError) as exc:
        lines += ["### Worked example", "", f"Not computed: a figure it needs is missing ({exc!r}).", ""]
    else:
        results["example"] = e
        lines += example_markdown(e)
    return "\n".join(lines).rstrip() + "\n"


def write_doc(path: Path, section: str) -> None:
    """Replace the block between the markers of ``path`` (created with a title if missing)."""
    if not path.exists():
        path.write_text("# Sizing a sidecar\n")
    update_results_md(path, section, begin=BEGIN, end=END)


# -- main -----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Measure, then write the block of ``--out`` (when every part ran) and the JSON."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench.sizing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: short runs, one repeat, small sizes")
    parser.add_argument("--out", type=Path, default=DOC, help="the document whose block is rewritten")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                        help="measure these parts only (then the document is left alone)")
    args = parser.parse_args(argv)
    if "latency" in args.parts and "rates" not in args.parts:
        parser.error("--parts latency needs rates too (its load is half the saturation rates)")
    plan = QUICK if args.quick else Plan()
    given = sys.argv[1:] if argv is None else argv
    results: dict[str, Any] = {"command": " ".join(["python -m tests.bench.sizing", *given]),
                               "when": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": machine(),
                               "plan": asdict(plan), "quick": args.quick, "failed": {}}
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ksidecar-sizing-") as tmp:
        logs = Path(tmp)

        def part(name: str, run: Callable[[], dict[str, Any]]) -> None:
            if name not in args.parts:
                return
            print(f"== {name}", flush=True)
            try:
                results[name] = run()
            except Exception as exc:  # the other parts still run; the block says what failed
                traceback.print_exc()
                results["failed"][name] = repr(exc)

        part("rates", lambda: rates(plan, logs))
        part("latency", lambda: latency(plan, logs, results.get("rates", {})))
        part("memory", lambda: memory_part(plan, logs))
        if {"cluster", "coordinator"} & set(args.parts):
            with start_zookeeper(logs) as zookeeper:
                part("cluster", lambda: cluster(plan, logs, zookeeper))
                part("coordinator", lambda: coordinator(plan, logs, zookeeper))
    results["seconds"] = time.perf_counter() - began
    results["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    section = document(results, plan, args.quick)
    OUT.mkdir(exist_ok=True)
    (OUT / "sizing.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    print()
    print(section)
    if set(args.parts) == set(PARTS):
        write_doc(args.out, section)
        print(f"wrote {args.out} ({_duration(results['seconds'])})")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
