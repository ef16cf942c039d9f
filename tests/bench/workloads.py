"""The workloads: each runs once against one target and returns its measurements.

A :class:`Workload` says what its primary metric is and which way is better; the runner
(:mod:`tests.bench.runner`) repeats it, interleaving targets, and computes ratios.

* ``produce-b{1,100,1000}-acks{1,all}``: closed loop, raw Produce v10 requests of one
  uncompressed batch of N records of 1 KiB, 5 requests in flight on one connection (the
  Java producer's ``max.in.flight.requests.per.connection``). Raw requests fix the batch
  size exactly; a client library batches as it likes.
* ``produce-sync``: confluent-kafka with ``max.in.flight.requests.per.connection=1``
  sends one 1 KiB record and waits for its acknowledgement (``flush``) before the next:
  every request pays the whole round trip, so this is the per-request cost of a hop.
  Measured also through the minimal relay (:mod:`tests.bench.relay`, in front of a broker
  that advertises the relay); the runner reports the time each proxy adds per request.
* ``consume``: confluent-kafka (librdkafka, Fetch v16) reads a pre-filled topic from
  offset 0 to the end; records per second from the first record to the last.
* ``latency-produce`` / ``latency-metadata``: open loop at a fixed rate well below every
  target's saturation; p50/p99 of each request's round trip on one connection.
* ``connections``: connect and complete one ApiVersions round trip on 1,000 connections
  (100 at a time), then hold them idle and read the serving process's RSS.
* ``local-api-versions`` / ``local-broker-metadata``: requests the sidecar answers
  itself, pipelined 16 deep. The broker and the peer forward ApiVersions to the broker;
  BrokerMetadata (key 10035) exists only in the sidecar.
"""

from __future__ import annotations

import select
import socket
import statistics
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.bench.kafka import (
    RECORD_SIZE,
    RawConnection,
    create_topic,
    produce_request,
    record_batch,
    request,
    response_body,
    split_address,
)
from tests.bench.pipeline import run_pipeline
from tests.bench.stack import LATENCY_TARGETS, TARGETS, Stack

if TYPE_CHECKING:
    from proxy.tools.rig.sidecar import SidecarServer

PRODUCE_VERSION = 10
PRODUCE_WINDOW = 5
LOCAL_WINDOW = 16


@dataclass(frozen=True)
class Settings:
    """How long and how much: full runs and ``--quick`` differ only here."""

    duration: float = 1.5
    warmup: float = 0.3
    #: Cap on bytes produced by one measured run (Tansu keeps everything in memory).
    produce_cap_bytes: int = 192 << 20
    consume_records: int = 196608
    latency_seconds: float = 3.0
    produce_rate: float = 1000.0
    metadata_rate: float = 500.0
    connections: int = 1000
    connection_batch: int = 100
    #: Restart the stack before a workload when the broker's RSS is above this.
    broker_rss_limit: int = 1 << 30
    #: The cluster-size workloads' topics and partitions per topic (``--topics``, ``--partitions``).
    cluster_topics: int = 1000
    cluster_partitions: int = 10
    #: Full Metadata requests per target (cluster-metadata), and clients refreshing it in a
    #: loop beside the steady producer (cluster-refresh), each pausing this long between
    #: requests (tight loops would measure a two-core machine's broker, not the proxy).
    metadata_requests: int = 40
    refreshers: int = 4
    refresh_pause: float = 0.1


QUICK = Settings(
    duration=0.5, warmup=0.15, produce_cap_bytes=48 << 20, consume_records=65536,
    latency_seconds=1.0, connections=1000,
)  # fmt: skip


Measure = Callable[[Stack, str, Settings, dict[str, Any]], dict[str, float]]


@dataclass(frozen=True)
class Workload:
    """One benchmark: ``measure(stack, target, settings, state)`` returns its numbers."""

    name: str
    title: str
    metric: str
    unit: str
    higher_is_better: bool
    measure: Measure
    setup: Callable[[Stack, Settings, dict[str, Any]], None] | None = None
    targets: tuple[str, ...] = TARGETS
    #: Start every repeat on a fresh stack: the broker keeps every produced record in
    #: memory, and latency is measured against a broker, sidecar and peer in a known state.
    fresh_broker: bool = False
    #: Compare by difference to direct (latency) rather than by ratio.
    additive: bool = False
    #: Also compare the time each proxy adds per request (1 / throughput, minus direct's).
    per_request: bool = False
    extra: tuple[str, ...] = field(default_factory=tuple)


