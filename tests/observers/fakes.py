"""Observers that misbehave on purpose (named by import path in ``observer.class.names``)."""

from __future__ import annotations

import threading
from typing import Any

from observers.api import Observer, ObserverConfig

#: Released by tests (in-process sidecars) to let a stalled observer go.
RELEASE = threading.Event()


class RaisingObserver(Observer):
    """Wants every body, then raises on every call."""

    name = "raising"

    def wants(self, api_key: int, api_version: int) -> bool:
        return True

    def record_request(self, *args: Any) -> None:
        raise RuntimeError("raising observer: record_request")

    def record_response(self, *args: Any) -> None:
        raise RuntimeError("raising observer: record_response")


class StallingObserver(Observer):
    """Blocks in its first call until :data:`RELEASE` is set (at most 60 s)."""

    name = "stalling"

    def configure(self, config: ObserverConfig) -> None:
        self.calls = 0

    def record_request(self, *args: Any) -> None:
        self.calls += 1
        RELEASE.wait(60)

    def record_response(self, *args: Any) -> None:
        self.calls += 1


class CountingObserver(Observer):
    """Remembers every call, for unit tests."""

    name = "counting"

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.threads: set[str] = set()
        self.closed_with: float | None = None
        self.ticks = 0

    def wants(self, api_key: int, api_version: int) -> bool:
        return True

    def record_request(self, request: Any, *args: Any) -> None:
        self.threads.add(threading.current_thread().name)
        self.calls.append(("request", (request, *args)))

    def record_response(self, response: Any, *args: Any) -> None:
        self.calls.append(("response", (response, *args)))

    def tick(self, now: float) -> None:
        self.ticks += 1

    def close(self, timeout: float) -> None:
        self.threads.add(threading.current_thread().name)
        self.closed_with = timeout


class RawObserver(Observer):
    """Takes raw exchanges: remembers what it read of each (and raises on correlation 13)."""

    name = "raw"

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, bytes | None, bytes | None, str]] = []

    def record_exchange(self, exchange: Any) -> None:
        request, response = exchange.request_body(), exchange.response_body()
        if exchange.header.correlation_id == 13:
            raise RuntimeError("raw observer: unlucky exchange")
        self.seen.append((exchange.header.api_key, exchange.header.correlation_id,
                          None if request is None else bytes(request),
                          None if response is None else bytes(response),
                          threading.current_thread().name))
