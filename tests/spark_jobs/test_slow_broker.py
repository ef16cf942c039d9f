"""A broker slow to answer still breaches the SLO, long polls or not.

A real sidecar in front of a real Tansu broker, with a relay between them that holds every
broker answer for :data:`DELAY` seconds: produce and consume through it, then run
latency_slo over the audit the sidecar wrote. Produce is judged on its whole latency (over
the SLO by the delay alone); the consumer's JoinGroup, held by design, is not judged.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from proxy.tools.demo import consume, create_topic, produce
from proxy.tools.rig.sidecar import start_sidecar
from spark_jobs import common, latency_slo

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from proxy.tools.rig.tansu import TansuServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: How long the relay holds each chunk the broker sends (seconds).
DELAY = 0.3
SLO_MS = 100


def _pump(source: socket.socket, target: socket.socket, delay: float) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            if delay:
                time.sleep(delay)
            target.sendall(chunk)
    for s in (source, target):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def slow_relay(broker: str, delay: float) -> Iterator[str]:
    """A TCP relay on loopback to ``broker`` that delays what the broker sends; yields its
    address. Threads, bounded by the test: every socket is closed on exit."""
    host, port = broker.rsplit(":", 1)
    listener = socket.create_server(("127.0.0.1", 0))
    sockets: list[socket.socket] = [listener]
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((host, int(port)), timeout=10)
            upstream.settimeout(None)
            sockets.extend((client, upstream))
            threading.Thread(target=_pump, args=(client, upstream, 0.0), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client, delay), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.close()


def test_a_delayed_broker_answer_is_a_breach_and_a_held_join_is_not(
    tansu: TansuServer, spark: SparkSession, tmp_path: Path
) -> None:
    topic = f"slow-{uuid.uuid4().hex[:8]}"
    audit = tmp_path / "audit"
    keys = {"observer.class.names": "audit", "observer.audit.dir": str(audit),
            "observer.audit.flush.interval.ms": "200"}
    with slow_relay(tansu.bootstrap, DELAY) as relay, \
            start_sidecar(tmp_path, relay, name="sidecar-slow", keys=keys) as sidecar:
        create_topic(sidecar.bootstrap, topic, 1)
        assert produce(sidecar.bootstrap, topic, [b"x" * 10] * 5) == 5
        consumed, _ = consume(sidecar.bootstrap, topic, f"g-{topic}", 1, 5, timeout=90)
        assert len(consumed) == 5

    df = common.read_audit(spark, str(audit))
    out = tmp_path / "out"
    latency_slo.load(latency_slo.transform(df, SLO_MS), latency_slo.transform_long_polls(df), str(out))

    judged = pq.read_table(out / "latency")
    produce_rows = judged.filter(pc.equal(judged["api_name"], "Produce"))
    # Every Produce waited at least DELAY (300 ms) for its answer: all over a 100 ms SLO.
    assert pc.sum(produce_rows["over_slo"]).as_py() == pc.sum(produce_rows["requests"]).as_py() >= 1
    assert min(produce_rows["p50_us"].to_pylist()) >= DELAY * 1_000_000
    assert "JoinGroup" not in judged["api_name"].to_pylist()
    polls = pq.read_table(out / "long_polls")
    assert "JoinGroup" in polls["api_name"].to_pylist()
