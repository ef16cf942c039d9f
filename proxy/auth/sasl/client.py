"""The client side of PLAIN and SCRAM, for the sidecar's own logins (its control connection
to a broker that authenticates, ``sidecar.upstream.sasl.*``).

A login is :meth:`LoginClient.first`, then :meth:`LoginClient.respond` to each server token
until it returns ``None``.
"""

from __future__ import annotations

from typing import Protocol

from proxy.auth.sasl.plain import MECHANISM as PLAIN
from proxy.auth.sasl.scram import MECHANISMS, ScramClient


class LoginClient(Protocol):
    """One login's client side."""

    def first(self) -> bytes:
        """The first client token."""
        ...

    def respond(self, server_message: bytes) -> bytes | None:
        """The next client token, or ``None`` when the exchange is complete."""
        ...


class PlainClient:
    """PLAIN: one token, and an empty answer ends it."""

    def __init__(self, username: str, password: str) -> None:
        self._token = b"\0" + username.encode("utf-8") + b"\0" + password.encode("utf-8")

    def first(self) -> bytes:
        """``NUL user NUL password``."""
        token, self._token = self._token, b""
        return token

    def respond(self, server_message: bytes) -> bytes | None:
        """PLAIN has one round."""
        return None


def login_client(mechanism: str, username: str, password: str) -> LoginClient:
    """A client for ``mechanism`` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)."""
    if mechanism == PLAIN:
        return PlainClient(username, password)
    return ScramClient(MECHANISMS[mechanism], username, password)
