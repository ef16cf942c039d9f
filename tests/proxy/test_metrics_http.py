"""The HTTP endpoint: /metrics parsed by prometheus_client's own parser, /healthz, /readyz."""

from __future__ import annotations

import struct

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from proxy.config.keys import HostPort
from proxy.tools.rig.ports import free_port
from tests.proxy.conftest import StartSidecar
from tests.proxy.wire import Wire, request_frame

pytestmark = pytest.mark.integration


async def http_get(address: HostPort | None, path: str, method: str = "GET") -> tuple[int, bytes]:
    """One HTTP/1.1 request over a raw socket: ``(status, body)``."""
    assert address is not None
    with trio.fail_after(5):
        stream = await trio.open_tcp_stream(address.host, address.port)
        await stream.send_all(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
        await stream.aclose()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    assert len(body) == (0 if method == "HEAD" else length)
    return status, body


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition, keyed by name and label set."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(table: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:
    return table.get((name, frozenset(labels.items())), 0.0)


async def test_metrics_after_traffic(start_sidecar: StartSidecar) -> None:
    sidecar = await start_sidecar()
    wire = await Wire.connect("127.0.0.1", sidecar.bound["PLAINTEXT"].port)
    metadata = request_frame(3, 1, 2, {"Topics": []})
    versions = request_frame(18, 0, 1, {})
    with trio.fail_after(5):
        await wire.send([versions, metadata, request_frame(10035, 0, 3, {"NodeIds": []}),
                         request_frame(9999, 0, 4, b"")])
        local, forwarded, broker_metadata, bare = await wire.read_frames(4)
    assert bare == struct.pack(">i", 4)

    status, body = await http_get(sidecar.metrics_address, "/metrics")
    assert status == 200
    table = samples(body.decode())

    assert value(table, "ksidecar_requests_total", api="Metadata", version="1",
                 outcome="forwarded") == 1
    assert value(table, "ksidecar_requests_total", api="ApiVersions", version="0",
                 outcome="local") == 1
    assert value(table, "ksidecar_requests_total", api="unknown", version="other",
                 outcome="unsupported") == 1
    assert value(table, "ksidecar_local_responses_total", api="ApiVersions") == 1
    assert value(table, "ksidecar_local_responses_total", api="BrokerMetadata") == 1
    assert value(table, "ksidecar_unsupported_requests_total", api_key="9999") == 1
    # Bytes as they crossed the wire, size prefixes included.
    assert value(table, "ksidecar_request_bytes_total", api="Metadata") == len(metadata)
    assert value(table, "ksidecar_request_bytes_total", api="ApiVersions") == len(versions)
    assert value(table, "ksidecar_response_bytes_total", api="Metadata") == 4 + len(forwarded)
    assert value(table, "ksidecar_response_bytes_total", api="ApiVersions") == 4 + len(local)
    assert value(table, "ksidecar_responses_total", api="BrokerMetadata") == 1
    assert value(table, "ksidecar_upstream_latency_seconds_count", api="Metadata") == 1
    assert value(table, "ksidecar_upstream_latency_seconds_sum", api="Metadata") > 0
    assert value(table, "ksidecar_sidecar_latency_seconds_count", api="ApiVersions") == 1
    assert value(table, "ksidecar_rewrites_total", api="Metadata") == 1
    assert value(table, "ksidecar_connections_total", listener="PLAINTEXT") == 1
    assert value(table, "ksidecar_connections_active", listener="PLAINTEXT") == 1
    assert value(table, "ksidecar_upstream_up") == 1
    del broker_metadata

    await wire.aclose()
    with trio.fail_after(5):
        while True:
            _, body = await http_get(sidecar.metrics_address, "/metrics")
            table = samples(body.decode())
            if value(table, "ksidecar_connections_active", listener="PLAINTEXT") == 0:
                break
            await trio.sleep(0.01)
    assert value(table, "ksidecar_connections_closed_total", listener="PLAINTEXT",
                 reason="client_closed") == 1


async def test_health_and_readiness(start_sidecar: StartSidecar) -> None:
    sidecar = await start_sidecar()
    assert await http_get(sidecar.metrics_address, "/healthz") == (200, b"ok\n")
    assert (await http_get(sidecar.metrics_address, "/readyz"))[0] == 200
    assert (await http_get(sidecar.metrics_address, "/nope"))[0] == 404
    assert (await http_get(sidecar.metrics_address, "/metrics", "POST"))[0] == 405
    assert await http_get(sidecar.metrics_address, "/healthz", "HEAD") == (200, b"")


async def test_not_ready_when_the_upstream_is_dead(start_sidecar: StartSidecar) -> None:
    sidecar = await start_sidecar(sidecar_upstream=f"127.0.0.1:{free_port()}")
    assert await http_get(sidecar.metrics_address, "/healthz") == (200, b"ok\n")
    status, body = await http_get(sidecar.metrics_address, "/readyz")
    assert (status, body) == (503, b"not ready: upstream not reachable\n")
    _, metrics = await http_get(sidecar.metrics_address, "/metrics")
    assert value(samples(metrics.decode()), "ksidecar_upstream_up") == 0
