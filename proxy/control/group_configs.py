"""Group configs (KIP-848's ``consumer.*``, KIP-932's ``share.*``) in ZooKeeper, for the
groups the embedded coordinator serves.

Each group with configs of its own has a znode ``/config/groups/<group>`` (the group id
escaped as the coordinator's other znodes, :func:`coordinator.paths.group_config_path`)
holding Kafka's dynamic-config JSON, ``{"version":1,"config":{"consumer.session.timeout.ms":
"50000"}}``. Every sidecar watches them all (:class:`quotas.store.EntityConfigStore`), so
whichever sidecar coordinates a group, or answers a DescribeConfigs, reads the same. A
change is a compare-and-set of that one znode, decided by Kafka's rules
(:func:`coordinator.group_configs.alter_group_configs`) on the znode as read, and retried
when another sidecar changed it meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from coordinator.group_configs import (
    AlterResult,
    BrokerGroupSettings,
    ConfigOp,
    DescribeResult,
    EffectiveGroupConfig,
    alter_group_configs,
    describe_group_configs,
    effective_group_config,
)
from coordinator.paths import GROUP_CONFIG_ROOT, escape, unescape
from proxy.config import SidecarConfig
from proxy.control.zk import ZooKeeper
from quotas.store import EntityConfigStore


class GroupConfigs:
    """Every group's configs, watched in ZooKeeper; written by IncrementalAlterConfigs."""

    def __init__(self, zk: ZooKeeper, broker: BrokerGroupSettings) -> None:
        self.zk = zk
        #: The broker-level ``group.*`` values group configs fall back to and are bounded by.
        self.broker = broker
        self._overrides: dict[str, dict[str, str]] = {}
        #: What a group without configs of its own uses (most groups: computed once), and
        #: the effective values of those with some (cleared whenever the configs change).
        self._default = effective_group_config(broker, None)
        self._effective: dict[str, EffectiveGroupConfig] = {}
        self.store = EntityConfigStore(zk.client, GROUP_CONFIG_ROOT, zk.deliver(self._install))

    async def start(self) -> None:
        """Create the path and start watching."""
        await self.zk.call(self.store.start)

    def _install(self, configs: dict[str, dict[str, str]]) -> None:
        self._overrides = {unescape(name): config for name, config in configs.items()}
        self._effective = {}

    def overrides(self, group_id: str) -> Mapping[str, str]:
        """The group's own configs as last seen (empty: none)."""
        return self._overrides.get(group_id, {})

    def effective(self, group_id: str) -> EffectiveGroupConfig:
        """The values the coordinator uses for ``group_id`` (asked at every heartbeat)."""
        overrides = self._overrides.get(group_id)
        if overrides is None:
            return self._default
        found = self._effective.get(group_id)
        if found is None:
            found = self._effective[group_id] = effective_group_config(self.broker, overrides)
        return found

    def describe(self, group_id: str, keys: Sequence[str] | None, *, synonyms: bool,
                 documentation: bool) -> DescribeResult:
        """DescribeConfigs for one GROUP resource."""
        return describe_group_configs(group_id, self.overrides(group_id), self.broker, keys=keys,
                                      include_synonyms=synonyms, include_documentation=documentation)

    async def alter(self, group_id: str, ops: Sequence[ConfigOp], *, validate_only: bool) -> AlterResult:
        """IncrementalAlterConfigs for one GROUP resource: decided on the znode as it is,
        written compare-and-set when it changes something."""
        outcome: list[AlterResult] = []

        def change(config: dict[str, str]) -> None:
            outcome.clear()
            result = alter_group_configs(group_id, config, ops, self.broker, validate_only=validate_only)
            outcome.append(result)
            if result.changed:
                config.clear()
                config.update(result.configs)

        await self.zk.call(self.store.edit, escape(group_id), change)
        result = outcome[0]
        if result.changed:
            self._overrides[group_id] = dict(result.configs)  # the watch confirms it shortly
            self._effective.pop(group_id, None)
        return result


def broker_group_settings(config: SidecarConfig) -> BrokerGroupSettings:
    """The broker-level values from the key table. Kafka's bounds for the keys the sidecar
    has no key for (``group.consumer.min.session.timeout.ms`` and the like) are widened to
    take in the value configured, so that a sidecar run with short timeouts (tests, the
    demo) starts as before; the bounds then hold group configs to that range."""
    session: int = config["group.consumer.session.timeout.ms"]
    heartbeat: int = config["group.consumer.heartbeat.interval.ms"]
    return BrokerGroupSettings(
        consumer_session_timeout_ms=session,
        consumer_min_session_timeout_ms=min(45_000, session),
        consumer_max_session_timeout_ms=max(60_000, session),
        consumer_heartbeat_interval_ms=heartbeat,
        consumer_min_heartbeat_interval_ms=min(5_000, heartbeat),
        consumer_max_heartbeat_interval_ms=max(15_000, heartbeat),
        share_session_timeout_ms=(share_session := config["group.share.session.timeout.ms"]),
        share_min_session_timeout_ms=min(45_000, share_session),
        share_max_session_timeout_ms=max(60_000, share_session),
        share_heartbeat_interval_ms=(share_heartbeat := config["group.share.heartbeat.interval.ms"]),
        share_min_heartbeat_interval_ms=min(5_000, share_heartbeat),
        share_max_heartbeat_interval_ms=max(15_000, share_heartbeat),
        share_record_lock_duration_ms=(lock := config["group.share.record.lock.duration.ms"]),
        share_min_record_lock_duration_ms=min(15_000, lock),
        share_max_record_lock_duration_ms=max(60_000, lock),
    )
