"""A small blocking Kafka client for the command line (``ksidecar quotas``, later ``features``).

One request at a time over a plain socket, encoded and decoded with our own schemas.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

import construct as c

from protocol.apis import DEFAULT_REGISTRY, ApiRegistry
from protocol.framing import EOF, NEED_DATA, FrameDecoder, encode_frame
from protocol.headers import decode_response_header, encode_request_header
from protocol.schema import decode, encode
from proxy.config import parse_hostport

CLIENT_ID = "ksidecar-cli"


class AdminError(Exception):
    """The sidecar could not be reached or answered something unreadable."""


class AdminClient:
    """A blocking connection to one sidecar (or broker)."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, registry: ApiRegistry = DEFAULT_REGISTRY):
        address = parse_hostport("--bootstrap-server", bootstrap)
        try:
            self.sock = socket.create_connection((address.host, address.port), timeout=timeout)
        except OSError as exc:
            raise AdminError(f"cannot connect to {bootstrap}: {exc}") from None
        self.registry = registry
        self.decoder = FrameDecoder()
        self.correlation = 0

    def close(self) -> None:
        """Close the connection."""
        self.sock.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, api_key: int, version: int, body: Mapping[str, Any]) -> c.Container:
        """Send one request and return its decoded response body."""
        api = self.registry.api(api_key)
        self.correlation += 1
        head = encode_request_header(api_key, version, self.correlation, CLIENT_ID, api.request_header_version(version))
        try:
            self.sock.sendall(encode_frame(head + encode(api.request, version, body)))
            while True:
                frame = self.decoder.next_frame()
                if frame is NEED_DATA:
                    self.decoder.receive_data(self.sock.recv(65536))
                    continue
                if frame is EOF:
                    raise AdminError("the connection closed before an answer came")
                payload = frame[4:]
                if len(payload) == 4:
                    raise AdminError(f"{api.name} v{version} is not supported there (KIP-35 empty answer)")
                correlation, size = decode_response_header(payload, api.response_header_version(version))
                if correlation != self.correlation:
                    raise AdminError(f"answer for correlation id {correlation}, expected {self.correlation}")
                return decode(api.response, version, payload[size:])
        except OSError as exc:
            raise AdminError(f"{api.name}: {exc}") from None
