"""SCRAM server against the RFCs' test vectors, kafka-python's client, and arbitrary bytes."""

from __future__ import annotations

import base64
import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient

from proxy.auth.sasl.errors import AuthenticationFailed, SaslError
from proxy.auth.sasl.scram import (
    SCRAM_SHA_1,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    decode_saslname,
    derive_credential,
    encode_saslname,
    parse_client_final,
    parse_client_first,
)

# RFC 5802 §5 (SCRAM-SHA-1) and RFC 7677 §3 (SCRAM-SHA-256): user "user", password "pencil".
RFC5802 = {
    "mechanism": SCRAM_SHA_1,
    "salt": "QSXCR+Q6sek8bf92",
    "server_nonce": "3rfcNHYJY1ZVvWVs7j",
    "client_first": b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
    "server_first": b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
    "client_final": b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
    "server_final": b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
}
RFC7677 = {
    "mechanism": SCRAM_SHA_256,
    "salt": "W22ZaJ0SNY7soEsUEjb6gQ==",
    "server_nonce": "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    "client_first": b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    "server_first": b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    "client_final": b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    "server_final": b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
}


def vector_server(vector: dict[str, object], password: str = "pencil") -> ScramServer:
    mechanism = vector["mechanism"]
    assert isinstance(mechanism, ScramMechanism)
    salt = base64.b64decode(str(vector["salt"]))
    credential = derive_credential(mechanism, password, 4096, salt)
    return ScramServer(mechanism, {"user": credential}.get, nonce=str(vector["server_nonce"]))


@pytest.mark.parametrize("vector", [RFC5802, RFC7677], ids=["rfc5802-sha1", "rfc7677-sha256"])
def test_rfc_vector(vector: dict[str, object]) -> None:
    server = vector_server(vector)
    assert server.receive(vector["client_first"]) == vector["server_first"]  # type: ignore[arg-type]
    assert not server.complete
    assert server.receive(vector["client_final"]) == vector["server_final"]  # type: ignore[arg-type]
    assert server.complete and server.username == "user"


@pytest.mark.parametrize("vector", [RFC5802, RFC7677], ids=["rfc5802-sha1", "rfc7677-sha256"])
def test_rfc_vector_with_another_password_fails(vector: dict[str, object]) -> None:
    server = vector_server(vector, password="pencil2")
    server.receive(vector["client_first"])  # type: ignore[arg-type]
    with pytest.raises(AuthenticationFailed):
        server.receive(vector["client_final"])  # type: ignore[arg-type]
    assert not server.complete and server.username is None


def test_rfc7677_stored_and_server_keys() -> None:
    # Independent arithmetic: SaltedPassword from PBKDF2 directly, then the RFC's formulas.
    import hashlib
    import hmac

    salt = base64.b64decode(RFC7677["salt"])  # type: ignore[arg-type]
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    expected = ScramCredential(salt, hashlib.sha256(client_key).digest(),
                               hmac.new(salted, b"Server Key", "sha256").digest(), 4096)
    got = derive_credential(SCRAM_SHA_256, "pencil", 4096, salt)
    assert (got.salt, got.stored_key, got.server_key, got.iterations) == (
        expected.salt, expected.stored_key, expected.server_key, expected.iterations)
    assert "pencil" not in repr(got) and "stored" not in repr(got)


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512], ids=lambda m: m.name)
@pytest.mark.parametrize("user", ["alice", "Zoë"])  # kafka-python does not escape , and =
def test_kafka_python_client_logs_in(mechanism: ScramMechanism, user: str) -> None:
    credential = derive_credential(mechanism, "s3cret", 4096)
    server = ScramServer(mechanism, {user: credential}.get)
    client = ScramClient(user, "s3cret", mechanism.name)
    client.process_server_first_message(server.receive(client.first_message()))
    final = server.receive(client.final_message())
    client.process_server_final_message(final)  # raises if the server signature is wrong
    assert server.complete and server.username == user


