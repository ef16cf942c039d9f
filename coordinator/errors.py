"""Error codes and the one exception of the coordinator core.

The core answers every client mistake with a Kafka error code inside a response; it raises
only :class:`GroupError`, and only inside its own handlers, where the dispatching code turns
it into the response's error field. Nothing here is fatal to a connection.

:class:`Code` lists every code the coordinator writes. ``protocol.errors.ErrorCode`` lacks
several of them (FENCED_INSTANCE_ID, NON_EMPTY_GROUP, ...); they are named here so the core
does not depend on a wider change to ``protocol/``.
"""

from __future__ import annotations

from enum import IntEnum


class Code(IntEnum):
    """Kafka error codes (``Errors.java``) the coordinator answers with."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNKNOWN_TOPIC_ID = 100
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 130


class GroupError(Exception):
    """A request the coordinator refuses: ``code`` goes into the response, ``message`` too
    where the response version has an ErrorMessage field."""

    def __init__(self, code: Code, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
