"""The audit trail's one schema: what the audit observer writes and spark_jobs read.

One row per request/response pair. Produce and Fetch pairs get one row per
topic-partition instead (``topic``, ``partition``, ``bytes``, ``records`` filled); every
other API gets a single row with those columns null. The columns describing the whole
request (sizes, latency, ids) repeat on each of its rows; ``first_row`` marks one row per
request so that counting requests or summing request sizes never counts a request twice.

Files are Parquet under Hive partitions ``dt=YYYY-MM-DD/hour=HH`` (UTC, of ``time``);
the partition columns live in the directory names, not in the files, and are declared
in :data:`PARTITION_COLUMNS`.

This module imports pyarrow only, so a Spark job (which may run where the sidecar does
not) can share it. Changing a column is a schema change: bump :data:`SCHEMA_VERSION`,
which every file carries in its key-value metadata under :data:`VERSION_KEY`, and keep the
readers able to read every version in :data:`READABLE_VERSIONS`.

Versions:

1. The columns up to ``records``.
2. Adds ``topic_partitions`` (the topic inventory: a Metadata request gets one more row,
   ``first_row`` false, per topic its response reported that this sidecar has not recorded
   in the same hour) and ``max_wait_ms`` (a Fetch's designed wait, for long-poll-aware
   latency). Version 1 files read as version 2 with both columns null: readers give the
   full schema and Parquet fills the columns a file lacks with nulls.
3. Adds ``client_software_name`` and ``client_software_version``: what the client said it
   is in its connection's ApiVersions v3+ request (KIP-511), null when it sent none (older
   clients, or requests before its ApiVersions), and ``denials``: what the sidecar's ACLs
   refused of the request (``sidecar.authorizer=acls``), or would have refused in shadow
   mode, as a list of {``resource_type``, ``resource_name``, ``operation``, ``mode``} on
   the request's ``first_row``; null on every other row and when nothing was refused.
   It also adds ``throttle_time_ms``: the response's top-level ``ThrottleTimeMs`` as sent
   to the client (client quotas, KIP-219: the larger of the broker's and the sidecar's),
   null when the response has no such field or there is none. Version 1 and 2 files read
   as version 3 with these columns null. ``throttle_time_ms`` came last, while version 3
   was still unreleased: a version 3 file written before it lacks that one column and
   reads with it null the same way (a file's columns are always a prefix of its version's).

Which version a sidecar writes is the fleet's decision, not the release's: the sidecar
feature ``ksidecar.audit.format`` (KIP-584, docs/features.md) at level 0 writes version 2,
at level 1 version 3 (:data:`VERSION_AT_LEVEL`). A release that can write version 3 keeps
writing version 2 until the operator finalizes level 1, so during a rolling upgrade every
file is one the oldest sidecar's readers know.
"""

from __future__ import annotations

import pyarrow as pa

#: The newest version (of :data:`AUDIT_SCHEMA`); each file's metadata names its own, and
#: readers may refuse versions they do not know.
SCHEMA_VERSION = 3
#: The file metadata key that holds the schema version (as text).
VERSION_KEY = "ksidecar.audit.schema"
#: The versions readers of this module's schema accept (older files read with nulls).
READABLE_VERSIONS = (1, 2, 3)
#: The sidecar feature (KIP-584) whose finalized level picks the version written
#: (coordinator.features.AUDIT_FORMAT; spelled here too, as this module imports pyarrow only).
FORMAT_FEATURE = "ksidecar.audit.format"
#: The version written at each finalized level of :data:`FORMAT_FEATURE`.
VERSION_AT_LEVEL: dict[int, int] = {0: 2, 1: 3}

#: Hive partition directories, outermost first (values are strings in the paths).
PARTITION_COLUMNS = ("dt", "hour")

#: The principal recorded for connections that did not authenticate.
ANONYMOUS = "User:ANONYMOUS"

#: The fields of one element of ``denials`` (version 3), in order: Kafka's names for the
#: resource type (``Topic``, ``Group``, ``Cluster``, ``TransactionalId``, ...) and the
#: operation (``Read``, ``Write``, ``Describe``, ...), the resource's name, and ``enforce``
#: (refused) or ``shadow`` (would have been).
DENIAL_FIELDS = ("resource_type", "resource_name", "operation", "mode")

