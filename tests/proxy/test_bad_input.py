"""Bad input costs at most its own connection: one log line, one metric, others unaffected.

Each test keeps a second, healthy connection open across the bad one and shows it still
completes requests afterwards. Upstream failures (unreachable, reset) use their own
brokers so the session's broker is never disturbed.
"""

from __future__ import annotations

import logging
import os
import signal
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.config.keys import build_config
from proxy.control.server import Sidecar
from proxy.tools.rig.ports import free_port
from proxy.tools.rig.tansu import TansuServer, start_broker
from tests.proxy.conftest import StartSidecar, sidecar_keys
from tests.proxy.wire import Wire, create_topic, request_frame, sample, wait_until

pytestmark = pytest.mark.integration

CLOSED_LOG = "proxy.datapath.connection"


def cid(frame: bytes) -> int:
    value: int = struct.unpack_from(">i", frame)[0]
    return value


async def healthy(wire: Wire, correlation_id: int) -> None:
    """A local and a forwarded request, both answered, on ``wire``."""
    with trio.fail_after(5):
        await wire.send([request_frame(18, 0, correlation_id, {}),
                         request_frame(3, 1, correlation_id + 1, {"Topics": []})])
        first, second = await wire.read_frames(2)
    assert (cid(first), cid(second)) == (correlation_id, correlation_id + 1)


async def connect(sidecar: Sidecar) -> Wire:
    return await Wire.connect("127.0.0.1", sidecar.bound["PLAINTEXT"].port)


# -- malformed frames ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (struct.pack(">i", 2048) + b"\x00" * 100, "frame_too_large"),  # above the 1024 limit
        (struct.pack(">i", 0x7FFFFFFF), "frame_too_large"),
        (struct.pack(">i", -5) + b"\x00" * 8, "negative_frame_size"),
        (struct.pack(">i", 3) + b"\x00\x03\x00", "bad_header"),  # a 3-byte frame
        (struct.pack(">i", 0), "bad_header"),
        # A v1 header whose client id claims 100 bytes and has 2.
        (struct.pack(">ihhih", 12, 3, 1, 7, 100) + b"ab", "bad_header"),
        # BrokerMetadata v0 (answered by the sidecar) whose NodeIds array claims 1000 ids.
        (request_frame(10035, 0, 9, b"\x00\x00\x03\xe8\x00\x00\x00\x01"), "bad_request"),
    ],
)
async def test_malformed_frame_closes_only_its_connection(
    start_sidecar: StartSidecar, caplog: pytest.LogCaptureFixture, data: bytes, cause: str
) -> None:
    caplog.set_level(logging.INFO, logger=CLOSED_LOG)
    sidecar = await start_sidecar(socket_request_max_bytes="1024")
    other = await connect(sidecar)
    await healthy(other, 1)
    bad = await connect(sidecar)
    with trio.fail_after(5):
        await bad.send(data)
        assert await bad.wait_closed() == b""
        await wait_until(lambda: sample(sidecar, "ksidecar_errors_total", cause=cause) == 1)
    assert sample(sidecar, "ksidecar_connections_closed_total", listener="PLAINTEXT",
                  reason=cause) == 1
    lines = [r.getMessage() for r in caplog.records if r.name == CLOSED_LOG]
    assert len(lines) == 1 and f": {cause}" in lines[0], lines
    await healthy(other, 10)
    await healthy(await connect(sidecar), 20)


async def test_frame_at_the_limit_is_accepted(start_sidecar: StartSidecar) -> None:
    sidecar = await start_sidecar(socket_request_max_bytes="1024")
    wire = await connect(sidecar)
    empty = request_frame(3, 1, 5, {"Topics": [{"Name": ""}]})
    name = "t" * (1024 - (len(empty) - 4))  # a Metadata v1 request body of exactly 1024 bytes
    frame = request_frame(3, 1, 5, {"Topics": [{"Name": name}]})
    assert struct.unpack_from(">i", frame)[0] == 1024
    with trio.fail_after(5):
        await wire.send(frame)
        (answer,) = await wire.read_frames(1)
    assert cid(answer) == 5


async def test_response_above_the_limit_closes_the_connection(start_sidecar: StartSidecar) -> None:
    sidecar = await start_sidecar(sidecar_response_max_bytes="16")
    other = await connect(sidecar)
    with trio.fail_after(5):  # a local answer is not limited
        assert cid(await other.call(18, 0, 1, {})) == 1
    wire = await connect(sidecar)
    with trio.fail_after(5):
        await wire.send(request_frame(3, 1, 2, {"Topics": []}))  # Tansu's answer: > 16 bytes
        assert await wire.wait_closed() == b""
        await wait_until(lambda: sample(sidecar, "ksidecar_errors_total", cause="bad_response") == 1)
        assert cid(await other.call(18, 0, 3, {})) == 3


# -- garbage ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuServer]:
    """A broker for garbage tests alone: forwarded garbage must not disturb the session's."""
    with start_broker(tmp_path_factory.mktemp("garbage"), name="tansu-garbage") as broker:
        yield broker


def _framed_request(header: tuple[int, int], body: bytes) -> bytes:
    """A frame with a real v1 request header (api key, version) and ``body`` after it."""
    payload = struct.pack(">hhih", *header, 1, 4) + b"junk" + body
    return struct.pack(">i", len(payload)) + payload


