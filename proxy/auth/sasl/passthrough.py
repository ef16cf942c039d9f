"""The principal of an exchange the broker performs (``sidecar.sasl.mode=passthrough``).

The sidecar forwards the exchange untouched and reads along: the mechanism from
SaslHandshake, the user from the client's first token (PLAIN's authentication id, SCRAM's
``n=`` attribute), and success from the broker's answers. The principal is set only once
the broker has accepted every round the mechanism needs (PLAIN one, SCRAM two); a failed
round forgets the candidate. Other mechanisms (GSSAPI, OAUTHBEARER) leave the principal as
it was: their tokens do not name the user in a form read here. Nothing secret is kept:
only the user name is taken from a token.
"""

from __future__ import annotations

from protocol.correlation import SASL_ROUNDS
from proxy.auth.sasl.errors import SaslError
from proxy.auth.sasl.plain import MECHANISM as PLAIN
from proxy.auth.sasl.plain import parse_plain
from proxy.auth.sasl.scram import MECHANISMS as SCRAM_MECHANISMS
from proxy.auth.sasl.scram import parse_client_first


def user_of(mechanism: str, token: bytes) -> str | None:
    """The user a client's first token names, or ``None`` (unknown mechanism, bad token)."""
    try:
        if mechanism == PLAIN:
            return parse_plain(token).username
        if mechanism in SCRAM_MECHANISMS:
            return parse_client_first(token).username
    except SaslError:
        return None
    return None


class PrincipalReader:
    """Follows one connection's forwarded exchanges; :attr:`principal` once one succeeds."""

    def __init__(self) -> None:
        self.principal: str | None = None
        self.mechanism: str | None = None
        self._candidate: str | None = None
        self._rounds_left = 0
        self._first_token = True

    def on_handshake(self, mechanism: str) -> None:
        """The client asked for ``mechanism``: a new exchange starts."""
        self.mechanism = mechanism.upper()
        self._candidate = None
        self._rounds_left = SASL_ROUNDS.get(self.mechanism, 0)
        self._first_token = True

    def on_client_token(self, token: bytes) -> None:
        """A token the client sent (SaslAuthenticate bytes or a raw frame)."""
        if self._first_token and self.mechanism is not None:
            self._candidate = user_of(self.mechanism, token)
        self._first_token = False

    def on_server_answer(self, accepted: bool) -> str | None:
        """The broker answered one round; returns the new principal when the exchange is done."""
        if not accepted:
            self._candidate, self._rounds_left = None, 0
            return None
        if self._rounds_left <= 0:
            return None
        self._rounds_left -= 1
        if self._rounds_left == 0 and self._candidate is not None:
            self.principal = f"User:{self._candidate}"
            self._candidate = None
            return self.principal
        return None

    @property
    def in_exchange(self) -> bool:
        """True between a handshake and the end of its exchange."""
        return self._rounds_left > 0
