"""The coordinator's settings: Kafka's broker keys, Kafka's defaults.

The shell reads ``server.properties``-style keys (``proxy/config``) and builds one
:class:`CoordinatorSettings`; the core only ever sees this frozen object. Each field names
the Kafka key it mirrors (``GroupCoordinatorConfig.java``, ``OffsetConfig.java``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Kafka's ``Integer.MAX_VALUE``: "no limit" for group sizes.
INT32_MAX = 2**31 - 1

#: Assignors the core implements, by their Kafka short names (``ConsumerGroupPartitionAssignor.name()``).
KNOWN_ASSIGNORS = ("uniform", "range")


@dataclass(frozen=True, kw_only=True, slots=True)
class CoordinatorSettings:
    """Everything the group coordinator is configured with; all times in milliseconds."""

    #: ``group.min.session.timeout.ms``: smallest session timeout a classic member may ask for.
    min_session_timeout_ms: int = 6_000
    #: ``group.max.session.timeout.ms``: largest session timeout a classic member may ask for.
    max_session_timeout_ms: int = 1_800_000
    #: ``group.initial.rebalance.delay.ms``: how long the first rebalance of an empty classic
    #: group waits for more members (extended while members keep arriving, up to the
    #: rebalance timeout).
    initial_rebalance_delay_ms: int = 3_000
    #: ``group.max.size``: most members of a classic group.
    max_size: int = INT32_MAX
    #: Not a Kafka key (``classicGroupNewMemberJoinTimeoutMs``): a new classic member that
    #: joined but never completes a join phase is dropped after this long.
    new_member_join_timeout_ms: int = 300_000
    #: ``group.consumer.heartbeat.interval.ms``: the interval KIP-848 members are told to use.
    consumer_heartbeat_interval_ms: int = 5_000
    #: ``group.consumer.session.timeout.ms``: KIP-848 members are fenced after this long
    #: without a heartbeat.
    consumer_session_timeout_ms: int = 45_000
    #: ``group.consumer.assignors``: server-side assignors, the first is the default.
    consumer_assignors: tuple[str, ...] = KNOWN_ASSIGNORS
    #: Not a Kafka key (KIP-1263's asynchronous assignment, Kafka 4.3): a KIP-848 group's
    #: next target is computed on a tick (a timer due at once, or at the assignment
    #: interval) once for every join, leave or subscription change since the last, and a
    #: heartbeat is answered at once against the current target (members reach the next one
    #: at a later heartbeat). Off: the heartbeat that finds the group epoch ahead computes
    #: the target itself (Kafka before 4.3). The shell, which runs the ticks, turns it on.
    consumer_assignment_batching: bool = False
    #: Batched mode only (KIP-1263's ``group.consumer.assignment.interval.ms``, not read from
    #: the configuration): the least time between two target assignments of a group; the
    #: tick waits for it, so joins that keep arriving share fewer assignor runs and fewer
    #: reshuffles of the members already there. 0: the tick is due at once.
    consumer_assignment_interval_ms: int = 0
    #: ``group.consumer.max.size``: most members of a KIP-848 group.
    consumer_max_size: int = INT32_MAX
    #: ``offsets.retention.minutes``: committed offsets of a group that has been empty this
    #: long are deleted (KIP-211).
    offsets_retention_minutes: int = 10_080
    #: ``offsets.retention.check.interval.ms``: how often expired offsets are looked for.
    offsets_retention_check_interval_ms: int = 600_000
    #: ``offset.metadata.max.bytes``: longest metadata string an OffsetCommit may carry.
    offset_metadata_max_bytes: int = 4_096

    def __post_init__(self) -> None:
        if self.min_session_timeout_ms > self.max_session_timeout_ms:
            raise ValueError(
                "group.min.session.timeout.ms must not exceed group.max.session.timeout.ms"
            )
        if not self.consumer_assignors:
            raise ValueError("group.consumer.assignors must name at least one assignor")
        unknown = [a for a in self.consumer_assignors if a not in KNOWN_ASSIGNORS]
        if unknown:
            raise ValueError(
                f"group.consumer.assignors: unknown assignor(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(KNOWN_ASSIGNORS)}"
            )
        for name in ("initial_rebalance_delay_ms", "consumer_heartbeat_interval_ms", "consumer_assignment_interval_ms",
                     "consumer_session_timeout_ms", "offsets_retention_minutes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.offsets_retention_check_interval_ms < 1:
            raise ValueError("offsets.retention.check.interval.ms must be >= 1")
        if self.max_size < 1 or self.consumer_max_size < 1:
            raise ValueError("group.max.size and group.consumer.max.size must be >= 1")

    @property
    def offsets_retention_ms(self) -> int:
        """``offsets.retention.minutes`` in milliseconds."""
        return self.offsets_retention_minutes * 60_000

    @property
    def default_assignor(self) -> str:
        """The assignor a KIP-848 group uses when no member names one."""
        return self.consumer_assignors[0]