garbage = st.one_of(
    st.binary(max_size=64),
    # A plausible size prefix followed by random bytes (a frame, or part of one).
    st.builds(lambda size, rest: struct.pack(">i", size) + rest,
              st.integers(-2, 300), st.binary(max_size=300)),
    # A real header (keys the sidecar decodes or answers itself among them), random body.
    st.builds(
        _framed_request,
        st.sampled_from([(0, 3), (0, 9), (17, 0), (17, 1), (18, 0), (18, 3), (18, 4), (3, 1),
                         (3, 12), (10, 4), (10035, 0), (10035, 1), (36, 2), (9999, 0)]),
        st.binary(max_size=80),
    ),
)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(garbage, min_size=12, max_size=12))
async def test_garbage_never_takes_the_sidecar_down(own_broker: TansuServer, blobs: list[bytes]) -> None:
    config = build_config(sidecar_keys(own_broker.bootstrap, socket_request_max_bytes="4096"))
    async with trio.open_nursery() as nursery:
        sidecar: Sidecar = await nursery.start(Sidecar(config).serve)
        other = await connect(sidecar)
        await healthy(other, 1)
        for n, blob in enumerate(blobs):
            wire = await connect(sidecar)
            with trio.fail_after(5):
                await wire.send(blob)
                await wire.stream.send_eof()  # type: ignore[attr-defined]
                await wire.wait_closed()  # the sidecar answers what it can, then closes
            await wire.aclose()
            await healthy(other, 100 + 10 * n)
        # Every way those connections ended was foreseen: none was a bug in the sidecar.
        causes = {s.labels["cause"]: s.value for m in sidecar.metrics.registry.collect()
                  if m.name == "ksidecar_errors" for s in m.samples
                  if s.name == "ksidecar_errors_total"}
        assert causes.get("internal_error", 0) == 0, causes
        nursery.cancel_scope.cancel()


# -- idle connections ------------------------------------------------------------------


async def test_idle_connection_is_closed_and_a_busy_one_is_not(start_sidecar: StartSidecar) -> None:
    sidecar = await start_sidecar(connections_max_idle_ms="300")
    idle, busy = await connect(sidecar), await connect(sidecar)
    await healthy(idle, 1)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:

        async def keep_busy() -> None:
            for n in range(10):  # a request every 100 ms for a second
                await healthy(busy, 100 + 2 * n)
                await trio.sleep(0.1)

        nursery.start_soon(keep_busy)
        with trio.fail_after(3):
            assert await idle.wait_closed() == b""
        closed_after = trio.current_time() - start
    assert 0.1 <= closed_after < 2.0  # about the 300 ms, not at once
    assert trio.current_time() - start >= 1.0  # busy ran for its whole second, still open
    await healthy(busy, 500)
    await wait_until(lambda: sample(sidecar, "ksidecar_connections_closed_total",
                                    listener="PLAINTEXT", reason="idle") == 1)


# -- upstream failures -----------------------------------------------------------------


async def test_unreachable_upstream_closes_the_client_promptly(
    start_sidecar: StartSidecar, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=CLOSED_LOG)
    sidecar = await start_sidecar(sidecar_upstream=f"127.0.0.1:{free_port()}")
    assert not sidecar.upstream.healthy
    for _ in range(2):
        wire = await connect(sidecar)
        with trio.fail_after(2):
            await wire.send(request_frame(3, 1, 1, {"Topics": []}))
            assert await wire.wait_closed() == b""
    await wait_until(lambda: sample(sidecar, "ksidecar_connections_closed_total",
                                    listener="PLAINTEXT", reason="upstream_unreachable") == 2)
    assert sample(sidecar, "ksidecar_errors_total", cause="upstream_unreachable") == 2
    assert sum("upstream_unreachable" in r.getMessage() for r in caplog.records
               if r.name == CLOSED_LOG) == 2


async def test_upstream_reset_closes_clients_and_a_new_broker_serves_new_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=CLOSED_LOG)
    broker = await trio.to_thread.run_sync(lambda: start_broker(tmp_path, name="tansu-reset"))
    second: TansuServer | None = None
    try:
        config = build_config(sidecar_keys(broker.bootstrap,
                                           sidecar_upstream_api_versions_refresh_ms="1000"))
        async with trio.open_nursery() as nursery:
            sidecar: Sidecar = await nursery.start(Sidecar(config).serve)
            idle, waiting = await connect(sidecar), await connect(sidecar)
            await healthy(idle, 1)
            await create_topic(waiting, "held")
            # A Fetch the broker holds (no data yet, long MaxWaitMs): in flight at the stop.
            await waiting.send(request_frame(1, 4, 9, {
                "ReplicaId": -1, "MaxWaitMs": 20000, "MinBytes": 1, "MaxBytes": 1 << 20,
                "IsolationLevel": 0, "Topics": [{"Topic": "held", "Partitions": [
                    {"Partition": 0, "FetchOffset": 0, "PartitionMaxBytes": 1 << 20}]}]}))
            await wait_until(lambda: any(c.link.slots for c in sidecar.connections))
            # The broker dies (SIGKILL: Tansu's SIGTERM waits for its connections to end).
            pid = broker.process.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            with trio.fail_after(2):
                assert await idle.wait_closed() == b""
                assert await waiting.wait_closed() == b""
            await wait_until(lambda: sample(sidecar, "ksidecar_connections_closed_total",
                                            listener="PLAINTEXT", reason="upstream_closed") == 1)
            await wait_until(lambda: sample(sidecar, "ksidecar_connections_closed_total",
                                            listener="PLAINTEXT", reason="upstream_reset") == 1)
            # Meanwhile a new client cannot be served: it is closed, not left hanging.
            refused = await connect(sidecar)
            with trio.fail_after(3):
                await refused.send(request_frame(3, 1, 1, {"Topics": []}))
                assert await refused.wait_closed() == b""
            second = await trio.to_thread.run_sync(
                lambda: start_broker(tmp_path, port=broker.port, name="tansu-reset-2"))
            fresh = await connect(sidecar)
            await healthy(fresh, 50)
            nursery.cancel_scope.cancel()
    finally:
        broker.stop()
        if second is not None:
            second.stop()

