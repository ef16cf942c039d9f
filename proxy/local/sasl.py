"""SaslHandshake (17), SaslAuthenticate (36) and raw tokens, where the sidecar terminates SASL.

Local APIs on a SASL listener in ``terminate`` mode; the admission rule that keeps
everything else out until the client has logged in is :mod:`proxy.auth.gate`. Both follow
the connection's :class:`~proxy.auth.sasl.session.Session` (``context.sasl``).

Token evaluation (PBKDF2 for PLAIN, HMACs for SCRAM) runs in a worker thread, and every
step is an answer-later that *holds* the pump: the next request may pass only once this
one's outcome is known, as Kafka's authenticator reads one request at a time while it
authenticates. A failed login is answered, then the connection closes after
``connection.failed.authentication.delay.ms``; after a v0 handshake a failure closes
without an answer.
"""

from __future__ import annotations

import trio

from protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE, ApiRegistry
from protocol.errors import ErrorCode
from proxy.auth.gate import ListenerAuth
from proxy.auth.sasl.session import Reply, Session
from proxy.local.api import Answer, Close, Context, Later, LocalApi, LocalRequest, Respond
from proxy.local.messages.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)


class SaslApis:
    """The SASL local APIs of one listener."""

    def __init__(self, auth: ListenerAuth) -> None:
        self.auth = auth

    def entries(self, registry: ApiRegistry) -> list[LocalApi]:
        """The table entries for SaslHandshake and SaslAuthenticate."""
        out = []
        for key, handler in ((SASL_HANDSHAKE, self.handshake), (SASL_AUTHENTICATE, self.authenticate)):
            api = registry.api(key)
            assert api.versions.hi is not None
            out.append(LocalApi(key=key, name=api.name, versions=(api.versions.lo, api.versions.hi),
                                handler=handler))
        return out

    def handshake(self, request: LocalRequest, context: Context) -> Answer:
        """Answer SaslHandshake: the mechanism is chosen (no token work: answered now)."""
        session = _session(context)
        assert request.body is not None
        asked = SaslHandshakeRequest.from_wire(request.version, request.body)
        reply = session.handshake(request.version, asked.mechanism, trio.current_time())
        response = SaslHandshakeResponse(error=ErrorCode(reply.error_code), mechanisms=reply.mechanisms)
        return self._after(reply, Respond(body=response.to_wire(request.version)), context)

    def authenticate(self, request: LocalRequest, context: Context) -> Answer:
        """Answer SaslAuthenticate: one token, evaluated off the event loop."""
        session = _session(context)
        assert request.body is not None
        version = request.version
        asked = SaslAuthenticateRequest.from_wire(version, request.body)

        async def answer() -> Respond | Close:
            reply = await trio.to_thread.run_sync(session.authenticate, version, asked.auth_bytes,
                                                  trio.current_time())
            response = SaslAuthenticateResponse(error=ErrorCode(reply.error_code), error_message=reply.message,
                                                auth_bytes=reply.token,
                                                session_lifetime_ms=reply.session_lifetime_ms)
            return self._after(reply, Respond(body=response.to_wire(version)), context)

        return Later(answer=answer, hold=True)

    def raw_token(self, token: bytes, context: Context) -> Answer:
        """Answer one raw token after a v0 handshake (no Kafka header either way)."""
        session = _session(context)

        async def answer() -> Respond | Close:
            reply = await trio.to_thread.run_sync(session.raw_token, token, trio.current_time())
            return self._after(reply, Respond(body=reply.token, raw=True), context)

        return Later(answer=answer, hold=True)

    def _after(self, reply: Reply, response: Respond, context: Context) -> Respond | Close:
        session = _session(context)
        mechanism = session.mechanism or "none"
        if reply.outcome == "success":
            assert session.principal is not None
            context.principal = session.principal
            self.auth.record(context, mechanism, "success", deviations=reply.deviations)
        elif reply.outcome == "failure":
            self.auth.record(context, mechanism, "failure", session.failure_reason)
        answer = response if reply.respond else None
        if reply.close:
            failed = reply.outcome == "failure"
            return Close(
                reason="sasl_authentication_failed" if failed else "sasl_refused",
                detail=session.failure_reason,
                answer=answer,
                linger=self.auth.failure_delay if failed else 0.0,
            )
        assert answer is not None
        return answer


def _session(context: Context) -> Session:
    assert context.sasl is not None, "SASL local APIs serve only terminating listeners"
    return context.sasl
