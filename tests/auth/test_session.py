"""The per-connection SASL session (sans-IO): the state table, re-authentication, expiry,
and invariants under arbitrary sequences of events."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from proxy.auth.sasl.errors import AuthenticationFailed
from proxy.auth.sasl.plain import PlainServer
from proxy.auth.sasl.session import Admission, Session, State

PASSWORDS = {"alice": "a-pw", "bob": "b-pw"}


def check(user: str, password: str) -> bool:
    return PASSWORDS.get(user) == password


def session(reauth_ms: int = 0) -> Session:
    return Session({"PLAIN": lambda: PlainServer(check)}, reauth_ms)


def token(user: str, password: str) -> bytes:
    return f"\0{user}\0{password}".encode()


def test_admission_table() -> None:
    s = session()
    # HANDSHAKE: ApiVersions only.
    assert s.admit(18, 0) is Admission.PASS
    assert s.admit(0, 0) is Admission.UNAUTHENTICATED
    assert s.handshake(1, "PLAIN", 0).error_code == 0
    # AUTHENTICATE: nothing (SaslAuthenticate is handled, not admitted).
    assert s.admit(18, 0) is Admission.ILLEGAL_STATE
    assert s.admit(3, 0) is Admission.ILLEGAL_STATE
    reply = s.authenticate(1, token("alice", "a-pw"), 0)
    assert (reply.error_code, reply.outcome, s.state, s.principal) == (0, "success", State.AUTHENTICATED, "User:alice")
    assert s.admit(0, 0) is Admission.PASS and s.expires_at is None


def test_unsupported_mechanism_closes() -> None:
    s = session()
    reply = s.handshake(1, "GSSAPI", 0)
    assert (reply.error_code, reply.mechanisms, reply.close, s.state) == (33, ("PLAIN",), True, State.FAILED)
    assert s.admit(18, 0) is Admission.ILLEGAL_STATE


def test_authenticate_before_handshake_closes_without_answer() -> None:
    s = session()
    reply = s.authenticate(1, token("alice", "a-pw"), 0)
    assert (reply.respond, reply.close, s.state) == (False, True, State.FAILED)


def test_wrong_password_message_is_kafkas_and_names_nobody() -> None:
    for user in ("alice", "nobody"):
        s = session()
        s.handshake(1, "PLAIN", 0)
        reply = s.authenticate(1, token(user, "wrong"), 0)
        assert reply.error_code == 58 and reply.close and reply.outcome == "failure"
        assert reply.message == ("Authentication failed during authentication due to invalid "
                                 "credentials with SASL mechanism PLAIN")
        assert s.principal is None and s.failure_reason


def test_second_handshake_during_exchange_is_illegal() -> None:
    s = session()
    s.handshake(1, "PLAIN", 0)
    reply = s.handshake(1, "PLAIN", 0)
    assert (reply.error_code, reply.close) == (34, True)


def test_after_authentication_sasl_requests_without_reauth_support() -> None:
    s = session()
    s.handshake(0, "PLAIN", 0)
    assert s.expects_raw_token
    assert s.raw_token(token("bob", "b-pw"), 0).token == b""
    assert not s.expects_raw_token and s.principal == "User:bob"
    # Raw tokens (v0) do not support KIP-368: a new handshake is ILLEGAL_SASL_STATE, kept open.
    reply = s.handshake(1, "PLAIN", 1)
    assert (reply.error_code, reply.close, s.state) == (34, False, State.AUTHENTICATED)
    reply = s.authenticate(1, b"x", 1)
    assert (reply.error_code, reply.close) == (34, False)


def test_raw_token_failure_closes_silently() -> None:
    s = session()
    s.handshake(0, "PLAIN", 0)
    reply = s.raw_token(token("bob", "nope"), 0)
    assert (reply.respond, reply.close, reply.outcome) == (False, True, "failure")


def test_reauthentication_and_expiry() -> None:
    s = session(reauth_ms=1000)
    s.handshake(1, "PLAIN", 0)
    assert s.authenticate(1, token("alice", "a-pw"), 10.0).session_lifetime_ms == 1000
    assert s.expires_at == 11.0
    assert s.admit(0, 10.999) is Admission.PASS
    assert s.admit(0, 11.0) is Admission.EXPIRED
    # A re-authenticating handshake is allowed even after expiry, and renews the session.
    assert s.handshake(1, "PLAIN", 11.5).error_code == 0
    assert s.admit(0, 11.5) is Admission.ILLEGAL_STATE  # nothing passes mid-exchange
    reply = s.authenticate(1, token("alice", "a-pw"), 11.5)
    assert (reply.error_code, reply.outcome, s.expires_at) == (0, "success", 12.5)
    # Re-authentication as another user fails and closes.
    s.handshake(1, "PLAIN", 12)
    reply = s.authenticate(1, token("bob", "b-pw"), 12)
    assert reply.error_code == 58 and reply.close
    assert reply.message == "Cannot change principals during re-authentication from User:alice: User:bob"


def test_reauthentication_with_another_mechanism_fails() -> None:
    s = Session({"PLAIN": lambda: PlainServer(check), "OTHER": lambda: PlainServer(check)})
    s.handshake(1, "PLAIN", 0)
    s.authenticate(2, token("alice", "a-pw"), 0)
    assert s.handshake(1, "OTHER", 1).error_code == 0  # Kafka answers the handshake...
    reply = s.authenticate(2, token("alice", "a-pw"), 1)  # ...and fails the exchange
    assert reply.error_code == 58 and "not supported for re-authentication of mechanism 'PLAIN'" in str(reply.message)


class FakeScram:
    """Two rounds, any tokens; the second token says who logs in (``ok:<user>``)."""

    def __init__(self) -> None:
        self.username: str | None = None
        self.complete = False
        self.rounds = 0

    def receive(self, data: bytes) -> bytes:
        self.rounds += 1
        if self.rounds == 2:
            if not data.startswith(b"ok:"):
                raise AuthenticationFailed("no")
            self.username, self.complete = data[3:].decode() or "x", True
        return b"server"


class SessionMachine(RuleBasedStateMachine):
    """Random interleavings of handshakes, tokens, requests and time."""

    def __init__(self) -> None:
        super().__init__()
        self.s = Session({"FAKE": FakeScram, "PLAIN": lambda: PlainServer(check)}, reauth_ms=500)
        self.now = 0.0
        self.closed = False
        self.logins = 0

    @rule(version=st.sampled_from([0, 1]), mechanism=st.sampled_from(["FAKE", "PLAIN", "NOPE"]))
    def handshake(self, version: int, mechanism: str) -> None:
        if self.s.expects_raw_token:
            return
        self.closed |= self.s.handshake(version, mechanism, self.now).close

    @rule(version=st.sampled_from([0, 1, 2]), data=st.sampled_from([b"", b"ok:alice", b"ok:bob", b"\0alice\0a-pw", b"junk"]))
    def token(self, version: int, data: bytes) -> None:
        before = self.s.principal
        if self.s.expects_raw_token:
            reply = self.s.raw_token(data, self.now)
        else:
            reply = self.s.authenticate(version, data, self.now)
        self.closed |= reply.close
        if reply.outcome == "success":
            self.logins += 1
            assert self.s.principal is not None
        else:
            assert self.s.principal == before  # only a completed exchange sets it

    @rule(seconds=st.floats(0, 1))
    def wait(self, seconds: float) -> None:
        self.now += seconds

    @invariant()
    def requests_pass_only_when_authenticated_and_fresh(self) -> None:
        passes = self.s.admit(0, self.now) is Admission.PASS
        assert passes == (self.s.state is State.AUTHENTICATED and not self.s.expired(self.now))
        if passes:
            assert self.s.principal is not None and self.logins > 0

    @invariant()
    def closing_is_final(self) -> None:
        # Every answer that closes the connection leaves the session FAILED, for good.
        if self.closed:
            assert self.s.state is State.FAILED and self.s.admit(18, self.now) is not Admission.PASS


TestSessionMachine = SessionMachine.TestCase


@pytest.mark.parametrize("mechanism", ["PLAIN"])
def test_enabled_order_is_the_configured_order(mechanism: str) -> None:
    s = Session({"SCRAM-SHA-512": FakeScram, mechanism: lambda: PlainServer(check)})
    assert s.handshake(1, "X", 0).mechanisms == ("SCRAM-SHA-512", "PLAIN")