# -- produce ---------------------------------------------------------------------------


def _produce_setup(topic: str) -> Callable[[Stack, Settings, dict[str, Any]], None]:
    def setup(stack: Stack, settings: Settings, state: dict[str, Any]) -> None:
        create_topic(stack.broker_address, topic)

    return setup


def _check_produce(frame: bytes) -> None:
    body = response_body(0, PRODUCE_VERSION, frame)
    for topic in body.Responses:
        for partition in topic.PartitionResponses:
            if partition.ErrorCode != 0:
                raise RuntimeError(f"Produce failed: error {partition.ErrorCode}")


def _produce(records: int, acks: int, topic: str) -> Measure:
    def measure(stack: Stack, target: str, settings: Settings, state: dict[str, Any]) -> dict[str, float]:
        batch = record_batch(records)
        frames = [
            produce_request(i, topic, batch, acks, PRODUCE_VERSION) for i in range(PRODUCE_WINDOW)
        ]
        cap = max(PRODUCE_WINDOW, settings.produce_cap_bytes // len(frames[0]))
        cpu = _cpu_probe(stack, target)
        result = run_pipeline(
            stack.address(target), frames, duration=settings.duration, warmup=settings.warmup,
            max_requests=cap, check=_check_produce,
        )  # fmt: skip
        out = {
            "records_per_s": result.per_second * records,
            "mb_per_s": result.request_bytes / result.seconds / 1e6,
            "requests_per_s": result.per_second,
            "seconds": result.seconds,
        }
        out.update(cpu(result.total))
        return out

    return measure


def _cpu_probe(stack: Stack, target: str) -> Callable[..., dict[str, float]]:
    """CPU used by the proxy process (if any) and the broker over a run, as a core fraction.

    Given the number of requests the run completed, ``done`` also reports the proxy's CPU
    microseconds per request: less sensitive to other load on the machine than throughput.
    """
    names = ["direct"] if target == "direct" else [target, "direct"]
    before = {n: stack.cpu_seconds(n) for n in names}
    t0 = time.perf_counter()

    def done(requests: int = 0) -> dict[str, float]:
        wall = time.perf_counter() - t0
        spent = {n: stack.cpu_seconds(n) - before[n] for n in names}
        out = {"broker_cpu": spent["direct"] / wall}
        if target != "direct":
            out["proxy_cpu"] = spent[target] / wall
            if requests:
                out["proxy_us_per_request"] = spent[target] / requests * 1e6
        return out

    return done


# -- produce, one in flight ----------------------------------------------------------------

SYNC_TOPIC = "bench-produce-sync"


def _sync_setup(stack: Stack, settings: Settings, state: dict[str, Any]) -> None:
    for target in ("direct", "relay"):
        create_topic(stack.broker_address_for(target), SYNC_TOPIC)


def _produce_sync(stack: Stack, target: str, settings: Settings, state: dict[str, Any]) -> dict[str, float]:
    """Synchronous sends: produce one record, wait for its acknowledgement, repeat."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({
        "bootstrap.servers": stack.address(target),
        "max.in.flight.requests.per.connection": 1,
        "linger.ms": 0,
        "acks": 1,
        "enable.idempotence": False,
        "socket.nagle.disable": True,
        "log_level": 3,
    })  # fmt: skip
    value = bytes(range(256)) * (RECORD_SIZE // 256)
    failed: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failed.append(str(error))

    def send() -> None:
        producer.produce(SYNC_TOPIC, value, on_delivery=delivered)
        if producer.flush(10) or failed:
            raise RuntimeError(f"synchronous produce via {target} failed: {failed or 'timeout'}")

    sent = 0
    try:
        warm_until = time.perf_counter() + settings.warmup
        while time.perf_counter() < warm_until or sent < 20:  # metadata, the broker link
            send()
            sent += 1
        cpu = _cpu_probe(stack, target)
        count = 0
        t0 = time.perf_counter()
        until = t0 + settings.duration
        while True:
            send()
            count += 1
            now = time.perf_counter()
            if now >= until or count >= 1_000_000:
                break
    except KafkaException as exc:
        raise RuntimeError(f"synchronous produce via {target}: {exc}") from None
    finally:
        producer.flush(5)
    seconds = now - t0
    out = {"requests_per_s": count / seconds, "us_per_request": seconds / count * 1e6,
           "seconds": seconds}
    out.update(cpu(count))
    return out


# -- consume ---------------------------------------------------------------------------

CONSUME_TOPIC = "bench-consume"


def _consume_setup(stack: Stack, settings: Settings, state: dict[str, Any]) -> None:
    batch = record_batch(1000)
    frames = [produce_request(i, CONSUME_TOPIC, batch, 1, PRODUCE_VERSION) for i in range(5)]
    batches = -(-settings.consume_records // 1000)
    for target in ("direct", "relay"):  # the relay fronts a broker of its own: fill both
        broker = stack.broker_address_for(target)
        create_topic(broker, CONSUME_TOPIC)
        result = run_pipeline(
            broker, frames, duration=3600, warmup=0, max_requests=batches, check=_check_produce,
        )  # fmt: skip
        state["records"] = min(state.get("records", result.total * 1000), result.total * 1000)


def _consume(stack: Stack, target: str, settings: Settings, state: dict[str, Any]) -> dict[str, float]:
    from confluent_kafka import Consumer, TopicPartition

    total: int = state["records"]
    consumer = Consumer({
        "bootstrap.servers": stack.address(target),
        "group.id": "ksidecar-bench",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 10,
        "log_level": 3,
    })  # fmt: skip
    cpu = _cpu_probe(stack, target)
    try:
        consumer.assign([TopicPartition(CONSUME_TOPIC, 0, 0)])
        delivered = 0
        first: float | None = None
        skipped = 0  # the interval starts with the first delivery: its records are not timed
        while delivered < total:
            messages = consumer.consume(min(10000, total - delivered), timeout=10)
            if not messages:
                raise RuntimeError(f"consume stalled after {delivered} of {total} records via {target}")
            if first is None:
                first = time.perf_counter()
                skipped = len(messages)
            for message in messages:
                error = message.error()
                if error is not None:
                    raise RuntimeError(f"consume error via {target}: {error}")
            delivered += len(messages)
        last = time.perf_counter()
    finally:
        consumer.close()
    assert first is not None
    seconds = last - first
    got = delivered - skipped
    out = {"records_per_s": got / seconds, "mb_per_s": got * RECORD_SIZE / seconds / 1e6,
           "seconds": seconds}
    out.update(cpu())
    return out


# -- latency ---------------------------------------------------------------------------


def open_loop(address: str, frame_for: Callable[[int], bytes], rate: float, seconds: float) -> list[float]:
    """Send one request every ``1/rate`` s on one connection; return each round trip in s.

    Open loop: a slow answer does not delay the next request, so queueing shows in the
    tail (no coordinated omission). Times are taken when a request is written and when
    its whole response has been read.
    """
    interval = 1.0 / rate
    count = max(1, int(rate * seconds))
    frames = [frame_for(i % 1024) for i in range(min(count, 1024))]
    sent: deque[float] = deque()
    rtts: list[float] = []
    with RawConnection(address) as conn:
        conn.sock.setblocking(True)
        start = time.perf_counter() + 0.05
        next_send = start
        i = 0
        while i < count or sent:
            now = time.perf_counter()
            if i < count and now >= next_send:
                conn.send(frames[i % len(frames)])
                sent.append(time.perf_counter())
                i += 1
                next_send = start + i * interval
                continue
            wait = max(0.0, next_send - now) if i < count else 1.0
            ready, _, _ = select.select([conn.sock], [], [], wait)
            if ready:
                conn.receive()
                n, _ = conn.take_frames()
                arrived = time.perf_counter()
                for _ in range(n):
                    rtts.append(arrived - sent.popleft())
    return rtts


def _percentiles(rtts: list[float]) -> dict[str, float]:
    ordered = sorted(rtts)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "mean_ms": statistics.fmean(ordered) * 1000,
            "samples": float(len(ordered))}


def own_time_buckets(sidecar: SidecarServer | None, api: str) -> dict[float, float]:
    """The sidecar's ``ksidecar_sidecar_latency_seconds`` buckets for ``api`` (cumulative)."""
    from prometheus_client.parser import text_string_to_metric_families

    assert sidecar is not None
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(sidecar.scrape()):
        if family.name != "ksidecar_sidecar_latency_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket") and sample.labels.get("api") == api:
                buckets[float(sample.labels["le"])] = sample.value
    return buckets


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The upper bound (ms) of the histogram bucket holding quantile ``q`` of the new samples."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return float("nan")
    for bound, count in zip(bounds, counts, strict=True):
        if count >= q * counts[-1]:
            return bound * 1000
    return float("inf")


