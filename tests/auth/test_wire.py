"""The SASL exchange at the wire: what passes when, v0 raw tokens, bad input, re-authentication.

Requests are built with kafka-python's protocol classes where it has them and answers are
read with its codec (an implementation independent of ours); the SCRAM client side is
kafka-python's ``ScramClient``.
"""

from __future__ import annotations

import struct

import pytest
import trio
from kafka.net.sasl.scram import ScramClient

from proxy.tools.rig.tansu import TansuServer
from tests.auth.conftest import USERS, SaslRig, StartSasl, new_topic
from tests.proxy.wire import Wire, our_decode, request_frame, sample, wait_until

pytestmark = pytest.mark.integration

LISTENER = "SASL_PLAINTEXT"


def plain_token(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


async def connect(rig: SaslRig) -> Wire:
    return await Wire.connect("127.0.0.1", rig.port)


async def handshake(wire: Wire, mechanism: str, version: int = 1, corr: int = 1) -> tuple[int, list[str]]:
    _, body = our_decode(await wire.call(17, version, corr, {"Mechanism": mechanism}), 17, version)
    return body.ErrorCode, list(body.Mechanisms)


async def authenticate(wire: Wire, token: bytes, version: int = 2, corr: int = 2) -> object:
    _, body = our_decode(await wire.call(36, version, corr, {"AuthBytes": token}), 36, version)
    return body


async def raw_round(wire: Wire, token: bytes) -> bytes | None:
    await wire.send(struct.pack(">i", len(token)) + token)
    return await wire.read_frame()


async def metadata_ok(wire: Wire, corr: int) -> bool:
    frame = await wire.call(3, 1, corr, {"Topics": []})
    _, body = our_decode(frame, 3, 1)
    return len(body.Brokers) == 1


async def test_api_versions_advertises_sasl_and_unauthenticated_requests_close(sasl_sidecar: StartSasl) -> None:
    rig = await sasl_sidecar()
    with trio.fail_after(10):
        wire = await connect(rig)
        frame = await wire.call(18, 3, 1, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})
        _, versions = our_decode(frame, 18, 3)
        keys = {k.ApiKey: (k.MinVersion, k.MaxVersion) for k in versions.ApiKeys}
        assert keys[17] == (0, 1) and keys[36] == (0, 2)  # Tansu advertises neither
        assert keys[50] == (0, 0) and keys[51] == (0, 0)
        # A Produce before authentication: the connection closes, nothing is answered.
        produce = request_frame(0, 3, 2, {"TransactionalId": None, "Acks": 1, "TimeoutMs": 1000,
                                          "TopicData": []})
        await wire.send(produce)
        assert await wire.wait_closed() == b""
        # A Metadata request likewise, and a SaslAuthenticate before any handshake.
        for frame in (request_frame(3, 1, 3, {"Topics": []}), request_frame(36, 1, 4, {"AuthBytes": b"x"})):
            other = await connect(rig)
            await other.send(frame)
            assert await other.wait_closed() == b""
    await wait_until(lambda: sample(rig.sidecar, "ksidecar_connections_closed_total",
                                    listener=LISTENER, reason="unauthenticated") == 2)
    await wait_until(lambda: sample(rig.sidecar, "ksidecar_connections_closed_total",
                                    listener=LISTENER, reason="sasl_refused") == 1)


