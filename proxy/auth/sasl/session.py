"""One connection's authentication on a SASL listener the sidecar terminates (sans-IO).

Theory of operation, after Kafka's ``SaslServerAuthenticator`` and KIP-368. A session is in
one of four states:

=============== ================================================================ ==========================
state           requests let through to the broker                               leaves on
=============== ================================================================ ==========================
HANDSHAKE       none (ApiVersions is answered by the sidecar; anything else      SaslHandshake → AUTHENTICATE
                closes the connection, as Kafka does)
AUTHENTICATE    none: only SaslAuthenticate (v1 handshake) or raw tokens         the mechanism completes →
                (v0 handshake); anything else is ILLEGAL_SASL_STATE and closes   AUTHENTICATED; fails → FAILED
AUTHENTICATED   everything, until the session expires; then any request but a    SaslHandshake (re-auth) →
                re-authenticating SaslHandshake closes the connection             AUTHENTICATE
FAILED          none: the connection closes after the failure answer             —
=============== ================================================================ ==========================

Session lifetime (``connections.max.reauth.ms``, 0 = none, and for OAUTHBEARER the token's
remaining life, whichever is shorter: :func:`session_lifetime_ms`) is sent as
SessionLifetimeMs in the SaslAuthenticate answer that completes the exchange (v1+). A client that authenticated
with SaslAuthenticate v1+ may re-authenticate on the same connection: a new SaslHandshake
with the same mechanism, then SaslAuthenticate, as the same user; a different mechanism or
user fails and closes. A client that used v0 (or raw tokens) cannot, and its connection is
closed at its first request after the session expired. A SaslHandshake or SaslAuthenticate
after a completed exchange from such a client is answered ILLEGAL_SASL_STATE and the
connection stays, as Kafka's request handler answers them.

The client-facing failure message is Kafka's, and names neither the user nor the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from protocol.errors import ErrorCode
from proxy.auth.sasl.errors import SaslError

API_VERSIONS = 18


class MechanismServer(Protocol):
    """The server side of one mechanism exchange (see :mod:`proxy.auth.sasl.scram`, :mod:`~.plain`)."""

    username: str | None
    complete: bool

    def receive(self, token: bytes) -> bytes:
        """Answer one client token; raise :class:`~proxy.auth.sasl.errors.SaslError` to fail."""
        ...


MechanismFactory = Callable[[], MechanismServer]


class State(Enum):
    """Where a session is (see the module docstring)."""

    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class Admission(Enum):
    """What happens to a request other than SaslHandshake and SaslAuthenticate."""

    PASS = "pass"
    UNAUTHENTICATED = "unauthenticated"
    ILLEGAL_STATE = "illegal_sasl_state"
    EXPIRED = "session_expired"


@dataclass(frozen=True, slots=True)
class Reply:
    """What to answer a SASL request or token with, and what follows.

    ``respond`` False: no answer at all (Kafka closes without one). ``close``: close the
    connection once the answer is out. ``outcome``: ``"success"`` or ``"failure"`` when
    this step ended an exchange (for metrics and logs). ``deviations``: on a success, what
    the login needed beyond the RFCs to accept an old client as Kafka does (e.g.
    ``"scram-nonce-suffix"``, see :mod:`proxy.auth.sasl.scram`); the shell counts them.
    """

    error_code: int = 0
    message: str | None = None
    token: bytes = b""
    mechanisms: tuple[str, ...] = ()
    session_lifetime_ms: int = 0
    respond: bool = True
    close: bool = False
    outcome: str | None = None
    deviations: tuple[str, ...] = ()


def failure_message(mechanism: str, reauthenticating: bool) -> str:
    """Kafka's answer to failed credentials; it does not tell an unknown user from a wrong password."""
    what = "re-authentication" if reauthenticating else "authentication"
    return f"Authentication failed during {what} due to invalid credentials with SASL mechanism {mechanism}"


def session_lifetime_ms(reauth_ms: int, credential_ms: int | None) -> int | None:
    """How long a new session lasts (``None``: forever), as Kafka's ``SaslServerAuthenticator``.

    ``connections.max.reauth.ms`` (0: unset) and what the credential had left (OAUTHBEARER's
    token ``exp``; ``None`` for mechanisms whose credential does not expire): the shorter of the
    two, so a token that expires ends its session even with ``connections.max.reauth.ms`` unset.
    """
    if credential_ms is None:
        return reauth_ms if reauth_ms > 0 else None
    if reauth_ms <= 0:
        return max(0, credential_ms)
    return max(0, min(credential_ms, reauth_ms))


