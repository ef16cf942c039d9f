"""SASL on SASL_PLAINTEXT / SASL_SSL listeners: the gate each client connection passes.

The connection hands every client frame to its gate first (one call in
``Connection._on_request``) and, in passthrough mode, every upstream answer too.

* **terminate** (:class:`TerminatingGate`): the sidecar answers SaslHandshake (17),
  SaslAuthenticate (36) and, after a v0 handshake, the raw tokens itself, following
  :class:`~proxy.sasl.session.Session`. Until the client has authenticated only
  ApiVersions passes (the sidecar answers it); anything else closes the connection, as
  Kafka does. Later requests go upstream over the sidecar's own link. Token evaluation
  (PBKDF2 for PLAIN, HMACs for SCRAM) runs in a worker thread.
* **passthrough** (:class:`PassthroughGate`): everything is forwarded untouched; the
  principal is read along (:class:`~proxy.sasl.passthrough.PrincipalReader`).

Either way the principal becomes ``connection.principal``; each completed or refused
exchange is one ``ksidecar_sasl_authentications_total{listener,mechanism,result}`` and one
log line naming user and mechanism, never a secret.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE
from protocol.correlation import FrameKind, InFlight
from protocol.errors import ProtocolError
from protocol.framing import size_prefix
from protocol.headers import decode_request_header, encode_response_header
from protocol.scan import response_header_size
from protocol.schema import decode, encode
from proxy.connection import ConnectionClosed
from proxy.plain_users import PlainUsersFile
from proxy.sasl.passthrough import PrincipalReader
from proxy.sasl.plain import MECHANISM as PLAIN
from proxy.sasl.plain import PlainServer
from proxy.sasl.scram import MECHANISMS as SCRAM_MECHANISMS
from proxy.sasl.scram import ScramCredential, ScramMechanism, ScramServer
from proxy.sasl.session import Admission, MechanismFactory, Reply, Session

if TYPE_CHECKING:
    from proxy.connection import Connection
    from proxy.server import Sidecar

log = logging.getLogger(__name__)

SASL_KEYS = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})
#: How long a refused client's last answer may take to leave before the connection closes.
FAILURE_FLUSH_TIMEOUT = 5.0


class ListenerAuth:
    """What one SASL listener's connections share: mechanisms, user sources, metrics."""

    def __init__(self, sidecar: Sidecar, listener: str) -> None:
        config = sidecar.config
        self.sidecar = sidecar
        self.listener = listener
        self.terminating = config["sidecar.sasl.mode"] == "terminate"
        self.mechanisms: tuple[str, ...] = config.listener_value(listener, "sasl.enabled.mechanisms")
        self.reauth_ms: int = config["connections.max.reauth.ms"]
        self.failure_delay: float = config["connection.failed.authentication.delay.ms"] / 1000
        self.plain_users = PlainUsersFile(config["sidecar.sasl.plain.users.file"])
        self._factories = {name: self._factory(name) for name in self.mechanisms}
        if self.terminating:
            self._warn_about_missing_users()

    def _warn_about_missing_users(self) -> None:
        config = self.sidecar.config
        if any(m in SCRAM_MECHANISMS for m in self.mechanisms) and not config["zookeeper.connect"]:
            log.warning("listener %s offers SCRAM but zookeeper.connect is empty: no SCRAM user "
                        "can log in (SCRAM users live in /config/users)", self.listener)
        if PLAIN in self.mechanisms and not config["sidecar.sasl.plain.users.file"]:
            log.warning("listener %s offers PLAIN but sidecar.sasl.plain.users.file is empty: "
                        "no PLAIN user can log in", self.listener)

    def _factory(self, name: str) -> MechanismFactory:
        if name == PLAIN:
            return lambda: PlainServer(self.plain_users.verify)
        mechanism = SCRAM_MECHANISMS[name]
        return lambda: ScramServer(mechanism, self._scram_lookup(mechanism))

    def _scram_lookup(self, mechanism: ScramMechanism) -> Callable[[str], ScramCredential | None]:
        def lookup(user: str) -> ScramCredential | None:
            registration = self.sidecar.registration
            users = registration.scram_users if registration is not None else {}
            return users.get(user, {}).get(mechanism.name)

        return lookup

    def gate(self, connection: Connection) -> SaslGate:
        """A new connection's gate."""
        if self.terminating:
            return TerminatingGate(self, connection, Session(self._factories, self.reauth_ms))
        return PassthroughGate(self, connection)

    def record(self, connection: Connection, mechanism: str, result: str, detail: str = "") -> None:
        """Count and log one finished exchange (user names and mechanisms only)."""
        self.sidecar.metrics.sasl_authentications.labels(self.listener, mechanism, result).inc()
        peer = f"{connection.peer[0]}:{connection.peer[1]}"
        if result == "success":
            log.info("%s authenticated as %s with %s on %s", peer, connection.principal, mechanism,
                     self.listener)
        else:
            log.info("%s failed to authenticate with %s on %s: %s", peer, mechanism, self.listener,
                     detail or "refused")