_FIELDS: list[tuple[str, pa.DataType, bool, str]] = [
    # name, type, nullable, meaning (the version that added a column: _ADDED)
    ("time", pa.timestamp("us", tz="UTC"), False, "when the sidecar received the request"),
    ("sidecar_broker_id", pa.int32(), False, "broker id of the sidecar that saw the request"),
    ("listener", pa.string(), False, "name of the sidecar listener the client used"),
    ("client_host", pa.string(), False, "client IP address"),
    ("client_port", pa.int32(), False, "client TCP port"),
    ("principal", pa.string(), False, "authenticated principal, e.g. User:alice, else User:ANONYMOUS"),
    ("client_id", pa.string(), True, "client.id from the request header (null when absent)"),
    ("api_key", pa.int16(), False, "Kafka API key"),
    ("api_name", pa.string(), False, "Kafka API name, e.g. Produce"),
    ("api_version", pa.int16(), False, "request version"),
    ("correlation_id", pa.int32(), False, "correlation id (unique per connection, not globally)"),
    ("request_id", pa.int64(), False, "unique per request within one sidecar run (with sidecar_broker_id and time)"),
    ("first_row", pa.bool_(), False, "true on exactly one row of each request"),
    ("error_code", pa.int16(), True, "this row's error: the partition's for Produce/Fetch rows, else the top-level one; null when no response"),
    ("request_bytes", pa.int64(), False, "size of the whole request frame, size prefix included"),
    ("response_bytes", pa.int64(), True, "size of the whole response frame sent to the client; null when none (acks=0)"),
    ("latency_us", pa.int64(), True, "request received to response sent to the client, microseconds; null when no response"),
    ("upstream_latency_us", pa.int64(), True, "request forwarded to broker response received, microseconds; null when answered locally or no response"),
    ("local", pa.bool_(), False, "true when the sidecar answered the request itself"),
    ("acks", pa.int16(), True, "Produce acks (0, 1, -1); null for other APIs"),
    ("topic", pa.string(), True, "topic of a Produce/Fetch row (Fetch topic ids mapped to names where known), or of a Metadata inventory row"),
    ("partition", pa.int32(), True, "partition of a Produce/Fetch row"),
    ("bytes", pa.int64(), True, "record bytes produced (request) or fetched (response) for this partition"),
    ("records", pa.int64(), True, "records produced or fetched for this partition"),
    ("topic_partitions", pa.int32(), True, "on a Metadata inventory row (first_row false): the partition count the response reported for topic, recorded at most once per topic per hour per sidecar; null elsewhere (v2)"),
    ("max_wait_ms", pa.int32(), True, "a Fetch request's MaxWaitMs: how long the broker may hold it by design (a long poll); null for other APIs (v2)"),
    ("client_software_name", pa.string(), True, "ClientSoftwareName of the connection's ApiVersions v3+ request, e.g. confluent-kafka-python; null when the client sent none (v3)"),
    ("client_software_version", pa.string(), True, "ClientSoftwareVersion of that request, e.g. 2.6.0-rdkafka-2.6.0; null likewise (v3)"),
    ("denials", pa.list_(pa.struct([pa.field(n, pa.string(), nullable=False) for n in DENIAL_FIELDS])), True,
     "on the first_row: each resource the sidecar's ACLs refused of the request (mode enforce) or would have (mode shadow), "
     "e.g. {Topic, orders-eu, Write, shadow}; null when nothing was, on other rows, and without sidecar.authorizer=acls (v3)"),
    ("throttle_time_ms", pa.int32(), True,
     "the response's top-level ThrottleTimeMs as sent to the client (with client quotas the larger of the broker's "
     "and the sidecar's; > 0: the client was throttled for that long), on every row of the request; null when the "
     "response has no such field at its version (e.g. Produce/Fetch v0) or there is no response (v3)"),
]

#: The first version of each column added after version 1 (the others are in every version).
_ADDED = {"topic_partitions": 2, "max_wait_ms": 2, "client_software_name": 3,
          "client_software_version": 3, "denials": 3, "throttle_time_ms": 3}

#: The Arrow schema of every audit file (partition columns excluded).
AUDIT_SCHEMA = pa.schema(
    [pa.field(name, dtype, nullable=nullable, metadata={"doc": doc}) for name, dtype, nullable, doc in _FIELDS],
    metadata={VERSION_KEY: str(SCHEMA_VERSION)},
)


def schema_for(version: int) -> pa.Schema:
    """The schema of a file of ``version``: the columns that version had, in file order,
    with the version in the metadata. New columns are only ever added at the end, so
    each version's columns are a prefix of the next one's."""
    if version not in READABLE_VERSIONS:
        raise ValueError(f"audit schema version {version}: this module knows {READABLE_VERSIONS}")
    return pa.schema([f for f in AUDIT_SCHEMA if _ADDED.get(f.name, 1) <= version],
                     metadata={VERSION_KEY: str(version)})


def version_at_level(level: int) -> int:
    """The version to write with ``ksidecar.audit.format`` finalized at ``level`` (a level
    above the known ones writes the newest version this module knows)."""
    if level in VERSION_AT_LEVEL:
        return VERSION_AT_LEVEL[level]
    return VERSION_AT_LEVEL[max(VERSION_AT_LEVEL)] if level > 0 else VERSION_AT_LEVEL[0]


#: Column names in file order.
COLUMNS: tuple[str, ...] = tuple(name for name, *_ in _FIELDS)

#: Column meanings, for documentation and reports.
DOCS: dict[str, str] = {name: doc for name, _, _, doc in _FIELDS}

#: API keys whose rows are per topic-partition.
PRODUCE_KEY = 0
FETCH_KEY = 1
#: ShareFetch (KIP-932): records out to share-group members, per topic-partition like Fetch.
SHARE_FETCH_KEY = 78
#: The API key whose responses list the topics (the inventory rows).
METADATA_KEY = 3


def markdown_table() -> str:
    """The schema as a Markdown table (for docs/audit.md)."""
    lines = ["| column | type | null | meaning |", "|---|---|---|---|"]
    for name, dtype, nullable, doc in _FIELDS:
        lines.append(f"| `{name}` | {dtype} | {'yes' if nullable else 'no'} | {doc} |")
    return "\n".join(lines) + "\n"


class UnreadableVersion(ValueError):
    """An audit file written with a schema version this reader does not know (or none)."""


def check_version(text: str | bytes | None, where: str) -> int:
    """The schema version a file's metadata value ``text`` names, if this module can read
    it; else :class:`UnreadableVersion` naming ``where`` (the file)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        version = int(text) if text is not None else None
    except ValueError:
        version = None
    if version not in READABLE_VERSIONS:
        found = "no schema version" if text is None else f"schema version {text!r}"
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise UnreadableVersion(f"{where}: {found} in its metadata ({VERSION_KEY}); "
                                f"this reader knows versions {readable}")
    assert version is not None
    return version