class Session:
    """The authentication state of one client connection; see the module docstring.

    ``mechanisms`` maps each enabled mechanism name to a factory of its server side;
    ``reauth_ms`` is ``connections.max.reauth.ms``. Times are seconds (``now``).
    """

    def __init__(self, mechanisms: Mapping[str, MechanismFactory], reauth_ms: int = 0) -> None:
        self._factories = dict(mechanisms)
        self.enabled = tuple(mechanisms)
        self.reauth_ms = reauth_ms
        self.state = State.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: str | None = None
        #: True after a v0 SaslHandshake: client frames are raw tokens until the end.
        self.raw_tokens = False
        self.expires_at: float | None = None
        self.supports_reauth = False
        self.reauthenticating = False
        #: Why the last exchange failed (for the log; never sent to the client).
        self.failure_reason = ""
        #: What the last successful exchange needed beyond the RFCs (see :class:`Reply`).
        self.deviations: tuple[str, ...] = ()
        #: Scopes of the last accepted credential (OAUTHBEARER's scope claim; else empty).
        self.scope: tuple[str, ...] = ()
        self._server: MechanismServer | None = None
        self._previous: tuple[str, str] | None = None  # (mechanism, principal) being re-authenticated

    # -- what may pass ---------------------------------------------------------------------

    def expired(self, now: float) -> bool:
        """True once an authenticated session has outlived ``connections.max.reauth.ms``."""
        return self.expires_at is not None and now >= self.expires_at

    def admit(self, api_key: int, now: float) -> Admission:
        """May this request (not SaslHandshake/SaslAuthenticate) go on?"""
        if self.state is State.AUTHENTICATED:
            return Admission.EXPIRED if self.expired(now) else Admission.PASS
        if self.state is State.HANDSHAKE:
            return Admission.PASS if api_key == API_VERSIONS else Admission.UNAUTHENTICATED
        return Admission.ILLEGAL_STATE

    @property
    def expects_raw_token(self) -> bool:
        """True while the next client frame is a raw SASL token (after a v0 handshake)."""
        return self.raw_tokens and self.state is State.AUTHENTICATE

    # -- the exchange ----------------------------------------------------------------------

    def handshake(self, version: int, mechanism: str, now: float) -> Reply:
        """Answer SaslHandshake ``version`` asking for ``mechanism``."""
        self.failure_reason = ""
        if self.state is State.AUTHENTICATED:
            if not self.supports_reauth:
                return Reply(int(ErrorCode.ILLEGAL_SASL_STATE), mechanisms=self.enabled)
            assert self.mechanism is not None and self.principal is not None
            self._previous = (self.mechanism, self.principal)
            self.reauthenticating = True
        elif self.state is not State.HANDSHAKE:
            return self._fail(int(ErrorCode.ILLEGAL_SASL_STATE), "SaslHandshake during an exchange", None)
        factory = self._factories.get(mechanism)
        if factory is None:
            self.state = State.FAILED
            self.failure_reason = f"mechanism {mechanism!r} is not enabled"
            return Reply(int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), mechanisms=self.enabled, close=True)
        self.state = State.AUTHENTICATE
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        self._server = factory()
        return Reply(mechanisms=self.enabled)

    def authenticate(self, version: int, token: bytes, now: float) -> Reply:
        """Answer SaslAuthenticate ``version`` carrying ``token``."""
        if self.state is State.AUTHENTICATED:
            return Reply(int(ErrorCode.ILLEGAL_SASL_STATE),
                         "SaslAuthenticate request received after successful authentication")
        if self.state is not State.AUTHENTICATE or self.raw_tokens:
            # Before a handshake Kafka closes without an answer.
            self.state = State.FAILED
            self.failure_reason = "SaslAuthenticate before SaslHandshake"
            return Reply(respond=False, close=True)
        if version >= 1:
            self.supports_reauth = True
        return self._step(token, now)

    def raw_token(self, token: bytes, now: float) -> Reply:
        """Answer one raw token (after a v0 handshake); a failure closes with no answer."""
        reply = self._step(token, now)
        if reply.error_code:
            return Reply(respond=False, close=True, outcome=reply.outcome)
        return reply

    def _step(self, token: bytes, now: float) -> Reply:
        server, mechanism = self._server, self.mechanism
        assert server is not None and mechanism is not None
        if self._previous is not None and self._previous[0] != mechanism:
            return self._fail(
                int(ErrorCode.SASL_AUTHENTICATION_FAILED),
                f"SASL mechanism '{mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self._previous[0]}'",
                "failure",
            )
        try:
            answer = server.receive(token)
        except SaslError as exc:
            self.failure_reason = exc.message
            return self._fail(int(ErrorCode.SASL_AUTHENTICATION_FAILED),
                              exc.client_message or failure_message(mechanism, self.reauthenticating),
                              "failure")
        if not server.complete:
            return Reply(token=answer)
        assert server.username is not None
        principal = f"User:{server.username}"
        # Mechanisms without leniencies (PLAIN) have no such attribute.
        deviations: tuple[str, ...] = getattr(server, "deviations", ())
        # Mechanisms whose credential expires (OAUTHBEARER's token) bound the session by it.
        credential_ms: int | None = getattr(server, "credential_lifetime_ms", None)
        self.scope = getattr(server, "scope", ())
        self._server = None  # the credential goes with it
        if self._previous is not None and self._previous[1] != principal:
            return self._fail(
                int(ErrorCode.SASL_AUTHENTICATION_FAILED),
                f"Cannot change principals during re-authentication from {self._previous[1]}: {principal}",
                "failure",
            )
        self.state = State.AUTHENTICATED
        self.principal = principal
        self.reauthenticating = False
        self._previous = None
        lifetime_ms = session_lifetime_ms(self.reauth_ms, credential_ms)
        self.expires_at = now + lifetime_ms / 1000 if lifetime_ms is not None else None
        self.deviations = deviations
        return Reply(
            token=answer,
            session_lifetime_ms=lifetime_ms or 0,
            outcome="success",
            deviations=deviations,
        )

    def _fail(self, code: int, message: str, outcome: str | None) -> Reply:
        self.state = State.FAILED
        self._server = None
        if not self.failure_reason:
            self.failure_reason = message
        return Reply(code, message, close=True, outcome=outcome)
