"""The bench's floor relays and the per-request harness work (structure, not timing)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from proxy.tools.rig.ports import free_port
from tests.bench.hop_micro import measure

ROOT = Path(__file__).resolve().parents[2]


def _connect(port: int, what: str) -> socket.socket:
    """A connection to ``port`` once the process started there listens (10 s at most)."""
    for _ in range(200):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            threading.Event().wait(0.05)
    pytest.fail(f"{what} did not listen")


def test_the_harness_forwards_every_request_and_answers_each() -> None:
    # measure() asserts every request was forwarded and every slot answered.
    assert measure(rounds=5, per_pass=4) > 0


@pytest.mark.parametrize("kind", ["epoll", "hub", "trio", "splice"])
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
    if kind == "splice":  # the minimal relay, moving bytes with splice(2) (BENCH_RELAY_SPLICE=1)
        command = ["tests.bench.relay", str(port)]
        env = {**os.environ, "BENCH_RELAY_SPLICE": "1"}
    else:
        command, env = ["tests.bench.floor_relays", kind, str(port)], None
    relay = subprocess.Popen([sys.executable, "-m", *command, "127.0.0.1", str(upstream_port)], cwd=ROOT, env=env)
    try:
        with _connect(port, f"the {kind} relay") as client:
            client.sendall(b"abcdef")
            got = b""
            while len(got) < 6:
                got += client.recv(64)
            assert got == b"fedcba"
    finally:
        relay.kill()
        relay.wait(5)
        echo.close()


def test_the_lane_forwards_a_produce_and_passes_its_answer_back_unchanged() -> None:
    """``lane``: the sidecar's Connection methods on an epoll loop, in front of a socket
    that answers one Produce v10 with a canned answer of the same correlation id."""
    from protocol.apis import DEFAULT_REGISTRY
    from protocol.framing import size_prefix
    from protocol.headers import encode_response_header
    from protocol.schema import encode
    from tests.bench.kafka import produce_request, record_batch

    answer_body = encode(DEFAULT_REGISTRY.api(0).response, 10, {"Responses": [], "ThrottleTimeMs": 0})
    answer = encode_response_header(7, 1) + answer_body
    framed_answer = size_prefix(len(answer)) + answer
    request = produce_request(7, "t", record_batch(1), 1, partition=0)
    broker = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = broker.accept()
        with conn:
            data = b""
            while len(data) < len(request):
                data += conn.recv(65536)
            got.append(data)
            conn.sendall(framed_answer)
            conn.recv(1)  # until the lane closes

    threading.Thread(target=serve, daemon=True).start()
    port = free_port("127.0.0.1")
    lane = subprocess.Popen([sys.executable, "-m", "tests.bench.floor_relays", "lane", str(port), "127.0.0.1",
                             str(broker.getsockname()[1])], cwd=ROOT)
    try:
        with _connect(port, "the lane") as client:
            client.sendall(request)
            received = b""
            while len(received) < len(framed_answer):
                chunk = client.recv(65536)
                assert chunk, "the lane closed"
                received += chunk
        assert received == framed_answer and got == [request]
    finally:
        lane.kill()
        lane.wait(5)
        broker.close()
