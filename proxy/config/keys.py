"""Sidecar configuration: every key, its type, default and meaning, in one table.

Keys follow Kafka's ``server.properties`` names wherever Kafka has one; keys that are the
sidecar's own start with ``sidecar.``. :data:`KEYS` is the single source of truth: it
validates values at start (a bad value fails with the key, the value and what is
allowed), and ``python -m proxy.config --markdown`` renders it as the reference table in
``docs/configuration.md`` (a test keeps the two in step).

Three families of keys are open-ended: ``tag.<name>`` (user tags served by
BrokerMetadata), ``listener.name.<listener>.<key>`` (per-listener overrides) and
``observer.<key>`` (handed to observers).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import ssl
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from coordinator.features import parse_supported_override
from proxy.config.properties import read_properties

log = logging.getLogger(__name__)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_LISTENER = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_\-]*)://(?P<host>\[[^\]]*\]|[^:\[\]]*):(?P<port>\d+)$")
_HOSTPORT = re.compile(r"^(?P<host>\[[^\]]*\]|[^:\[\]]+):(?P<port>\d+)$")


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names key, value and rule."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """``name://host:port``, as in Kafka's ``listeners``."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class HostPort:
    """``host:port``."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def _port(key: str, value: str, text: str, *, allow_zero: bool = False) -> int:
    port = int(text)
    if not (0 if allow_zero else 1) <= port <= 65535:
        raise ConfigError(f"{key}={value!r}: port {port} is outside 1-65535")
    return port


def parse_endpoints(key: str, value: str) -> tuple[Endpoint, ...]:
    """``PLAINTEXT://127.0.0.1:9092,SSL://:9093`` → endpoints (names unique)."""
    endpoints: list[Endpoint] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        match = _LISTENER.match(item)
        if match is None:
            raise ConfigError(
                f"{key}={value!r}: {item!r} is not name://host:port (e.g. PLAINTEXT://127.0.0.1:19092)"
            )
        host = match["host"].strip("[]")
        endpoints.append(Endpoint(match["name"].upper(), host, _port(key, value, match["port"], allow_zero=True)))
    names = [e.name for e in endpoints]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{key}={value!r}: listener name(s) {', '.join(duplicates)} appear twice")
    return tuple(endpoints)


def parse_hostport(key: str, value: str, *, allow_zero: bool = False) -> HostPort:
    """``host:port`` (``[::1]:9092`` for IPv6); port 0 only where ``allow_zero``."""
    match = _HOSTPORT.match(value.strip())
    if match is None:
        raise ConfigError(f"{key}={value!r}: expected host:port (e.g. 127.0.0.1:9092)")
    return HostPort(match["host"].strip("[]"), _port(key, value, match["port"], allow_zero=allow_zero))


def parse_address_map(key: str, value: str) -> dict[int, HostPort]:
    """``1=host:port,2=host:port`` → {broker id: address}."""
    result: dict[int, HostPort] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        node, sep, address = item.partition("=")
        if not sep or not node.strip().lstrip("-").isdigit():
            raise ConfigError(f"{key}={value!r}: {item!r} is not <broker id>=<host>:<port>")
        result[int(node)] = parse_hostport(key, address)
    return result


def parse_protocol_map(key: str, value: str) -> dict[str, str]:
    """``INTERNAL:PLAINTEXT,EXTERNAL:SSL`` → {listener name: security protocol}."""
    result: dict[str, str] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{key}={value!r}: {item!r} is not <listener>:<{'|'.join(SECURITY_PROTOCOLS)}>"
            )
        result[name.strip().upper()] = protocol
    return result


@dataclass(frozen=True, slots=True)
class Key:
    """One configuration key: how to read it, its default, and its documentation."""

    name: str
    kind: str
    default: str | None
    doc: str
    parse: Callable[[str, str], Any]
    allowed: str = ""

    def read(self, value: str) -> Any:
        """Parse ``value``, turning any failure into a :class:`ConfigError` naming the key."""
        try:
            return self.parse(self.name, value)
        except ConfigError:
            raise
        except (ValueError, TypeError):
            raise ConfigError(
                f"{self.name}={value!r}: expected {self.allowed or self.kind}"
            ) from None


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[str, str], int]:
    def parse(key: str, value: str) -> int:
        number = int(value.strip())
        if (lo is not None and number < lo) or (hi is not None and number > hi):
            raise ConfigError(f"{key}={value!r}: must be {_range_text(lo, hi)}")
        return number

    return parse


def _bound_or_none(key: str, value: str) -> int:
    """A byte bound: -1 (none) or a positive number."""
    number = _int(-1)(key, value)
    if number == 0:
        raise ConfigError(f"{key}={value!r}: expected -1 (no bound) or a number >= 1")
    return number


