"""The observers package's one error."""

from __future__ import annotations


class ObserverError(ValueError):
    """An observer that cannot be loaded or configured; the message says which and why."""


__all__ = ["ObserverError"]
