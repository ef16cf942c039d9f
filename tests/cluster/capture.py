"""A test observer that keeps every answer that can name a broker, as the client got it.

Loaded by the cluster's sidecars (``observer.class.names=tests.cluster.capture:Capture``,
``observer.capture.dir``): each response to Produce, Fetch, Metadata, FindCoordinator and
DescribeCluster is appended to ``<dir>/responses-<broker id>.bin`` as a record of API key
(int16), version (int16), body length (int32) and the body, flushed on every tick. The
test reads them back with kafka-python (:func:`read`), an independent decoder, to check
that no broker address ever reached a client.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from observers.api import Observer, ObserverConfig
from observers.exchange import Exchange

#: API keys whose responses can name a broker (proxy.datapath.rewrite.SITES, by Kafka's specs).
NAMING = frozenset({0, 1, 3, 10, 60})
_HEAD = struct.Struct(">hhi")


class Capture(Observer):
    """Appends the response bodies of :data:`NAMING` APIs to one file per sidecar."""

    name = "capture"

    def __init__(self) -> None:
        self._out: BinaryIO | None = None

    def configure(self, config: ObserverConfig) -> None:
        """Open ``<observer.capture.dir>/responses-<broker id>.bin`` for appending."""
        path = Path(config["observer.capture.dir"]) / f"responses-{config.broker_id}.bin"
        self._out = path.open("ab")

    def record_exchange(self, exchange: Exchange) -> None:
        """Keep the response body if the API can name a broker."""
        header = exchange.header
        if header.api_key not in NAMING or self._out is None:
            return
        body = exchange.response_body()
        if body is not None:
            self._out.write(_HEAD.pack(header.api_key, header.api_version, len(body)) + bytes(body))

    def tick(self, now: float) -> None:
        """Flush, so the test reads what has been answered so far."""
        if self._out is not None:
            self._out.flush()

    def close(self, timeout: float) -> None:
        """Close the file."""
        if self._out is not None:
            self._out.close()
            self._out = None


def read(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """The ``(api key, version, body)`` records of one capture file."""
    data = path.read_bytes() if path.exists() else b""
    at = 0
    while at + _HEAD.size <= len(data):
        key, version, size = _HEAD.unpack_from(data, at)
        at += _HEAD.size
        yield key, version, data[at : at + size]
        at += size
