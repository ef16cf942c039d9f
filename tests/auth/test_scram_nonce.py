"""The client-final nonce: Kafka 3.9's suffix rule (the default) and RFC 5802's equality.

librdkafka before 2.6.1 (Debian's 2.0.2, which kcat links) builds its client-final message as
``c=biws,r=<client nonce><server-first nonce>``: the server-first nonce already begins with
the client nonce, so the client nonce appears twice (confluentinc/librdkafka#4895). Kafka
3.8.1/3.9 accept it (``ScramSaslServer``: ``nonce().endsWith(serverFirstMessage.nonce())``,
the CVE-2024-56128 fix); Kafka 4.x compares for equality and refuses it.

The exchange below is replayed as that client writes it: its message layout (``n,,n=<user>,
r=<32 chars from '-'..'~'>``, then the doubled nonce) with the proof computed here from
RFC 5802's formulas (hashlib/hmac directly, not the code under test) over the message as sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from proxy.auth.sasl.errors import AuthenticationFailed
from proxy.auth.sasl.scram import (
    NONCE_SUFFIX,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramMechanism,
    ScramServer,
    derive_credential,
)
from proxy.auth.sasl.session import Session, State

PASSWORD = "kcat-secret"
SALT = bytes(range(24))
#: librdkafka's client nonce: 32 characters drawn from 0x2d..0x7e.
CLIENT_NONCE = "-./0123456789:;<=>?@ABCDEFGHIJKL"
SERVER_NONCE = "sidecarServerNonce_0123456789abc"


def _client_final(
    mechanism: ScramMechanism,
    client_first_bare: str,
    server_first: str,
    nonce: str,
    password: str = PASSWORD,
) -> tuple[bytes, bytes]:
    """(client-final message, expected server signature), from RFC 5802 §3 by hand."""
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        mechanism.hash_name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.digest(salted, b"Client Key", mechanism.hash_name)
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    without_proof = f"c=biws,r={nonce}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, mechanism.hash_name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.digest(salted, b"Server Key", mechanism.hash_name)
    server_signature = hmac.digest(server_key, auth_message, mechanism.hash_name)
    final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    return final, b"v=" + base64.b64encode(server_signature)


def _server(mechanism: ScramMechanism, **kwargs: object) -> ScramServer:
    credential = derive_credential(mechanism, PASSWORD, 4096, SALT)
    return ScramServer(mechanism, {"kcat": credential}.get, nonce=SERVER_NONCE, **kwargs)  # type: ignore[arg-type]


def _replay(server: ScramServer, doubled: bool) -> tuple[bytes, bytes]:
    bare = f"n=kcat,r={CLIENT_NONCE}"
    server_first = server.receive(f"n,,{bare}".encode()).decode()
    assert server_first.startswith(f"r={CLIENT_NONCE}{SERVER_NONCE},s=")
    full_nonce = server_first.split(",")[0][2:]
    nonce = CLIENT_NONCE + full_nonce if doubled else full_nonce
    final, expected = _client_final(server.mechanism, bare, server_first, nonce)
    return server.receive(final), expected


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512], ids=lambda m: m.name)
def test_kcat_doubled_nonce_logs_in_by_default_and_is_counted(mechanism: ScramMechanism) -> None:
    server = _server(mechanism)
    assert server.nonce_check == "kafka"
    answer, expected = _replay(server, doubled=True)
    assert answer == expected  # the signature covers the message as sent
    assert server.complete and server.username == "kcat"
    assert server.deviations == (NONCE_SUFFIX,) == ("scram-nonce-suffix",)


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512], ids=lambda m: m.name)
def test_strict_refuses_the_doubled_nonce(mechanism: ScramMechanism) -> None:
    server = _server(mechanism, nonce_check="strict")
    with pytest.raises(AuthenticationFailed, match="nonce does not match"):
        _replay(server, doubled=True)
    assert not server.complete and server.username is None


@pytest.mark.parametrize("check", ["kafka", "strict"])
def test_rfc_nonce_needs_no_leniency(check: str) -> None:
    server = _server(SCRAM_SHA_256, nonce_check=check)
    answer, expected = _replay(server, doubled=False)
    assert answer == expected and server.complete
    assert server.deviations == ()


@pytest.mark.parametrize(
    "nonce",
    [
        CLIENT_NONCE,  # only the client's half (refused by Kafka 3.9 as well)
        CLIENT_NONCE + SERVER_NONCE + "x",  # something after the server-first nonce
        SERVER_NONCE,  # the server's half alone
        "",
    ],
)
def test_kafka_rule_is_a_suffix_rule_not_anything_goes(nonce: str) -> None:
    server = _server(SCRAM_SHA_256)
    bare = f"n=kcat,r={CLIENT_NONCE}"
    server_first = server.receive(f"n,,{bare}".encode()).decode()
    final, _ = _client_final(SCRAM_SHA_256, bare, server_first, nonce)
    with pytest.raises(AuthenticationFailed, match="nonce does not match"):
        server.receive(final)


def test_any_prefix_passes_as_in_kafka_39_but_the_proof_still_decides() -> None:
    # Kafka 3.9 checks endsWith only: what comes before the server-first nonce is not looked
    # at. The proof is over the message as sent, so a wrong password still fails.
    server = _server(SCRAM_SHA_256)
    bare = f"n=kcat,r={CLIENT_NONCE}"
    server_first = server.receive(f"n,,{bare}".encode()).decode()
    full = server_first.split(",")[0][2:]
    final, expected = _client_final(SCRAM_SHA_256, bare, server_first, "anything" + full)
    assert server.receive(final) == expected
    assert server.deviations == (NONCE_SUFFIX,)
    wrong = _server(SCRAM_SHA_256)
    server_first = wrong.receive(f"n,,{bare}".encode()).decode()
    final, _ = _client_final(SCRAM_SHA_256, bare, server_first, CLIENT_NONCE + full, "wrong")
    with pytest.raises(AuthenticationFailed, match="proof"):
        wrong.receive(final)


def test_unknown_nonce_check_is_refused() -> None:
    with pytest.raises(ValueError, match="nonce_check"):
        _server(SCRAM_SHA_256, nonce_check="lenient")


@pytest.mark.parametrize("raw", [True, False], ids=["handshake-v0-raw-tokens", "authenticate-v0"])
def test_session_reports_the_deviation_on_success(raw: bool) -> None:
    # kcat (librdkafka 2.0.2) speaks SaslHandshake v1 + SaslAuthenticate v0; a v0 handshake
    # sends raw tokens. Either way the success reply names what the login needed.
    servers: list[ScramServer] = []

    def factory() -> ScramServer:
        servers.append(_server(SCRAM_SHA_512))
        return servers[-1]

    session = Session({"SCRAM-SHA-512": factory})
    session.handshake(0 if raw else 1, "SCRAM-SHA-512", now=0.0)

    def step(token: bytes) -> bytes:
        reply = session.raw_token(token, 0.0) if raw else session.authenticate(0, token, 0.0)
        assert not reply.error_code
        if reply.outcome == "success":
            assert reply.deviations == (NONCE_SUFFIX,)
        else:
            assert reply.deviations == ()
        return reply.token

    bare = f"n=kcat,r={CLIENT_NONCE}"
    server_first = step(f"n,,{bare}".encode()).decode()
    full = server_first.split(",")[0][2:]
    final, expected = _client_final(SCRAM_SHA_512, bare, server_first, CLIENT_NONCE + full)
    assert step(final) == expected
    assert session.state is State.AUTHENTICATED and session.principal == "User:kcat"
    assert session.deviations == (NONCE_SUFFIX,)
