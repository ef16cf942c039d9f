"""The bench's floor relays and the per-request harness work (structure, not timing)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from proxy.tools.rig.ports import free_port
from tests.bench.hop_micro import measure

ROOT = Path(__file__).resolve().parents[2]


def test_the_harness_forwards_every_request_and_answers_each() -> None:
    # measure() asserts every request was forwarded and every slot answered.
    assert measure(rounds=5, per_pass=4) > 0


@pytest.mark.parametrize("kind", ["epoll", "trio"])
def test_a_floor_relay_copies_both_ways_unchanged(kind: str) -> None:
    echo = socket.create_server(("127.0.0.1", 0))
    upstream_port = echo.getsockname()[1]

    def serve() -> None:
        conn, _ = echo.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data[::-1])

    threading.Thread(target=serve, daemon=True).start()
    port = free_port("127.0.0.1")
    relay = subprocess.Popen([sys.executable, "-m", "tests.bench.floor_relays", kind, str(port), "127.0.0.1",
                              str(upstream_port)], cwd=ROOT)
    try:
        for _ in range(100):
            try:
                client = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                threading.Event().wait(0.05)
        else:
            pytest.fail(f"the {kind} relay did not listen")
        with client:
            client.sendall(b"abcdef")
            got = b""
            while len(got) < 6:
                got += client.recv(64)
            assert got == b"fedcba"
    finally:
        relay.kill()
        relay.wait(5)
        echo.close()
