"""Finding, constructing and configuring the observers ``observer.class.names`` names.

KIP-388's life cycle: each class is imported, called with no arguments, then configured
once; an observer whose constructor or ``configure`` raises stops the sidecar from
starting (:class:`~observers.errors.ObserverError` names the key and the reason).
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Mapping
from typing import Any

from observers.api import ObserverConfig
from observers.errors import ObserverError
from observers.worker import (
    DEFAULT_BLOCK_MAX_MS,
    DEFAULT_QUEUE_CAPACITY,
    OVERFLOW_POLICIES,
    Settings,
)

#: Observers built in, by the short name ``observer.class.names`` may use.
BUILTIN = {
    "audit": "observers.audit.AuditObserver",
    "prometheus": "observers.prometheus.PrometheusObserver",
}
#: Third-party observers may register under this entry-point group.
ENTRY_POINT_GROUP = "ksidecar.observers"

#: What :func:`load` returns per observer: the instance, its unique name, its queue settings.
Loaded = tuple[Any, str, Settings]


def load(names: str, config: ObserverConfig) -> list[Loaded]:
    """Import, construct and configure the observers named in ``names`` (comma-separated);
    a name taken twice gets a suffix (``audit-2``)."""
    loaded: list[Loaded] = []
    taken: set[str] = set()
    for spec in (n.strip() for n in names.split(",")):
        if not spec:
            continue
        observer = construct(spec)
        name = str(getattr(observer, "name", "") or type(observer).__name__.lower())
        base, n = name, 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        taken.add(name)
        try:
            observer.configure(config)
        except ObserverError:
            raise
        except Exception as exc:
            raise ObserverError(f"observer {spec!r}: configure failed: {exc}") from exc
        loaded.append((observer, name, settings_for(name, config)))
    return loaded


def construct(spec: str) -> Any:
    """An instance of the observer ``spec`` names: a built-in name, ``module.Class``,
    ``module:Class``, or a name in the ``ksidecar.observers`` entry-point group."""
    target: Any
    path = BUILTIN.get(spec, spec)
    if "." in path or ":" in path:
        module_name, sep, attribute = path.partition(":")
        if not sep:
            module_name, _, attribute = path.rpartition(".")
        try:
            target = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise ObserverError(f"observer.class.names: cannot import {spec!r}: {exc}") from None
    else:
        found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=spec)
        if not found:
            raise ObserverError(
                f"observer.class.names: {spec!r} is neither an import path nor a built-in "
                f"({', '.join(sorted(BUILTIN))}) nor in the {ENTRY_POINT_GROUP} entry points"
            )
        try:
            target = next(iter(found)).load()
        except Exception as exc:
            raise ObserverError(f"observer.class.names: loading {spec!r} failed: {exc}") from None
    try:
        observer = target()
    except Exception as exc:
        raise ObserverError(f"observer.class.names: {spec!r}() failed: {exc}") from None
    missing = [m for m in ("configure", "wants", "record_request", "record_response", "close")
               if not callable(getattr(observer, m, None))]
    if missing:
        raise ObserverError(f"observer.class.names: {spec!r} lacks {', '.join(missing)}")
    if not callable(getattr(observer, "tick", None)):
        observer.tick = lambda now: None
    return observer


def settings_for(name: str, config: Mapping[str, str]) -> Settings:
    """``observer.<name>.queue.capacity`` / ``.overflow`` / ``.block.max.ms``, defaulting to
    ``observer.queue.capacity`` / ``observer.overflow`` / ``observer.block.max.ms``."""

    def value(key: str, default: str) -> tuple[str, str]:
        own = f"observer.{name}.{key}"
        if own in config:
            return own, config[own]
        return f"observer.{key}", config.get(f"observer.{key}", default)

    def number(key: str, default: int) -> int:
        where, text = value(key, str(default))
        try:
            result = int(text.strip())
        except ValueError:
            result = -1
        least = 1 if key == "queue.capacity" else 0
        if result < least:
            raise ObserverError(f"{where}={text!r}: expected a whole number >= {least}")
        return result

    where, overflow = value("overflow", "drop")
    if overflow.strip().lower() not in OVERFLOW_POLICIES:
        raise ObserverError(f"{where}={overflow!r}: must be one of {', '.join(OVERFLOW_POLICIES)}")
    return Settings(
        capacity=number("queue.capacity", DEFAULT_QUEUE_CAPACITY),
        overflow=overflow.strip().lower(),
        block_max=number("block.max.ms", DEFAULT_BLOCK_MAX_MS) / 1000,
    )


__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "construct", "load", "settings_for"]
