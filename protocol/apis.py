"""The API key registry: which requests exist, at which versions, with which headers.

An :class:`ApiRegistry` joins the generated Kafka table with our own extension
(BrokerMetadata, at a configurable key) and answers the questions the data path asks of
every frame: is this key known, is this version valid, which header versions does it use,
and which spec decodes its body.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from protocol.errors import UnknownApiKey, UnsupportedVersion
from protocol.messages import extensions
from protocol.messages.generated import REQUESTS, RESPONSES
from protocol.spec import MessageSpec, Versions

#: API keys whose header versions break the flexible-version rule (PROTOCOL_NOTES.md).
API_VERSIONS = 18
CONTROLLED_SHUTDOWN = 7
PRODUCE = 0
SASL_HANDSHAKE = 17


@dataclass(frozen=True, slots=True)
class Api:
    """One API: its key, name, and request/response specs."""

    key: int
    name: str
    request: MessageSpec
    response: MessageSpec

    @property
    def versions(self) -> Versions:
        """The versions this project can parse (the request's valid range)."""
        return self.request.valid

    def is_flexible(self, version: int) -> bool:
        """True when ``version`` of this API uses flexible encodings (KIP-482)."""
        return self.request.is_flexible(version)

    def request_header_version(self, version: int) -> int:
        """Request header version: 2 if flexible else 1; ControlledShutdown v0 uses 0."""
        if self.key == CONTROLLED_SHUTDOWN and version == 0:
            return 0
        return 2 if self.request.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        """Response header version: 1 if flexible else 0; ApiVersions always uses 0.

        ApiVersions keeps header v0 so that a client can read the error of a version it
        guessed too high before it knows which header the broker expects (KIP-511).
        """
        if self.key == API_VERSIONS:
            return 0
        return 1 if self.response.is_flexible(version) else 0


class ApiRegistry:
    """All APIs this process knows, Kafka's plus BrokerMetadata at ``broker_metadata_key``."""

    def __init__(self, broker_metadata_key: int = extensions.BROKER_METADATA_API_KEY) -> None:
        if not 0 <= broker_metadata_key <= 0x7FFF:
            raise ValueError(f"BrokerMetadata API key {broker_metadata_key} is not an int16 >= 0")
        if broker_metadata_key in REQUESTS:
            raise ValueError(
                f"BrokerMetadata API key {broker_metadata_key} collides with Kafka's "
                f"{REQUESTS[broker_metadata_key].name}"
            )
        apis: dict[int, Api] = {}
        for key, request in REQUESTS.items():
            response = RESPONSES[key]
            apis[key] = Api(key, request.name.removesuffix("Request"), request, response)
        apis[broker_metadata_key] = Api(
            broker_metadata_key,
            "BrokerMetadata",
            extensions.BROKER_METADATA_REQUEST,
            extensions.BROKER_METADATA_RESPONSE,
        )
        self.broker_metadata_key = broker_metadata_key
        self._apis = apis

    def __contains__(self, key: object) -> bool:
        return key in self._apis

    def __iter__(self) -> Iterator[Api]:
        return iter(sorted(self._apis.values(), key=lambda a: a.key))

    def __len__(self) -> int:
        return len(self._apis)

    def get(self, key: int) -> Api | None:
        """The API at ``key``, or ``None``."""
        return self._apis.get(key)

    def api(self, key: int) -> Api:
        """The API at ``key``; :class:`UnknownApiKey` if there is none."""
        try:
            return self._apis[key]
        except KeyError:
            raise UnknownApiKey(key) from None

    def checked(self, key: int, version: int) -> Api:
        """The API at ``key`` if ``version`` is one this project parses, else an error."""
        api = self.api(key)
        if version not in api.request.valid:
            raise UnsupportedVersion(key, version)
        return api

    def name(self, key: int) -> str:
        """A label for metrics and logs: the API's name or ``unknown``."""
        api = self._apis.get(key)
        return api.name if api is not None else "unknown"


#: The registry with BrokerMetadata at its default key.
DEFAULT_REGISTRY = ApiRegistry()
