"""TLS on a client listener: Python's ssl and confluent-kafka through an SSL:// listener,
and client-certificate authentication. Certificates come from trustme (a throwaway CA)."""

from __future__ import annotations

import hashlib
import ssl
import uuid
from pathlib import Path

import pytest
import trio
import trustme
from confluent_kafka import Producer
from kafka.protocol.metadata import MetadataResponse

from proxy.control.server import Sidecar
from proxy.tools.rig.tansu import TansuServer
from tests.proxy.conftest import StartSidecar, sidecar_keys
from tests.proxy.wire import (
    Wire,
    confluent_consume,
    create_topic,
    kp_decode,
    request_frame,
    sample,
    wait_until,
)

pytestmark = pytest.mark.integration


class Pki:
    """A CA, the sidecar's certificate (with key, one PEM file) and a client's."""

    def __init__(self, root: Path) -> None:
        self.ca = trustme.CA()
        self.ca_path = root / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_path))
        self.keystore = root / "sidecar.pem"
        self.ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
            str(self.keystore)
        )
        self.client = root / "client.pem"
        self.ca.issue_cert("client.wire-test").private_key_and_cert_chain_pem.write_to_path(
            str(self.client)
        )

    def client_context(self, with_cert: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_path))
        if with_cert:
            context.load_cert_chain(str(self.client))
        return context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


async def tls_wire(sidecar: Sidecar, context: ssl.SSLContext) -> Wire:
    tcp = await trio.open_tcp_stream("127.0.0.1", sidecar.bound["SSL"].port)
    stream = trio.SSLStream(tcp, context, server_hostname="127.0.0.1")
    await stream.do_handshake()
    return Wire(stream)


async def start_tls(start_sidecar: StartSidecar, pki: Pki, **keys: str) -> Sidecar:
    return await start_sidecar(listeners="SSL://127.0.0.1:0",
                               ssl_keystore_location=str(pki.keystore), **keys)


async def test_python_ssl_client_through_an_ssl_listener(
    start_sidecar: StartSidecar, pki: Pki
) -> None:
    sidecar = await start_tls(start_sidecar, pki)
    with trio.fail_after(10):
        wire = await tls_wire(sidecar, pki.client_context())
        frame = await wire.call(3, 1, 1, {"Topics": []})
    _, decoded = kp_decode(MetadataResponse, 1, frame, 3)
    # Clients on the SSL listener are told the SSL listener's address.
    assert [(b.host, b.port) for b in decoded.brokers] == [("127.0.0.1", sidecar.bound["SSL"].port)]
    await wire.aclose()


async def test_protocol_map_and_per_listener_keystore(
    start_sidecar: StartSidecar, pki: Pki, tansu: TansuServer
) -> None:
    """A listener named EXTERNAL is SSL through the map, with its own keystore key."""
    raw = sidecar_keys(tansu.bootstrap)
    raw.update({
        "listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:SSL",
        "listener.name.external.ssl.keystore.location": str(pki.keystore),
    })
    sidecar = await start_sidecar(raw)
    external, plain = sidecar.bound["EXTERNAL"].port, sidecar.bound["PLAINTEXT"].port
    with trio.fail_after(10):
        tcp = await trio.open_tcp_stream("127.0.0.1", external)
        tls = trio.SSLStream(tcp, pki.client_context(), server_hostname="127.0.0.1")
        await tls.do_handshake()
        over_tls = await Wire(tls).call(3, 1, 1, {"Topics": []})
        cleartext = await (await Wire.connect("127.0.0.1", plain)).call(3, 1, 2, {"Topics": []})
    # Each listener's clients are told that listener's address.
    _, decoded = kp_decode(MetadataResponse, 1, over_tls, 3)
    assert [b.port for b in decoded.brokers] == [external]
    _, decoded = kp_decode(MetadataResponse, 1, cleartext, 3)
    assert [b.port for b in decoded.brokers] == [plain]


async def test_confluent_kafka_produces_and_consumes_over_tls(
    start_sidecar: StartSidecar, pki: Pki
) -> None:
    sidecar = await start_tls(start_sidecar, pki)
    topic = f"tls-{uuid.uuid4().hex[:10]}"
    with trio.fail_after(10):
        await create_topic(await tls_wire(sidecar, pki.client_context()), topic)
    common = {
        "bootstrap.servers": f"127.0.0.1:{sidecar.bound['SSL'].port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca_path),
    }
    sent = [(f"k{i}".encode(), hashlib.sha256(str(i).encode()).digest() * (1 + i % 5))
            for i in range(300)]

    def produce() -> int:
        producer = Producer({**common, "linger.ms": 5})
        for key, value in sent:
            producer.produce(topic, value=value, key=key, partition=0)
        return int(producer.flush(20))

    with trio.fail_after(60):
        assert await trio.to_thread.run_sync(produce) == 0
        got = await trio.to_thread.run_sync(confluent_consume, common, topic, len(sent), 30)
    assert got == sent
    assert sample(sidecar, "ksidecar_connections_total", listener="SSL") >= 2


async def test_required_client_certificate(start_sidecar: StartSidecar, pki: Pki) -> None:
    sidecar = await start_tls(start_sidecar, pki, ssl_client_auth="required",
                              ssl_truststore_location=str(pki.ca_path))
    # Without a certificate: the handshake fails (with TLS 1.3 the client learns it on its
    # first read), nothing is answered, and the sidecar counts it.
    answer: bytes | None = b"?"
    with trio.fail_after(10):
        try:
            wire = await tls_wire(sidecar, pki.client_context(with_cert=False))
            await wire.send(request_frame(3, 1, 1, {"Topics": []}))
            answer = await wire.read_frame()
        except trio.BrokenResourceError:
            answer = None
    assert answer is None
    await wait_until(lambda: sample(sidecar, "ksidecar_errors_total", cause="tls_handshake") == 1)
    assert sample(sidecar, "ksidecar_connections_closed_total", listener="SSL",
                  reason="tls_handshake") == 1
    # With one, everything works.
    with trio.fail_after(10):
        wire = await tls_wire(sidecar, pki.client_context(with_cert=True))
        frame = await wire.call(3, 1, 2, {"Topics": []})
    _, decoded = kp_decode(MetadataResponse, 1, frame, 3)
    assert len(decoded.brokers) == 1
    assert sample(sidecar, "ksidecar_errors_total", cause="tls_handshake") == 1