async def test_plain_v1_then_requests_pass_with_the_principal(sasl_sidecar: StartSasl) -> None:
    rig = await sasl_sidecar()
    with trio.fail_after(10):
        wire = await connect(rig)
        assert await handshake(wire, "PLAIN") == (0, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
        body = await authenticate(wire, plain_token("alice", USERS["alice"]))
        assert (body.ErrorCode, body.ErrorMessage, body.AuthBytes, body.SessionLifetimeMs) == (0, None, b"", 0)  # type: ignore[attr-defined]
        assert await metadata_ok(wire, 3)
        # After authentication: SaslAuthenticate is ILLEGAL_SASL_STATE, and the connection stays.
        body = await authenticate(wire, b"again", version=1, corr=4)
        assert body.ErrorCode == 34  # type: ignore[attr-defined]
        assert await metadata_ok(wire, 5)
    (connection,) = rig.sidecar.connections
    assert connection.principal == "User:alice"


async def test_wrong_password_gets_error_58_then_close_every_time(sasl_sidecar: StartSasl) -> None:
    rig = await sasl_sidecar()
    with trio.fail_after(30):
        for attempt in range(20):
            wire = await connect(rig)
            await wire.call(18, 0, 1)
            assert (await handshake(wire, "PLAIN", corr=2))[0] == 0
            user = "alice" if attempt % 2 else "nobody"
            body = await authenticate(wire, plain_token(user, "wrong"), version=1, corr=3)
            assert body.ErrorCode == 58  # type: ignore[attr-defined]
            assert body.ErrorMessage == (  # type: ignore[attr-defined]
                "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN")
            assert await wire.wait_closed() == b""
    assert sample(rig.sidecar, "ksidecar_sasl_authentications_total", listener=LISTENER,
                  mechanism="PLAIN", result="failure") == 20


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_v0_handshake_raw_tokens(mechanism: str, sasl_sidecar: StartSasl) -> None:
    rig = await sasl_sidecar()
    with trio.fail_after(10):
        wire = await connect(rig)
        assert (await handshake(wire, mechanism, version=0))[0] == 0
        if mechanism == "PLAIN":
            assert await raw_round(wire, plain_token("bob", USERS["bob"])) == b""
        else:
            client = ScramClient("alice", USERS["alice"], mechanism)
            first = await raw_round(wire, client.first_message())
            assert first is not None
            client.process_server_first_message(first)
            final = await raw_round(wire, client.final_message())
            assert final is not None
            client.process_server_final_message(final)  # checks the server's signature
        assert await metadata_ok(wire, 7)
        # A failed raw exchange closes with no answer (Kafka's v0 behaviour).
        bad = await connect(rig)
        assert (await handshake(bad, "PLAIN", version=0))[0] == 0
        assert await raw_round(bad, plain_token("bob", "nope")) is None
    assert sample(rig.sidecar, "ksidecar_sasl_authentications_total", listener=LISTENER,
                  mechanism=mechanism, result="success") == 1


async def test_bad_handshakes_and_tokens(sasl_sidecar: StartSasl) -> None:
    rig = await sasl_sidecar(sasl_enabled_mechanisms="SCRAM-SHA-256")
    with trio.fail_after(10):
        # A mechanism the listener does not enable: UNSUPPORTED_SASL_MECHANISM, then close.
        wire = await connect(rig)
        assert await handshake(wire, "PLAIN") == (33, ["SCRAM-SHA-256"])
        assert await wire.wait_closed() == b""
        # A second handshake during the exchange: ILLEGAL_SASL_STATE, then close.
        wire = await connect(rig)
        assert (await handshake(wire, "SCRAM-SHA-256"))[0] == 0
        assert (await handshake(wire, "SCRAM-SHA-256", corr=2))[0] == 34
        assert await wire.wait_closed() == b""
        # A request other than SaslAuthenticate during the exchange: closed.
        wire = await connect(rig)
        assert (await handshake(wire, "SCRAM-SHA-256"))[0] == 0
        await wire.send(request_frame(3, 1, 2, {"Topics": []}))
        assert await wire.wait_closed() == b""
        # A malformed SCRAM token: SASL_AUTHENTICATION_FAILED, then close.
        for token in (b"", b"\xff" * 40, b"n,,n=alice", b"y,,n=alice,r=abc"):
            wire = await connect(rig)
            assert (await handshake(wire, "SCRAM-SHA-256"))[0] == 0
            body = await authenticate(wire, token)
            assert body.ErrorCode == 58  # type: ignore[attr-defined]
            assert await wire.wait_closed() == b""
        # A SaslAuthenticate body that does not decode: closed.
        wire = await connect(rig)
        assert (await handshake(wire, "SCRAM-SHA-256"))[0] == 0
        await wire.send(request_frame(36, 1, 2, b"\x00\x00\x10\x00"))
        assert await wire.wait_closed() == b""
    await wait_until(lambda: sample(rig.sidecar, "ksidecar_connections_closed_total",
                                    listener=LISTENER, reason="bad_request") == 1)


async def test_reauthentication_and_session_expiry(
    sasl_sidecar: StartSasl, tansu: TansuServer
) -> None:
    rig = await sasl_sidecar(connections_max_reauth_ms="1500")
    with trio.fail_after(20):
        wire = await connect(rig)
        assert (await handshake(wire, "PLAIN"))[0] == 0
        body = await authenticate(wire, plain_token("alice", USERS["alice"]), version=1)
        assert body.SessionLifetimeMs == 1500  # type: ignore[attr-defined]
        # Re-authenticate as the same user: allowed, and a new lifetime starts.
        assert (await handshake(wire, "PLAIN", corr=3))[0] == 0
        body = await authenticate(wire, plain_token("alice", USERS["alice"]), version=1, corr=4)
        assert (body.ErrorCode, body.SessionLifetimeMs) == (0, 1500)  # type: ignore[attr-defined]
        assert await metadata_ok(wire, 5)
        # As somebody else: refused, closed.
        assert (await handshake(wire, "PLAIN", corr=6))[0] == 0
        body = await authenticate(wire, plain_token("bob", USERS["bob"]), version=1, corr=7)
        assert body.ErrorCode == 58  # type: ignore[attr-defined]
        assert "Cannot change principals" in body.ErrorMessage  # type: ignore[attr-defined]
        assert await wire.wait_closed() == b""
        # A session left to expire: the next request closes the connection.
        stale = await connect(rig)
        assert (await handshake(stale, "PLAIN"))[0] == 0
        assert (await authenticate(stale, plain_token("bob", USERS["bob"]), version=1)).ErrorCode == 0  # type: ignore[attr-defined]
        await trio.sleep(1.6)
        await stale.send(request_frame(3, 1, 3, {"Topics": []}))
        assert await stale.wait_closed() == b""
    await wait_until(lambda: sample(rig.sidecar, "ksidecar_connections_closed_total",
                                    listener=LISTENER, reason="session_expired") == 1)


async def test_kafka_python_reauthenticates_on_a_live_connection(
    sasl_sidecar: StartSasl, tansu: TansuServer
) -> None:
    """kafka-python (KIP-368) re-authenticates before SessionLifetimeMs runs out."""
    rig = await sasl_sidecar(connections_max_reauth_ms="2000")
    topic = await new_topic(tansu)

    def produce_across_sessions() -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=rig.bootstrap, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
            sasl_plain_password=USERS["alice"],
        )
        try:
            for i in range(8):
                producer.send(topic, f"v{i}".encode(), partition=0).get(timeout=10)
                import time

                time.sleep(0.5)
        finally:
            producer.close()

    with trio.fail_after(60):
        await trio.to_thread.run_sync(produce_across_sessions)
    # Logins beyond the first connections' are re-authentications; none expired.
    assert sample(rig.sidecar, "ksidecar_sasl_authentications_total", listener=LISTENER,
                  mechanism="SCRAM-SHA-256", result="success") >= 3
    assert sample(rig.sidecar, "ksidecar_connections_closed_total", listener=LISTENER,
                  reason="session_expired") == 0