def _latency(
    stack: Stack, target: str, api: str, frame: Callable[[int], bytes], rate: float, seconds: float
) -> dict[str, float]:
    """Open-loop round trips; through the sidecar also its own time, from its histogram.

    The sidecar measures the time each request spends in it minus the broker's time
    (``ksidecar_sidecar_latency_seconds``): comparing that with the added latency the
    client sees separates the sidecar's own work from waiting to be scheduled.
    """
    before = own_time_buckets(stack.sidecar, api) if target == "sidecar" else {}
    out = _percentiles(open_loop(stack.address(target), frame, rate, seconds))
    if target == "sidecar":
        after = own_time_buckets(stack.sidecar, api)
        out["own_p50_ms_le"] = bucket_quantile(before, after, 0.50)
        out["own_p99_ms_le"] = bucket_quantile(before, after, 0.99)
    return out


def _latency_produce(stack: Stack, target: str, settings: Settings, state: dict[str, Any]) -> dict[str, float]:
    batch = record_batch(1)

    def frame(i: int) -> bytes:
        return produce_request(i, "bench-latency", batch, 1, PRODUCE_VERSION)

    return _latency(stack, target, "Produce", frame, settings.produce_rate, settings.latency_seconds)


def _latency_metadata(stack: Stack, target: str, settings: Settings, state: dict[str, Any]) -> dict[str, float]:
    body = {"Topics": [{"TopicId": uuid.UUID(int=0), "Name": "bench-latency"}],
            "AllowAutoTopicCreation": False, "IncludeTopicAuthorizedOperations": False}

    def frame(i: int) -> bytes:
        return request(3, 12, i, body)

    return _latency(stack, target, "Metadata", frame, settings.metadata_rate, settings.latency_seconds)


