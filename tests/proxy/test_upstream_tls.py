"""The sidecar's TLS link to its upstream, against a real TLS server.

Tansu 0.6's TLS listener does not complete a handshake here, so the TLS upstream is
another real sidecar with an SSL listener in front of Tansu: client → sidecar B
(plaintext) → TLS → sidecar A → Tansu. Certificates come from trustme.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trustme

from proxy.tools.rig.tansu import TansuServer
from tests.proxy.conftest import StartSidecar, sidecar_keys
from tests.proxy.wire import Wire, our_decode, request_frame

pytestmark = pytest.mark.integration


async def test_sidecar_reaches_its_upstream_over_tls(
    start_sidecar: StartSidecar, tansu: TansuServer, tmp_path: Path
) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    keystore = tmp_path / "server.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(keystore))
    truststore = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(truststore))

    tls_front = await start_sidecar(
        sidecar_keys(
            tansu.bootstrap,
            listeners="SSL://127.0.0.1:0",
            ssl_keystore_location=str(keystore),
        )
    )
    tls_port = tls_front.bound["SSL"].port
    outer = await start_sidecar(
        sidecar_keys(
            f"127.0.0.1:{tls_port}",
            sidecar_upstream_security_protocol="ssl",
            sidecar_upstream_ssl_truststore_location=str(truststore),
            broker_id="111",
        )
    )
    assert outer.upstream.healthy, "the control connection over TLS failed"
    wire = await Wire.connect("127.0.0.1", outer.bound["PLAINTEXT"].port)
    try:
        with trio.fail_after(10):
            _, metadata = our_decode(await wire.call(3, 12, 7, {"Topics": []}), 3, 12)
    finally:
        await wire.aclose()
    # Tansu names itself; the TLS sidecar rewrites that to its SSL port, and the outer
    # sidecar (offset mapping relative to its upstream, the TLS sidecar) to its own port.
    assert [(b.NodeId, b.Port) for b in metadata.Brokers] == [(111, outer.bound["PLAINTEXT"].port)]


async def test_untrusted_upstream_certificate_is_refused(
    start_sidecar: StartSidecar, tansu: TansuServer, tmp_path: Path
) -> None:
    served_by, trusted = trustme.CA(), trustme.CA()
    keystore = tmp_path / "server.pem"
    served_by.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(keystore))
    truststore = tmp_path / "other-ca.pem"
    trusted.cert_pem.write_to_path(str(truststore))
    tls_front = await start_sidecar(
        sidecar_keys(tansu.bootstrap, listeners="SSL://127.0.0.1:0", ssl_keystore_location=str(keystore))
    )
    outer = await start_sidecar(
        sidecar_keys(
            f"127.0.0.1:{tls_front.bound['SSL'].port}",
            sidecar_upstream_security_protocol="ssl",
            sidecar_upstream_ssl_truststore_location=str(truststore),
            broker_id="111",
        )
    )
    assert not outer.upstream.healthy
    wire = await Wire.connect("127.0.0.1", outer.bound["PLAINTEXT"].port)
    try:
        # The broker is dialled for the first request that must be forwarded: it fails.
        await wire.send(request_frame(3, 1, 1, {"Topics": []}))
        with trio.fail_after(10):
            assert await wire.wait_closed() == b""
    finally:
        await wire.aclose()
    assert outer.metrics.errors.labels("upstream_unreachable")._value.get() >= 1
