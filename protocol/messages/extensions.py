"""Messages that are ours, not Kafka's, written in the same declarative model.

BrokerMetadata is the request the KIP-35 draft (seed 002) proposed and Kafka never
adopted (Kafka chose ApiVersions). The sidecar answers it itself. Its API key sits
outside Kafka's range and is configurable (``sidecar.broker.metadata.api.key``);
:data:`BROKER_METADATA_API_KEY` is the default. Version 0 is the draft's layout with
classic encodings; version 1 is the same fields with compact encodings and tagged
sections, for clients written against flexible versions.
"""

from __future__ import annotations

from protocol.spec import FieldSpec, MessageSpec, Versions

#: Default API key of BrokerMetadata: "KIP-35" written into Kafka's int16 key space,
#: far above Kafka's own keys (0-92 in Kafka 4.1).
BROKER_METADATA_API_KEY = 10035

_ALL = Versions(0, None)

BROKER_METADATA_REQUEST = MessageSpec(
    name="BrokerMetadataRequest",
    kind="request",
    api_key=BROKER_METADATA_API_KEY,
    valid=Versions(0, 1),
    flexible=Versions(1, None),
    fields=(
        # Empty: every broker the sidecar knows; [-1]: the answering sidecar only.
        FieldSpec("NodeIds", "[]int32", _ALL, default=()),
    ),
    listeners=("broker",),
)

BROKER_METADATA_RESPONSE = MessageSpec(
    name="BrokerMetadataResponse",
    kind="response",
    api_key=BROKER_METADATA_API_KEY,
    valid=Versions(0, 1),
    flexible=Versions(1, None),
    fields=(
        FieldSpec(
            "Brokers",
            "[]BrokerMetadata",
            _ALL,
            default=(),
            fields=(
                FieldSpec("NodeId", "int32", _ALL, default=0),
                FieldSpec("Host", "string", _ALL, default=""),
                FieldSpec("Port", "int32", _ALL, default=0),
                FieldSpec("ProtocolVersionMin", "int32", _ALL, default=0),
                FieldSpec("ProtocolVersionMax", "int32", _ALL, default=0),
                FieldSpec(
                    "Tags",
                    "[]Tag",
                    _ALL,
                    default=(),
                    fields=(
                        FieldSpec("Key", "string", _ALL, default=""),
                        FieldSpec("Value", "string", _ALL, default=""),
                    ),
                ),
            ),
        ),
    ),
    listeners=("broker",),
)
