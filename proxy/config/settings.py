"""Typed settings: what each component reads, built once from the key table.

Components take one of these frozen objects instead of looking keys up in a
:class:`~proxy.config.keys.SidecarConfig` (whose values are typed ``Any``): the key names
appear once, here, and a component's tests build its settings directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.settings import CoordinatorSettings
from proxy.config.keys import SidecarConfig


@dataclass(frozen=True, kw_only=True)
class ConnectionSettings:
    """One client connection's bounds (the data path)."""

    #: ``sidecar.max.in.flight.requests.per.connection``: slots in the response FIFO.
    max_in_flight: int = 1000
    #: ``sidecar.max.buffered.bytes.per.connection``: ready answers not yet written.
    max_buffered_bytes: int = 64 * 1024 * 1024
    #: ``connections.max.idle.ms`` in seconds.
    idle_timeout: float = 600.0
    #: ``socket.request.max.bytes``: the largest request frame.
    request_max_bytes: int = 104857600
    #: ``socket.request.read.timeout.ms`` in seconds (``None``: no limit): how long one
    #: request frame may take to arrive.
    request_read_timeout: float | None = 30.0
    #: ``sidecar.response.max.bytes``: the largest response frame.
    response_max_bytes: int = 1073741824
    #: ``sidecar.unsupported.request.policy``: ``respond`` (KIP-35) or ``close``.
    unsupported_policy: str = "respond"
    #: ``sidecar.unparsed.request.policy``: ``answer``, ``forward`` or ``close``.
    unparsed_policy: str = "answer"
    #: How long a drained connection reads and discards client bytes after its last
    #: answer and its FIN, so that closing it does not reset answers still in flight.
    drain_linger: float = 0.5

    @classmethod
    def from_config(cls, config: SidecarConfig) -> ConnectionSettings:
        """The settings the key table holds."""
        return cls(
            max_in_flight=config["sidecar.max.in.flight.requests.per.connection"],
            max_buffered_bytes=config["sidecar.max.buffered.bytes.per.connection"],
            idle_timeout=config["connections.max.idle.ms"] / 1000,
            request_max_bytes=config["socket.request.max.bytes"],
            request_read_timeout=None if config["socket.request.read.timeout.ms"] < 0
            else config["socket.request.read.timeout.ms"] / 1000,
            response_max_bytes=config["sidecar.response.max.bytes"],
            unsupported_policy=config["sidecar.unsupported.request.policy"],
            unparsed_policy=config["sidecar.unparsed.request.policy"],
        )


def queued_max_request_bytes(config: SidecarConfig) -> int | None:
    """``queued.max.request.bytes`` (``None``: no bound)."""
    value: int = config["queued.max.request.bytes"]
    return None if value < 0 else value


@dataclass(frozen=True, kw_only=True)
class SaslSettings:
    """SASL on one listener."""

    #: ``sidecar.sasl.mode`` is ``terminate`` (the sidecar authenticates).
    terminate: bool = True
    #: ``[listener.name.<l>.]sasl.enabled.mechanisms``.
    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    #: ``connections.max.reauth.ms`` (0: sessions never expire).
    reauth_ms: int = 0
    #: ``connection.failed.authentication.delay.ms`` in seconds.
    failure_delay: float = 0.1
    #: ``sidecar.sasl.plain.users.file`` ("" for none).
    plain_users_file: str = ""
    #: ``sidecar.sasl.scram.nonce.check``: ``kafka`` (suffix rule) or ``strict`` (RFC 5802).
    scram_nonce_check: str = "kafka"

    @classmethod
    def from_config(cls, config: SidecarConfig, listener: str) -> SaslSettings:
        """The settings of ``listener``."""
        return cls(
            terminate=config["sidecar.sasl.mode"] == "terminate",
            mechanisms=tuple(config.listener_value(listener, "sasl.enabled.mechanisms")),
            reauth_ms=config["connections.max.reauth.ms"],
            failure_delay=config["connection.failed.authentication.delay.ms"] / 1000,
            plain_users_file=config["sidecar.sasl.plain.users.file"],
            scram_nonce_check=config["sidecar.sasl.scram.nonce.check"],
        )


def coordinator_settings(config: SidecarConfig) -> CoordinatorSettings:
    """The embedded coordinator's settings (Kafka's ``group.*`` / ``offsets.*`` keys)."""
    return CoordinatorSettings(
        min_session_timeout_ms=config["group.min.session.timeout.ms"],
        max_session_timeout_ms=config["group.max.session.timeout.ms"],
        initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
        max_size=config["group.max.size"],
        consumer_heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
        consumer_session_timeout_ms=config["group.consumer.session.timeout.ms"],
        consumer_assignors=tuple(config["group.consumer.assignors"]),
        consumer_max_size=config["group.consumer.max.size"],
        offsets_retention_minutes=config["offsets.retention.minutes"],
        offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
        offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
    )
