"""The broker behind the sidecar dies and returns; clients open many connections.

* ``/readyz`` turns 503 within 2 s of the broker's death (no client traffic needed: the
  idle control connection is watched) and 200 within 2 s of its return.
* The broker connection is dialled on the first request that must be forwarded: idle and
  slowloris connections, and connections that only ask ApiVersions, cost the broker
  nothing.
* A broker killed mid-produce: no request is acknowledged that the broker did not append
  (every acknowledged record is in the log when the broker's storage survives; here it is
  Tansu's memory store, so the check is that no ack came after the kill), and the sidecar
  stays up and ready again once the broker is back.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from proxy.tools.rig.tansu import start_broker
from tests.faults.support import (
    call,
    connect,
    established_to,
    produce_request,
    readyz,
    record_batch,
    sidecar_process,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def wait_for(predicate: object, timeout: float, step: float = 0.02) -> float:
    """Seconds until ``predicate()`` held (fails the test after ``timeout``)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():  # type: ignore[operator]
            return time.monotonic() - started
        time.sleep(step)
    raise AssertionError(f"not within {timeout} s")


def test_readyz_follows_the_broker_within_two_seconds(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, name="tansu-readyz")
    port = broker.port
    try:
        with sidecar_process(tmp_path, broker.bootstrap, "readyz") as sidecar:
            assert readyz(sidecar) == 200
            os.killpg(broker.process.pid or 0, signal.SIGKILL)
            broker.process.stop()
            went_down = wait_for(lambda: readyz(sidecar) == 503, timeout=5)
            assert went_down < 2.0, went_down
            broker = start_broker(tmp_path, name="tansu-readyz", port=port)
            came_back = wait_for(lambda: readyz(sidecar) == 200, timeout=5)
            assert came_back < 2.0, came_back
    finally:
        broker.stop()


def test_idle_and_versions_only_connections_cost_the_broker_nothing(tmp_path: Path) -> None:
    with start_broker(tmp_path, name="tansu-lazy") as broker, \
            sidecar_process(tmp_path, broker.bootstrap, "lazy") as sidecar:
        baseline = established_to(broker.port)  # the sidecar's control connection
        idle = [connect(sidecar.port) for _ in range(400)]
        slowloris = [connect(sidecar.port) for _ in range(50)]
        for sock in slowloris:
            sock.sendall(b"\x00\x00\x10")  # three bytes of a size prefix, then nothing
        asking = [connect(sidecar.port) for _ in range(50)]
        for sock in asking:
            versions = call(sock, 18, 3, {"ClientSoftwareName": "faults", "ClientSoftwareVersion": "1"})
            assert versions.ErrorCode == 0  # type: ignore[attr-defined]
        time.sleep(0.5)
        assert established_to(broker.port) == baseline
        # The first request that must go to the broker dials it.
        metadata = call(asking[0], 3, 1, {"Topics": []})
        assert metadata.Brokers  # type: ignore[attr-defined]
        assert established_to(broker.port) == baseline + 1
        for sock in idle + slowloris + asking:
            sock.close()


def test_broker_killed_mid_produce_acks_nothing_after_the_kill(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, name="tansu-kill")
    port = broker.port
    try:
        with sidecar_process(tmp_path, broker.bootstrap, "kill") as sidecar:
            sock = connect(sidecar.port)
            topic = "kill-mid-produce"
            call(sock, 19, 4, {"Topics": [{"Name": topic, "NumPartitions": 1, "ReplicationFactor": 1,
                                           "Assignments": [], "Configs": []}],
                               "TimeoutMs": 10000, "ValidateOnly": False})
            batch = record_batch(1, 100)
            acked_before = 0
            for i in range(200):
                answer = call(sock, 0, 8, {"TransactionalId": None, "Acks": 1, "TimeoutMs": 5000,
                                           "TopicData": [{"Name": topic, "PartitionData": [
                                               {"Index": 0, "Records": batch}]}]},
                              correlation_id=i)
                assert answer.Responses[0].PartitionResponses[0].ErrorCode == 0  # type: ignore[attr-defined]
                acked_before += 1
            os.killpg(broker.process.pid or 0, signal.SIGKILL)
            broker.process.stop()
            # The next request cannot be acknowledged: the connection ends without an answer.
            sock.settimeout(10)
            try:
                sock.sendall(produce_request(999, topic, batch, 1, 8))
                data = sock.recv(65536)
            except OSError:
                data = b""
            assert data == b"", "an answer came for a request no broker could have appended"
            sock.close()
            assert acked_before == 200
            wait_for(lambda: readyz(sidecar) == 503, timeout=5)
            broker = start_broker(tmp_path, name="tansu-kill", port=port)
            wait_for(lambda: readyz(sidecar) == 200, timeout=5)
            with connect(sidecar.port) as again:
                assert call(again, 3, 1, {"Topics": []}).Brokers  # type: ignore[attr-defined]
    finally:
        broker.stop()

