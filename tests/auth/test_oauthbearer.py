"""OAUTHBEARER at the sidecar, sans-IO: the token check, the RFC 7628 exchange, the session.

Keys are made here with ``cryptography``; tokens are signed with PyJWT, except the forged
ones (``alg: none``, HS256 keyed with the public key), which are put together by hand as an
attacker would. ``now`` is passed in: no real clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import jwt
import pytest
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ErrorCode
from proxy.auth.sasl.errors import AuthenticationFailed
from proxy.auth.sasl.jwt_token import (
    JwksError,
    KeySet,
    TokenRefused,
    TokenRules,
    UnknownKey,
    validate,
)
from proxy.auth.sasl.oauthbearer import OAuthBearerServer, parse_initial_response
from proxy.auth.sasl.session import Session, State, session_lifetime_ms
from proxy.control.jwks import JwksFetcher, JwksSettings

NOW = 1_800_000_000.0
ISSUER = "https://idp.example"
AUDIENCE = "urn:kafka"
RULES = TokenRules(expected_issuer=ISSUER, expected_audience=(AUDIENCE,), clock_skew_s=30)


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


KEY = rsa_key()
OTHER = rsa_key()
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def jwk(key: Any, kid: str, alg: str | None = "RS256") -> dict[str, Any]:
    public = key.public_key()
    algorithm = jwt.algorithms.RSAAlgorithm if isinstance(public, rsa.RSAPublicKey) else jwt.algorithms.ECAlgorithm
    data: dict[str, Any] = json.loads(algorithm.to_jwk(public))
    data.update(kid=kid, use="sig")
    if alg:
        data["alg"] = alg
    return data


def keyset(*entries: dict[str, Any]) -> KeySet:
    return KeySet.from_json(json.dumps({"keys": list(entries)}).encode())


KEYS = keyset(jwk(KEY, "k1"), jwk(EC_KEY, "e1", "ES256"))


def claims(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"sub": "svc-a", "iss": ISSUER, "aud": AUDIENCE, "iat": NOW - 10,
                            "exp": NOW + 300, "scope": "kafka read"}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def token(key: Any = KEY, kid: str | None = "k1", alg: str = "RS256", **changes: Any) -> str:
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(claims(**changes), key, algorithm=alg, headers=headers)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], signature: Any) -> str:
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims()).encode())}"
    return f"{signing_input}.{signature(signing_input.encode())}"


class Source:
    """A key source: ``current`` keys, and what a refresh would bring."""

    def __init__(self, keys: KeySet, after_refresh: KeySet | None = None) -> None:
        self.keys = keys
        self.after_refresh = after_refresh
        self.refreshes: list[str | None] = []

    def current(self) -> KeySet:
        return self.keys

    def refreshed(self, kid: str | None) -> KeySet:
        self.refreshes.append(kid)
        if self.after_refresh is not None:
            self.keys = self.after_refresh
        return self.keys


def initial(bearer: str, authzid: str = "", extensions: str = "") -> bytes:
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01auth=Bearer {bearer}\x01{extensions}\x01".encode()


# -- the token check -------------------------------------------------------------------------


def test_good_token_names_the_principal_scope_and_expiry() -> None:
    valid = validate(token(), KEYS, NOW, RULES)
    assert (valid.principal, valid.scope, valid.expires_at) == ("svc-a", ("kafka", "read"), NOW + 300)
    assert validate(token(EC_KEY, "e1", "ES256"), KEYS, NOW, RULES).principal == "svc-a"


def test_sub_claim_name_picks_the_principal() -> None:
    rules = TokenRules(sub_claim="client_id", scope_claim="scp")
    valid = validate(token(client_id="app-7", scp=["a", "b"]), KEYS, NOW, rules)
    assert (valid.principal, valid.scope) == ("app-7", ("a", "b"))
    with pytest.raises(TokenRefused, match="client_id"):
        validate(token(), KEYS, NOW, rules)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"exp": NOW - 31}, "expired"),
        ({"exp": None}, "no 'exp'"),
        ({"iat": None}, "no 'iat'"),
        ({"iat": NOW + 60}, "future"),
        ({"nbf": NOW + 60}, "not valid before"),
        ({"aud": "urn:other"}, "audience"),
        ({"aud": ["urn:other", "urn:more"]}, "audience"),
        ({"iss": "https://evil.example"}, "issuer"),
        ({"sub": ""}, "'sub'"),
        ({"exp": "soon"}, "not a number"),
    ],
)
def test_refused_claims(changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(TokenRefused, match=reason):
        validate(token(**changes), KEYS, NOW, RULES)


def test_clock_skew_is_leeway_both_ways() -> None:
    assert validate(token(exp=NOW - 29, nbf=NOW + 29, iat=NOW + 29), KEYS, NOW, RULES)
    assert validate(token(aud=["x", AUDIENCE]), KEYS, NOW, RULES)
    assert validate(token(iss="any", aud="any"), KEYS, NOW, TokenRules()).principal == "svc-a"


def test_signature_by_a_key_not_in_the_set() -> None:
    with pytest.raises(UnknownKey) as info:
        validate(token(OTHER, kid="k9"), KEYS, NOW, RULES)
    assert info.value.kid == "k9"
    with pytest.raises(TokenRefused, match="signature"):  # the right kid, the wrong key
        validate(token(OTHER, kid="k1"), KEYS, NOW, RULES)


def test_alg_none_is_refused() -> None:
    unsigned = forged({"alg": "none", "kid": "k1"}, lambda _: "")
    with pytest.raises(TokenRefused, match="'none' is not allowed"):
        validate(unsigned, KEYS, NOW, RULES)


def test_hs256_keyed_with_the_public_key_is_refused() -> None:
    pem = KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    for secret in (pem, json.dumps(jwk(KEY, "k1")).encode()):
        mac = forged({"alg": "HS256", "kid": "k1"},
                     lambda data, s=secret: b64(hmac.new(s, data, hashlib.sha256).digest()))
        with pytest.raises(TokenRefused, match="'HS256' is not allowed"):
            validate(mac, KEYS, NOW, RULES)


def test_key_declaring_an_alg_verifies_only_that_alg() -> None:
    with pytest.raises(TokenRefused, match="differs"):
        validate(token(alg="PS256"), KEYS, NOW, RULES)
    loose = keyset(jwk(KEY, "k1", alg=None))
    assert validate(token(alg="PS256"), loose, NOW, RULES).principal == "svc-a"
    with pytest.raises(TokenRefused):  # an RSA key cannot verify ES256
        validate(token(EC_KEY, kid="k1", alg="ES256"), loose, NOW, RULES)


def test_jwks_skips_symmetric_and_encryption_keys() -> None:
    oct_key = {"kty": "oct", "k": b64(b"0" * 32), "kid": "h"}
    enc = {**jwk(OTHER, "x"), "use": "enc"}
    keys = keyset(oct_key, enc, jwk(KEY, "k1"))
    assert set(keys.keys) == {"k1"}
    for bad in (b"not json", b"{}", json.dumps({"keys": [oct_key]}).encode()):
        with pytest.raises(JwksError):
            KeySet.from_json(bad)


# -- the RFC 7628 exchange -------------------------------------------------------------------


def test_initial_response_parts() -> None:
    parsed = parse_initial_response(initial("a.b.c", "svc=2Ca", "host=h\x01port=9\x01"))
    assert (parsed.authzid, parsed.token, parsed.extensions) == ("svc,a", "a.b.c", (("host", "h"), ("port", "9")))
    assert "a.b.c" not in repr(parsed)


@pytest.mark.parametrize(
    "data",
    [b"", b"n,,", b"n,,\x01\x01", b"y,,\x01auth=Bearer t\x01\x01", b"n,,\x01auth=Basic dXNlcg==\x01\x01",
     b"n,,\x01auth=Bearer t\x01", b"n,,\x01host=h\x01\x01", b"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01",
     b"n,,\x01auth=Bearer a b\x01\x01", "n,,\x01auth=Bearer ü\x01\x01".encode()],
)
def test_malformed_initial_responses(data: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        parse_initial_response(data)


def server(source: Source | None = None, now: float = NOW) -> OAuthBearerServer:
    return OAuthBearerServer(source or Source(KEYS), RULES, lambda: now)


def test_exchange_success_and_lifetime() -> None:
    mech = server()
    assert mech.receive(initial(token(), authzid="svc-a")) == b""
    assert (mech.complete, mech.username, mech.credential_lifetime_ms) == (True, "svc-a", 300_000)


def test_exchange_refused_token_is_a_challenge_then_the_json() -> None:
    mech = server()
    challenge = mech.receive(initial(token(aud="urn:other")))
    assert json.loads(challenge) == {"status": "invalid_token"} and not mech.complete
    with pytest.raises(AuthenticationFailed) as info:
        mech.receive(b"\x01")
    assert info.value.client_message == '{"status":"invalid_token"}'
    assert "audience" in info.value.message


def test_authzid_must_be_the_principal() -> None:
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        server().receive(initial(token(), authzid="someone-else"))


def test_unknown_kid_refreshes_once_then_validates() -> None:
    rotated = keyset(jwk(OTHER, "k2"))
    source = Source(KEYS, after_refresh=rotated)
    assert server(source).receive(initial(token(OTHER, kid="k2"))) == b""
    assert source.refreshes == ["k2"]
    stale = Source(KEYS)
    assert json.loads(server(stale).receive(initial(token(OTHER, kid="k3")))) == {"status": "invalid_token"}
    assert stale.refreshes == ["k3"]


# -- the session -------------------------------------------------------------------------------


def session(reauth_ms: int = 0, source: Source | None = None, now: float = NOW) -> Session:
    return Session({"OAUTHBEARER": lambda: server(source, now)}, reauth_ms)


def test_session_bounded_by_token_expiry() -> None:
    assert session_lifetime_ms(0, None) is None
    assert session_lifetime_ms(5000, None) == 5000
    assert session_lifetime_ms(0, 300_000) == 300_000
    assert session_lifetime_ms(60_000, 300_000) == 60_000
    assert session_lifetime_ms(600_000, 300_000) == 300_000
    assert session_lifetime_ms(0, -5) == 0
    s = session()
    s.handshake(1, "OAUTHBEARER", 100.0)
    reply = s.authenticate(2, initial(token(exp=NOW + 20)), 100.0)
    assert (reply.error_code, reply.session_lifetime_ms, s.principal) == (0, 20_000, "User:svc-a")
    assert s.scope == ("kafka", "read")
    assert not s.expired(119.9) and s.expired(120.0)


def test_session_refusal_is_kafkas_answer() -> None:
    s = session()
    s.handshake(1, "OAUTHBEARER", 0.0)
    first = s.authenticate(2, initial(token(exp=NOW - 100)), 0.0)
    assert first.error_code == 0 and json.loads(first.token) == {"status": "invalid_token"}
    final = s.authenticate(2, b"\x01", 0.0)
    assert (final.error_code, final.message, final.close, final.outcome) == (
        int(ErrorCode.SASL_AUTHENTICATION_FAILED), '{"status":"invalid_token"}', True, "failure")
    assert "expired" in s.failure_reason and s.state is State.FAILED


def test_session_reauth_with_a_new_token_same_principal() -> None:
    s = session(reauth_ms=60_000)
    s.handshake(1, "OAUTHBEARER", 0.0)
    assert s.authenticate(2, initial(token()), 0.0).session_lifetime_ms == 60_000
    s.handshake(1, "OAUTHBEARER", 50.0)
    assert s.authenticate(2, initial(token(jti="2")), 50.0).outcome == "success"
    s.handshake(1, "OAUTHBEARER", 55.0)
    other = s.authenticate(2, initial(token(sub="svc-b")), 55.0)
    assert other.error_code == int(ErrorCode.SASL_AUTHENTICATION_FAILED) and other.close


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=300),
                 st.builds(lambda t: initial(t).replace(b"Bearer", b"bearer"), st.text(max_size=50)),
                 st.builds(lambda b: b"n,,\x01auth=Bearer " + b + b"\x01\x01", st.binary(max_size=80))))
def test_garbage_initial_response_costs_only_a_clear_failure(data: bytes) -> None:
    s = session()
    s.handshake(1, "OAUTHBEARER", 0.0)
    reply = s.authenticate(2, data, 0.0)
    if reply.error_code == 0:  # parsed, but not a token: the error challenge
        assert json.loads(reply.token) == {"status": "invalid_token"} and not reply.close
        reply = s.authenticate(2, b"\x01", 0.0)
    assert reply.error_code == int(ErrorCode.SASL_AUTHENTICATION_FAILED) and reply.close
    assert s.state is State.FAILED and s.principal is None


# -- the JWKS shell ---------------------------------------------------------------------------


async def test_jwks_fetcher_refreshes_for_an_unknown_kid_rate_limited(tmp_path: Any) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk(KEY, "k1")]}))
    fetcher = JwksFetcher(JwksSettings(url=path.as_uri(), retry_backoff_s=0.01), RULES)
    async with trio.open_nursery() as nursery:
        await nursery.start(fetcher.run)
        with trio.fail_after(5):
            while fetcher.statistics()["fetches"] == 0:
                await trio.sleep(0.01)
        assert set(fetcher.current().keys) == {"k1"}
        path.write_text(json.dumps({"keys": [jwk(OTHER, "k2")]}))
        keys = await trio.to_thread.run_sync(fetcher.refreshed, "k2")
        assert set(keys.keys) == {"k2"}
        path.write_text(json.dumps({"keys": [jwk(KEY, "k3")]}))
        again = await trio.to_thread.run_sync(fetcher.refreshed, "k3")  # within 10 s: no fetch
        assert set(again.keys) == {"k2"} and fetcher.statistics()["fetches"] == 2
        nursery.cancel_scope.cancel()
