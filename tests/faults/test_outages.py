"""ZooKeeper outages under traffic and quotas, slowloris clients, and SIGKILL with the audit on.

* ZooKeeper killed for 3 s and for 9 s (shorter than the sidecar's 6 s session timeout, and
  half again as long), then restarted on the same port and data: a
  producer through the sidecar sees no error and no stall, the per-IP quota keeps applying
  (from the last snapshot) and is still reported, and the session survives (kazoo's
  reconnect backoff is capped under the session timeout, so the sidecar reconnects within
  seconds of ZooKeeper's return and never has to register again).
* 1,000 slowloris connections (a byte of a request every half second) beside a healthy
  producer: the producer's requests keep their latency; the slow connections hold no
  broker connection.
* SIGKILL with the audit observer on: every visible Parquet file is readable, the journal
  left behind is completed when the sidecar starts again, and only rows of the last flush
  interval can be missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from kazoo.client import KazooClient

from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import start_zookeeper
from tests.faults.support import (
    call,
    connect,
    create_topic,
    established_to,
    latest_offset,
    record_batch,
    sidecar_process,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.slow, pytest.mark.serial]

#: How long a producer runs for a latency sample or for the audit to record: about 170
#: requests, one every 10 ms or so.
PRODUCE_SECONDS = 2.0


class Producer(threading.Thread):
    """Produces one record per request on one connection until stopped; notes every error
    and the longest wait for an answer."""

    def __init__(self, port: int, topic: str) -> None:
        super().__init__(daemon=True)
        self.port, self.topic = port, topic
        self.sent = self.errors = 0
        self.longest = 0.0
        self.latencies: list[float] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        batch = record_batch(1, 100)
        body = {"TransactionalId": None, "Acks": 1, "TimeoutMs": 5000, "TopicData": [
            {"Name": self.topic, "PartitionData": [{"Index": 0, "Records": batch}]}]}
        with connect(self.port) as sock:
            while not self.stop_event.is_set():
                started = time.monotonic()
                answer = call(sock, 0, 8, body, correlation_id=self.sent)
                took = time.monotonic() - started
                self.latencies.append(took)
                self.longest = max(self.longest, took)
                self.sent += 1
                if answer.Responses[0].PartitionResponses[0].ErrorCode:  # type: ignore[attr-defined]
                    self.errors += 1
                time.sleep(0.01)

    def finish(self) -> None:
        self.stop_event.set()
        self.join(30)


def accepted_from(ip: str, port: int, attempts: int) -> int:
    """How many of a burst of ``attempts`` connections from ``ip``, all opened at once, get an
    ApiVersions answer within 0.3 s."""

    def attempt(_: int) -> bool:
        sock = socket.socket()
        sock.settimeout(0.3)
        try:
            sock.bind((ip, 0))
            sock.connect(("127.0.0.1", port))
            call(sock, 18, 0, {})
            return True
        except OSError:
            return False
        finally:
            sock.close()

    with ThreadPoolExecutor(attempts) as pool:
        return sum(pool.map(attempt, range(attempts)))


# A ZooKeeper server that is down expires no session, so an outage longer than the session
# timeout must cost nothing either: one outage under the 6 s session, one 3 s past it.
@pytest.mark.parametrize("outage", [3.0, 9.0])
def test_zookeeper_outage_costs_nothing(tansu: TansuServer, tmp_path: Path, outage: float) -> None:
    name = f"zk-outage-{int(outage)}"
    zk = start_zookeeper(tmp_path, name=name)
    zk_port = zk.port
    chroot = f"/outage{int(outage)}"
    try:
        admin = KazooClient(hosts=f"{zk.address}", timeout=10)
        admin.start(timeout=10)
        admin.ensure_path(f"{chroot}/config/ips")
        admin.create(f"{chroot}/config/ips/127.0.0.9",
                     json.dumps({"version": 1, "config": {"connection_creation_rate": "1"}}).encode())
        admin.stop()
        admin.close()
        with sidecar_process(tmp_path, tansu.bootstrap, f"outage{int(outage)}",
                             **{"zookeeper.connect": f"{zk.address}{chroot}",
                                "zookeeper.session.timeout.ms": "6000"}) as sidecar:
            topic = f"outage-{int(outage)}-{os.getpid()}"
            create_topic(sidecar.port, topic)
            # 1 connection/s over an 11-second window: a burst of 40 gets about 11 through.
            assert accepted_from("127.0.0.9", sidecar.port, 40) <= 20
            producer = Producer(sidecar.port, topic)
            producer.start()
            time.sleep(1)
            zk.stop()
            time.sleep(outage)
            # During the outage: still throttled, and the quota still described.
            assert accepted_from("127.0.0.9", sidecar.port, 40) <= 20
            with connect(sidecar.port) as sock:
                described = call(sock, 48, 1, {"Components": [
                    {"EntityType": "ip", "MatchType": 0, "Match": "127.0.0.9"}], "Strict": False})
            entries = described.Entries  # type: ignore[attr-defined]
            assert [e.Values[0].Value for e in entries] == [1.0]
            zk = start_zookeeper(tmp_path, name=name, port=zk_port)
            back = time.monotonic()
            log_path = sidecar.log_path
            deadline = back + 15
            while time.monotonic() < deadline:
                if log_path.read_text().count("ZooKeeper session connected") >= 1:
                    break
                time.sleep(0.1)
            reconnected = time.monotonic() - back
            time.sleep(1)
            producer.finish()
            log = log_path.read_text()
        assert "ZooKeeper session connected" in log, log[-3000:]
        assert reconnected < 6.0, f"reconnected {reconnected:.1f} s after ZooKeeper was back"
        assert "registering /brokers/ids" not in log, "the session expired"
        assert producer.errors == 0
        assert producer.sent > outage * 20  # it kept producing throughout
        assert producer.longest < 1.0, f"a produce waited {producer.longest:.2f} s"
    finally:
        zk.stop()


def test_slowloris_connections_beside_a_healthy_producer(tansu: TansuServer, tmp_path: Path) -> None:
    with sidecar_process(tmp_path, tansu.bootstrap, "slowloris") as sidecar:
        topic = f"slowloris-{os.getpid()}"
        create_topic(sidecar.port, topic)
        baseline = Producer(sidecar.port, topic)
        baseline.start()
        time.sleep(PRODUCE_SECONDS)
        baseline.finish()
        broker_links = established_to(tansu.port)
        slow = [connect(sidecar.port) for _ in range(1000)]
        for sock in slow:
            sock.setblocking(False)
        stop = threading.Event()

        def drip() -> None:
            frame = b"\x00\x00\x00\x30" + b"\x00" * 44
            at = 0
            while not stop.is_set() and at < len(frame):
                for sock in slow:
                    with contextlib.suppress(OSError):
                        sock.send(frame[at : at + 1])
                at += 1
                stop.wait(0.5)

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        loaded = Producer(sidecar.port, topic)
        loaded.start()
        time.sleep(PRODUCE_SECONDS)
        loaded.finish()
        stop.set()
        dripper.join(5)
        links_with_slowloris = established_to(tansu.port)
        for sock in slow:
            sock.close()
    p50 = sorted(baseline.latencies)[len(baseline.latencies) // 2]
    p50_loaded = sorted(loaded.latencies)[len(loaded.latencies) // 2]
    assert loaded.errors == 0
    assert p50_loaded < max(3 * p50, 0.01), (p50, p50_loaded)
    assert links_with_slowloris <= broker_links + 1  # the loaded producer's own link at most


def test_sigkill_with_the_audit_on_loses_at_most_one_flush_interval(
    tansu: TansuServer, tmp_path: Path
) -> None:
    audit = tmp_path / "audit"
    keys = {"observer.class.names": "audit", "observer.audit.dir": str(audit),
            "observer.audit.flush.interval.ms": "500"}
    topic = f"audit-kill-{os.getpid()}"
    with sidecar_process(tmp_path, tansu.bootstrap, "audit-kill", **keys) as sidecar:
        create_topic(sidecar.port, topic)
        producer = Producer(sidecar.port, topic)
        producer.start()
        time.sleep(PRODUCE_SECONDS)
        producer.finish()
        time.sleep(1.5)  # three flush intervals after the last request
        os.kill(sidecar.process.pid or 0, signal.SIGKILL)
        sidecar.process.stop()
    produced = latest_offset(tansu.port, topic)
    visible = [p for p in audit.rglob("*.parquet") if not p.name.startswith(".")]
    rows_before = sum(pq.read_table(p).num_rows for p in visible)  # every visible file reads
    with sidecar_process(tmp_path, tansu.bootstrap, "audit-restart", **keys):
        time.sleep(1)
    files = [p for p in audit.rglob("*.parquet") if not p.name.startswith(".")]
    assert len(files) >= len(visible)  # the journal became a file on restart (or none was left)
    produced_rows = 0
    for path in files:
        table = pq.read_table(path, columns=["api_key", "topic", "records"]).to_pylist()
        produced_rows += sum(r["records"] or 0 for r in table if r["api_key"] == 0 and r["topic"] == topic)
    # Three flush intervals passed after the last request before the kill: nothing may be
    # missing (a kill loses at most the rows of the flush interval it interrupts).
    assert produced_rows == produced, (produced_rows, produced, rows_before)