# -- cluster size ----------------------------------------------------------------------

CLUSTER_PREFIX = "bench-cluster"
#: Digits of a cluster-size topic's number in its name (``bench-cluster-00042``).
CLUSTER_DIGITS = 5
#: Topics per CreateTopics request while the cluster is built.
CREATE_BATCH = 50


def _cluster_setup(stack: Stack, settings: Settings, state: dict[str, Any]) -> None:
    """Give the broker ``cluster_topics`` × ``cluster_partitions`` (once per stack)."""
    key = (settings.cluster_topics, settings.cluster_partitions, stack.generation)
    if state.get("cluster") == key:
        return
    names = [f"{CLUSTER_PREFIX}-{t:0{CLUSTER_DIGITS}d}" for t in range(settings.cluster_topics)]
    with RawConnection(stack.address("direct")) as conn:
        for at in range(0, len(names), CREATE_BATCH):
            body = conn.call(19, 4, {
                "Topics": [{"Name": n, "NumPartitions": settings.cluster_partitions, "ReplicationFactor": 1,
                            "Assignments": [], "Configs": []} for n in names[at : at + CREATE_BATCH]],
                "TimeoutMs": 30000, "ValidateOnly": False,
            })  # fmt: skip
            failed = [t.ErrorCode for t in body.Topics if t.ErrorCode not in (0, 36)]
            if failed:
                raise RuntimeError(f"CreateTopics for the cluster workloads: errors {failed[:3]}")
    create_topic(stack.address("direct"), "bench-latency")
    state["cluster"] = key


