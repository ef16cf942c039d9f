"""An OAuth access token (a signed JWT) checked against an identity provider's keys (sans-IO).

What Kafka's broker checks (``ValidatorAccessTokenValidator``, KIP-768), with the same keys:

* the signature, by PyJWT (with ``cryptography``), against the key of the JWKS whose ``kid``
  the token names — no crypto here. Only asymmetric algorithms are allowed
  (:data:`ALGORITHMS`: RS*, PS*, ES*): ``alg: none`` and every HMAC (HS*) are refused before a
  key is looked at, so a token "signed" with the provider's public key as an HMAC secret never
  reaches a verifier; a key whose JWK names an ``alg`` verifies that algorithm only;
* ``exp`` (required), ``iat`` (required, not in the future), ``nbf`` (when present), each with
  ``sasl.oauthbearer.clock.skew.seconds`` of leeway against ``now``, which the caller passes
  (wall-clock seconds), so tests need no real clock;
* ``iss`` equal to ``sasl.oauthbearer.expected.issuer`` and ``aud`` naming one of
  ``sasl.oauthbearer.expected.audience``, when those are set (Kafka checks neither otherwise);
* the principal claim (``sasl.oauthbearer.sub.claim.name``, default ``sub``): a non-empty
  string; the scope claim (``sasl.oauthbearer.scope.claim.name``) is read when present
  (a space-separated string or a list of strings).

A refusal is :class:`TokenRefused` (its ``message`` is for the log only; the client gets
Kafka's ``{"status":"invalid_token"}``); a token naming a key the set lacks is
:class:`UnknownKey`, so the caller may fetch the JWKS again and retry once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from jwt.api_jwk import PyJWK

from proxy.auth.sasl.errors import AuthenticationFailed

#: The algorithms a token may be signed with: asymmetric only (RFC 7518 §3.1 names).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
#: Longest token looked at (the SASL token limit bounds it anyway).
MAX_TOKEN = 16 * 1024
#: Longest JWKS document read.
MAX_JWKS = 1024 * 1024


class TokenRefused(AuthenticationFailed):
    """The token is not acceptable; ``message`` says why (for the log, never the client)."""

    status = "invalid_token"


class UnknownKey(TokenRefused):
    """The token names a key id (``kid``) the key set does not hold."""

    def __init__(self, kid: str | None) -> None:
        super().__init__(f"no key {kid!r} in the JWKS")
        self.kid = kid


class JwksError(ValueError):
    """A JWKS document that cannot be used (not JSON, no usable signing key)."""


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One public key of the set and the algorithm its JWK declares (``None``: any allowed)."""

    key: PyJWK
    alg: str | None


