"""SaslHandshake (17, v0-v1) and SaslAuthenticate (36, v0-v2) as typed messages.

SaslHandshake v1 has v0's fields (v0 only means that raw tokens follow, no Kafka framing);
SaslAuthenticate v1 adds ``SessionLifetimeMs`` to the answer (KIP-368), v2 is flexible.
A raw token after a v0 handshake is no Kafka message and has no type here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocol.errors import ErrorCode


@dataclass(frozen=True, kw_only=True, slots=True)
class SaslHandshakeRequest:
    """SaslHandshake v0-v1: the mechanism the client wants."""

    mechanism: str

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> SaslHandshakeRequest:
        """From a decoded SaslHandshake request body."""
        return cls(mechanism=body["Mechanism"])


@dataclass(frozen=True, kw_only=True, slots=True)
class SaslHandshakeResponse:
    """SaslHandshake answer: an error and the mechanisms the listener enables."""

    error: ErrorCode = ErrorCode.NONE
    mechanisms: tuple[str, ...] = ()

    def to_wire(self, version: int) -> dict[str, Any]:
        """To a SaslHandshake response body (the same fields at v0 and v1)."""
        return {"ErrorCode": int(self.error), "Mechanisms": list(self.mechanisms)}


@dataclass(frozen=True, kw_only=True, slots=True, repr=False)
class SaslAuthenticateRequest:
    """SaslAuthenticate v0-v2: one token of the exchange."""

    auth_bytes: bytes

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> SaslAuthenticateRequest:
        """From a decoded SaslAuthenticate request body."""
        return cls(auth_bytes=bytes(body["AuthBytes"]))

    def __repr__(self) -> str:
        return f"SaslAuthenticateRequest(<{len(self.auth_bytes)} bytes hidden>)"


@dataclass(frozen=True, kw_only=True, slots=True, repr=False)
class SaslAuthenticateResponse:
    """SaslAuthenticate answer: the outcome and the server's token."""

    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    auth_bytes: bytes = b""
    #: KIP-368: how long the session lasts before the client must re-authenticate
    #: (0: no limit). Only v1+ carries it.
    session_lifetime_ms: int = 0

    def to_wire(self, version: int) -> dict[str, Any]:
        """To a SaslAuthenticate response body; ``SessionLifetimeMs`` from v1."""
        body: dict[str, Any] = {"ErrorCode": int(self.error), "ErrorMessage": self.error_message,
                                "AuthBytes": self.auth_bytes}
        if version >= 1:
            body["SessionLifetimeMs"] = self.session_lifetime_ms
        return body

    def __repr__(self) -> str:
        return (f"SaslAuthenticateResponse(error={self.error.name}, error_message={self.error_message!r}, "
                f"<{len(self.auth_bytes)} bytes hidden>, session_lifetime_ms={self.session_lifetime_ms})")