FULL_METADATA = {"Topics": None, "AllowAutoTopicCreation": False, "IncludeTopicAuthorizedOperations": False}


def _full_metadata(address: str, count: int, deadline: float, last: list[bytes] | None = None) -> list[float]:
    """``count`` full Metadata v12 round trips one after another (until ``deadline``); the
    last answer's frame is appended to ``last`` if given."""
    frame = request(3, 12, 1, FULL_METADATA)
    rtts: list[float] = []
    answer = b""
    with RawConnection(address) as conn:
        for _ in range(count):
            if time.perf_counter() > deadline:
                break
            began = time.perf_counter()
            conn.send(frame)
            answer = conn.read_frame()
            rtts.append(time.perf_counter() - began)
    if last is not None:
        last.append(answer)
    return rtts


def _cluster_metadata(stack: Stack, target: str, settings: Settings, state: dict[str, Any]) -> dict[str, float]:
    _full_metadata(stack.address(target), 3, time.perf_counter() + 30)  # warm up
    last: list[bytes] = []
    out = _percentiles(_full_metadata(stack.address(target), settings.metadata_requests,
                                      time.perf_counter() + 60, last))
    # What the client saw (the "acls" target narrows to half the cluster-size topics).
    topics = response_body(3, 12, last[0]).Topics
    out["cluster_topics_seen"] = sum(1 for t in topics if (t.Name or "").startswith(CLUSTER_PREFIX))
    return out


def _cluster_refresh(stack: Stack, target: str, settings: Settings, state: dict[str, Any]) -> dict[str, float]:
    """A steady producer's round trips while ``refreshers`` clients ask for full Metadata
    in a loop on connections of their own, all through ``target``."""
    address = stack.address(target)
    batch = record_batch(1)
    stop = threading.Event()
    refreshed: list[int] = []

    def refresh() -> None:
        count = 0
        while not stop.wait(settings.refresh_pause):
            count += len(_full_metadata(address, 1, time.perf_counter() + 30))
        refreshed.append(count)

    threads = [threading.Thread(target=refresh, daemon=True) for _ in range(settings.refreshers)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.2)  # the refreshers are in full swing
        rtts = open_loop(address, lambda i: produce_request(i, "bench-latency", batch, 1, PRODUCE_VERSION),
                         settings.produce_rate, settings.latency_seconds)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    out = _percentiles(rtts)
    out["metadata_per_s"] = sum(refreshed) / (settings.latency_seconds + 0.2)
    return out


# -- connections -----------------------------------------------------------------------


def _connections(stack: Stack, target: str, settings: Settings, state: dict[str, Any]) -> dict[str, float]:
    host, port = split_address(stack.address(target))
    hello = request(18, 3, 7, {"ClientSoftwareName": "bench", "ClientSoftwareVersion": "1"})
    baseline = stack.rss(target)
    sockets: list[socket.socket] = []
    cpu0 = stack.cpu_seconds(target)
    try:
        t0 = time.perf_counter()
        while len(sockets) < settings.connections:
            group = [
                socket.create_connection((host, port), timeout=30)
                for _ in range(min(settings.connection_batch, settings.connections - len(sockets)))
            ]
            sockets.extend(group)
            for sock in group:
                sock.sendall(hello)
            for sock in group:
                _read_one_frame(sock)
        elapsed = time.perf_counter() - t0
        setup_cpu = stack.cpu_seconds(target) - cpu0
        time.sleep(0.5)  # let the process settle before reading its memory
        held = stack.rss(target)
    finally:
        for sock in sockets:
            sock.close()
    time.sleep(0.3)
    return {
        "accepts_per_s": len(sockets) / elapsed,
        "rss_mb": held / 1e6,
        "rss_delta_mb": (held - baseline) / 1e6,
        "kb_per_connection": (held - baseline) / len(sockets) / 1e3,
        "cpu_us_per_connection": setup_cpu / len(sockets) * 1e6,
        "cpu_during_setup": setup_cpu / elapsed,
    }


