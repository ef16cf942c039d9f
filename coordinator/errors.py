"""Error codes and the one exception of the coordinator core.

The core answers every client mistake with a Kafka error code inside a response; it raises
only :class:`GroupError`, and only inside its own handlers, where the dispatching code turns
it into the response's error field. Nothing here is fatal to a connection.

:data:`Code` is ``protocol.errors.ErrorCode``, the project's one list of Kafka's error codes
(every code the coordinator writes is there).
"""

from __future__ import annotations

from protocol.errors import ErrorCode

#: Kafka error codes (``Errors.java``): the project's one list, by the name the core uses.
Code = ErrorCode


class GroupError(Exception):
    """A request the coordinator refuses: ``code`` goes into the response, ``message`` too
    where the response version has an ErrorMessage field."""

    def __init__(self, code: Code, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
