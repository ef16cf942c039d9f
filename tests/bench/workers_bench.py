"""Issue 32: a sidecar with ``sidecar.workers=2`` against one with ``1``, side by side.

    python -m tests.bench.workers_bench saturation [--seconds 3] [--repeats 3] [--generators 1]
    python -m tests.bench.workers_bench memory [--connections 1000]
    python -m tests.bench.workers_bench storm [--limit 20] [--storm-seconds 23]
    python -m tests.bench.workers_bench profile [--seconds 8]

* **saturation**: the sidecar is the bottleneck. Raw pipelined clients
  (:func:`tests.bench.pipeline.run_spread`: pre-encoded frames, epoll, size prefixes only)
  keep many requests in flight over many connections: ApiVersions and the sidecar-only
  BrokerMetadata (64 connections × 16), one-record Produce acks=1 (64 × 4 and 16 × 16). A
  Tansu broker with two sidecars in front of it, ``workers=1`` and ``workers=2``, and the
  broker itself (``direct``: the same generator against the broker, so its ceiling shows),
  measured in turns, the order rotated per repeat. Per run: requests/s; the CPU per request
  of the sidecar's whole process tree (supervisor, fork server, workers) and each worker's
  share of a core; the broker's, the generator's and the rest of the machine's cores.
* **memory**: a fresh sidecar of each kind: each process's RSS and PSS idle, then
  ``--connections`` idle connections (each after one ApiVersions) and the tree's RSS growth
  per connection.
* **storm**: KIP-612 against a two-worker sidecar: ``max.connection.creation.rate=LIMIT``
  under 5 × LIMIT attempts a second from three loopback addresses (as
  :mod:`tests.bench.quota_bench`), acceptance counted at the clients (the time each
  connection's ApiVersions answer arrived); then a per-IP quota set over the wire
  (AlterClientQuotas through the sidecar, which one of its workers forwards to the
  supervisor) and connections from that IP right after its answer.
* **profile**: py-spy on one worker of the two-worker sidecar under one-record Produce at
  16 × 16 (collapsed stacks and a summary under ``tests/bench/out/workers-profile/``).

Loopback only; every load loop is bounded in count and time. Prints Markdown for
``tests/bench/RESULTS.md`` and writes JSON under ``tests/bench/out/``.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.tools.rig.ports import LOOPBACK
from proxy.tools.rig.process import ManagedProcess, Service, start_on_port
from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from proxy.tools.rig.tansu import TansuServer, start_broker
from tests.bench import procfs
from tests.bench.kafka import (
    RawConnection,
    create_topic,
    produce_request,
    record_batch,
    request,
    response_body,
)
from tests.bench.pipeline import run_spread
from tests.bench.stack import SIDECAR_KEYS, _accepts

OUT = Path(__file__).parent / "out"
TOPIC = "bench-workers"
#: Partitions of :data:`TOPIC`.
PARTITIONS = 16
API_VERSIONS: tuple[int, int, dict[str, Any]] = (18, 3, {"ClientSoftwareName": "bench", "ClientSoftwareVersion": "1"})
BROKER_METADATA: tuple[int, int, dict[str, Any]] = (10035, 0, {"NodeIds": []})
_STARTED = re.compile(r"worker (\d+) started \(pid (\d+)\)")


def sidecar(logs: Path, broker: TansuServer, workers: int, **keys: str) -> SidecarServer:
    """A ``ksidecar run`` with ``sidecar.workers=workers`` in front of ``broker``."""
    return start_sidecar(logs, broker.bootstrap, name=f"ksidecar-w{workers}-{uuid.uuid4().hex[:4]}",
                         keys={**SIDECAR_KEYS, "sidecar.workers": str(workers), **keys})


def worker_pids(server: SidecarServer) -> dict[int, int]:
    """Each worker's PID (the latest of its slot, from the supervisor's log); one process: itself."""
    pids = {int(index): int(pid) for index, pid in _STARTED.findall(server.process.log_path.read_text())}
    if not pids:
        assert server.process.pid is not None
        return {0: server.process.pid}
    return pids


# -- saturation --------------------------------------------------------------------------------


def start_hop(logs: Path, kind: str, upstream: TansuServer) -> Service:
    """A bare relay in front of ``upstream``: ``relay`` (:mod:`tests.bench.relay`, two
    blocking Python threads per connection), ``socat`` (C, a forked process per
    connection), or ``epoll``, ``hub``, ``trio`` and ``lane`` (:mod:`tests.bench.floor_relays`; the
    last runs the sidecar's forwarded lane on a plain epoll loop)."""
    def build(port: int) -> ManagedProcess:
        if kind in ("epoll", "hub", "trio", "lane"):  # tests.bench.floor_relays: where an event loop's floor lies
            argv = [sys.executable, "-m", "tests.bench.floor_relays", kind, str(port), upstream.host,
                    str(upstream.port)]
        elif kind == "socat":
            socat = shutil.which("socat")
            if socat is None:
                raise RuntimeError("socat is not installed (apt-get install socat)")
            argv = [socat, f"TCP-LISTEN:{port},bind={LOOPBACK},reuseaddr,fork,backlog=1024,nodelay",
                    f"TCP:{upstream.host}:{upstream.port},nodelay"]
        else:
            argv = [sys.executable, "-m", "tests.bench.relay", str(port), upstream.host, str(upstream.port)]
        return ManagedProcess(kind, argv, log_path=logs / f"{kind}.log",
                              probe=lambda: _accepts(LOOPBACK, port), cwd=Path(__file__).resolve().parents[2])

    port, process = start_on_port(build, None)
    return Service(process, LOOPBACK, port)


@dataclass(frozen=True)
class Load:
    """One saturation workload: what each connection keeps in flight, and where it goes."""

    name: str
    title: str
    frames: Callable[[], list[bytes] | Callable[[int], list[bytes]]]
    connections: int
    targets: tuple[str, ...]
    check: Callable[[bytes], None]


def _check_api_versions(frame: bytes) -> None:
    if response_body(18, 3, frame).ErrorCode:
        raise RuntimeError("ApiVersions answered an error")


def _check_broker_metadata(frame: bytes) -> None:
    body = response_body(10035, 0, frame)
    if getattr(body, "ErrorCode", 0):
        raise RuntimeError("BrokerMetadata answered an error")


def _check_produce(frame: bytes) -> None:
    for topic in response_body(0, 10, frame).Responses:
        for partition in topic.PartitionResponses:
            if partition.ErrorCode:
                raise RuntimeError(f"Produce failed: error {partition.ErrorCode}")


def _local(api: tuple[int, int, dict[str, Any]], window: int) -> Callable[[], list[bytes]]:
    return lambda: [request(api[0], api[1], i, api[2]) for i in range(window)]


def _produce(window: int) -> Callable[[], Callable[[int], list[bytes]]]:
    """Connection ``c`` produces to partition ``c % PARTITIONS``: one partition for all
    would measure the broker's lock on it (Tansu's in-memory log), not the proxies."""
    def frames() -> Callable[[int], list[bytes]]:
        batch = record_batch(1)
        rings = [[produce_request(i, TOPIC, batch, 1, partition=p) for i in range(window)]
                 for p in range(PARTITIONS)]
        return lambda connection: rings[connection % PARTITIONS]

    return frames


LOADS = (
    Load("api-versions-64x16", "ApiVersions v3, 64 connections × 16 in flight", _local(API_VERSIONS, 16), 64,
         ("direct", "w1", "w2"), _check_api_versions),
    Load("broker-metadata-64x16", "BrokerMetadata v0 (sidecar only), 64 × 16", _local(BROKER_METADATA, 16), 64,
         ("w1", "w2"), _check_broker_metadata),
    Load("produce-1-64x4", "Produce v10, 1 record × 1 KiB, acks=1, 64 connections × 4", _produce(4), 64,
         ("direct", "socat", "relay", "w1", "w2"), _check_produce),
    Load("produce-1-16x16", "Produce v10, 1 record × 1 KiB, acks=1, 16 connections × 16", _produce(16), 16,
         ("direct", "socat", "relay", "lane", "w1", "w2"), _check_produce),
    Load("produce-1-1x1", "Produce v10, 1 record × 1 KiB, acks=1, one connection, one in flight", _produce(1), 1,
         ("direct", "socat", "relay", "epoll", "hub", "trio", "lane", "w1"), _check_produce),
)


def measure(address: str, load: Load, serving: list[int], broker_pid: int, generators: int,
            seconds: float, warmup: float) -> dict[str, float]:
    """One run of ``load`` against ``address``; ``serving`` the PIDs of the target's process
    tree root (first) and workers (the rest; empty for the broker)."""
    marks: dict[str, Any] = {}

    def read(tag: str) -> None:
        marks[tag] = {"t": time.monotonic(), "busy": procfs.machine_busy_seconds(),
                      "tree": procfs.tree_cpu_seconds(serving[0]) if serving else 0.0,
                      "workers": [procfs.cpu_seconds(pid) for pid in serving[1:]],
                      "broker": procfs.cpu_seconds(broker_pid)}

    result = run_spread(address, load.frames(), connections=load.connections, processes=generators,
                        duration=seconds, warmup=warmup, on_start=lambda: read("start"),
                        on_end=lambda: read("end"))
    if result.sample is None:
        raise RuntimeError(f"{load.name}: no response sampled")
    load.check(result.sample)
    a, b = marks["start"], marks["end"]
    wall = b["t"] - a["t"]
    tree = b["tree"] - a["tree"]
    broker = b["broker"] - a["broker"]
    out = {"requests_per_s": result.per_second, "generator_cores": result.generator_cpu / wall,
           "broker_cores": broker / wall,
           "others_cores": max(0.0, (b["busy"] - a["busy"] - tree - broker - result.generator_cpu) / wall)}
    if serving:
        out["sidecar_cores"] = tree / wall
        out["us_per_request"] = tree / result.requests * 1e6 if result.requests else float("nan")
        for i, (w0, w1) in enumerate(zip(a["workers"], b["workers"], strict=True)):
            out[f"worker{i}_cores"] = (w1 - w0) / wall
            out[f"worker{i}_us_per_request"] = (w1 - w0) / result.requests * 1e6 if result.requests else 0.0
    return out


def saturation(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    """Every :data:`LOADS` workload against direct, the bare relays (socat and the Python
    relay), ``workers=1`` and ``workers=2``, in turns (``--loads`` and ``--targets`` choose)."""
    results: dict[str, Any] = {}
    loads = [load for load in LOADS if not args.loads or load.name in args.loads]
    wanted = set(args.targets or ("direct", "socat", "relay", "epoll", "hub", "trio", "lane", "w1", "w2"))
    with start_broker(logs) as broker, contextlib.ExitStack() as stack:
        create_topic(broker.bootstrap, TOPIC, PARTITIONS)
        servers: dict[str, SidecarServer] = {}
        hops: dict[str, Service] = {}
        for workers in (1, 2):
            if f"w{workers}" in wanted:
                servers[f"w{workers}"] = stack.enter_context(sidecar(logs, broker, workers))
        for kind in ("socat", "relay", "epoll", "hub", "trio", "lane"):
            if kind in wanted and any(kind in load.targets for load in loads):
                hops[kind] = stack.enter_context(start_hop(logs, kind, broker))
        broker_pid = broker.process.pid
        assert broker_pid is not None
        for load in loads:
            targets = [t for t in load.targets if t in wanted]
            runs: dict[str, list[dict[str, float]]] = {t: [] for t in targets}
            for repeat in range(args.repeats):
                order = targets[repeat % len(targets):] + targets[: repeat % len(targets)]
                for target in order:
                    if target == "direct":
                        address, serving = broker.bootstrap, []
                    elif target in hops:
                        hop = hops[target]
                        assert hop.process.pid is not None
                        address, serving = hop.address, [hop.process.pid]
                    else:
                        server = servers[target]
                        assert server.process.pid is not None
                        pids = worker_pids(server)
                        address = server.address
                        serving = [server.process.pid] + ([pids[i] for i in sorted(pids)] if target == "w2" else [])
                    runs[target].append(measure(address, load, serving, broker_pid, args.generators,
                                                args.seconds, args.warmup))
            results[load.name] = {"title": load.title, "runs": runs}
            print(_progress(load.name, runs), flush=True)
    return results


def _median(runs: list[dict[str, float]], key: str) -> float:
    values = [r[key] for r in runs if key in r]
    return statistics.median(values) if values else float("nan")


def _paired(runs: dict[str, list[dict[str, float]]], a: str, b: str, key: str = "requests_per_s") -> list[float]:
    if a not in runs or b not in runs:
        return []
    return [x[key] / y[key] for x, y in zip(runs[a], runs[b], strict=True) if y.get(key)]


def _progress(name: str, runs: dict[str, list[dict[str, float]]]) -> str:
    parts = [f"{t}={_median(r, 'requests_per_s'):,.0f}/s" + (f" {_median(r, 'us_per_request'):.1f}us/req"
                                                               if t != "direct" else "")
             for t, r in runs.items()]
    ratios = _paired(runs, "w2", "w1")
    return f"{name:24} " + "  ".join(parts) + (f"  w2/w1={statistics.median(ratios):.2f}" if ratios else "")


def saturation_markdown(results: dict[str, Any], args: argparse.Namespace) -> str:
    """The saturation tables."""
    lines = [
        "| workload | target | requests/s (median; min–max) | w2/w1 (median; runs) | sidecar tree µs CPU "
        "per request | per worker: cores, µs per request | sidecar cores | broker cores | generator cores "
        "| other cores |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in results.values():
        runs = entry["runs"]
        ratios = _paired(runs, "w2", "w1")
        for target, samples in runs.items():
            rps = [s["requests_per_s"] for s in samples]
            ratio = (f"**{statistics.median(ratios):.2f}** ({', '.join(f'{r:.2f}' for r in ratios)})"
                     if target == "w2" and ratios else "")
            workers = ""
            if target == "w2":
                count = sum(1 for key in samples[0] if key.endswith("_us_per_request") and key.startswith("worker"))
                workers = "; ".join(f"w{i}: {_median(samples, f'worker{i}_cores'):.2f}, "
                                    f"{_median(samples, f'worker{i}_us_per_request'):.0f}" for i in range(count))
            elif target != "direct":
                workers = f"{_median(samples, 'sidecar_cores'):.2f}, {_median(samples, 'us_per_request'):.0f}"
            sidecar_us = f"{_median(samples, 'us_per_request'):.1f}" if target != "direct" else "–"
            sidecar_cores = f"{_median(samples, 'sidecar_cores'):.2f}" if target != "direct" else "–"
            lines.append(
                f"| {entry['title'] if target == next(iter(runs)) else ''} | {target} | "
                f"{statistics.median(rps):,.0f} ({min(rps):,.0f}–{max(rps):,.0f}) | {ratio} | {sidecar_us} | "
                f"{workers} | {sidecar_cores} | {_median(samples, 'broker_cores'):.2f} | "
                f"{_median(samples, 'generator_cores'):.2f} | {_median(samples, 'others_cores'):.2f} |")
    return "\n".join(lines)


# -- memory -------------------------------------------------------------------------------------


def roles(root: int) -> dict[int, str]:
    """The processes of a sidecar's tree, named by their part (proxy/control/forks.py names
    the fork server and the workers)."""
    named: dict[int, str] = {}
    for pid in procfs.descendants(root):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if pid == root:
            named[pid] = "supervisor" if len(procfs.descendants(root)) > 1 else "the one process"
        elif comm == "ksidecar-forks":
            named[pid] = "fork server"
        elif comm.startswith("ksidecar-w"):
            named[pid] = "worker"
        else:
            named[pid] = comm
    return named


def memory(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    """Idle RSS/PSS per process, and RSS growth per idle connection, for workers=1 and 2."""
    out: dict[str, Any] = {}
    hello = request(*API_VERSIONS[:2], 7, API_VERSIONS[2])
    with start_broker(logs) as broker:
        for workers in (1, 2):
            with sidecar(logs, broker, workers) as server:
                root = server.process.pid
                assert root is not None
                time.sleep(1.0)  # every worker ready (readyz says so) and settled
                named = roles(root)
                pids = worker_pids(server)
                by_pid = {pid: index for index, pid in pids.items()}
                idle = [{"pid": pid, "role": role + (f" {by_pid[pid]}" if pid in by_pid and workers > 1 else ""),
                         "rss": procfs.rss_bytes(pid), "pss": procfs.pss_bytes(pid)} for pid, role in named.items()]
                before = procfs.tree_rss_bytes(root)
                before_workers = {i: procfs.rss_bytes(pid) for i, pid in pids.items()}
                held: list[RawConnection] = []
                try:
                    t0 = time.perf_counter()
                    while len(held) < args.connections and time.perf_counter() - t0 < 120:
                        group = [RawConnection(server.address)
                                 for _ in range(min(100, args.connections - len(held)))]
                        held.extend(group)
                        for conn in group:
                            conn.send(hello)
                        for conn in group:
                            conn.read_frame()
                    time.sleep(0.5)
                    after = procfs.tree_rss_bytes(root)
                    after_workers = {i: procfs.rss_bytes(pid) for i, pid in pids.items()}
                    split = _worker_connections(server)
                finally:
                    for conn in held:
                        conn.close()
                out[f"w{workers}"] = {
                    "idle": idle, "idle_rss_total": sum(p["rss"] for p in idle),
                    "idle_pss_total": sum(p["pss"] for p in idle), "connections": len(held),
                    "kb_per_connection": (after - before) / len(held) / 1e3,
                    "worker_growth_kb": {i: (after_workers[i] - before_workers[i]) / 1e3 for i in pids},
                    "worker_connections": split}
    return out


def _worker_connections(server: SidecarServer) -> dict[str, float]:
    pattern = re.compile(r'^ksidecar_worker_connections\{worker="(\d+)"\} ([0-9.e+]+)$', re.MULTILINE)
    return {index: float(value) for index, value in pattern.findall(server.scrape())}


def memory_markdown(results: dict[str, Any]) -> str:
    """The memory table."""
    lines = ["| sidecar | process | RSS idle | PSS idle |", "|---|---|---|---|"]
    for name, entry in results.items():
        for p in entry["idle"]:
            lines.append(f"| {name} | {p['role']} | {p['rss'] / 2**20:.1f} MiB | {p['pss'] / 2**20:.1f} MiB |")
        lines.append(f"| {name} | **total** | **{entry['idle_rss_total'] / 2**20:.1f} MiB** | "
                     f"**{entry['idle_pss_total'] / 2**20:.1f} MiB** |")
    lines += ["", "| sidecar | idle connections | tree RSS growth per connection | per worker: growth, connections |",
              "|---|---|---|---|"]
    for name, entry in results.items():
        workers = "; ".join(f"w{i}: {kb:,.0f} kB, {entry['worker_connections'].get(str(i), '–')}"
                            for i, kb in entry["worker_growth_kb"].items())
        lines.append(f"| {name} | {entry['connections']:,} | **{entry['kb_per_connection']:.1f} kB** | {workers} |")
    return "\n".join(lines)


# -- storm and the per-IP quota over the wire ---------------------------------------------------


async def _attempt(port: int, ip: str, answered: list[float], refused: list[float], origin: float,
                   wait: float) -> None:
    import trio

    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=ip)
    except OSError:
        refused.append(time.monotonic() - origin)
        return
    hello = request(*API_VERSIONS[:2], 1, API_VERSIONS[2])
    try:
        with trio.move_on_after(wait):
            await stream.send_all(hello)
            data = b""
            while len(data) < 4:
                chunk = await stream.receive_some(64)
                if not chunk:
                    refused.append(time.monotonic() - origin)
                    return
                data += chunk
            answered.append(time.monotonic() - origin)
    except (OSError, trio.BrokenResourceError):
        refused.append(time.monotonic() - origin)
    finally:
        await trio.aclose_forcefully(stream)


async def _storm(port: int, limit: float, seconds: float) -> dict[str, Any]:
    import trio

    answered: list[float] = []
    refused: list[float] = []
    origin = time.monotonic()
    attempts = 0

    async def client(ip: str, rate: float, spawn: trio.Nursery) -> None:
        nonlocal attempts
        n = 0
        while n / rate < seconds:
            await trio.sleep_until(trio.current_time() + max(0.0, origin + n / rate - time.monotonic()))
            spawn.start_soon(_attempt, port, ip, answered, refused, origin, seconds + 10)
            n += 1
            attempts += 1

    async with trio.open_nursery() as spawn:
        for ip in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
            spawn.start_soon(client, ip, 5 * limit / 3, spawn)
    times = sorted(t for t in answered if t <= seconds)
    span = 11.0
    worst = max((i - bisect.bisect_right(times, t - span) + 1 for i, t in enumerate(times)), default=0)
    return {"attempts": attempts, "accepted_in_window": len(times), "accepted_per_limit": len(times) / seconds / limit,
            "worst_span": worst, "worst_span_allowed": span * limit, "worst_span_per_limit": worst / (span * limit)}


async def _ip_quota(server: SidecarServer, rate: float, seconds: float, attempts_per_s: float) -> dict[str, Any]:
    """Set ``rate`` for 127.0.0.6 over the wire, then connect from it (and from 127.0.0.7,
    no quota) at ``attempts_per_s`` for ``seconds``; answered connections from each are held
    until the end, when the supervisor's per-worker connection counts are read."""
    import trio

    from proxy.tools.admin_client import AdminClient

    port = server.port
    results: dict[str, Any] = {}
    held: list[trio.SocketStream] = []

    async def hold(ip: str, answered: list[float], refused: list[float], origin: float) -> None:
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=ip)
        except OSError:
            refused.append(time.monotonic() - origin)
            return
        try:
            await stream.send_all(request(*API_VERSIONS[:2], 1, API_VERSIONS[2]))
            with trio.move_on_after(seconds + 5):
                chunk = await stream.receive_some(64)
                if chunk:
                    answered.append(time.monotonic() - origin)
                    held.append(stream)
                    return
            refused.append(time.monotonic() - origin)
        except (OSError, trio.BrokenResourceError):
            refused.append(time.monotonic() - origin)
        await trio.aclose_forcefully(stream)

    def alter() -> float:
        with AdminClient(server.address) as client:
            began = time.monotonic()
            body = client.call(49, 1, {"Entries": [{"Entity": [{"EntityType": "ip", "EntityName": "127.0.0.6"}],
                                                    "Ops": [{"Key": "connection_creation_rate", "Value": rate,
                                                             "Remove": False}]}], "ValidateOnly": False})
            if body.Entries[0].ErrorCode:
                raise RuntimeError(f"AlterClientQuotas: {body.Entries[0].ErrorMessage}")
            return time.monotonic() - began

    results["alter_ms"] = await trio.to_thread.run_sync(alter) * 1000
    origin = time.monotonic()
    outcome: dict[str, tuple[list[float], list[float]]] = {"127.0.0.6": ([], []), "127.0.0.7": ([], [])}
    async with trio.open_nursery() as nursery:
        for n in range(int(seconds * attempts_per_s)):
            await trio.sleep_until(trio.current_time() + max(0.0, origin + n / attempts_per_s - time.monotonic()))
            for ip, (answered, refused) in outcome.items():
                nursery.start_soon(hold, ip, answered, refused, origin)
    results["worker_connections"] = _worker_connections(server)
    for stream in held:
        await trio.aclose_forcefully(stream)
    for ip, (answered, refused) in outcome.items():
        results[ip] = {"answered": len(answered), "refused": len(refused),
                       "first_refused_s": min(refused, default=float("nan")),
                       "answered_first_second": sum(1 for t in answered if t < 1.0)}
    results.update(rate=rate, seconds=seconds, attempts_per_s=attempts_per_s)
    return results


def storm(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    """The KIP-612 storm and the per-IP quota against two-worker sidecars."""
    import trio

    from proxy.tools.rig.zookeeper import start_zookeeper

    out: dict[str, Any] = {}
    with start_broker(logs) as broker:
        with sidecar(logs, broker, 2, **{"max.connection.creation.rate": str(int(args.limit)),
                                         "sidecar.log.level": "warning"}) as server:
            out["storm"] = trio.run(_storm, server.port, args.limit, args.storm_seconds)
        with start_zookeeper(logs) as zookeeper, sidecar(logs, broker, 2, **{
                "zookeeper.connect": f"{zookeeper.connect}/bench-{uuid.uuid4().hex[:8]}",
                "sidecar.log.level": "warning"}) as server:
            out["ip_quota"] = trio.run(_ip_quota, server, 2.0, 3.0, 20.0)
    return out


def storm_markdown(results: dict[str, Any], args: argparse.Namespace) -> str:
    """The storm and quota table."""
    s, q = results["storm"], results["ip_quota"]
    limited, free = q["127.0.0.6"], q["127.0.0.7"]
    return "\n".join([
        "| measure | value |", "|---|---|",
        f"| storm at 5 × {args.limit:g}/s for {args.storm_seconds:g} s ({s['attempts']:,} attempts): accepted "
        f"rate / limit | {s['accepted_per_limit']:.3f} |",
        f"| storm: worst trailing 11 s span (accepted, at the clients) / allowed | **{s['worst_span']} / "
        f"{s['worst_span_allowed']:.0f} = {s['worst_span_per_limit']:.3f}** |",
        f"| AlterClientQuotas ip=127.0.0.6 connection_creation_rate={q['rate']:g} through the sidecar: round "
        f"trip | {q['alter_ms']:.0f} ms |",
        f"| then {q['attempts_per_s']:g} connections/s from 127.0.0.6 for {q['seconds']:g} s: answered, "
        f"refused; first refusal | {limited['answered']}, {limited['refused']}; "
        f"{limited['first_refused_s'] * 1000:.0f} ms after the quota's answer |",
        f"| the same from 127.0.0.7 (no quota) at the same time: answered, refused | "
        f"{free['answered']}, {free['refused']} |",
        f"| connections held at the end, per worker (ksidecar_worker_connections) | "
        f"{', '.join(f'w{k}: {v:.0f}' for k, v in sorted(q['worker_connections'].items()))} |",
    ])


# -- profile ------------------------------------------------------------------------------------


def profile(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    """py-spy on worker 0 of a ``--workers`` sidecar (one process with 1) under one-record Produce, 16 × 16."""
    from tests.bench.profile import py_spy, summarize

    out_dir = OUT / "workers-profile"
    out_dir.mkdir(parents=True, exist_ok=True)
    load = next(item for item in LOADS if item.name == "produce-1-16x16")
    with start_broker(logs) as broker:
        create_topic(broker.bootstrap, TOPIC, PARTITIONS)
        with sidecar(logs, broker, args.workers) as server:
            pid = worker_pids(server)[0]
            raw = out_dir / "produce-1-16x16-worker0.txt"
            spy = subprocess.Popen([py_spy(), "record", "--pid", str(pid), "--rate", "200", "--duration",
                                    str(int(args.seconds)), "--format", "raw", "--nonblocking", "--output",
                                    str(raw)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(0.5)
            assert broker.process.pid is not None and server.process.pid is not None
            workers = list(worker_pids(server).values()) if args.workers > 1 else []
            measured = measure(server.address, load, [server.process.pid, *workers],
                               broker.process.pid, args.generators, args.seconds - 1.0, 0.3)
            _, err = spy.communicate(timeout=args.seconds + 30)
            if spy.returncode != 0 or not raw.exists():
                raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')}")
    summary = out_dir / "produce-1-16x16-worker0.summary.txt"
    summary.write_text(f"{load.title}, worker 0 of {args.workers}\n\n" + summarize(raw.read_text(), top=40))
    return {"measured": measured, "summary": str(summary)}


# -- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Run the chosen part and print its Markdown."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench.workers_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("saturation", "memory", "storm", "profile"))
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per run (profile: sampled)")
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--generators", type=int, default=1, help="load generator processes")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--limit", type=float, default=20.0)
    parser.add_argument("--storm-seconds", type=float, default=23.0)
    parser.add_argument("--workers", type=int, default=2, help="profile: sidecar.workers of the profiled sidecar")
    parser.add_argument("--loads", nargs="*", default=[], help="saturation: these workloads only (names)")
    parser.add_argument("--targets", nargs="*", default=[],
                        help="saturation: these targets only (direct socat relay epoll hub trio lane w1 w2)")
    args = parser.parse_args(argv)
    if not (0 < args.seconds <= 60 and 1 <= args.repeats <= 10 and 1 <= args.generators <= 8
            and 1 <= args.connections <= 5000 and 0 < args.storm_seconds <= 120 and 0 < args.limit <= 200):
        parser.error("out of bounds: seconds ≤ 60, repeats ≤ 10, generators ≤ 8, connections ≤ 5000, "
                     "storm-seconds ≤ 120, limit ≤ 200")
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m tests.bench.workers_bench", *given])
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        part: dict[str, Callable[[argparse.Namespace, Path], dict[str, Any]]] = {
            "saturation": saturation, "memory": memory, "storm": storm, "profile": profile}
        results = part[args.part](args, logs)
    results["command"] = command
    results["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    OUT.mkdir(exist_ok=True)
    (OUT / f"workers-{args.part}.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"\n`{command}` (`uptime` after: `{results['uptime']}`)\n")
    if args.part == "saturation":
        print(saturation_markdown({k: v for k, v in results.items() if isinstance(v, dict)}, args))
    elif args.part == "memory":
        print(memory_markdown({k: v for k, v in results.items() if isinstance(v, dict)}))
    elif args.part == "storm":
        print(storm_markdown(results, args))
    else:
        print(json.dumps(results["measured"], indent=2))
        print(Path(results["summary"]).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
