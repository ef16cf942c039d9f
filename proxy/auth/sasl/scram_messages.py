"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) as typed messages, v0.

The decisions (:mod:`proxy.auth.sasl.scram_admin`) take these requests' parts and return
these responses, so the types live here, below the local-API shell
(:mod:`proxy.local.scram_credentials`) that converts them from and to decoded bodies.
Field names on the wire are Kafka's (``DescribeUserScramCredentialsRequest.json`` and its
siblings); both APIs have the one version 0, flexible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from protocol.errors import ErrorCode


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribeUserScramCredentialsRequest:
    """DescribeUserScramCredentials v0: the users to describe, ``None`` (or empty) for all."""

    users: tuple[str, ...] | None = None

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> DescribeUserScramCredentialsRequest:
        """From a decoded DescribeUserScramCredentials request body (``Users`` is nullable)."""
        users = body["Users"]
        return cls(users=None if users is None else tuple(u["Name"] for u in users))


@dataclass(frozen=True, kw_only=True, slots=True)
class CredentialInfo:
    """One credential of a user: its mechanism (Kafka's type id) and iteration count."""

    mechanism: int
    iterations: int


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribedUser:
    """One user's credentials, or the error for the name asked."""

    user: str
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    credentials: tuple[CredentialInfo, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        """To one ``Results`` entry."""
        return {"User": self.user, "ErrorCode": int(self.error), "ErrorMessage": self.error_message,
                "CredentialInfos": [{"Mechanism": c.mechanism, "Iterations": c.iterations}
                                    for c in self.credentials]}


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribeUserScramCredentialsResponse:
    """DescribeUserScramCredentials answer: a top-level error and one result per user."""

    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    results: tuple[DescribedUser, ...] = ()
    throttle_time_ms: int = 0

    def to_wire(self, version: int) -> dict[str, Any]:
        """To a DescribeUserScramCredentials response body."""
        return {"ThrottleTimeMs": self.throttle_time_ms, "ErrorCode": int(self.error),
                "ErrorMessage": self.error_message, "Results": [r.to_wire() for r in self.results]}


@dataclass(frozen=True, slots=True)
class Deletion:
    """Remove one user's credential for one mechanism (Kafka's type id)."""

    name: str
    mechanism: int

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> Deletion:
        """From one decoded ``Deletions`` entry."""
        return cls(body["Name"], body["Mechanism"])


@dataclass(frozen=True, slots=True, repr=False)
class Upsertion:
    """Set one user's credential for one mechanism from a salted password."""

    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> Upsertion:
        """From one decoded ``Upsertions`` entry."""
        return cls(body["Name"], body["Mechanism"], body["Iterations"], bytes(body["Salt"]),
                   bytes(body["SaltedPassword"]))

    def __repr__(self) -> str:
        return f"Upsertion(name={self.name!r}, mechanism={self.mechanism}, <secrets hidden>)"


@dataclass(frozen=True, kw_only=True, slots=True)
class AlterUserScramCredentialsRequest:
    """AlterUserScramCredentials v0: deletions, then upsertions, as Kafka applies them."""

    deletions: tuple[Deletion, ...] = ()
    upsertions: tuple[Upsertion, ...] = ()

    @classmethod
    def from_wire(cls, version: int, body: Mapping[str, Any]) -> AlterUserScramCredentialsRequest:
        """From a decoded AlterUserScramCredentials request body."""
        return cls(deletions=tuple(Deletion.from_wire(d) for d in body["Deletions"]),
                   upsertions=tuple(Upsertion.from_wire(u) for u in body["Upsertions"]))


@dataclass(frozen=True, kw_only=True, slots=True)
class AlteredUser:
    """The outcome for one user named in an AlterUserScramCredentials request."""

    user: str
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """To one ``Results`` entry."""
        return {"User": self.user, "ErrorCode": int(self.error), "ErrorMessage": self.error_message}


@dataclass(frozen=True, kw_only=True, slots=True)
class AlterUserScramCredentialsResponse:
    """AlterUserScramCredentials answer: one result per user, in the order first named."""

    results: tuple[AlteredUser, ...] = ()
    throttle_time_ms: int = 0

    def failed(self, user: str, error: ErrorCode, message: str) -> AlterUserScramCredentialsResponse:
        """This answer with ``user``'s result replaced by an error (a write that failed)."""
        return replace(self, results=tuple(
            replace(r, error=error, error_message=message) if r.user == user else r for r in self.results))

    def to_wire(self, version: int) -> dict[str, Any]:
        """To an AlterUserScramCredentials response body."""
        return {"ThrottleTimeMs": self.throttle_time_ms, "Results": [r.to_wire() for r in self.results]}
