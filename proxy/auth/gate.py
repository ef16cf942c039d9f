"""SASL on SASL_PLAINTEXT / SASL_SSL listeners: the admission rule each connection passes.

The connection hands every client frame to its gate before routing it
(:meth:`TerminatingGate.admit`, :meth:`PassthroughGate.admit`) and, in passthrough mode,
every upstream answer too.

* **terminate** (:class:`TerminatingGate`): SaslHandshake (17) and SaslAuthenticate (36) are
  local APIs (:mod:`proxy.local.sasl`) and pass the gate; after a v0 handshake the client's
  frames are raw tokens, which the gate marks (:data:`RAW_TOKEN`) for the SASL local API.
  Until the client has authenticated only ApiVersions passes; anything else closes the
  connection, as Kafka's ``SaslServerAuthenticator`` does (:class:`Refusal`).
* **passthrough** (:class:`PassthroughGate`): everything passes untouched; the principal
  is read along (:class:`~proxy.auth.sasl.passthrough.PrincipalReader`).

Either way the principal is written to the connection's holder (anything with a
``principal`` attribute: the local-API context); each completed or refused exchange is
one ``ksidecar_sasl_authentications_total{listener,mechanism,result}`` and one log line
naming user and mechanism, never a secret (:meth:`ListenerAuth.record`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE, ApiRegistry
from protocol.correlation import FrameKind, InFlight
from protocol.errors import ProtocolError
from protocol.headers import decode_request_header
from protocol.scan import response_header_size
from protocol.schema import decode
from proxy.auth.plain_users import PlainUsersFile
from proxy.auth.sasl.jwt_token import KeySet, TokenRules
from proxy.auth.sasl.oauthbearer import MECHANISM as OAUTHBEARER
from proxy.auth.sasl.oauthbearer import OAuthBearerServer
from proxy.auth.sasl.passthrough import PrincipalReader
from proxy.auth.sasl.plain import MECHANISM as PLAIN
from proxy.auth.sasl.plain import PlainServer
from proxy.auth.sasl.scram import MECHANISMS as SCRAM_MECHANISMS
from proxy.auth.sasl.scram import NonceCheck, ScramCredential, ScramServer
from proxy.auth.sasl.session import Admission, MechanismFactory, Session
from proxy.config.settings import SaslSettings

log = logging.getLogger(__name__)

SASL_KEYS = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})


class PrincipalHolder(Protocol):
    """Where a gate writes who the client is (the connection's local-API context)."""

    principal: str
    peer: tuple[str, int]


@dataclass(frozen=True, slots=True)
class Refusal:
    """The frame may not pass: close the connection (no answer), as Kafka does."""

    reason: str
    detail: str


class _RawToken:
    def __repr__(self) -> str:
        return "RAW_TOKEN"


#: The frame is a raw SASL token (after a v0 handshake) for the SASL local API.
RAW_TOKEN: Final = _RawToken()

#: What :meth:`TerminatingGate.admit` says: pass (``None``), a raw token, or a refusal.
Verdict = Refusal | _RawToken | None

#: ``lookup(user, mechanism name)``: a SCRAM user's stored credential, if any.
ScramLookup = Callable[[str, str], "ScramCredential | None"]
#: ``count(listener, mechanism, result)``: the authentications metric.
Count = Callable[[str, str, str], None]


class _NoKeys:
    """The key source of an OAUTHBEARER listener without a JWKS URL: no key, ever."""

    def current(self) -> KeySet:
        return KeySet.empty()

    def refreshed(self, kid: str | None) -> KeySet:
        return KeySet.empty()


class ListenerAuth:
    """What one SASL listener's connections share: mechanisms, user sources, metrics."""

    def __init__(
        self,
        listener: str,
        settings: SaslSettings,
        scram_lookup: ScramLookup,
        count: Count,
        *,
        has_zookeeper: bool,
        count_lenient: Count = lambda _listener, _mechanism, _deviation: None,
        oauthbearer: MechanismFactory | None = None,
    ) -> None:
        self.listener = listener
        self.settings = settings
        self.terminating = settings.terminate
        self.mechanisms = settings.mechanisms
        self.failure_delay = settings.failure_delay
        self.plain_users = PlainUsersFile(settings.plain_users_file)
        self._scram_lookup = scram_lookup
        self._count = count
        self._count_lenient = count_lenient
        self._oauthbearer = oauthbearer
        self._factories = {name: self._factory(name) for name in self.mechanisms}
        if self.terminating:
            self._warn_about_missing_users(has_zookeeper)

    def _warn_about_missing_users(self, has_zookeeper: bool) -> None:
        if any(m in SCRAM_MECHANISMS for m in self.mechanisms) and not has_zookeeper:
            log.warning("listener %s offers SCRAM but zookeeper.connect is empty: no SCRAM user "
                        "can log in (SCRAM users live in /config/users)", self.listener)
        if OAUTHBEARER in self.mechanisms and self._oauthbearer is None:
            log.warning("listener %s offers OAUTHBEARER but sasl.oauthbearer.jwks.endpoint.url "
                        "is empty: no token can be checked", self.listener)
        if PLAIN in self.mechanisms and not self.settings.plain_users_file:
            log.warning("listener %s offers PLAIN but sidecar.sasl.plain.users.file is empty: "
                        "no PLAIN user can log in", self.listener)

    def _factory(self, name: str) -> MechanismFactory:
        if name == PLAIN:
            return lambda: PlainServer(self.plain_users.verify)
        if name == OAUTHBEARER:
            # Built by the composition root (proxy.control.jwks: the JWKS it fetches); without
            # one no key is known and every token is refused.
            return self._oauthbearer or (lambda: OAuthBearerServer(_NoKeys(), TokenRules(), time.time))
        mechanism = SCRAM_MECHANISMS[name]
        check: NonceCheck = "strict" if self.settings.scram_nonce_check == "strict" else "kafka"
        return lambda: ScramServer(
            mechanism, lambda user: self._scram_lookup(user, mechanism.name), nonce_check=check
        )

    def session(self) -> Session:
        """A new connection's authentication state (terminate mode)."""
        return Session(self._factories, self.settings.reauth_ms)

    def gate(
        self, holder: PrincipalHolder, registry: ApiRegistry, session: Session | None = None
    ) -> TerminatingGate | PassthroughGate:
        """A new connection's gate (terminate mode: over ``session``, shared with the SASL APIs)."""
        if self.terminating:
            return TerminatingGate(session if session is not None else self.session())
        return PassthroughGate(self, holder, registry)

    def record(
        self, holder: PrincipalHolder, mechanism: str, result: str, detail: str = "",
        deviations: tuple[str, ...] = (),
    ) -> None:
        """Count and log one finished exchange (user names and mechanisms only).

        ``deviations`` name where a successful login needed a rule looser than the RFC
        (``scram-nonce-suffix``): counted apart, and logged, so operators see which clients
        depend on ``sidecar.sasl.scram.nonce.check=kafka``.
        """
        self._count(self.listener, mechanism, result)
        for deviation in deviations:
            self._count_lenient(self.listener, mechanism, deviation)
            log.info("%s:%d logged in as %s with %s only under Kafka's lenient rule (%s); "
                     "sidecar.sasl.scram.nonce.check=strict would refuse it",
                     holder.peer[0], holder.peer[1], holder.principal, mechanism, deviation)
        peer = f"{holder.peer[0]}:{holder.peer[1]}"
        if result == "success":
            log.info("%s authenticated as %s with %s on %s", peer, holder.principal, mechanism,
                     self.listener)
        else:
            log.info("%s failed to authenticate with %s on %s: %s", peer, mechanism, self.listener,
                     detail or "refused")


class TerminatingGate:
    """Admission on a listener where the sidecar authenticates (see the module docstring)."""

    #: The broker's answers teach this gate nothing: they may be streamed.
    reads_responses = False

    def __init__(self, session: Session) -> None:
        self.session = session

    def admit(self, body: memoryview, now: float, in_sasl_exchange: bool) -> Verdict:
        """Pass (``None``), :data:`RAW_TOKEN`, or a :class:`Refusal` for one client frame."""
        session = self.session
        if session.expects_raw_token:
            return RAW_TOKEN
        if len(body) < 4:
            return None  # too short for a header: the usual path refuses it
        api_key = int.from_bytes(body[:2], "big", signed=True)
        if api_key in SASL_KEYS:
            return None  # the SASL local APIs answer them
        admission = session.admit(api_key, now)
        if admission is Admission.PASS:
            return None
        details = {
            Admission.UNAUTHENTICATED: f"api key {api_key} before SASL authentication",
            Admission.ILLEGAL_STATE: f"api key {api_key} during a SASL exchange",
            Admission.EXPIRED: f"api key {api_key} after the session expired "
                               f"(connections.max.reauth.ms={session.reauth_ms})",
        }
        return Refusal(admission.value, details[admission])

    def on_response(self, record: InFlight, body: memoryview) -> None:
        """Nothing to learn: the sidecar itself answered the login."""


class PassthroughGate:
    """Reads the principal from an exchange the broker performs; lets everything pass."""

    #: The broker's answers say whether a login succeeded: each is read whole.
    reads_responses = True

    def __init__(self, auth: ListenerAuth, holder: PrincipalHolder, registry: ApiRegistry) -> None:
        self.auth = auth
        self.holder = holder
        self.registry = registry
        self.reader = PrincipalReader()

    def admit(self, body: memoryview, now: float, in_sasl_exchange: bool) -> Verdict:
        """Read the mechanism and the user from the client's side; never refuses."""
        if in_sasl_exchange:
            self.reader.on_client_token(bytes(body))
            return None
        if len(body) < 4 or int.from_bytes(body[:2], "big", signed=True) not in SASL_KEYS:
            return None
        try:
            header = decode_request_header(body, self.registry)
            api = self.registry.api(header.api_key)
            request = decode(api.request, header.api_version, body[header.size :])
        except (ProtocolError, KeyError):
            return None  # the broker will refuse it; nothing to learn
        if header.api_key == SASL_HANDSHAKE:
            self.reader.on_handshake(request["Mechanism"])
        else:
            self.reader.on_client_token(bytes(request["AuthBytes"]))
        return None

    def on_response(self, record: InFlight, body: memoryview) -> None:
        """Learn from the broker's answer whether a round was accepted."""
        header = record.header
        if record.kind is FrameKind.SASL_TOKEN:
            accepted = not (self.reader.mechanism in SCRAM_MECHANISMS and bytes(body[:2]) == b"e=")
        elif header is not None and header.api_key in SASL_KEYS and self.reader.in_exchange:
            try:
                start = response_header_size(body, record.response_header_version)
            except ProtocolError:
                return
            code = int.from_bytes(body[start : start + 2], "big", signed=True)
            if header.api_key == SASL_HANDSHAKE:
                if code != 0:
                    self.reader.on_server_answer(False)
                return
            accepted = code == 0
        else:
            return
        mechanism = self.reader.mechanism or "none"
        principal = self.reader.on_server_answer(accepted)
        if principal is not None:
            self.holder.principal = principal
            self.auth.record(self.holder, mechanism, "success")
        elif not accepted:
            self.auth.record(self.holder, mechanism, "failure", "the broker refused it")
