"""Clients that announce large request frames and never finish them stop nobody else.

Three connections each announce a 98 MiB Produce (under ``socket.request.max.bytes``) and
send half of it, then stop: together they reserve more than ``queued.max.request.bytes``
(256 MiB by default). A neighbour producer on a new connection still delivers every record
at once (the share kept for small frames), the sidecar's memory grows by what the three
sent, not by what they announced (lazily backed buffers), and the three are closed once
``socket.request.read.timeout.ms`` has passed since their first bytes.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from proxy.tools.rig.tansu import TansuServer
from tests.faults.support import rss_bytes, sidecar_process

pytestmark = [pytest.mark.integration, pytest.mark.faults]

MIB = 1 << 20
FRAME = 98 * MIB
TIMEOUT_S = 4.0


def test_three_half_sent_98_mib_frames_stop_nobody_and_are_closed_in_time(tansu: TansuServer, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    # One process: queued.max.request.bytes is shared out per worker (three frames over two
    # workers would wait for memory, not time out), and the RSS read is the sidecar's own.
    keys = {"socket.request.read.timeout.ms": str(int(TIMEOUT_S * 1000)), "sidecar.workers": "1"}
    with sidecar_process(tmp_path, tansu.bootstrap, "slow-frames", **keys) as sidecar:
        pid = sidecar.process.pid or 0
        producer = Producer({"bootstrap.servers": sidecar.bootstrap, "linger.ms": 0})
        producer.produce("slow-frames", b"warm")  # connections, Metadata, the topic
        assert producer.flush(20) == 0
        before = rss_bytes(pid)

        socks = [socket.create_connection(("127.0.0.1", sidecar.port), timeout=10) for _ in range(3)]
        began = time.monotonic()
        half = b"\x00" * (FRAME // 2)
        for sock in socks:
            sock.sendall(struct.pack(">i", FRAME) + half)
        time.sleep(0.3)  # the sidecar has read what was sent
        held = rss_bytes(pid) - before

        delivered: list[object] = []
        start = time.monotonic()
        for i in range(100):
            producer.produce("slow-frames", f"n-{i}".encode(),
                             on_delivery=lambda err, _m: delivered.append(err))
        assert producer.flush(10) == 0
        took = time.monotonic() - start
        assert delivered == [None] * 100
        print(f"\nheld {held / MIB:.0f} MiB for 3 × 49 MiB sent (3 × 98 MiB announced); "
              f"neighbour delivered 100 records in {took:.2f} s")
        assert took < 2.0
        assert held <= 150 * MIB, held / MIB  # what arrived, not what was announced

        for sock in socks:  # closed by the sidecar after the read timeout, not before
            sock.settimeout(TIMEOUT_S + 5)
            assert sock.recv(1) == b""
            sock.close()
        closed_after = time.monotonic() - began
        assert TIMEOUT_S - 0.5 <= closed_after <= TIMEOUT_S + 3, closed_after
        metrics = sidecar.scrape()
        assert 'ksidecar_connections_closed_total{listener="PLAINTEXT",reason="request_read_timeout"} 3.0' in metrics
