"""BrokerMetadata (seed 002, the KIP-35 draft), answered by the sidecar.

``NodeIds`` empty asks for every broker the sidecar knows, ``[-1]`` for the answering
sidecar only, otherwise for the listed ids (unknown ids are left out). Each entry holds
the sidecar's advertised host and port for the client's listener, the protocol version
range, and key/value tags: the builtin tags the seed lists plus the operator's ``tag.*``.

ProtocolVersionMin/Max: Kafka never adopted the draft's global protocol version (it chose
per-API ApiVersions). The sidecar reports 0 and the number of (API, version) request
pairs it can parse, a number that only grows as the schema table grows.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.apis import ApiRegistry
from protocol.schema import decode, encode
from proxy.local.api import Answer, Context, LocalApi, LocalRequest, Respond
from proxy.local.messages.broker_metadata import (
    SELF,
    BrokerDescription,
    BrokerMetadataRequest,
    BrokerMetadataResponse,
)
from proxy.local.ports import BrokerEntry

VERSION = "0.1.0"
#: Record-batch attribute codes Kafka defines (bits 0-2).
COMPRESSION_CODECS = "1=gzip,2=snappy,3=lz4,4=zstd"


def version_int(version: str) -> str:
    """``0.1.0`` → ``0x00010000`` (major, minor, patch, 0 as bytes), as the seed's example."""
    parts = [int(p) for p in version.split(".")[:3]] + [0, 0, 0]
    return "0x" + "".join(f"{p:02x}" for p in parts[:4])


def protocol_version_max(registry: ApiRegistry) -> int:
    """How many (API, version) requests this sidecar can parse."""
    total = 0
    for api in registry:
        assert api.versions.hi is not None
        total += api.versions.hi - api.versions.lo + 1
    return total


def builtin_tags(
    broker_id: int,
    endpoints: Sequence[str],
    message_max_bytes: int,
    message_formats: str,
) -> dict[str, str]:
    """The seed's builtin tags for this sidecar."""
    return {
        "broker.id": str(broker_id),
        "broker.version": f"ksidecar-{VERSION}",
        "broker.version.int": version_int(VERSION),
        "compression.codecs": COMPRESSION_CODECS,
        "message.max.bytes": str(message_max_bytes),
        "message.formats": message_formats,
        "endpoints": ",".join(endpoints),
    }


def select(node_ids: Sequence[int], me: BrokerEntry, others: Sequence[BrokerEntry]) -> list[BrokerEntry]:
    """Apply the NodeIds filter: empty = all, -1 (:data:`SELF`) = me, else the listed known ids."""
    everyone = {me.node_id: me}
    for entry in others:
        everyone.setdefault(entry.node_id, entry)
    if not node_ids:
        return [everyone[k] for k in sorted(everyone)]
    chosen: list[BrokerEntry] = []
    for node_id in node_ids:
        found = me if node_id == SELF else everyone.get(node_id)
        if found is not None and found not in chosen:
            chosen.append(found)
    return chosen


def handle_broker_metadata(
    registry: ApiRegistry,
    version: int,
    body: bytes | memoryview,
    me: BrokerEntry,
    others: Sequence[BrokerEntry],
) -> bytes:
    """Answer one BrokerMetadata request (raises protocol errors on a bad body)."""
    api = registry.api(registry.broker_metadata_key)
    request = BrokerMetadataRequest.from_wire(version, decode(api.request, version, body))
    pmax = protocol_version_max(registry)
    response = BrokerMetadataResponse(brokers=tuple(
        BrokerDescription(node_id=e.node_id, host=e.host, port=e.port, protocol_version_min=0,
                          protocol_version_max=pmax, tags=tuple(e.tags.items()))
        for e in select(request.node_ids, me, others)
    ))
    return encode(api.response, version, response.to_wire(version))


def entry(registry: ApiRegistry) -> LocalApi:
    """The BrokerMetadata table entry (its key is ``sidecar.broker.metadata.api.key``)."""
    api = registry.api(registry.broker_metadata_key)
    assert api.versions.hi is not None

    def handle(request: LocalRequest, context: Context) -> Answer:
        me, others = context.ports.brokers.broker_entries(context.listener)
        return Respond(body=handle_broker_metadata(registry, request.version, request.raw, me, others))

    return LocalApi(key=api.key, name=api.name, versions=(api.versions.lo, api.versions.hi),
                    handler=handle, decode=False)
