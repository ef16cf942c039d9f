"""OAUTHBEARER (RFC 7628) as Kafka's broker speaks it (``OAuthBearerSaslServer``), sans-IO.

The client's initial response is ``n,[a=<authzid>],<0x01>auth=Bearer <token><0x01>
[<key>=<value><0x01>]...<0x01>``. The token is checked by :mod:`proxy.auth.sasl.jwt_token`
against the provider's keys (a :class:`KeySource`); the SASL extensions are parsed (keys
``[A-Za-z]+``, values of 0x01-0x7F as Kafka allows, ``auth`` not among them) and then
ignored, as Kafka ignores those no callback asks for.

What the exchange looks like (Kafka's, RFC 7628 §3.2.2-3):

* a good token: the server answers an empty token and the exchange is complete; the
  session's lifetime is bounded by the token's ``exp`` (KIP-368,
  :attr:`OAuthBearerServer.credential_lifetime_ms`);
* a token that does not validate: the server answers the OAuth error JSON
  ``{"status":"invalid_token"}`` as a challenge; the client answers ``0x01``; the server then
  fails the exchange with that JSON as the message (SASL_AUTHENTICATION_FAILED's text, what
  the client shows);
* a malformed initial response (not RFC 7628, another scheme than Bearer): failed at once,
  with Kafka's generic message;
* an authorization id that differs from the token's principal: failed.

Nothing here reads a clock or the network: ``now`` (wall-clock seconds) and the keys come in.
A token naming a key the set lacks makes the server ask its :class:`KeySource` for a fresher
set once (the shell fetches the JWKS again, rate-limited: :mod:`proxy.control.jwks`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from proxy.auth.sasl.errors import AuthenticationFailed
from proxy.auth.sasl.jwt_token import (
    KeySet,
    TokenRefused,
    TokenRules,
    UnknownKey,
    ValidToken,
    validate,
)

MECHANISM = "OAUTHBEARER"
#: Longest initial response read.
MAX_RESPONSE = 16 * 1024

_SEP = "\x01"
_SASLNAME = re.compile(r"^(?:[\x01-\x7f]|=2C|=3D)+$")
_AUTH = re.compile(r"^(?P<scheme>[A-Za-z0-9_]+) +(?P<token>[-_.A-Za-z0-9]+)$")
_EXT_KEY = re.compile(r"^[A-Za-z]+$")
_EXT_VALUE = re.compile(r"^[\x01-\x7f]+$")


@dataclass(frozen=True, kw_only=True, slots=True, repr=False)
class InitialResponse:
    """A parsed client initial response (its ``repr`` hides the token)."""

    authzid: str
    token: str
    extensions: tuple[tuple[str, str], ...]

    def __repr__(self) -> str:
        return f"InitialResponse(authzid={self.authzid!r}, <token hidden>, extensions={self.extensions!r})"


def parse_initial_response(data: bytes) -> InitialResponse:
    """Split an RFC 7628 client initial response; :class:`AuthenticationFailed` if malformed."""
    if len(data) > MAX_RESPONSE:
        raise AuthenticationFailed(f"OAUTHBEARER initial response longer than {MAX_RESPONSE} bytes")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise AuthenticationFailed("OAUTHBEARER initial response is not ASCII") from None
    gs2, sep, rest = text.partition(_SEP)
    if not sep or len(rest) < 3 or not rest.endswith(_SEP + _SEP):
        raise AuthenticationFailed("OAUTHBEARER initial response is not kvpairs ending in two 0x01")
    authzid = _gs2_authzid(gs2)
    pairs: dict[str, str] = {}
    for item in rest[:-2].split(_SEP):
        key, eq, value = item.partition("=")
        if not eq or not _EXT_KEY.match(key) or (key != "auth" and not _EXT_VALUE.match(value)):
            raise AuthenticationFailed("OAUTHBEARER initial response holds a malformed key/value pair")
        if key in pairs:
            raise AuthenticationFailed(f"OAUTHBEARER initial response repeats {key!r}")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise AuthenticationFailed("OAUTHBEARER initial response has no auth=")
    match = _AUTH.match(auth)
    if match is None:
        raise AuthenticationFailed("OAUTHBEARER auth= is not '<scheme> <token>'")
    if match["scheme"].lower() != "bearer":
        raise AuthenticationFailed(f"Invalid scheme in OAUTHBEARER client first message: {match['scheme']}")
    return InitialResponse(authzid=authzid, token=match["token"], extensions=tuple(pairs.items()))


def _gs2_authzid(gs2: str) -> str:
    # Kafka accepts only "n" (no channel binding): "n,," or "n,a=<saslname>,".
    if not gs2.startswith("n,") or not gs2.endswith(","):
        raise AuthenticationFailed("OAUTHBEARER gs2 header is not 'n,[a=<authzid>],'")
    middle = gs2[2:-1]
    if not middle:
        return ""
    if not middle.startswith("a=") or not _SASLNAME.match(middle[2:]) or "," in middle[2:]:
        raise AuthenticationFailed("OAUTHBEARER gs2 authzid is malformed")
    return middle[2:].replace("=2C", ",").replace("=3D", "=")


class KeySource(Protocol):
    """Where the server gets the provider's keys (:class:`proxy.control.jwks.JwksFetcher`)."""

    def current(self) -> KeySet:
        """The keys as last fetched."""
        ...

    def refreshed(self, kid: str | None) -> KeySet:
        """The keys after fetching them again for an unknown ``kid`` (rate-limited by the
        source: may return the same set). Called from a worker thread; may block it."""
        ...