class TerminatingGate:
    """The sidecar's own authentication of one connection (see the module docstring)."""

    def __init__(self, auth: ListenerAuth, connection: Connection, session: Session) -> None:
        self.auth = auth
        self.connection = connection
        self.session = session

    async def intercept(
        self, frame: memoryview, parts: list[bytes | memoryview], upstream: trio.abc.Stream
    ) -> bool:
        """Take ``frame`` if it is part of the exchange; close the connection if it may not pass.

        Returns False for a request the connection should handle as usual.
        """
        now = trio.current_time()
        body = frame[4:]
        session = self.session
        if session.expects_raw_token:
            reply = await trio.to_thread.run_sync(session.raw_token, bytes(body), now)
            if reply.respond:
                self._answer(InFlight(FrameKind.SASL_TOKEN, None, True), "SaslToken", -1,
                             size_prefix(len(reply.token)) + reply.token, frame, now)
            await self._after(reply, parts, upstream)
            return True
        if len(body) < 4:
            return False  # too short for a header: the usual path refuses it
        api_key = int.from_bytes(body[:2], "big", signed=True)
        if api_key in SASL_KEYS:
            await self._request(frame, parts, upstream, now)
            return True
        admission = session.admit(api_key, now)
        if admission is Admission.PASS:
            return False
        details = {
            Admission.UNAUTHENTICATED: f"api key {api_key} before SASL authentication",
            Admission.ILLEGAL_STATE: f"api key {api_key} during a SASL exchange",
            Admission.EXPIRED: f"api key {api_key} after the session expired "
                               f"(connections.max.reauth.ms={session.reauth_ms})",
        }
        raise ConnectionClosed(admission.value, details[admission])

    async def _request(
        self,
        frame: memoryview,
        parts: list[bytes | memoryview],
        upstream: trio.abc.Stream,
        now: float,
    ) -> None:
        registry = self.connection.sidecar.registry
        body = frame[4:]
        try:
            header = decode_request_header(body, registry)
            api = registry.api(header.api_key)
            if header.api_version not in api.versions:
                raise ConnectionClosed(
                    "unsupported_request", f"{api.name} v{header.api_version} is not supported"
                )
            request = decode(api.request, header.api_version, body[header.size :])
        except ProtocolError as exc:
            raise ConnectionClosed("bad_request", f"SASL request: {exc}") from None
        version = header.api_version
        session = self.session
        response: dict[str, Any]
        if header.api_key == SASL_HANDSHAKE:
            reply = session.handshake(version, request["Mechanism"], now)
            response = {"ErrorCode": reply.error_code, "Mechanisms": list(reply.mechanisms)}
        else:
            reply = await trio.to_thread.run_sync(
                session.authenticate, version, bytes(request["AuthBytes"]), now
            )
            response = {
                "ErrorCode": reply.error_code,
                "ErrorMessage": reply.message,
                "AuthBytes": reply.token,
                "SessionLifetimeMs": reply.session_lifetime_ms,
            }
        if reply.respond:
            header_version = api.response_header_version(version)
            payload = encode_response_header(header.correlation_id, header_version) + encode(
                api.response, version, response
            )
            record = InFlight(FrameKind.REQUEST, header, True, header_version)
            self._answer(record, api.name, header.api_key, size_prefix(len(payload)) + payload, frame, now)
        await self._after(reply, parts, upstream)

    def _answer(
        self, record: InFlight, label: str, api_key: int, response: bytes, frame: memoryview, now: float
    ) -> None:
        connection = self.connection
        metrics = connection.sidecar.metrics
        api = metrics.for_api(api_key) if api_key >= 0 else metrics.for_label(label)
        api.request_bytes.inc(len(frame))
        if record.header is not None:
            api.requests(record.header.api_version, "local").inc()
        connection.stats.requests += 1
        connection.answer_local(record, api, response, now)

    async def _after(
        self, reply: Reply, parts: list[bytes | memoryview], upstream: trio.abc.Stream
    ) -> None:
        session = self.session
        mechanism = session.mechanism or "none"
        if reply.outcome == "success":
            assert session.principal is not None
            self.connection.principal = session.principal
            self.auth.record(self.connection, mechanism, "success")
        elif reply.outcome == "failure":
            self.auth.record(self.connection, mechanism, "failure", session.failure_reason)
        if reply.close:
            reason = "sasl_authentication_failed" if reply.outcome == "failure" else "sasl_refused"
            linger = self.auth.failure_delay if reply.outcome == "failure" else 0.0
            await self.connection.close_when_answered(
                parts, upstream, reason, session.failure_reason, FAILURE_FLUSH_TIMEOUT, linger
            )

    def on_response(self, record: InFlight, body: memoryview) -> None:
        """Upstream answers need nothing from a terminating gate."""


class PassthroughGate:
    """Reads the principal from an exchange the broker performs; forwards everything."""

    def __init__(self, auth: ListenerAuth, connection: Connection) -> None:
        self.auth = auth
        self.connection = connection
        self.reader = PrincipalReader()

    async def intercept(
        self, frame: memoryview, parts: list[bytes | memoryview], upstream: trio.abc.Stream
    ) -> bool:
        """Read the mechanism and the user from the client's side; never takes a frame."""
        body = frame[4:]
        if self.connection.tracker.in_sasl_exchange:
            self.reader.on_client_token(bytes(body))
            return False
        if len(body) < 4 or int.from_bytes(body[:2], "big", signed=True) not in SASL_KEYS:
            return False
        registry = self.connection.sidecar.registry
        try:
            header = decode_request_header(body, registry)
            api = registry.api(header.api_key)
            request = decode(api.request, header.api_version, body[header.size :])
        except (ProtocolError, KeyError):
            return False  # the broker will refuse it; nothing to learn
        if header.api_key == SASL_HANDSHAKE:
            self.reader.on_handshake(request["Mechanism"])
        else:
            self.reader.on_client_token(bytes(request["AuthBytes"]))
        return False

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
            self.connection.principal = principal
            self.auth.record(self.connection, mechanism, "success")
        elif not accepted:
            self.auth.record(self.connection, mechanism, "failure", "the broker refused it")


#: The gate a connection on a SASL listener holds.
SaslGate = TerminatingGate | PassthroughGate
