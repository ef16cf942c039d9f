"""PLAIN tokens, the PLAIN users file, Kafka's SCRAM credential text, the client side of the
logins, the passthrough principal reader, and the configuration keys (sans-IO)."""

from __future__ import annotations

import base64
import contextlib
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.auth.sasl.client import login_client
from proxy.auth.sasl.credentials import (
    CredentialFormatError,
    format_credential,
    parse_credential,
    scram_credentials,
)
from proxy.auth.sasl.errors import AuthenticationFailed, SaslError
from proxy.auth.sasl.passthrough import PrincipalReader
from proxy.auth.sasl.password_file import (
    PasswordFileError,
    check_user_name,
    format_users,
    hash_password,
    parse_users,
    verify_user,
)
from proxy.auth.sasl.plain import PlainServer, parse_plain
from proxy.auth.sasl.scram import (
    SCRAM_SHA_1,
    SCRAM_SHA_256,
    ScramClient,
    ScramServer,
    derive_credential,
)
from proxy.auth.user_store import desanitize, sanitize
from proxy.config.keys import ConfigError, build_config
from tests.auth.test_scram import RFC5802, RFC7677


@pytest.mark.parametrize(
    ("token", "user"),
    [(b"\0alice\0pw", "alice"), (b"alice\0alice\0pw", "alice"), ("\0Zoë\0p:w".encode(), "Zoë")],
)
def test_plain_tokens(token: bytes, user: str) -> None:
    parsed = parse_plain(token)
    assert parsed.username == user and "pw" not in repr(parsed) and "p:w" not in repr(parsed)


@pytest.mark.parametrize("token", [b"", b"\0alice", b"\0\0pw", b"\0alice\0", b"bob\0alice\0pw",
                                   b"\0a\0b\0c", b"\0\xff\0pw", b"\0a\0" + b"x" * 1000])
def test_bad_plain_tokens(token: bytes) -> None:
    server = PlainServer(lambda _u, _p: True)
    with pytest.raises(AuthenticationFailed):
        server.receive(token)
    assert not server.complete


@given(st.binary(max_size=300))
def test_plain_server_raises_only_sasl_errors(token: bytes) -> None:
    server = PlainServer(lambda _u, _p: False)
    with contextlib.suppress(SaslError):
        server.receive(token)
    assert not server.complete


def test_password_file_round_trip_and_verification() -> None:
    users = {"alice": hash_password("a-pw"), "x:y": hash_password("xy", iterations=5000)}
    text = format_users(users)
    assert "a-pw" not in text
    again = parse_users(text)
    assert sorted(again) == ["alice", "x:y"] and again["x:y"].iterations == 5000
    assert verify_user(again, "alice", "a-pw")
    assert not verify_user(again, "alice", "b-pw")
    assert not verify_user(again, "nobody", "a-pw")
    # The hash is PBKDF2-HMAC-SHA256 of the password with the stored salt (computed here).
    line = next(line for line in text.splitlines() if line.startswith("alice:"))
    _, scheme, iterations, salt, digest = line.split(":")
    assert scheme == "pbkdf2-sha256"
    assert base64.b64decode(digest) == hashlib.pbkdf2_hmac(
        "sha256", b"a-pw", base64.b64decode(salt), int(iterations))


@pytest.mark.parametrize(
    "text",
    ["alice:md5:1:AA==:AA==", "alice:pbkdf2-sha256:x:AA==:AA==", "alice:pbkdf2-sha256:10:!!:AA==",
     "alice:pbkdf2-sha256:10:AA==:AA==", ":pbkdf2-sha256:10:AA==:" + "A" * 44, "just-a-name"],
)
def test_bad_password_files(text: str) -> None:
    with pytest.raises(PasswordFileError, match="line 1"):
        parse_users(text)


def test_duplicate_users_and_bad_names() -> None:
    line = format_users({"a": hash_password("p")}).splitlines()[-1]
    with pytest.raises(PasswordFileError, match="twice"):
        parse_users(f"{line}\n{line}\n")
    for name in ("", "#x", "a\nb", "a\0b"):
        with pytest.raises(ValueError):
            check_user_name(name)
    with pytest.raises(ValueError):
        hash_password("p", iterations=10)


def test_kafka_credential_text() -> None:
    credential = derive_credential(SCRAM_SHA_256, "pw", 4096, b"salty")
    text = format_credential(credential)
    assert text.startswith("salt=c2FsdHk=,stored_key=") and text.endswith(",iterations=4096")
    again = parse_credential(text)
    assert (again.salt, again.stored_key, again.server_key, again.iterations) == (
        credential.salt, credential.stored_key, credential.server_key, 4096)
    # Kafka accepts the fields in any order; exactly four of them.
    fields = dict(part.split("=", 1) for part in text.split(","))
    assert parse_credential(",".join(f"{k}={fields[k]}" for k in reversed(list(fields)))).iterations == 4096
    for bad in ("salt=AA==", text + ",extra=1", text.replace("iterations=4096", "iterations=x"),
                "salt=!,stored_key=AA==,server_key=AA==,iterations=1", "nonsense"):
        with pytest.raises(CredentialFormatError):
            parse_credential(bad)
    config = {"SCRAM-SHA-256": text, "SCRAM-SHA-512": "broken", "producer_byte_rate": "1024"}
    assert list(scram_credentials(config)) == ["SCRAM-SHA-256"]