def _read_one_frame(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before answering ApiVersions")
        data += chunk
    return data


# -- locally answered --------------------------------------------------------------------


def _local(api_key: int, version: int, body: dict[str, Any]) -> Measure:
    def measure(stack: Stack, target: str, settings: Settings, state: dict[str, Any]) -> dict[str, float]:
        frames = [request(api_key, version, i, body) for i in range(LOCAL_WINDOW)]
        cpu = _cpu_probe(stack, target)
        result = run_pipeline(stack.address(target), frames, duration=settings.duration,
                              warmup=settings.warmup)
        out = {"requests_per_s": result.per_second}
        out.update(cpu(result.total))
        return out

    return measure


def _latency_setup(stack: Stack, settings: Settings, state: dict[str, Any]) -> None:
    for target in ("direct", "relay"):
        create_topic(stack.broker_address_for(target), "bench-latency")


def _produce_workloads() -> list[Workload]:
    out = []
    for records in (1, 100, 1000):
        for acks, acks_name in ((1, "1"), (-1, "all")):
            topic = f"bench-produce-{records}-{acks_name}"
            out.append(Workload(
                name=f"produce-b{records}-acks{acks_name}",
                title=f"Produce, batches of {records} × 1 KiB, acks={acks_name}",
                metric="records_per_s", unit="records/s", higher_is_better=True,
                measure=_produce(records, acks, topic), setup=_produce_setup(topic),
                fresh_broker=records >= 100,
            ))  # fmt: skip
    return out


WORKLOADS: list[Workload] = [
    Workload("produce-sync", "Produce, one record per request, one in flight (confluent-kafka, "
             "synchronous sends)", "requests_per_s", "req/s", True, _produce_sync,
             setup=_sync_setup, targets=LATENCY_TARGETS, per_request=True),
    *_produce_workloads(),
    Workload("consume", "Consume (confluent-kafka, Fetch v16) of a pre-filled topic",
             "records_per_s", "records/s", True, _consume, setup=_consume_setup, fresh_broker=True,
             targets=LATENCY_TARGETS),
    Workload("latency-produce", "Produce latency, 1 × 1 KiB acks=1 at 1,000 req/s",
             "p99_ms", "ms", False, _latency_produce, setup=_latency_setup, additive=True,
             extra=("p50_ms",), fresh_broker=True, targets=LATENCY_TARGETS),
    Workload("latency-metadata", "Metadata v12 latency at 500 req/s (rewritten by the sidecar)",
             "p99_ms", "ms", False, _latency_metadata, setup=_latency_setup, additive=True,
             extra=("p50_ms",), fresh_broker=True, targets=LATENCY_TARGETS),
    Workload("cluster-metadata", "Full Metadata v12 of the cluster-size topics (1,000 × 10 unless "
             "--topics/--partitions), one request at a time", "p50_ms", "ms", False, _cluster_metadata,
             setup=_cluster_setup, additive=True, extra=("p99_ms", "cluster_topics_seen")),
    Workload("cluster-refresh", "Produce p99 at 1,000 req/s while 4 clients refresh full Metadata "
             "every 100 ms (1,000 × 10 unless --topics/--partitions)", "p99_ms", "ms", False, _cluster_refresh,
             setup=_cluster_setup, extra=("p50_ms", "metadata_per_s")),
    Workload("connections", "Connection setup (connect + ApiVersions), 1,000 connections",
             "accepts_per_s", "conn/s", True, _connections, extra=("rss_mb",),
             fresh_broker=True),  # RSS growth is measured from a process that never had any
    Workload("local-api-versions", "ApiVersions v3, pipelined 16 deep",
             "requests_per_s", "req/s", True,
             _local(18, 3, {"ClientSoftwareName": "bench", "ClientSoftwareVersion": "1"})),
    Workload("local-broker-metadata", "BrokerMetadata v0 (key 10035; sidecar only)",
             "requests_per_s", "req/s", True, _local(10035, 0, {"NodeIds": []}),
             targets=("sidecar",)),
]

BY_NAME = {w.name: w for w in WORKLOADS}
