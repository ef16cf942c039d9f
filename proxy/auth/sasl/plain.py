"""PLAIN (RFC 4616) as Kafka speaks it: one token ``[authzid] NUL authcid NUL passwd``.

The server answers an empty token on success. As in Kafka's ``PlainSaslServer``, the
authorization id must be empty or equal the user name, and neither name nor password may
be empty. The password is handed to ``verify`` and dropped; no message names it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxy.auth.sasl.errors import AuthenticationFailed

MECHANISM = "PLAIN"
#: Longest token read (RFC 4616 bounds each of the three parts at 255 octets).
MAX_TOKEN = 3 * 255 + 2

PasswordCheck = Callable[[str, str], bool]


@dataclass(frozen=True, slots=True, repr=False)
class PlainToken:
    """A parsed PLAIN token (its ``repr`` hides the password)."""

    authzid: str
    username: str
    password: str

    def __repr__(self) -> str:
        return f"PlainToken(username={self.username!r}, <password hidden>)"


def parse_plain(token: bytes) -> PlainToken:
    """Split a PLAIN token; :class:`AuthenticationFailed` if it is malformed."""
    if len(token) > MAX_TOKEN:
        raise AuthenticationFailed(f"PLAIN token longer than {MAX_TOKEN} bytes")
    parts = token.split(b"\0")
    if len(parts) != 3:
        raise AuthenticationFailed("PLAIN token must hold exactly two NUL separators")
    try:
        authzid, username, password = (part.decode("utf-8") for part in parts)
    except UnicodeDecodeError:
        raise AuthenticationFailed("PLAIN token is not UTF-8") from None
    if not username:
        raise AuthenticationFailed("PLAIN user name not specified")
    if not password:
        raise AuthenticationFailed("PLAIN password not specified")
    if authzid and authzid != username:
        raise AuthenticationFailed("PLAIN authorization id differs from the user name")
    return PlainToken(authzid, username, password)


class PlainServer:
    """One PLAIN exchange, server side; ``verify(user, password)`` decides."""

    def __init__(self, verify: PasswordCheck) -> None:
        self._verify = verify
        self.username: str | None = None
        self.complete = False
        self._done = False

    def receive(self, token: bytes) -> bytes:
        """Check the one client token; an empty answer on success."""
        if self._done:
            raise AuthenticationFailed("PLAIN exchange already ended")
        self._done = True
        parsed = parse_plain(token)
        if not self._verify(parsed.username, parsed.password):
            raise AuthenticationFailed("PLAIN user name or password is wrong")
        self.username = parsed.username
        self.complete = True
        return b""