def error_json(status: str) -> str:
    """The OAuth error the server sends as its challenge (RFC 7628 §3.2.2, Kafka's form)."""
    return json.dumps({"status": status}, separators=(",", ":"))


class OAuthBearerServer:
    """One OAUTHBEARER exchange, server side; see the module docstring.

    ``clock`` gives wall-clock seconds (``time.time``; tests pass their own).
    """

    def __init__(self, keys: KeySource, rules: TokenRules, clock: Callable[[], float]) -> None:
        self._keys = keys
        self._rules = rules
        self._clock = clock
        self.username: str | None = None
        self.complete = False
        #: Scopes the token carried (``sasl.oauthbearer.scope.claim.name``).
        self.scope: tuple[str, ...] = ()
        #: Milliseconds the token had left when it was accepted (KIP-368 bounds the session).
        self.credential_lifetime_ms: int | None = None
        #: Why the token was refused, while the error challenge awaits the client's 0x01.
        self._error: str | None = None
        self._done = False

    def receive(self, token: bytes) -> bytes:
        """Answer one client message: empty on success, the error JSON on a refused token."""
        if self._done:
            raise AuthenticationFailed("OAUTHBEARER exchange already ended")
        if self._error is not None:
            self._done = True
            # RFC 7628 §3.2.3: the client acknowledges the error with 0x01; whatever it sends,
            # the exchange fails with the error the client was shown.
            failure = AuthenticationFailed(self._error)
            failure.client_message = error_json(TokenRefused.status)
            raise failure
        response = parse_initial_response(token)
        try:
            valid = self._validate(response.token)
        except TokenRefused as exc:
            self._error = exc.message
            return error_json(exc.status).encode()
        if response.authzid and response.authzid != valid.principal:
            self._done = True
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different "
                "from the token's principal name")
        self._done = True
        self.username = valid.principal
        self.scope = valid.scope
        self.credential_lifetime_ms = max(0, int((valid.expires_at - self._clock()) * 1000))
        self.complete = True
        return b""

    @property
    def failure_reason(self) -> str | None:
        """Why the token was refused (for the log), if it was."""
        return self._error

    def _validate(self, token: str) -> ValidToken:
        try:
            return validate(token, self._keys.current(), self._clock(), self._rules)
        except UnknownKey as exc:
            return validate(token, self._keys.refreshed(exc.kid), self._clock(), self._rules)

