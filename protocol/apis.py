"""The API key registry: which requests exist, at which versions, with which headers.

An :class:`ApiRegistry` joins the generated Kafka table with our own extension
(BrokerMetadata, at a configurable key) and answers the questions the data path asks of
every frame: is this key known, is this version valid, which header versions does it use,
and which spec decodes its body.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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
#: Other API keys the sidecar names in code.
METADATA = 3
CREATE_TOPICS = 19
DELETE_TOPICS = 20
CREATE_PARTITIONS = 37
SASL_AUTHENTICATE = 36
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
#: The group APIs the embedded coordinator serves.
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
TXN_OFFSET_COMMIT = 28
DELETE_GROUPS = 42
OFFSET_DELETE = 47
CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
#: The share-group APIs (KIP-932) the embedded coordinator serves.
SHARE_GROUP_HEARTBEAT = 76
SHARE_GROUP_DESCRIBE = 77
SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79
DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92
#: What the sidecar asks its broker for a share group's records.
FETCH = 1
LIST_OFFSETS = 2
#: The admin APIs the sidecar answers for what it owns: its ACLs, per-IP quotas, KIP-584 features.
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
UPDATE_FEATURES = 57
#: The highest API key Kafka has assigned (as far as the generated table knows).
KAFKA_MAX_API_KEY = max(REQUESTS)


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
        """Request header version: 2 if flexible else 1.

        (ControlledShutdown v0, the one request with header v0, is not a client API and has
        no :class:`Api` here; :func:`protocol.headers.request_header_version` knows it.)
        """
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
    """All APIs this process knows, Kafka's plus BrokerMetadata at ``broker_metadata_key``.

    ``requests``/``responses`` default to the generated table; a bump passes the table it
    is about to write, to render the docs' API table from it.
    """

    def __init__(
        self,
        broker_metadata_key: int = extensions.BROKER_METADATA_API_KEY,
        *,
        requests: Mapping[int, MessageSpec] = REQUESTS,
        responses: Mapping[int, MessageSpec] = RESPONSES,
    ) -> None:
        if not 0 <= broker_metadata_key <= 0x7FFF:
            raise ValueError(f"BrokerMetadata API key {broker_metadata_key} is not an int16 >= 0")
        highest = max(requests)
        if broker_metadata_key <= highest:
            # Kafka assigns keys densely; the gaps in our table are controller-only or
            # ZooKeeper-era APIs (4-7 included), which are Kafka's all the same.
            raise ValueError(
                f"BrokerMetadata API key {broker_metadata_key} collides with Kafka's API keys "
                f"(0-{highest})"
            )
        apis: dict[int, Api] = {}
        for key, request in requests.items():
            response = responses[key]
            apis[key] = Api(key, request.name.removesuffix("Request"), request, response)
        apis[broker_metadata_key] = Api(
            broker_metadata_key,
            "BrokerMetadata",
            extensions.BROKER_METADATA_REQUEST,
            extensions.BROKER_METADATA_RESPONSE,
        )
        self.broker_metadata_key = broker_metadata_key
        self._apis = apis
        #: ``(api_key, api_version)`` of every version this project parses: its request
        #: and response header versions (what every forwarded frame needs, looked up once).
        self.header_versions: dict[tuple[int, int], tuple[int, int]] = {
            (key, version): (api.request_header_version(version), api.response_header_version(version))
            for key, api in apis.items()
            for version in range(api.versions.lo, (api.versions.hi or api.versions.lo) + 1)
        }

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


def flexible_from(api: Api) -> int | None:
    """The first version of ``api`` with flexible encodings, ``None`` if it has none."""
    hi = api.versions.hi
    assert hi is not None  # every API in the table has a closed valid range
    flexible = [v for v in range(api.versions.lo, hi + 1) if api.is_flexible(v)]
    return flexible[0] if flexible else None


def markdown_table(registry: ApiRegistry = DEFAULT_REGISTRY) -> str:
    """The API key table of ``docs/protocol.md``: key, name, versions, flexible-from."""
    lines = [
        "| Key | API | Versions parsed | Flexible from |",
        "| ---: | --- | --- | --- |",
    ]
    for api in registry:
        first = flexible_from(api)
        lines.append(
            f"| {api.key} | {api.name} | {api.versions} | {'never' if first is None else first} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m protocol.apis --markdown``: print the API key table for the docs."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m protocol.apis", description=main.__doc__)
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.parse_args(argv)
    print(markdown_table(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
