"""Passthrough: the broker authenticates, the sidecar forwards the exchange and reads the
principal from it.

Tansu cannot authenticate, so a second sidecar in terminate mode stands in for the
authenticating broker: client → sidecar A (passthrough) → sidecar B (terminate) → Tansu.
A's control connection logs in to B with ``sidecar.upstream.sasl.*``. SCRAM signs every
message of the exchange, so a login that succeeds through A shows that A forwarded it
untouched.
"""

from __future__ import annotations

import struct

import pytest
import trio
from kafka.net.sasl.scram import ScramClient

from proxy.control.server import Sidecar
from proxy.tools.rig.tansu import TansuServer
from tests.auth.conftest import USERS, StartSasl, new_topic
from tests.auth.test_clients import run_confluent
from tests.proxy.conftest import StartSidecar, sidecar_keys
from tests.proxy.wire import Wire, our_decode, sample, wait_until

pytestmark = pytest.mark.integration

LISTENER = "SASL_PLAINTEXT"


async def start_pair(
    sasl_sidecar: StartSasl, start_sidecar: StartSidecar, **keys: str
) -> tuple[Sidecar, Sidecar]:
    rig_b = await sasl_sidecar()
    b = rig_b.sidecar
    a = await start_sidecar(sidecar_keys(
        f"127.0.0.1:{b.bound[LISTENER].port}",
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        sidecar_sasl_mode="passthrough",
        sidecar_upstream_sasl_mechanism="SCRAM-SHA-512",
        sidecar_upstream_sasl_username="alice",
        sidecar_upstream_sasl_password=USERS["alice"],
        **keys,
    ))
    assert a.upstream.healthy, "A's control connection could not log in to B"
    return a, b


def principals(sidecar: Sidecar) -> list[str]:
    return sorted(c.principal for c in sidecar.connections)


async def test_scram_v1_and_plain_v0_through_a_passthrough_sidecar(
    sasl_sidecar: StartSasl, start_sidecar: StartSidecar
) -> None:
    a, b = await start_pair(sasl_sidecar, start_sidecar)
    port = a.bound[LISTENER].port
    with trio.fail_after(20):
        # SCRAM-SHA-256 with SaslAuthenticate v1, kafka-python's client.
        scram = await Wire.connect("127.0.0.1", port)
        _, versions = our_decode(await scram.call(18, 0, 1), 18, 0)
        assert {k.ApiKey for k in versions.ApiKeys} >= {17, 36}  # B's, passed on by A
        _, shake = our_decode(await scram.call(17, 1, 2, {"Mechanism": "SCRAM-SHA-256"}), 17, 1)
        assert shake.ErrorCode == 0
        client = ScramClient("bob", USERS["bob"], "SCRAM-SHA-256")
        _, first = our_decode(await scram.call(36, 1, 3, {"AuthBytes": client.first_message()}), 36, 1)
        client.process_server_first_message(first.AuthBytes)
        assert principals(a) == ["User:ANONYMOUS"]  # one round is not a login
        _, final = our_decode(await scram.call(36, 1, 4, {"AuthBytes": client.final_message()}), 36, 1)
        assert final.ErrorCode == 0
        client.process_server_final_message(final.AuthBytes)  # B signed what the client sent
        assert principals(a) == ["User:bob"]
        # PLAIN with a v0 handshake: raw tokens pass through A as they are.
        plain = await Wire.connect("127.0.0.1", port)
        _, shake = our_decode(await plain.call(17, 0, 1, {"Mechanism": "PLAIN"}), 17, 0)
        assert shake.ErrorCode == 0
        token = b"\0alice\0" + USERS["alice"].encode()
        await plain.send(struct.pack(">i", len(token)) + token)
        assert await plain.read_frame() == b""
        _, metadata = our_decode(await plain.call(3, 1, 2, {"Topics": []}), 3, 1)
        assert [broker.Port for broker in metadata.Brokers] == [port]  # A's address, not B's
        assert principals(a) == ["User:alice", "User:bob"]
        # B also holds A's control connection, logged in as alice and kept open (watched).
        assert principals(b) == ["User:alice", "User:alice", "User:bob"]
        # A wrong password: B refuses, A counts it and keeps the principal anonymous.
        wrong = await Wire.connect("127.0.0.1", port)
        await wrong.call(17, 1, 1, {"Mechanism": "PLAIN"})
        _, refused = our_decode(await wrong.call(36, 1, 2, {"AuthBytes": b"\0bob\0nope"}), 36, 1)
        assert refused.ErrorCode == 58
        assert await wrong.wait_closed() == b""
    assert sample(a, "ksidecar_sasl_authentications_total", listener=LISTENER,
                  mechanism="SCRAM-SHA-256", result="success") == 1
    assert sample(a, "ksidecar_sasl_authentications_total", listener=LISTENER,
                  mechanism="PLAIN", result="success") == 1
    assert sample(a, "ksidecar_sasl_authentications_total", listener=LISTENER,
                  mechanism="PLAIN", result="failure") == 1
    # A answered none of it: every SASL request went to B.
    assert sample(a, "ksidecar_requests_total", api="SaslAuthenticate", version="1",
                  outcome="forwarded") == 3
    assert sample(a, "ksidecar_local_responses_total", api="SaslAuthenticate") == 0
    await wait_until(lambda: sample(b, "ksidecar_sasl_authentications_total", listener=LISTENER,
                                    mechanism="PLAIN", result="failure") == 1)


async def test_confluent_kafka_through_passthrough(
    sasl_sidecar: StartSasl, start_sidecar: StartSidecar, tansu: TansuServer
) -> None:
    a, _ = await start_pair(sasl_sidecar, start_sidecar)
    topic = await new_topic(tansu)
    with trio.fail_after(60):
        got = await trio.to_thread.run_sync(
            run_confluent, f"127.0.0.1:{a.bound[LISTENER].port}", "SCRAM-SHA-512", "bob", USERS["bob"], topic)
    assert len(got) == 5
    assert sample(a, "ksidecar_sasl_authentications_total", listener=LISTENER,
                  mechanism="SCRAM-SHA-512", result="success") >= 2


async def test_observers_never_see_a_forwarded_secret(
    sasl_sidecar: StartSasl, start_sidecar: StartSidecar
) -> None:
    """In passthrough the exchange crosses the sidecar; its request bodies must not reach
    observers (a PLAIN SaslAuthenticate carries the password in clear)."""
    a, _ = await start_pair(
        sasl_sidecar, start_sidecar, observer_class_names="tests.observers.fakes:CountingObserver"
    )
    assert a.observers is not None
    observer = a.observers.workers[0].observer
    with trio.fail_after(20):
        wire = await Wire.connect("127.0.0.1", a.bound[LISTENER].port)
        await wire.call(17, 1, 1, {"Mechanism": "PLAIN"})
        token = b"\0alice\0" + USERS["alice"].encode()
        _, done = our_decode(await wire.call(36, 1, 2, {"AuthBytes": token}), 36, 1)
        assert done.ErrorCode == 0
        await wire.call(3, 1, 3, {"Topics": []})
        await wire.aclose()
        await wait_until(lambda: len(observer.calls) >= 6)  # three exchanges, two calls each
    seen = {(args[3], type(args[0]).__name__) for kind, args in observer.calls if kind == "request"}
    assert (36, "NoneType") in seen  # the SaslAuthenticate exchange is recorded, without its body
    assert (3, "StructView") in seen  # while other requests keep theirs
    assert not any(USERS["alice"] in repr(args) for _, args in observer.calls)