def _range_text(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"between {lo} and {hi}"
    if lo is not None:
        return f">= {lo}"
    return f"<= {hi}"


def _choice(*options: str) -> Callable[[str, str], str]:
    def parse(key: str, value: str) -> str:
        v = value.strip().lower()
        if v not in options:
            raise ConfigError(f"{key}={value!r}: must be one of {', '.join(options)}")
        return v

    return parse


def _bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise ConfigError(f"{key}={value!r}: must be true or false")
    return v == "true"


def _str(key: str, value: str) -> str:
    return value.strip()


def _pem_only(key: str, value: str) -> str:
    """Kafka's store types: only PEM is read here; JKS and PKCS12 are refused with the way out."""
    v = value.strip().upper() or "PEM"
    if v == "PEM":
        return v
    if v in ("JKS", "PKCS12"):
        raise ConfigError(
            f"{key}={value.strip()}: only PEM stores are read (convert: `keytool -importkeystore "
            f"-srckeystore store.jks -destkeystore store.p12 -deststoretype PKCS12`, then `openssl "
            f"pkcs12 -in store.p12 -out store.pem` for the keystore, `openssl pkcs12 -in store.p12 "
            f"-nokeys -out ca.pem` for the truststore; docs/operations.md)"
        )
    raise ConfigError(f"{key}={value!r}: must be PEM")


def _regex(key: str, value: str) -> str:
    """A regular expression (matched whole, as Kafka matches its patterns), or empty."""
    text = value.strip()
    try:
        re.compile(text)
    except re.error as exc:
        raise ConfigError(f"{key}={value!r}: not a regular expression: {exc}") from None
    return text


#: Record batch compression types by Kafka's names (``compression.type``).
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")


def _compressions(key: str, value: str) -> frozenset[str]:
    names = {n.strip().lower() for n in value.split(",") if n.strip()}
    unknown = sorted(names - set(COMPRESSION_TYPES))
    if unknown:
        raise ConfigError(f"{key}={value!r}: {', '.join(unknown)} not among {', '.join(COMPRESSION_TYPES)}")
    return frozenset(names)


def _features_override(key: str, value: str) -> str:
    try:
        parse_supported_override(value)
    except ValueError as exc:
        raise ConfigError(f"{key}={value!r}: {exc}") from None
    return value.strip()


def _optional_hostport(key: str, value: str) -> HostPort | None:
    return parse_hostport(key, value, allow_zero=True) if value.strip() else None


def parse_ip_counts(key: str, value: str) -> dict[str, int]:
    """``1.2.3.4:100,10.0.0.1:5`` → {normalised IP: count}; IPv6 as ``[::1]:5``."""
    import ipaddress

    result: dict[str, int] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        address, sep, count = item.rpartition(":")
        address = address.strip("[]")
        try:
            ip = str(ipaddress.ip_address(address))
            number = int(count)
        except ValueError:
            raise ConfigError(f"{key}={value!r}: {item!r} is not <ip>:<integer>") from None
        if not sep or number < 0:
            raise ConfigError(f"{key}={value!r}: {item!r} is not <ip>:<integer >= 0>")
        result[ip] = number
    return result


#: SASL mechanisms the sidecar can terminate.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: What a terminating listener may offer: the above and OAUTHBEARER (RFC 7628, JWTs checked
#: against a JWKS); the control connection's own login stays PLAIN or SCRAM.
SERVER_SASL_MECHANISMS = (*SASL_MECHANISMS, "OAUTHBEARER")


ASSIGNORS = ("uniform", "range")


def parse_assignors(key: str, value: str) -> tuple[str, ...]:
    """``uniform,range`` → the assignor names (no repeats; at least one)."""
    names: list[str] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        if item not in ASSIGNORS:
            raise ConfigError(f"{key}={value!r}: {item!r} is not an assignor the sidecar has "
                              f"(allowed: {', '.join(ASSIGNORS)})")
        if item not in names:
            names.append(item)
    if not names:
        raise ConfigError(f"{key}={value!r}: name at least one of {', '.join(ASSIGNORS)}")
    return tuple(names)


def parse_mechanisms(
    key: str, value: str, allowed: tuple[str, ...] = SASL_MECHANISMS
) -> tuple[str, ...]:
    """``PLAIN,SCRAM-SHA-256`` → the mechanism names (upper case, no repeats)."""
    names: list[str] = []
    for item in (part.strip().upper() for part in value.split(",")):
        if not item:
            continue
        if item not in allowed:
            raise ConfigError(
                f"{key}={value!r}: {item!r} is not supported (allowed: {', '.join(allowed)})"
            )
        if item not in names:
            names.append(item)
    if not names:
        raise ConfigError(f"{key}={value!r}: name at least one of {', '.join(allowed)}")
    return tuple(names)


def parse_server_mechanisms(key: str, value: str) -> tuple[str, ...]:
    """``sasl.enabled.mechanisms``: :func:`parse_mechanisms` with OAUTHBEARER allowed too."""
    return parse_mechanisms(key, value, SERVER_SASL_MECHANISMS)


def _url(key: str, value: str) -> str:
    text = value.strip()
    if text and not re.match(r"^(https?|file):", text):
        raise ConfigError(f"{key}={value!r}: not an http://, https:// or file: URL")
    return text


def _names(key: str, value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _optional_mechanism(key: str, value: str) -> str:
    if not value.strip():
        return ""
    names = parse_mechanisms(key, value)
    if len(names) != 1:
        raise ConfigError(f"{key}={value!r}: name one mechanism")
    return names[0]


def parse_principals(key: str, value: str) -> frozenset[str]:
    """``User:alice;User:bob`` → the principals (Kafka separates ``super.users`` with ``;``)."""
    result: set[str] = set()
    for item in (part.strip() for part in value.split(";")):
        if not item:
            continue
        kind, sep, name = item.partition(":")
        if not sep or kind != "User" or not name:
            raise ConfigError(f"{key}={value!r}: {item!r} is not User:<name>")
        result.add(item)
    return frozenset(result)


_NO_LIMIT = "2147483647"


_DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)

#: Every fixed key the sidecar reads. Later issues add theirs here.
KEYS: tuple[Key, ...] = (
    Key("broker.id", "int", "-1",
        "Node id of the broker this sidecar fronts. -1: learn it from the upstream at start "
        "(the broker whose advertised address is `sidecar.upstream`, or the only broker).",
        _int(-1), ">= -1"),
    Key("listeners", "list", None,
        "Client listeners, `NAME://host:port` comma-separated. The security protocol of each "
        "comes from `listener.security.protocol.map`. Port 0 picks a free port (tests).",
        parse_endpoints, "name://host:port[,...]"),
    Key("advertised.listeners", "list", "",
        "Addresses clients are told to use for this sidecar, per listener name. Empty: the "
        "`listeners` value (a wildcard host such as 0.0.0.0 is refused).",
        lambda k, v: parse_endpoints(k, v) if v.strip() else (), "name://host:port[,...]"),
    Key("listener.security.protocol.map", "map", _DEFAULT_PROTOCOL_MAP,
        "Listener name to security protocol.", parse_protocol_map,
        "LISTENER:PROTOCOL[,...] with PROTOCOL in " + "|".join(SECURITY_PROTOCOLS)),
    Key("sidecar.upstream", "host:port", None,
        "The broker this sidecar fronts (usually on localhost in the same pod).",
        parse_hostport, "host:port"),
    Key("sidecar.upstream.security.protocol", "enum", "plaintext",
        "How the sidecar talks to its broker.", _choice("plaintext", "ssl"), "plaintext|ssl"),
    Key("sidecar.upstream.ssl.truststore.location", "path", "",
        "PEM CA bundle that verifies the broker's certificate (SSL upstream). Empty: system CAs.",
        _str),
    Key("sidecar.upstream.ssl.endpoint.identification.enabled", "bool", "true",
        "Check the broker certificate's host name (SSL upstream).", _bool, "true|false"),
    Key("sidecar.upstream.connect.timeout.ms", "int", "10000",
        "How long a new upstream connection may take before the client connection is closed.",
        _int(1), ">= 1"),
    Key("sidecar.upstream.api.versions.refresh.ms", "int", "60000",
        "How often the sidecar re-learns the broker's ApiVersions on its control connection.",
        _int(1000), ">= 1000"),
    Key("zookeeper.connect", "string", "",
        "ZooKeeper connect string with optional chroot (`127.0.0.1:2181/ksidecar`). Empty: run "
        "standalone (no registration, no per-IP quota store, group APIs pass through).", _str),
    Key("zookeeper.session.timeout.ms", "int", "18000", "ZooKeeper session timeout.",
        _int(1000), ">= 1000"),
    Key("zookeeper.set.acl", "bool", "false",
        "Create every znode owned by the sidecars' ZooKeeper identity (Kafka's key): readable by "
        "anyone else only where Kafka leaves it readable, never `/config/users` (SCRAM "
        "credentials) nor `/kafka-acl*`. Needs `zookeeper.digest.username`. Existing nodes: "
        "`ksidecar zookeeper secure` (docs/operations.md).", _bool, "true|false"),
    Key("zookeeper.digest.username", "string", "",
        "The sidecars' ZooKeeper identity, ZooKeeper's `digest` scheme (`addauth digest "
        "user:password`); the same for every sidecar of a fleet and the CLIs. Empty: "
        "unauthenticated.", _str),
    Key("zookeeper.digest.password", "password", "",
        "Password of `zookeeper.digest.username` (never logged; `${ENV}` substitution or "
        "`KSIDECAR_ZOOKEEPER_DIGEST_PASSWORD` keep it out of the file).", _str),
    Key("zookeeper.ssl.client.enable", "bool", "false",
        "Connect to ZooKeeper over TLS (Kafka's key; the servers' `secureClientPort`). The "
        "sidecar and the CLIs' `--zk-config-file` read the `zookeeper.ssl.*` keys below only "
        "when this is true.", _bool, "true|false"),
    Key("zookeeper.ssl.keystore.location", "path", "",
        "Client certificate for ZooKeeper's TLS: one PEM file holding the private key (PKCS#8 "
        "or traditional, optionally encrypted) and the certificate chain, as Kafka and "
        "ZooKeeper read with type PEM. Empty: no client certificate (the digest identity "
        "still authenticates).", _str),
    Key("zookeeper.ssl.keystore.password", "password", "",
        "Password of the keystore's private key if encrypted (never logged; "
        "`KSIDECAR_ZOOKEEPER_SSL_KEYSTORE_PASSWORD` keeps it out of the file).", _str),
    Key("zookeeper.ssl.keystore.type", "enum", "PEM",
        "Only PEM: JKS and PKCS12 stores (Kafka's other types) are refused with the command that "
        "converts them (docs/operations.md).", _pem_only, "PEM"),
    Key("zookeeper.ssl.truststore.location", "path", "",
        "PEM CA bundle that verifies the ZooKeeper servers' certificates. Empty: the system's CAs.",
        _str),
    Key("zookeeper.ssl.truststore.password", "password", "",
        "Accepted for configurations carried over from Kafka, and unused: a PEM truststore has "
        "no password (ZooKeeper's PEM reader ignores it too).", _str),
    Key("zookeeper.ssl.truststore.type", "enum", "PEM",
        "Only PEM, as `zookeeper.ssl.keystore.type`.", _pem_only, "PEM"),
    Key("zookeeper.ssl.endpoint.identification.enable", "bool", "true",
        "Check that the ZooKeeper server's certificate names the host of the connect string "
        "(an IP address needs an IP SAN), Kafka's default. The certificate chain is always "
        "verified.", _bool, "true|false"),
    Key("socket.request.max.bytes", "int", "104857600",
        "Largest request frame accepted from a client; a larger one closes the connection.",
        _int(1), ">= 1"),
    Key("queued.max.request.bytes", "int", "268435456",
        "Request bytes all client connections together may hold in memory (Kafka's name and "
        "meaning: a frame being read reserves its whole size; past the bound no connection "
        "starts reading a new large request until memory is released). An eighth more is "
        "kept for frames of at most 1 MiB, so clients holding large half-sent frames do not "
        "stop the others. -1: no bound (Kafka's default; the sidecar's is 256 MiB, so a "
        "handful of clients sending large frames cannot exhaust it).",
        _bound_or_none, "-1 or >= 1"),
    Key("socket.request.read.timeout.ms", "int", "30000",
        "Longest a client may take to send one request frame, from its first byte to its "
        "last; past it the connection is closed (cause `request_read_timeout`, logged and "
        "counted in ksidecar_errors_total), and the frame's memory is released. -1: no "
        "limit (Kafka's broker has none: a client that announces a large frame and stops "
        "would hold its share of queued.max.request.bytes for good).",
        _bound_or_none, "-1 or >= 1"),
    Key("sidecar.response.max.bytes", "int", "1073741824",
        "Largest response frame accepted from the broker.", _int(1), ">= 1"),
    Key("connections.max.idle.ms", "int", "600000",
        "Close a client connection with no request in flight after this long idle (checked a "
        "tenth of it apart, at most every second: closed within one such period after the timeout).",
        _int(1), ">= 1"),
    Key("sidecar.max.in.flight.requests.per.connection", "int", "1000",
        "Requests one client connection may have outstanding; at the bound the sidecar stops "
        "reading that client until responses go out (backpressure).", _int(1), ">= 1"),
    Key("sidecar.max.buffered.bytes.per.connection", "int", "67108864",
        "Response bytes held for one client (waiting for earlier responses or the socket) "
        "before the sidecar stops reading its requests.", _int(1024), ">= 1024"),
    Key("sidecar.address.mapping", "enum", "auto",
        "How broker addresses in responses become sidecar addresses: `offset` (same host, "
        "port + `sidecar.address.port.offset`), `static` (`sidecar.address.map`), `zookeeper` "
        "(sidecars registered under /brokers/ids), `auto` (zookeeper when "
        "`zookeeper.connect` is set, else offset). A broker with no known sidecar address is "
        "withheld, never passed through: dropped from broker lists, and a coordinator answer "
        "becomes COORDINATOR_NOT_AVAILABLE (logged once, counted in "
        "`ksidecar_rewrite_unmapped_total`).",
        _choice("auto", "offset", "static", "zookeeper"), "auto|offset|static|zookeeper"),
    Key("sidecar.address.port.offset", "int", "",
        "Port offset for the `offset` mapping. Empty: this sidecar's first advertised port "
        "minus its upstream's port.",
        lambda k, v: _int(-65535, 65535)(k, v) if v.strip() else None, "an integer"),
    Key("sidecar.address.map", "map", "",
        "Static mapping `brokerId=host:port,...` for the `static` scheme.", parse_address_map,
        "id=host:port[,...]"),
    Key("sidecar.unsupported.request.policy", "enum", "respond",
        "What to do with a request whose API key or version neither the sidecar nor the broker "
        "supports: `respond` (KIP-35: a response holding only the correlation id, connection "
        "kept) or `close` (as a Kafka broker does).", _choice("respond", "close"), "respond|close"),
    Key("sidecar.unparsed.request.policy", "enum", "answer",
        "What to do with an API key or version the broker advertises but the sidecar cannot parse "
        "(a newer Kafka's, a vendor's key): `answer` advertises only what the sidecar parses and "
        "answers the rest as unsupported (KIP-35); `forward` advertises the broker's ranges and "
        "passes such requests through opaque, paired by their header, counted per key and version "
        "and audited from the header (never for APIs whose answers name brokers: those stay at "
        "the versions the sidecar can rewrite); `close` closes a connection that sends one.",
        _choice("answer", "forward", "close"), "answer|forward|close"),
    Key("sidecar.coordinator", "enum", "passthrough",
        "Who coordinates consumer groups: `passthrough` forwards every group API to the broker; "
        "`embedded` answers them in the sidecar (classic and KIP-848 protocols, offsets in "
        "ZooKeeper under `/consumers`, docs/coordinator.md); Metadata then also names every "
        "registered sidecar its broker list lacks, since FindCoordinator may name any of them. "
        "`embedded` needs `zookeeper.connect`.",
        _choice("passthrough", "embedded"), "passthrough|embedded"),
    Key("sidecar.coordinator.metadata.refresh.ms", "int", "10000",
        "Embedded coordinator: how often it asks the broker for the partition counts of the "
        "topics its groups subscribe to (also at once when a subscription changes); a new "
        "partition rebalances the KIP-848 groups that use the topic.", _int(100), ">= 100"),
    Key("group.min.session.timeout.ms", "int", "6000",
        "Embedded coordinator: the smallest session timeout a classic member may ask for "
        "(else INVALID_SESSION_TIMEOUT).", _int(1), ">= 1"),
    Key("group.max.session.timeout.ms", "int", "1800000",
        "Embedded coordinator: the largest session timeout a classic member may ask for.",
        _int(1), ">= 1"),
    Key("group.initial.rebalance.delay.ms", "int", "3000",
        "Embedded coordinator: how long the first rebalance of an empty classic group waits for "
        "more members to join.", _int(0), ">= 0"),
    Key("sidecar.features.supported.override", "str", "",
        "Test only: replace this release's supported feature ranges (KIP-584, docs/features.md), "
        "`feature=min-max[,...]`, e.g. `group.version=0-0` to play an older sidecar in a mixed "
        "fleet. Empty: the release's own ranges.", _features_override, "feature=min-max[,...]"),
    Key("group.max.size", "int", _NO_LIMIT,
        "Embedded coordinator: most members of a classic group (GROUP_MAX_SIZE_REACHED past it).",
        _int(1), ">= 1"),
    Key("group.consumer.heartbeat.interval.ms", "int", "5000",
        "Embedded coordinator: the heartbeat interval KIP-848 members are told to use.",
        _int(1), ">= 1"),
    Key("group.consumer.session.timeout.ms", "int", "45000",
        "Embedded coordinator: a KIP-848 member without a heartbeat for this long is fenced.",
        _int(1), ">= 1"),
    Key("group.consumer.assignors", "list", "uniform,range",
        "Embedded coordinator: server-side assignors for KIP-848 groups, the first the default "
        "(others: UNSUPPORTED_ASSIGNOR).", parse_assignors, "uniform, range"),
    Key("group.consumer.max.size", "int", _NO_LIMIT,
        "Embedded coordinator: most members of a KIP-848 group.", _int(1), ">= 1"),
    Key("group.share.session.timeout.ms", "int", "45000",
        "Share groups (KIP-932): a member without a heartbeat for this long is fenced and its "
        "records go back to the group.", _int(1), ">= 1"),
    Key("group.share.heartbeat.interval.ms", "int", "5000",
        "Share groups: the heartbeat interval members are told to use.", _int(1), ">= 1"),
    Key("group.share.record.lock.duration.ms", "int", "30000",
        "Share groups: how long a member holds the records it acquired before they go back to "
        "the group (a group's share.record.lock.duration.ms overrides it).", _int(1), ">= 1"),
    Key("group.share.delivery.count.limit", "int", "5",
        "Share groups: a record delivered this many times is archived instead of delivered "
        "again.", _int(2, 10), "2-10"),
    Key("group.share.partition.max.record.locks", "int", "2000",
        "Share groups: the most records in flight per share-partition.", _int(100, 10_000), "100-10000"),
    Key("group.share.max.size", "int", "200",
        "Share groups: the most members of one share group (GROUP_MAX_SIZE_REACHED past it).",
        _int(1, 1000), "1-1000"),
    Key("group.share.max.share.sessions", "int", "2000",
        "Share groups: the most share sessions (one per member fetching here) the sidecar keeps "
        "(SHARE_SESSION_LIMIT_REACHED past it).", _int(1), ">= 1"),
    Key("offsets.retention.minutes", "int", "10080",
        "Embedded coordinator: committed offsets of a group that has been empty this long are "
        "deleted (KIP-211).", _int(1), ">= 1"),
    Key("offsets.retention.check.interval.ms", "int", "600000",
        "Embedded coordinator: how often expired offsets are looked for.", _int(1), ">= 1"),
    Key("offset.metadata.max.bytes", "int", "4096",
        "Embedded coordinator: longest metadata string an OffsetCommit may carry "
        "(OFFSET_METADATA_TOO_LARGE past it).", _int(0), ">= 0"),
    Key("sidecar.broker.metadata.api.key", "int", "10035",
        "API key of the BrokerMetadata request (seed 002); above Kafka's keys (0-92 in Kafka 4.1).",
        _int(93, 32767), "93-32767"),
    Key("message.max.bytes", "int", "1048588",
        "Reported to clients in BrokerMetadata (`message.max.bytes` tag); set it to the broker's.",
        _int(0), ">= 0"),
    Key("sidecar.metrics.listener", "host:port", "127.0.0.1:9404",
        "Where /metrics, /healthz and /readyz are served. Empty: no HTTP endpoint.",
        _optional_hostport, "host:port or empty"),
    Key("sidecar.workers", "int", "0",
        "Worker processes serving client connections (docs/operations.md, \"Workers\"). 0: as "
        "many as the CPUs the sidecar is given: its container's cgroup CPU quota rounded down "
        "(at least 1) or its cpuset when narrower than the host, the smaller of the two; with "
        "neither it shares the host's cores with its broker, and runs one process (a second "
        "one would take CPU from the broker). The count and why are logged at startup. 1: one "
        "process serves everything. With more than one, a supervisor process binds the "
        "listeners, admits connections under the KIP-612 quotas for the sidecar as a whole, "
        "hands each to the least-loaded worker, and owns the coordinator, features and the "
        "ACL, SCRAM and quota administration; /metrics sums every process.",
        _int(0, 256), "0-256"),
    Key("sidecar.shutdown.drain.ms", "int", "10000",
        "On SIGTERM: stop accepting and reading, send the broker what was read, and wait up to "
        "this long for every answer owed; then close each connection without a reset. What "
        "is still unanswered at the deadline (or at a second SIGTERM) is abandoned: logged "
        "with its count, and the exit code is 3.",
        _int(0), ">= 0"),
    Key("ssl.keystore.location", "path", "",
        "PEM file holding this sidecar's certificate chain and private key (SSL listeners).",
        _str),
    Key("ssl.key.password", "password", "", "Password of the private key, if encrypted.", _str),
    Key("ssl.truststore.location", "path", "",
        "PEM CA bundle for verifying client certificates (`ssl.client.auth`).", _str),
    Key("ssl.client.auth", "enum", "none", "Client certificate authentication on SSL listeners.",
        _choice("none", "requested", "required"), "none|requested|required"),
    Key("ssl.principal.mapping.rules", "list", "DEFAULT",
        "SSL listeners with a client certificate: Kafka's rules turning the certificate's subject "
        "(RFC 2253, e.g. `CN=alice,OU=eng,O=Acme`) into the principal `User:<name>`, first match "
        "wins: `RULE:<pattern>/<replacement>/` (optionally `L` or `U` after it) or `DEFAULT` (the whole subject), "
        "comma-separated. No match fails the connection's authentication (docs/authentication.md).",
        _str, "comma-separated `RULE:…/…/[LU]`, `DEFAULT`"),
    Key("ssl.allow.dn.changes", "bool", "false",
        "On a reload (docs/operations.md, \"Reloading\"): accept a new server certificate whose subject "
        "differs from the one in force (Kafka's key). False: such a reload changes nothing and says why.",
        _bool, "true|false"),
    Key("ssl.allow.san.changes", "bool", "false",
        "On a reload: accept a new server certificate that drops a subject alternative name of the one "
        "in force (Kafka's key; names may be added either way). False: such a reload changes nothing.",
        _bool, "true|false"),
    Key("max.connection.creation.rate", "int", _NO_LIMIT,
        "KIP-612: connections accepted per second, sidecar-wide (all listeners but "
        "`inter.broker.listener.name`). Over it the acceptor waits (never drops). "
        "2147483647: no limit. Per listener: `listener.name.<l>.max.connection.creation.rate`.",
        _int(0), ">= 0"),
    Key("inter.broker.listener.name", "string", "",
        "The protected listener: it honours only its own connection limits (KIP-612, KIP-402).",
        lambda k, v: v.strip().upper()),
    Key("sidecar.connection.rate.smoothing", "bool", "true",
        "Cap each quota window of the sidecar-wide and listener connection rates at "
        "limit × window, so Kafka's burst on a fresh (or recycled) sensor is spread out. "
        "false: Kafka's formula exactly (bursts of up to (quota.window.num - 1) × limit).",
        _bool, "true|false"),
    Key("quota.window.num", "int", "11", "Samples in a quota's rate sensor (connection rates and client "
        "quotas; Kafka's default).", _int(1), ">= 1"),
    Key("quota.window.size.seconds", "int", "1",
        "Length of one sample; also the longest accept delay.", _int(1), ">= 1"),
    Key("sidecar.client.quotas", "enum", "auto",
        "Who enforces user and client-id quotas (`producer_byte_rate`, `consumer_byte_rate`; "
        "`/config/users`, `/config/clients` in ZooKeeper, KIP-55): `sidecar` measures and throttles "
        "here as Kafka's broker does (KIP-219: the answer carries the throttle time, then the "
        "connection is not read for it) and answers DescribeClientQuotas and AlterClientQuotas for "
        "users and client ids; `broker` forwards those requests and enforces nothing here; `auto` "
        "is `sidecar` when the broker does not serve DescribeClientQuotas, else `broker`. "
        "`sidecar` and `auto` need `zookeeper.connect` to enforce anything (docs/operations.md, "
        "\"Client quotas\").",
        _choice("auto", "sidecar", "broker"), "auto|sidecar|broker"),
    Key("max.connections", "int", _NO_LIMIT,
        "Open client connections, sidecar-wide; at the limit the acceptor waits for a slot. "
        "Per listener: `listener.name.<l>.max.connections`.", _int(0), ">= 0"),
    Key("max.connections.per.ip", "int", _NO_LIMIT,
        "Open connections per client IP; one more is closed at once.", _int(0), ">= 0"),
    Key("max.connections.per.ip.overrides", "map", "",
        "Per-IP exceptions to `max.connections.per.ip`: `ip:count,...`.", parse_ip_counts,
        "ip:count[,...]"),
    Key("sidecar.ip.connection.creation.rate", "int", _NO_LIMIT,
        "Per-IP connection rate quota used when ZooKeeper holds none (`/config/ips/<default>` "
        "wins when set). Over it a connection is held for the delay, then closed.",
        _int(0), ">= 0"),
    Key("sidecar.ip.connection.creation.rate.overrides", "map", "",
        "Per-IP quotas from config, `ip:rate,...` (ZooKeeper's `/config/ips/<ip>` wins).",
        parse_ip_counts, "ip:rate[,...]"),
    Key("sidecar.sasl.mode", "enum", "terminate",
        "Who authenticates clients on SASL_PLAINTEXT/SASL_SSL listeners: `terminate` (the "
        "sidecar answers SaslHandshake/SaslAuthenticate itself, then forwards over its own "
        "link, and answers Describe/AlterUserScramCredentials) or `passthrough` (the broker "
        "does; the exchange is forwarded untouched and the principal read from it).",
        _choice("terminate", "passthrough"), "terminate|passthrough"),
    Key("sasl.enabled.mechanisms", "list", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "Mechanisms a terminating SASL listener offers (Kafka's key; per listener: "
        "`listener.name.<l>.sasl.enabled.mechanisms`). SCRAM credentials live in ZooKeeper "
        "(`/config/users/<user>`), PLAIN users in `sidecar.sasl.plain.users.file`, OAUTHBEARER "
        "tokens are checked against `sasl.oauthbearer.jwks.endpoint.url`.",
        parse_server_mechanisms, "comma-separated subset of " + ",".join(SERVER_SASL_MECHANISMS)),
    Key("sidecar.sasl.scram.nonce.check", "enum", "kafka",
        "How a SCRAM client-final nonce is checked when the sidecar terminates SASL: `kafka` "
        "accepts a final nonce that ends with the server's (Kafka 3.8.1-3.9's rule; librdkafka "
        "before 2.6.1, e.g. Debian's kcat, sends its own nonce twice and needs it), `strict` "
        "requires equality (RFC 5802 and Kafka 4.x). Logins that needed the leniency are "
        "counted in `ksidecar_sasl_lenient_logins_total` (docs/authentication.md).",
        _choice("kafka", "strict"), "kafka|strict"),
    Key("sidecar.sasl.plain.users.file", "path", "",
        "PLAIN users: a file of salted PBKDF2 hashes (`ksidecar users add NAME --plain-file "
        "FILE`); re-read when its size or modification time changes. Empty: no PLAIN users.",
        _str),
    Key("connections.max.reauth.ms", "int", "0",
        "KIP-368: session lifetime sent in SaslAuthenticate answers; a connection whose session "
        "expired is closed at its next request unless it re-authenticates. 0: sessions never "
        "expire.", _int(0), ">= 0"),
    # OAUTHBEARER (RFC 7628) where the sidecar terminates SASL: Kafka's broker-side keys
    # (KIP-768) and defaults. docs/authentication.md, "OAUTHBEARER".
    Key("sasl.oauthbearer.jwks.endpoint.url", "string", "",
        "OAUTHBEARER: where the identity provider publishes its signing keys (a JWKS, e.g. "
        "`https://idp/jwks`; `file:` URLs are read the same way). Fetched at start, every "
        "`sasl.oauthbearer.jwks.endpoint.refresh.ms`, and when a token names a key id not in "
        "the set (at most once per 10 s). Empty: no OAUTHBEARER login can succeed.",
        _url, "http(s):// or file: URL"),
    Key("sasl.oauthbearer.jwks.endpoint.refresh.ms", "int", "3600000",
        "OAUTHBEARER: how often the JWKS is fetched again (Kafka's default: an hour).",
        _int(1), ">= 1"),
    Key("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "int", "100",
        "OAUTHBEARER: first wait before retrying a failed JWKS fetch; doubled per attempt.",
        _int(0), ">= 0"),
    Key("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "int", "10000",
        "OAUTHBEARER: longest wait between JWKS fetch retries.", _int(0), ">= 0"),
    Key("sasl.oauthbearer.clock.skew.seconds", "int", "30",
        "OAUTHBEARER: leeway for a token's `exp`, `nbf` and `iat` against the sidecar's clock.",
        _int(0), ">= 0"),
    Key("sasl.oauthbearer.expected.audience", "list", "",
        "OAUTHBEARER: a token's `aud` must name one of these (comma-separated). Empty: not "
        "checked (Kafka's default; set it in production).", _names, "name[,...]"),
    Key("sasl.oauthbearer.expected.issuer", "string", "",
        "OAUTHBEARER: a token's `iss` must equal this. Empty: not checked (Kafka's default).",
        _str),
    Key("sasl.oauthbearer.sub.claim.name", "string", "sub",
        "OAUTHBEARER: the claim whose value is the principal (`User:<value>`).", _str),
    Key("sasl.oauthbearer.scope.claim.name", "string", "scope",
        "OAUTHBEARER: the claim holding the token's scopes (a space-separated string or a list); "
        "recorded with the session.", _str),
    Key("connection.failed.authentication.delay.ms", "int", "100",
        "KIP-306: after a failed authentication the error answer goes out and the connection "
        "closes this much later (slows password guessing; lets clients read the answer).",
        _int(0), ">= 0"),
    Key("super.users", "list", "",
        "Principals (`User:alice;User:bob`, Kafka's form) allowed to describe and alter SCRAM "
        "credentials over the wire (DescribeUserScramCredentials/AlterUserScramCredentials). "
        "`User:ANONYMOUS` admits unauthenticated listeners. Empty: only `ksidecar users`.",
        parse_principals, "User:<name>[;...]"),
    Key("sidecar.authorizer", "enum", "none",
        "Who authorizes clients' requests: `none` (today's behaviour: the broker, which sees the "
        "sidecar's own identity when the sidecar terminates SASL) or `acls` (Kafka ACLs kept in "
        "ZooKeeper in Kafka's format; CreateAcls/DescribeAcls/DeleteAcls answered by the sidecar; "
        "needs `zookeeper.connect`). See docs/authorization.md.",
        _choice("none", "acls"), "none|acls"),
    Key("sidecar.authorizer.mode", "enum", "enforce",
        "With `sidecar.authorizer=acls`: `enforce` refuses what the ACLs do not allow; `shadow` "
        "refuses nothing but logs, counts and audits every request that would be refused.",
        _choice("enforce", "shadow"), "enforce|shadow"),
    Key("allow.everyone.if.no.acl.found", "bool", "false",
        "With `sidecar.authorizer=acls`: a resource no ACL applies to is open to everyone "
        "(Kafka's key and default).", _bool, "true|false"),
    Key("sidecar.upstream.sasl.mechanism", "enum", "",
        "How the control connection authenticates to a broker that requires SASL (passthrough "
        "mode): empty (not at all), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.",
        _optional_mechanism, "empty|" + "|".join(SASL_MECHANISMS)),
    Key("sidecar.upstream.sasl.username", "string", "",
        "User of the control connection (`sidecar.upstream.sasl.mechanism`).", _str),
    Key("sidecar.upstream.sasl.password", "password", "",
        "Password of the control connection's user (never logged).", _str),
    Key("sidecar.log.level", "enum", "info", "Log level.",
        _choice("debug", "info", "warning", "error"), "debug|info|warning|error"),
    Key("sidecar.config.watch.ms", "int", "1000",
        "How often the sidecar looks for a change in the files it was configured from: the "
        "properties file, every keystore and truststore it names, ZooKeeper's TLS stores (a "
        "mounted Secret's symlink swap included); a change reloads (docs/operations.md, "
        "\"Reloading\"). The PLAIN users file needs no watch: it is read again at the first login "
        "after it changes. 0: only SIGHUP and `ksidecar reload` reload.", _int(0), ">= 0"),
    Key("sidecar.pid.file", "path", "",
        "Where `ksidecar run` writes its process id (removed at exit), for `ksidecar reload` and "
        "other tools that signal it. Empty: none.", _str),
    # Request filters (docs/filters.md). Filters also get every other filter.* key.
    Key("filter.class.names", "list", "",
        "Request filters to run, in order, after the built-in ones (the unparsed-request policy, "
        "then the ACLs): `policy` (built in, the `policy.*` keys) or an import path "
        "(`pkg.mod.Class`, `pkg.mod:Class`). Each is constructed with no arguments and "
        "configured with every `filter.*` and `policy.*` key. Empty: none (free).",
        _str, "name[,...]"),
    Key("policy.mode", "enum", "enforce",
        "The `policy` filter: `enforce` refuses what the policy does not allow; `shadow` refuses "
        "nothing but logs, counts and audits every request that would be refused.",
        _choice("enforce", "shadow"), "enforce|shadow"),
    Key("policy.client.id.pattern", "string", "",
        "The `policy` filter: every request but ApiVersions and SASL must carry a client id the "
        "whole of which this regular expression matches (else POLICY_VIOLATION). Empty: any.",
        _regex, "a regular expression"),
    Key("policy.acks.all.topics.pattern", "string", "",
        "The `policy` filter: a Produce to a topic the whole of whose name this regular "
        "expression matches must have acks=all (-1): acks=1 is answered INVALID_REQUIRED_ACKS, "
        "an acks=0 producer's connection is closed. Empty: none.",
        _regex, "a regular expression"),
    Key("policy.produce.max.records", "int", "0",
        "The `policy` filter: the most records one Produce request may carry (POLICY_VIOLATION "
        "above it). 0: no cap.", _int(0), ">= 0"),
    Key("policy.produce.max.bytes", "int", "0",
        "The `policy` filter: the most record bytes one Produce request may carry "
        "(POLICY_VIOLATION above it). 0: no cap.", _int(0), ">= 0"),
    Key("policy.compression.types.refused", "list", "",
        "The `policy` filter: record batch compression types a Produce may not use "
        "(UNSUPPORTED_COMPRESSION_TYPE), comma-separated among none, gzip, snappy, lz4, zstd.",
        _compressions, "type[,...]"),
    Key("policy.create.topics.partitions.min", "int", "0",
        "The `policy` filter: CreateTopics of fewer partitions is refused (POLICY_VIOLATION, per "
        "topic, as Kafka's create.topic.policy.class.name). 0: no minimum.", _int(0), ">= 0"),
    Key("policy.create.topics.partitions.max", "int", "0",
        "The `policy` filter: CreateTopics of more partitions is refused. 0: no maximum.",
        _int(0), ">= 0"),
    Key("policy.create.topics.replication.factor.min", "int", "0",
        "The `policy` filter: CreateTopics with a lower replication factor is refused. 0: no "
        "minimum.", _int(0), ">= 0"),
    Key("policy.create.topics.name.pattern", "string", "",
        "The `policy` filter: a topic to create must have a name the whole of which this regular "
        "expression matches. Empty: any.", _regex, "a regular expression"),
    # Observers (KIP-388; docs/observers.md). Observers also get every other observer.* key.
    Key("observer.class.names", "list", "",
        "Observers to load, comma-separated: a built-in name (`audit`, `prometheus`), an import "
        "path (`observers.audit.AuditObserver`, `pkg.mod:Class`) or a name in the "
        "`ksidecar.observers` entry-point group. Each is constructed with no arguments, "
        "configured with the `observer.*` keys and closed on shutdown. Empty: none (free).",
        _str, "name[,...]"),
    Key("observer.close.timeout.ms", "int", "10000",
        "On shutdown, how long observers may take to drain their queues and close (the audit "
        "observer writes its last files then).", _int(0), ">= 0"),
    Key("observer.queue.capacity", "int", "10000",
        "Exchanges waiting for one observer before new ones are dropped (counted in "
        "`ksidecar_observer_dropped_total`). Per observer: `observer.<name>.queue.capacity`.",
        _int(1), ">= 1"),
    Key("observer.overflow", "enum", "drop",
        "What a full observer queue does: `drop` (the exchange, counted) or `block` (the "
        "connection waits for room up to `observer.block.max.ms`: backpressure, then drop). "
        "Per observer: `observer.<name>.overflow`.", _choice("drop", "block"), "drop|block"),
    Key("observer.block.max.ms", "int", "5000",
        "With `overflow=block`, the longest a connection waits for room before dropping. Per "
        "observer: `observer.<name>.block.max.ms`.", _int(0), ">= 0"),
    Key("observer.audit.dir", "path", "",
        "Where the audit observer writes Parquet (`dt=YYYY-MM-DD/hour=HH/part-*.parquet`); "
        "required when it is on.", _str),
    Key("observer.audit.flush.interval.ms", "int", "1000",
        "How often buffered audit rows are appended to disk (a journal that survives a killed "
        "process): a SIGKILL loses at most this long's rows.", _int(1), ">= 1"),
    Key("observer.audit.roll.rows", "int", "1000000",
        "Rows after which an audit file is completed (made visible).", _int(1), ">= 1"),
    Key("observer.audit.roll.bytes", "int", "134217728",
        "Buffered (Arrow) bytes after which an audit file is completed; Parquet files come out "
        "smaller.", _int(1), ">= 1"),
    Key("observer.audit.roll.ms", "int", "300000",
        "Age after which an audit file is completed even if small.", _int(1), ">= 1"),
    Key("observer.audit.isolation", "enum", "thread",
        "Where the audit observer does its work: `thread` (its worker thread in the sidecar "
        "process, sharing the GIL with the data path) or `process` (a child process started "
        "with the sidecar: the sidecar only packs each exchange and hands it over, large "
        "frames picked first; the audit's metrics are reported back; docs/observers.md).",
        _choice("thread", "process"), "thread|process"),
    Key("observer.audit.queue.capacity", "int", "",
        "Queue of the audit observer. Empty: `observer.queue.capacity`.",
        lambda k, v: _int(1)(k, v) if v.strip() else None, ">= 1 or empty"),
    Key("observer.audit.overflow", "enum", "",
        "`drop` or `block` for the audit observer (block: no audit row is lost to a full "
        "queue while the audit keeps up within `observer.audit.block.max.ms`). Empty: "
        "`observer.overflow`.",
        lambda k, v: _choice("drop", "block")(k, v) if v.strip() else None, "drop|block or empty"),
    Key("observer.audit.block.max.ms", "int", "",
        "With `observer.audit.overflow=block`, the longest wait for room. Empty: "
        "`observer.block.max.ms`.", lambda k, v: _int(0)(k, v) if v.strip() else None,
        ">= 0 or empty"),
    Key("observer.prometheus.max.topics", "int", "1000",
        "Distinct topic label values of `ksidecar_observed_*`; later topics count as `other`.",
        _int(0), ">= 0"),
    Key("observer.prometheus.max.principals", "int", "100",
        "Distinct principal label values of `ksidecar_observed_*`; later ones count as `other`.",
        _int(0), ">= 0"),
)

_BY_NAME = {k.name: k for k in KEYS}
#: Per-listener overridable keys (``listener.name.<l>.<key>``).
LISTENER_KEYS = (
    "max.connection.creation.rate",
    "max.connections",
    "ssl.keystore.location",
    "ssl.key.password",
    "ssl.truststore.location",
    "ssl.client.auth",
    "ssl.principal.mapping.rules",
    "ssl.allow.dn.changes",
    "ssl.allow.san.changes",
    "sasl.enabled.mechanisms",
)

#: The keys a reload changes in a running sidecar (docs/operations.md, "Reloading"); a
#: change to any other key is applied at the next restart, and a reload names it. Open-ended
#: families: ``filter.*`` reload; ``listener.name.<l>.<key>`` as ``<key>`` does;
#: ``observer.<name>.queue.capacity`` / ``.overflow`` / ``.block.max.ms`` reload; ``tag.*``
#: and every other ``observer.*`` key need a restart.
LIVE_KEYS = frozenset({
    # TLS: server certificates and trusted CAs, per listener; ZooKeeper's for new sessions
    "ssl.keystore.location", "ssl.key.password", "ssl.truststore.location", "ssl.client.auth",
    "ssl.principal.mapping.rules", "ssl.allow.dn.changes", "ssl.allow.san.changes",
    "zookeeper.ssl.keystore.location", "zookeeper.ssl.keystore.password",
    "zookeeper.ssl.truststore.location", "zookeeper.ssl.truststore.password",
    "zookeeper.ssl.endpoint.identification.enable",
    # who may do what
    "super.users", "allow.everyone.if.no.acl.found",
    "sasl.enabled.mechanisms", "sidecar.sasl.plain.users.file", "sidecar.sasl.scram.nonce.check",
    "connections.max.reauth.ms", "connection.failed.authentication.delay.ms",
    # request filters and the built-in policy
    "filter.class.names", "policy.mode", "policy.client.id.pattern", "policy.acks.all.topics.pattern",
    "policy.produce.max.records", "policy.produce.max.bytes", "policy.compression.types.refused",
    "policy.create.topics.partitions.min", "policy.create.topics.partitions.max",
    "policy.create.topics.replication.factor.min", "policy.create.topics.name.pattern",
    # connection admission (KIP-612, KIP-402)
    "max.connection.creation.rate", "max.connections", "max.connections.per.ip",
    "max.connections.per.ip.overrides", "sidecar.connection.rate.smoothing",
    "sidecar.ip.connection.creation.rate", "sidecar.ip.connection.creation.rate.overrides",
    # timeouts and limits (new connections; idle and read timeouts for every connection)
    "socket.request.max.bytes", "socket.request.read.timeout.ms", "sidecar.response.max.bytes",
    "connections.max.idle.ms", "sidecar.max.in.flight.requests.per.connection",
    "sidecar.max.buffered.bytes.per.connection", "sidecar.unsupported.request.policy",
    "sidecar.shutdown.drain.ms",
    # the process itself
    "sidecar.log.level", "sidecar.config.watch.ms",
    # the observers' queues (not the observers themselves: those need a restart)
    "observer.queue.capacity", "observer.overflow", "observer.block.max.ms",
    "observer.audit.queue.capacity", "observer.audit.overflow", "observer.audit.block.max.ms",
})

#: An observer's own queue keys (``observer.<name>.<key>``) change on a reload too.
_OBSERVER_QUEUE_KEYS = (".queue.capacity", ".overflow", ".block.max.ms")


def is_live(name: str) -> bool:
    """True when a change to key ``name`` (a fixed key or one of an open-ended family)
    takes effect on a reload; false when it waits for a restart."""
    if name.startswith("filter."):
        return True
    if name.startswith("listener.name."):
        return name[len("listener.name."):].partition(".")[2] in LIVE_KEYS
    if name.startswith("observer.") and name.endswith(_OBSERVER_QUEUE_KEYS):
        return True
    return name in LIVE_KEYS


@dataclass(frozen=True)
class SidecarConfig:
    """Validated configuration. ``values`` holds every fixed key, parsed."""

    values: Mapping[str, Any]
    tags: Mapping[str, str] = field(default_factory=dict)
    listener_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    observer: Mapping[str, str] = field(default_factory=dict)
    raw: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def listeners(self) -> tuple[Endpoint, ...]:
        """The client listeners."""
        result: tuple[Endpoint, ...] = self.values["listeners"]
        return result

    def advertised(self, name: str) -> Endpoint:
        """The advertised endpoint of listener ``name``."""
        advertised: tuple[Endpoint, ...] = self.values["advertised.listeners"] or self.listeners
        for endpoint in advertised:
            if endpoint.name == name:
                return endpoint
        raise KeyError(name)

    def security_protocol(self, listener: str) -> str:
        """The security protocol of listener ``listener``."""
        mapping: dict[str, str] = self.values["listener.security.protocol.map"]
        return mapping.get(listener, listener if listener in SECURITY_PROTOCOLS else "PLAINTEXT")

    def is_sasl(self, listener: str) -> bool:
        """True when ``listener`` is SASL_PLAINTEXT or SASL_SSL."""
        return self.security_protocol(listener).startswith("SASL_")

    def listener_value(self, listener: str, key: str) -> Any:
        """``listener.name.<listener>.<key>`` if set, else ``key``."""
        return self.listener_overrides.get(listener, {}).get(key, self.values[key])


def build_config(raw: Mapping[str, str], *, warn_unknown: bool = True) -> SidecarConfig:
    """Validate raw key/values (after overrides) into a :class:`SidecarConfig`; an unknown
    key is logged (``warn_unknown``: a worker given its supervisor's configuration does not
    say it again) and ignored."""
    values: dict[str, Any] = {}
    tags: dict[str, str] = {}
    overrides: dict[str, dict[str, Any]] = {}
    observer: dict[str, str] = {}
    for name, value in raw.items():
        if name in _BY_NAME:
            continue
        if name.startswith("tag."):
            tags[name[4:]] = value
        elif name.startswith("observer."):
            observer[name] = value
        elif name.startswith("filter."):
            pass  # an operator's filter's own key (filter_entries)
        elif name.startswith("listener.name."):
            listener, _, sub_key = name[len("listener.name.") :].partition(".")
            if sub_key not in LISTENER_KEYS:
                raise ConfigError(
                    f"{name}: {sub_key!r} cannot be set per listener (allowed: {', '.join(LISTENER_KEYS)})"
                )
            overrides.setdefault(listener.upper(), {})[sub_key] = _BY_NAME[sub_key].read(value)
        elif warn_unknown:
            log.warning("ignoring unknown configuration key %s", name)
    for key in KEYS:
        if key.name in raw:
            values[key.name] = key.read(raw[key.name])
        elif key.default is None:
            raise ConfigError(f"{key.name} is required ({key.allowed or key.kind}): {key.doc}")
        else:
            values[key.name] = key.read(key.default)
    _cross_check(values)
    return SidecarConfig(values, tags, overrides, observer, dict(raw))


def _cross_check(values: dict[str, Any]) -> None:
    listeners: tuple[Endpoint, ...] = values["listeners"]
    if not listeners:
        raise ConfigError("listeners='': at least one listener is required")
    names = {e.name for e in listeners}
    advertised: tuple[Endpoint, ...] = values["advertised.listeners"]
    for endpoint in advertised:
        if endpoint.name not in names:
            raise ConfigError(
                f"advertised.listeners: {endpoint.name} is not one of the listeners ({', '.join(sorted(names))})"
            )
    for endpoint in advertised or listeners:
        if endpoint.host in ("", "0.0.0.0", "::"):
            raise ConfigError(
                f"advertised.listeners: {endpoint} cannot be advertised; set advertised.listeners "
                "to an address clients can reach"
            )
    protected = values["inter.broker.listener.name"]
    if protected and protected not in names:
        raise ConfigError(
            f"inter.broker.listener.name={protected!r}: not one of the listeners ({', '.join(sorted(names))})"
        )
    if values["sidecar.address.mapping"] == "static" and not values["sidecar.address.map"]:
        raise ConfigError("sidecar.address.mapping=static needs sidecar.address.map (id=host:port,...)")
    if values["sidecar.address.mapping"] == "zookeeper" and not values["zookeeper.connect"]:
        raise ConfigError("sidecar.address.mapping=zookeeper needs zookeeper.connect")
    if values["sidecar.coordinator"] == "embedded" and not values["zookeeper.connect"]:
        raise ConfigError(
            "sidecar.coordinator=embedded needs zookeeper.connect (groups and offsets live in "
            "ZooKeeper); set it, or use sidecar.coordinator=passthrough"
        )
    if values["group.min.session.timeout.ms"] > values["group.max.session.timeout.ms"]:
        raise ConfigError(
            f"group.min.session.timeout.ms={values['group.min.session.timeout.ms']} is above "
            f"group.max.session.timeout.ms={values['group.max.session.timeout.ms']}"
        )
    if values["sidecar.authorizer"] == "acls" and not values["zookeeper.connect"]:
        raise ConfigError(
            "sidecar.authorizer=acls needs zookeeper.connect (the ACLs live in ZooKeeper under /kafka-acl)"
        )
    check_zookeeper_identity(values)
    if values["sidecar.upstream.sasl.mechanism"] and not values["sidecar.upstream.sasl.username"]:
        raise ConfigError("sidecar.upstream.sasl.mechanism is set but sidecar.upstream.sasl.username is empty")


def check_zookeeper_identity(values: Mapping[str, Any]) -> None:
    """``zookeeper.set.acl`` needs an identity to own the znodes; a digest user name cannot
    hold ``:`` and needs a password; the TLS stores must load (:func:`check_zookeeper_tls`).
    (Also used by the CLIs' ``--zk-config-file``.)"""
    username: str = values["zookeeper.digest.username"]
    if ":" in username:
        raise ConfigError(f"zookeeper.digest.username={username!r}: cannot contain ':'")
    if username and not values["zookeeper.digest.password"]:
        raise ConfigError("zookeeper.digest.username is set but zookeeper.digest.password is empty")
    if values["zookeeper.set.acl"] and not username:
        raise ConfigError(
            "zookeeper.set.acl=true needs the sidecars' ZooKeeper identity: set "
            "zookeeper.digest.username and zookeeper.digest.password"
        )
    check_zookeeper_tls(values)


def check_zookeeper_tls(values: Mapping[str, Any]) -> None:
    """With ``zookeeper.ssl.client.enable``, the PEM stores named must load (the keystore
    with its password), so a wrong file or password stops the start with exit 2, not a
    session that never connects. The password is never part of the message."""
    if not values["zookeeper.ssl.client.enable"]:
        return
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    keystore: str = values["zookeeper.ssl.keystore.location"]
    truststore: str = values["zookeeper.ssl.truststore.location"]
    if keystore:
        try:
            # Never None: OpenSSL would prompt on the terminal for an encrypted key.
            context.load_cert_chain(keystore, keystore, password=str(values["zookeeper.ssl.keystore.password"]))
        except (OSError, ssl.SSLError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise ConfigError(
                f"zookeeper.ssl.keystore.location={keystore!r}: cannot load a private key and its "
                f"certificate from it ({reason}; one PEM file with both, and "
                "zookeeper.ssl.keystore.password if the key is encrypted)"
            ) from None
    elif values["zookeeper.ssl.keystore.password"]:
        raise ConfigError("zookeeper.ssl.keystore.password is set but zookeeper.ssl.keystore.location is empty")
    if truststore:
        try:
            context.load_verify_locations(cafile=truststore)
        except (OSError, ssl.SSLError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise ConfigError(
                f"zookeeper.ssl.truststore.location={truststore!r}: cannot read CA certificates "
                f"from it ({reason}; a PEM bundle)"
            ) from None


def observer_entries(config: SidecarConfig) -> dict[str, str]:
    """What observers are configured with: every ``observer.*`` key as a string, the
    documented ones (validated above) with their defaults, empty ones left out."""
    entries = {
        key.name: config.raw.get(key.name, key.default or "").strip()
        for key in KEYS
        if key.name.startswith("observer.")
    }
    entries.update(config.observer)
    return {k: v for k, v in entries.items() if v}


def filter_entries(config: SidecarConfig) -> dict[str, str]:
    """What request filters are configured with: every ``filter.*`` and ``policy.*`` key as
    a string (the documented ones with their defaults), empty ones left out."""
    entries = {
        key.name: config.raw.get(key.name, key.default or "").strip()
        for key in KEYS
        if key.name.startswith(("filter.", "policy."))
    }
    entries.update({k: v.strip() for k, v in config.raw.items() if k.startswith("filter.")})
    return {k: v for k, v in entries.items() if v}


def env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """``KSIDECAR_BROKER_ID=3`` → ``broker.id=3`` (``_`` → ``.``, ``__`` → ``_``)."""
    result: dict[str, str] = {}
    for name, value in environ.items():
        if name.startswith("KSIDECAR_") and len(name) > len("KSIDECAR_"):
            key = name[len("KSIDECAR_") :].lower().replace("__", "\0").replace("_", ".").replace("\0", "_")
            result[key] = value
    return result


def load_config(
    path: str | None,
    overrides: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> SidecarConfig:
    """File, then ``KSIDECAR_*`` environment, then explicit overrides (flags) win."""
    env = os.environ if environ is None else environ
    raw: dict[str, str] = read_properties(path, environ=env) if path else {}
    raw.update(env_overrides(env))
    raw.update(overrides or {})
    return build_config(raw)


def reference_markdown() -> str:
    """The configuration reference table (docs/configuration.md)."""
    lines = [
        "# Configuration reference",
        "",
        "Generated by `python -m proxy.config --markdown` from `proxy/config/keys.py`; do not edit.",
        "",
        "A sidecar reads a Java `.properties` file (`ksidecar run --config FILE`). Values may use",
        "`${NAME}` or `${NAME:-default}` from the environment. Environment variables",
        "`KSIDECAR_<KEY>` (dots as `_`, underscores as `__`) override the file, and",
        "`--set key=value` flags override both.",
        "",
        "Open-ended keys: `tag.<name>=<value>` (user tags served by BrokerMetadata),",
        "`listener.name.<listener>.<key>` for " + ", ".join(f"`{k}`" for k in LISTENER_KEYS) + ",",
        "`observer.<key>` (handed to observers) and `filter.<key>` (handed to request filters).",
        "",
        "Reload: `live` keys change in a running sidecar on a reload (SIGHUP, `ksidecar reload`, a",
        "changed file; docs/operations.md, \"Reloading\"); `restart` keys wait for the next start.",
        "`filter.*` keys and each observer's own `observer.<name>.queue.capacity`, `.overflow` and",
        "`.block.max.ms` are live; `tag.*` and the other `observer.*` keys need a restart.",
        "",
        "| key | type | default | allowed | reload | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for key in KEYS:
        default = "(required)" if key.default is None else (f"`{key.default}`" if key.default else "(empty)")
        allowed = (key.allowed or key.kind).replace("|", "\\|")  # a bare | would split the cell
        reload = "live" if key.name in LIVE_KEYS else "restart"
        lines.append(f"| `{key.name}` | {key.kind} | {default} | {allowed} | {reload} | "
                     f"{key.doc.replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m proxy.config --markdown`` prints the reference; ``--check FILE`` validates."""
    parser = argparse.ArgumentParser(prog="python -m proxy.config")
    parser.add_argument("--markdown", action="store_true", help="print the reference table")
    parser.add_argument("--check", metavar="FILE", help="validate a properties file")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(reference_markdown())
    if args.check:
        try:
            load_config(args.check)
        except ValueError as exc:
            print(f"invalid: {exc}", file=sys.stderr)
            return 1
        print("ok")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