def test_user_znode_names_follow_kafkas_sanitizer() -> None:
    assert sanitize("alice") == "alice"
    assert sanitize("a b*c~/é") == "a%20b%2Ac%7E%2F%C3%A9"
    assert desanitize(sanitize("a b*c~/é")) == "a b*c~/é"


@pytest.mark.parametrize("vector", [RFC5802, RFC7677], ids=["rfc5802", "rfc7677"])
def test_scram_client_against_rfc_vectors(vector: dict[str, object]) -> None:
    nonce = bytes(vector["client_first"]).split(b"r=")[1].decode()  # type: ignore[arg-type]
    mechanism = SCRAM_SHA_1 if vector is RFC5802 else SCRAM_SHA_256
    client = ScramClient(mechanism, "user", "pencil", nonce=nonce)
    assert client.first() == vector["client_first"]
    assert client.respond(vector["server_first"]) == vector["client_final"]  # type: ignore[arg-type]
    assert client.respond(vector["server_final"]) is None  # type: ignore[arg-type]


def test_scram_client_refuses_a_forged_server() -> None:
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce="abc")
    client.first()
    client.respond(b"r=abcdef,s=QSXCR+Q6sek8bf92,i=4096")
    with pytest.raises(AuthenticationFailed):
        client.respond(b"v=AAAA")
    with pytest.raises(AuthenticationFailed):
        ScramClient(SCRAM_SHA_256, "u", "p", nonce="abc").respond(b"r=zzz,s=AA==,i=4096")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_login_clients_against_our_servers(mechanism: str) -> None:
    credential = derive_credential(SCRAM_SHA_256, "pw")
    server = (PlainServer(lambda u, p: (u, p) == ("svc", "pw")) if mechanism == "PLAIN"
              else ScramServer(SCRAM_SHA_256, {"svc": credential}.get))
    client = login_client(mechanism, "svc", "pw")
    token: bytes | None = client.first()
    while token is not None:
        token = client.respond(server.receive(token))
    assert server.complete and server.username == "svc"


def test_passthrough_reader() -> None:
    reader = PrincipalReader()
    reader.on_handshake("scram-sha-512")
    reader.on_client_token(b"n,,n=bo=2Cb,r=abc")
    assert reader.on_server_answer(True) is None  # server-first: not done
    reader.on_client_token(b"c=biws,r=abc,p=AAAA")  # only the first token names the user
    assert reader.on_server_answer(True) == "User:bo,b"
    # A refused round forgets the candidate; a later PLAIN login replaces the principal.
    reader.on_handshake("PLAIN")
    reader.on_client_token(b"\0eve\0pw")
    assert reader.on_server_answer(False) is None and reader.principal == "User:bo,b"
    reader.on_handshake("PLAIN")
    reader.on_client_token(b"\0carol\0pw")
    assert reader.on_server_answer(True) == "User:carol"
    # Mechanisms whose tokens do not name the user leave it as it is.
    reader.on_handshake("GSSAPI")
    reader.on_client_token(b"\x60\x00")
    assert reader.on_server_answer(True) is None and reader.principal == "User:carol"
    reader.on_handshake("PLAIN")
    reader.on_client_token(b"garbage")
    assert reader.on_server_answer(True) is None


BASE = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sidecar.upstream": "127.0.0.1:9092"}


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"sasl.enabled.mechanisms": "PLAIN,GSSAPI"}, "sasl.enabled.mechanisms='PLAIN,GSSAPI': 'GSSAPI' is not supported"),
        ({"sasl.enabled.mechanisms": " "}, "sasl.enabled.mechanisms"),
        ({"sidecar.sasl.mode": "proxy"}, "sidecar.sasl.mode='proxy': must be one of terminate, passthrough"),
        ({"connections.max.reauth.ms": "-1"}, "connections.max.reauth.ms='-1'"),
        ({"super.users": "alice"}, "super.users='alice': 'alice' is not User:<name>"),
        ({"sidecar.upstream.sasl.mechanism": "PLAIN,SCRAM-SHA-256"}, "name one mechanism"),
        ({"sidecar.upstream.sasl.mechanism": "PLAIN"}, "sidecar.upstream.sasl.username is empty"),
        ({"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI"),
    ],
)
def test_config_refusals_name_the_key(keys: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        build_config({**BASE, **keys})
    assert message in str(refused.value)


def test_config_values() -> None:
    config = build_config({**BASE, "sasl.enabled.mechanisms": "scram-sha-512, PLAIN,PLAIN",
                           "super.users": "User:alice; User:bob",
                           "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN"})
    assert config["sasl.enabled.mechanisms"] == ("SCRAM-SHA-512", "PLAIN")
    assert config["super.users"] == frozenset({"User:alice", "User:bob"})
    assert config.listener_value("SASL_PLAINTEXT", "sasl.enabled.mechanisms") == ("PLAIN",)
    assert config["sidecar.sasl.mode"] == "terminate" and config["connections.max.reauth.ms"] == 0