@dataclass(frozen=True, slots=True)
class KeySet:
    """The provider's signing keys by ``kid`` (``None``: a key published without one)."""

    keys: Mapping[str | None, SigningKey]

    @classmethod
    def empty(cls) -> KeySet:
        """No keys yet (before the first fetch)."""
        return cls({})

    @classmethod
    def from_json(cls, document: bytes) -> KeySet:
        """Parse a JWKS (RFC 7517 §5); keys for encryption or of unknown types are skipped."""
        if len(document) > MAX_JWKS:
            raise JwksError(f"JWKS longer than {MAX_JWKS} bytes")
        try:
            data = json.loads(document)
        except ValueError as exc:
            raise JwksError(f"JWKS is not JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
            raise JwksError("JWKS has no \"keys\" array")
        keys: dict[str | None, SigningKey] = {}
        for entry in data["keys"]:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            if entry.get("kty") not in ("RSA", "EC") or entry.get("alg", ALGORITHMS[0]) not in ALGORITHMS:
                continue  # symmetric ("oct") and unknown key types never verify a token here
            try:
                key = PyJWK(entry)
            except jwt.PyJWTError:
                continue
            kid, alg = entry.get("kid"), entry.get("alg")
            keys[kid if isinstance(kid, str) else None] = SigningKey(key, alg if isinstance(alg, str) else None)
        if not keys:
            raise JwksError("JWKS holds no usable RSA or EC signing key")
        return cls(keys)

    def __len__(self) -> int:
        return len(self.keys)

    def find(self, kid: str | None) -> SigningKey:
        """The key for ``kid``; a token without one uses the only key, if there is one."""
        if kid is None and len(self.keys) == 1:
            return next(iter(self.keys.values()))
        key = self.keys.get(kid)
        if key is None:
            raise UnknownKey(kid)
        return key


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenRules:
    """What a token must satisfy (Kafka's ``sasl.oauthbearer.*`` keys)."""

    expected_issuer: str = ""
    expected_audience: tuple[str, ...] = ()
    clock_skew_s: int = 30
    sub_claim: str = "sub"
    scope_claim: str = "scope"


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidToken:
    """A token that passed: who it names, its scopes and when it expires (epoch seconds)."""

    principal: str
    scope: tuple[str, ...]
    expires_at: float
    issued_at: float


def token_key_id(token: str) -> tuple[str, str | None]:
    """The token's ``alg`` and ``kid`` from its header; refuses disallowed algorithms."""
    if len(token) > MAX_TOKEN:
        raise TokenRefused(f"token longer than {MAX_TOKEN} bytes")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise TokenRefused(f"token is not a JWS: {exc}") from None
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in ALGORITHMS:
        raise TokenRefused(f"algorithm {alg!r} is not allowed (allowed: {', '.join(ALGORITHMS)})")
    if kid is not None and not isinstance(kid, str):
        raise TokenRefused("kid is not a string")
    return alg, kid


def validate(token: str, keys: KeySet, now: float, rules: TokenRules) -> ValidToken:
    """Check ``token`` at wall-clock ``now``; :class:`TokenRefused` (or :class:`UnknownKey`)."""
    alg, kid = token_key_id(token)
    key = keys.find(kid)
    if key.alg is not None and key.alg != alg:
        raise TokenRefused(f"token algorithm {alg} differs from key {kid!r}'s {key.alg}")
    if key.key.key_type != ("EC" if alg.startswith("ES") else "RSA"):
        raise TokenRefused(f"token algorithm {alg} does not fit key {kid!r} ({key.key.key_type})")
    try:
        # The library verifies the signature and the algorithm against the key type; the
        # claims are checked below against the caller's ``now``.
        claims: dict[str, Any] = jwt.decode(
            token, key.key.key, algorithms=[alg],
            options={"verify_signature": True, "verify_exp": False, "verify_nbf": False,
                     "verify_iat": False, "verify_aud": False, "verify_iss": False,
                     "verify_sub": False, "verify_jti": False},
        )
    except (jwt.PyJWTError, TypeError, ValueError) as exc:
        # TypeError/ValueError: what the library raises for a key it cannot use with alg.
        raise TokenRefused(f"signature not verified with key {kid!r}: {type(exc).__name__}") from None
    return _check_claims(claims, now, rules)


def _number(claims: Mapping[str, Any], name: str, required: bool) -> float | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise TokenRefused(f"token has no {name!r} claim")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenRefused(f"{name!r} claim is not a number")
    return float(value)


def _check_claims(claims: Mapping[str, Any], now: float, rules: TokenRules) -> ValidToken:
    skew = rules.clock_skew_s
    expires = _number(claims, "exp", True)
    issued = _number(claims, "iat", True)
    not_before = _number(claims, "nbf", False)
    assert expires is not None and issued is not None
    if now >= expires + skew:
        raise TokenRefused(f"token expired at {expires:.0f} (now {now:.0f}, skew {skew} s)")
    if issued > now + skew:
        raise TokenRefused(f"token issued in the future ({issued:.0f}, now {now:.0f})")
    if not_before is not None and not_before > now + skew:
        raise TokenRefused(f"token not valid before {not_before:.0f} (now {now:.0f})")
    if rules.expected_issuer and claims.get("iss") != rules.expected_issuer:
        raise TokenRefused(f"issuer {claims.get('iss')!r} is not {rules.expected_issuer!r}")
    if rules.expected_audience:
        aud = claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not any(isinstance(a, str) and a in rules.expected_audience for a in audiences):
            raise TokenRefused(f"audience {aud!r} names none of {', '.join(rules.expected_audience)}")
    principal = claims.get(rules.sub_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise TokenRefused(f"claim {rules.sub_claim!r} is missing or not a non-empty string")
    return ValidToken(principal=principal, scope=_scope(claims.get(rules.scope_claim)),
                      expires_at=expires, issued_at=issued)


def _scope(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list):
        return tuple(item for item in value if isinstance(item, str))
    return ()
