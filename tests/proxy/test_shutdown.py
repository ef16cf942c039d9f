"""SIGTERM on a real `ksidecar run` process: stop accepting, finish in-flight requests, exit 0."""

from __future__ import annotations

import shutil
import signal
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import trio
from kafka.protocol.consumer import FetchResponse

from proxy.config.keys import HostPort
from proxy.tools.rig.ports import free_port
from proxy.tools.rig.tansu import TansuServer
from tests.proxy.test_metrics_http import http_get, samples, value
from tests.proxy.wire import Wire, create_topic, kp_decode, request_frame

pytestmark = pytest.mark.integration

HOLD_MS = 1500
DRAIN_MS = 6000


def ksidecar() -> str:
    """The installed console script, next to this interpreter."""
    script = Path(sys.executable).parent / "ksidecar"
    found = str(script) if script.exists() else shutil.which("ksidecar")
    assert found, "the ksidecar console script is not installed"
    return found


async def test_sigterm_drains_in_flight_requests_and_exits_0(
    tansu: TansuServer, tmp_path: Path
) -> None:
    port, metrics_port = free_port(), free_port()
    config = tmp_path / "sidecar.properties"
    config.write_text(
        f"listeners=PLAINTEXT://127.0.0.1:{port}\n"
        f"sidecar.upstream={tansu.bootstrap}\n"
        f"sidecar.metrics.listener=127.0.0.1:{metrics_port}\n"
        f"sidecar.shutdown.drain.ms={DRAIN_MS}\n"
    )
    metrics = HostPort("127.0.0.1", metrics_port)
    log = (tmp_path / "ksidecar.log").open("wb")
    process = await trio.lowlevel.open_process(
        [ksidecar(), "run", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        with trio.fail_after(15):
            while True:
                try:
                    if (await http_get(metrics, "/readyz"))[0] == 200:
                        break
                except OSError:
                    pass
                await trio.sleep(0.05)
        wire = await Wire.connect("127.0.0.1", port)
        topic = f"drain-{uuid.uuid4().hex[:10]}"
        await create_topic(wire, topic)
        # In flight at SIGTERM: a Fetch the broker holds (no data, MaxWaitMs) and a request
        # pipelined behind it, which must come back after it.
        await wire.send([
            request_frame(1, 4, 501, {
                "ReplicaId": -1, "MaxWaitMs": HOLD_MS, "MinBytes": 1, "MaxBytes": 1 << 20,
                "IsolationLevel": 0, "Topics": [{"Topic": topic, "Partitions": [
                    {"Partition": 0, "FetchOffset": 0, "PartitionMaxBytes": 1 << 20}]}]}),
            request_frame(3, 1, 502, {"Topics": []}),
        ])
        with trio.fail_after(5):  # the sidecar has read both (scraped, not guessed)
            while True:
                table = samples((await http_get(metrics, "/metrics"))[1].decode())
                if value(table, "ksidecar_requests_total", api="Metadata", version="1",
                         outcome="forwarded") == 1:
                    break
                await trio.sleep(0.01)
        sent_at = trio.current_time()
        process.send_signal(signal.SIGTERM)

        # It stops accepting: a new connection is refused or closed unanswered.
        await trio.sleep(0.2)
        answer: bytes | None = b"?"
        try:
            late = await Wire.connect("127.0.0.1", port)
            with trio.fail_after(3):
                await late.send(request_frame(18, 0, 1, {}))
                answer = await late.read_frame()
        except OSError:
            answer = None
        assert answer is None
        assert trio.current_time() - sent_at < HOLD_MS / 1000  # the Fetch is still held

        with trio.fail_after(DRAIN_MS / 1000):
            fetched, metadata = await wire.read_frames(2)
            assert await wire.read_frame() is None  # then the sidecar closes the connection
        assert struct.unpack_from(">i", fetched)[0] == 501
        assert struct.unpack_from(">i", metadata)[0] == 502
        _, fetch = kp_decode(FetchResponse, 4, fetched, 1)
        assert [p.error_code for t in fetch.responses for p in t.partitions] == [0]

        with trio.fail_after(DRAIN_MS / 1000):
            code = await process.wait()
        assert code == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        log.close()
