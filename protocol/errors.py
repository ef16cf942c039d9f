"""Errors raised by the protocol package.

Every failure on untrusted bytes raises a subclass of :class:`ProtocolError`; nothing else
(no ``IndexError``, ``struct.error`` or bare ``construct`` error) escapes a decoder. Each
error carries the Kafka error code a peer should be answered with, so the shell can turn a
decode failure into a response without a lookup table of its own.

The tree is small and flat on purpose::

    ProtocolError
    ├── FrameError            the size prefix itself is unacceptable
    │   ├── FrameTooLarge
    │   └── NegativeFrameSize
    ├── DecodeError           the bytes inside a frame do not match the schema
    │   ├── Truncated
    │   ├── TrailingBytes
    │   ├── InvalidTaggedFields
    │   └── InvalidValue
    ├── UnknownApiKey
    ├── UnsupportedVersion
    └── EncodeError           a value we were asked to write does not fit the schema
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """The Kafka error codes this project reads or writes (``Errors.java``): the one list,
    the coordinator's included (``coordinator.errors.Code`` is this enum)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    INVALID_REQUIRED_ACKS = 21
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    FENCED_LEADER_EPOCH = 74
    UNSUPPORTED_COMPRESSION_TYPE = 76
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    THROTTLING_QUOTA_EXCEEDED = 89
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100
    UNSUPPORTED_ENDPOINT_TYPE = 115
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    SHARE_SESSION_LIMIT_REACHED = 133
    INVALID_REGULAR_EXPRESSION = 128


class ProtocolError(Exception):
    """Base of every error raised on untrusted protocol bytes.

    ``error_code`` is the Kafka error code to answer the peer with where an answer is
    possible at all (a frame that cannot be delimited can only cost its connection).
    """

    error_code: ErrorCode = ErrorCode.INVALID_REQUEST

    def __init__(self, message: str, *, error_code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if error_code is not None:
            self.error_code = error_code


class FrameError(ProtocolError):
    """The 4-byte size prefix cannot start an acceptable frame; the stream is unusable."""


class FrameTooLarge(FrameError):
    """A frame announces more bytes than ``max_frame_size`` (Kafka: socket.request.max.bytes)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class NegativeFrameSize(FrameError):
    """A frame announces a negative size."""

    def __init__(self, size: int) -> None:
        super().__init__(f"frame announces a negative size ({size})")
        self.size = size


class DecodeError(ProtocolError):
    """The bytes inside a complete frame do not match the schema they were read with."""


class Truncated(DecodeError):
    """The input ended before the schema did."""


class TrailingBytes(DecodeError):
    """The schema ended before the input did."""

    def __init__(self, extra: int, what: str) -> None:
        super().__init__(f"{extra} unexpected trailing byte(s) after {what}")
        self.extra = extra


class InvalidTaggedFields(DecodeError):
    """A tagged-field section is out of order, repeats a tag or mis-sizes a known tag."""


class InvalidValue(DecodeError):
    """A value is well delimited but impossible (bad UTF-8, overlong varint, bad length)."""


class UnknownApiKey(ProtocolError):
    """The request names an API key this project has no schema for."""

    error_code = ErrorCode.UNSUPPORTED_VERSION

    def __init__(self, api_key: int) -> None:
        super().__init__(f"unknown API key {api_key}")
        self.api_key = api_key


class UnsupportedVersion(ProtocolError):
    """The API key is known but not at this version."""

    error_code = ErrorCode.UNSUPPORTED_VERSION

    def __init__(self, api_key: int, api_version: int) -> None:
        super().__init__(f"API key {api_key} has no version {api_version}")
        self.api_key = api_key
        self.api_version = api_version


class EncodeError(ProtocolError):
    """A value handed to a builder does not fit the schema (our bug, not the peer's)."""

    error_code = ErrorCode.UNKNOWN_SERVER_ERROR
