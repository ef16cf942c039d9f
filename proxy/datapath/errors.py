"""How a connection ends: one exception with a metric reason, and reading a task group's end."""

from __future__ import annotations

import logging

import trio

from protocol.errors import FrameError

log = logging.getLogger("proxy.datapath.connection")


class UpstreamError(Exception):
    """The broker could not be reached or answered nonsense."""


class ConnectionClosed(Exception):
    """Ends a connection; ``reason`` becomes the metric label, ``detail`` the log line."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.detail = detail


def reason_of(group: BaseExceptionGroup[BaseException]) -> tuple[str, str]:
    """The first way a connection's tasks ended: ``(reason, detail)``.

    A bug (any other ``Exception``) costs only this connection: it is logged with its
    traceback and counted as ``internal_error``. Cancellation and other
    ``BaseException`` subclasses are re-raised.
    """
    expected, unexpected = group.split(
        (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError, OSError)
    )
    if unexpected is not None:
        fatal, bugs = unexpected.split(lambda e: not isinstance(e, Exception))
        if fatal is not None:
            raise unexpected
        assert bugs is not None
        log.error("internal error on a connection (closed)", exc_info=bugs)
        first = leaves(bugs)[0]
        return "internal_error", f"{type(first).__name__}: {first}"
    assert expected is not None
    found = leaves(expected)
    for leaf in found:
        if isinstance(leaf, ConnectionClosed):
            return leaf.reason, leaf.detail
    return "reset", str(found[0]) or type(found[0]).__name__


def leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """Every exception in a (nested) group, depth first."""
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def frame_cause(exc: FrameError) -> str:
    """The close reason for a frame the decoder refused."""
    name = type(exc).__name__
    return {"FrameTooLarge": "frame_too_large", "NegativeFrameSize": "negative_frame_size"}.get(
        name, "bad_frame"
    )