@pytest.mark.parametrize("user", ["alice", "nobody"])
def test_wrong_password_and_unknown_user_look_alike(user: str) -> None:
    credential = derive_credential(SCRAM_SHA_256, "right", 4096)
    server = ScramServer(SCRAM_SHA_256, {"alice": credential}.get)
    client = ScramClient(user, "wrong", "SCRAM-SHA-256")
    first = server.receive(client.first_message())
    # Both get a server-first with a salt and Kafka's iteration count, and fail at the proof.
    assert first.split(b",")[2] == b"i=4096"
    client.process_server_first_message(first)
    with pytest.raises(AuthenticationFailed) as failed:
        server.receive(client.final_message())
    assert failed.value.message == "SCRAM proof does not verify"
    with pytest.raises(AuthenticationFailed):
        server.receive(b"anything")  # an ended exchange stays ended


def test_unknown_user_salt_is_stable() -> None:
    def salt_for(name: str) -> bytes:
        server = ScramServer(SCRAM_SHA_512, lambda _: None, nonce="n")
        return server.receive(f"n,,n={name},r=abc".encode()).split(b",s=")[1]

    assert salt_for("ghost") == salt_for("ghost") != salt_for("ghost2")


def test_too_few_iterations_in_store_fail() -> None:
    weak = derive_credential(SCRAM_SHA_256, "pw", 1000)
    server = ScramServer(SCRAM_SHA_256, {"u": weak}.get)
    client = ScramClient("u", "pw", "SCRAM-SHA-256")
    client.process_server_first_message(server.receive(client.first_message()))
    with pytest.raises(AuthenticationFailed):
        server.receive(client.final_message())


@pytest.mark.parametrize(
    "token",
    [
        b"y,,n=user,r=abc",  # channel binding flag
        b"p=tls-unique,,n=user,r=abc",
        b"n,,m=ext,n=user,r=abc",  # mandatory extension
        b"n,,n=,r=abc",  # empty user
        b"n,,n=user,r=",  # empty nonce
        b"n,,n=us,er,r=abc",  # unescaped comma
        b"n,,n=us=2Der,r=abc",  # bad escape
        b"n,a=other,n=user,r=abc",  # authzid differs
        b"n,x=1,n=user,r=abc",
        b"n,,r=abc,n=user",  # order
        b"n,,n=user,r=abc,tokenauth=true",  # delegation token
        b"\xff\xfe",
        b"n,,n=user",
        b"",
    ],
)
def test_bad_client_first(token: bytes) -> None:
    server = ScramServer(SCRAM_SHA_256, lambda _: None)
    with pytest.raises(AuthenticationFailed):
        server.receive(token)


@pytest.mark.parametrize(
    "final",
    [
        b"c=biws,r=WRONG,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        b"c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=!!!",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        b"r=x,c=biws,p=AAAA",
    ],
)
def test_bad_client_final(final: bytes) -> None:
    server = vector_server(RFC7677)
    server.receive(RFC7677["client_first"])  # type: ignore[arg-type]
    with pytest.raises(AuthenticationFailed):
        server.receive(final)


def test_saslname_escaping_round_trips() -> None:
    assert encode_saslname("a=b,c") == "a=3Db=2Cc"
    assert decode_saslname("a=3Db=2Cc") == "a=b,c"


@given(st.text(max_size=40))
def test_saslname_round_trip_any(name: str) -> None:
    assert decode_saslname(encode_saslname(name)) == name


@given(st.binary(max_size=300))
def test_parsers_raise_only_sasl_errors(data: bytes) -> None:
    for parse in (parse_client_first, parse_client_final):
        with contextlib.suppress(SaslError):
            parse(data)


@given(st.lists(st.binary(max_size=200), min_size=1, max_size=3), st.booleans())
def test_server_on_arbitrary_tokens_raises_only_sasl_errors(tokens: list[bytes], known: bool) -> None:
    credential = derive_credential(SCRAM_SHA_256, "pw", 4096, b"salt")
    server = ScramServer(SCRAM_SHA_256, lambda _: credential if known else None)
    for token in tokens:
        try:
            server.receive(token)
        except SaslError:
            break
    assert not server.complete


_ATTR = st.text(alphabet=st.sampled_from("nrcpaim=,=2C3Dbiws+/x"), max_size=60)


@given(st.lists(_ATTR, min_size=1, max_size=2))
def test_server_on_near_miss_messages(messages: list[str]) -> None:
    # Text built from SCRAM's own alphabet reaches deeper than random bytes.
    server = ScramServer(SCRAM_SHA_256, lambda _: derive_credential(SCRAM_SHA_256, "pw", 4096, b"s"))
    for message in messages:
        try:
            server.receive(("n,," + message).encode())
        except SaslError:
            break
