"""Memory under large frames, and the broker list across a ZooKeeper session expiry.

* ``queued.max.request.bytes``: three connections each send most of a 40 MiB frame and
  stop. Unbounded, the sidecar holds all three (about 117 MiB more RSS); bounded at
  20 MiB, it holds the one frame it started (the pool goes over for a frame once started,
  as Kafka's does) and does not read the others.
* A ZooKeeper session expiry (the sidecar frozen with SIGSTOP for longer than its session
  timeout, so ZooKeeper expires the session): Metadata through the sidecar names the
  sidecar's own broker, at its own address, in every answer before and after the
  re-registration.
"""

from __future__ import annotations

import os
import signal
import struct
import time
from pathlib import Path

import pytest

from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import start_zookeeper
from tests.faults.support import call, connect, rss_bytes, sidecar_process

pytestmark = [pytest.mark.integration, pytest.mark.faults]

MIB = 1 << 20
FRAME = 40 * MIB
STALLED = 2.0
"""Seconds without a byte accepted on any connection after which the frames are as far as
the sidecar will let them get."""


def held_rss(tmp_path: Path, tansu: TansuServer, name: str, **keys: str) -> int:
    """RSS growth of a sidecar while three connections each hold FRAME - 1 MiB of a frame.

    One process: the pool is per process (a worker has its share of the bound, and may go
    over it by one frame, docs/operations.md), and the RSS read is the sidecar's own."""
    with sidecar_process(tmp_path, tansu.bootstrap, name, **{"sidecar.workers": "1", **keys}) as sidecar:
        pid = sidecar.process.pid or 0
        with connect(sidecar.port) as warm:
            call(warm, 18, 3, {"ClientSoftwareName": "faults", "ClientSoftwareVersion": "1"})
        before = rss_bytes(pid)
        socks = [connect(sidecar.port, timeout=2) for _ in range(3)]
        chunk = b"\x00" * MIB
        for sock in socks:
            sock.setblocking(False)
            sock.send(struct.pack(">i", FRAME))
        # Sends until every connection has sent its part, or none has moved for STALLED
        # seconds: a connection the sidecar does not read stops as soon as the kernel's
        # buffers are full, and waiting out the deadline would only hold what it holds.
        now = time.monotonic()
        deadline, moved = now + 20, now
        sent = [0, 0, 0]
        while now < deadline and now - moved < STALLED and min(sent) < FRAME - MIB:
            progressed = False
            for i, sock in enumerate(socks):
                if sent[i] >= FRAME - MIB:
                    continue
                try:
                    sent[i] += sock.send(chunk[: FRAME - MIB - sent[i]])
                    progressed = True
                except BlockingIOError:
                    pass
            now = time.monotonic()
            if progressed:
                moved = now
            else:
                time.sleep(0.02)
        time.sleep(0.5)
        grown = rss_bytes(pid) - before
        for sock in socks:
            sock.close()
        return grown


def test_queued_max_request_bytes_bounds_what_large_frames_hold(
    tansu: TansuServer, tmp_path: Path
) -> None:
    unbounded = held_rss(tmp_path, tansu, "mem-unbounded", **{"queued.max.request.bytes": "-1"})
    bounded = held_rss(tmp_path, tansu, "mem-bounded", **{"queued.max.request.bytes": str(20 * MIB)})
    assert unbounded > 100 * MIB, unbounded  # the three frames, as the issue measured
    assert bounded < 70 * MIB, bounded  # one frame (39 MiB) and the kernel's buffers


def test_own_broker_is_listed_across_a_zookeeper_session_expiry(
    tansu: TansuServer, tmp_path: Path
) -> None:
    zk = start_zookeeper(tmp_path, name="zk-expiry")
    try:
        with sidecar_process(
            tmp_path, tansu.bootstrap, "expiry",
            **{"zookeeper.connect": f"{zk.address}/expiry", "zookeeper.session.timeout.ms": "4000"},
        ) as sidecar, connect(sidecar.port) as sock:
            answers: list[list[tuple[int, str, int]]] = []

            def ask(seconds: float) -> None:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    metadata = call(sock, 3, 1, {"Topics": []}, correlation_id=len(answers))
                    answers.append([(b.NodeId, b.Host, b.Port) for b in metadata.Brokers])  # type: ignore[attr-defined]
                    time.sleep(0.02)

            ask(1.0)
            # The sidecar is frozen longer than its session timeout, so ZooKeeper (running)
            # expires the session; when it resumes, kazoo learns it on reconnecting. (Freezing
            # ZooKeeper instead races its expiry thread against the client's reconnect.) The
            # whole sidecar: its process group, the supervisor and its workers.
            os.killpg(sidecar.process.pid or 0, signal.SIGSTOP)
            try:
                time.sleep(7.0)
            finally:
                os.killpg(sidecar.process.pid or 0, signal.SIGCONT)
            ask(6.0)  # expiry noticed, re-registration, the watch rebuilt
            log = sidecar.log_path.read_text()
        assert "registering /brokers/ids" in log, "the session did not expire: the test proves nothing"
        mine = answers[0]
        assert mine and all(entry[1:] == ("127.0.0.1", sidecar.port) for entry in mine if entry[0] == mine[0][0])
        empty = [i for i, brokers in enumerate(answers) if not brokers]
        assert not empty, f"{len(empty)} of {len(answers)} Metadata answers named no broker"
        assert all(mine[0] in brokers for brokers in answers)
    finally:
        zk.stop()
