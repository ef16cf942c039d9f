"""SASL failures, each carrying the Kafka error code it is answered with.

The messages are safe to send to an unauthenticated client and to log: they never hold a
password, a token or a proof, and a failed login never says whether the user exists.
"""

from __future__ import annotations

from protocol.errors import ErrorCode


class SaslError(Exception):
    """A SASL exchange that cannot go on; ``error_code`` is Kafka's answer to it."""

    error_code = ErrorCode.SASL_AUTHENTICATION_FAILED
    #: What the client is told instead of Kafka's generic failure message, when the
    #: mechanism defines it (OAUTHBEARER's error JSON); ``None``: the generic message.
    client_message: str | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class AuthenticationFailed(SaslError):
    """Wrong credentials, unknown user or a malformed token (SASL_AUTHENTICATION_FAILED)."""


class IllegalSaslState(SaslError):
    """A request that does not fit the exchange's state (ILLEGAL_SASL_STATE)."""

    error_code = ErrorCode.ILLEGAL_SASL_STATE


class UnsupportedMechanism(SaslError):
    """A mechanism this listener does not enable (UNSUPPORTED_SASL_MECHANISM)."""

    error_code = ErrorCode.UNSUPPORTED_SASL_MECHANISM
