"""Finalized features as the sidecar holds them: ``/feature``, watched, written compare-and-set.

:class:`FeatureState` is the feature port of the local APIs
(:class:`~proxy.local.ports.FeaturePort`: ApiVersions, UpdateFeatures, the KIP-848 gate).
The decisions are :mod:`coordinator.features`'; this module reads and writes ZooKeeper.

* At start it creates ``/feature`` from the defaults if no sidecar has yet (the seed's
  "controller finalizes the defaults"; a lost race is fine, the other creator's node
  stands), reads it, and refuses to start (:class:`~coordinator.features.IncompatibleFeatures`)
  when a finalized level is outside this release's range.
* A kazoo ``DataWatch`` brings every change to trio (no polling): ApiVersions and the gates
  read :attr:`snapshot`, replaced whole.
* Every sidecar applies UpdateFeatures itself: read the node and its version, judge against
  the live registrations, write with ``version=`` (compare-and-set). A concurrent writer
  makes ours fail with FEATURE_UPDATE_FAILED (``docs/features.md`` says why there is no
  elected controller).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from coordinator.features import (
    FEATURE_PATH,
    FeatureError,
    FeatureSnapshot,
    FeatureUpdate,
    SupportedRange,
    UpdatePlan,
    check_startup,
    concurrent_update_error,
    decode_feature_znode,
    default_levels,
    encode_feature_znode,
    parse_registration_features,
    plan_update,
)
from proxy.control.zk import ZooKeeper

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class UpdateOutcome:
    """What UpdateFeatures answers: the plan, and the write's failure if it failed."""

    plan: UpdatePlan
    #: Set when the plan was valid but the write lost (compare-and-set) or failed.
    write_error: FeatureError | None = None


class FeatureState:
    """This sidecar's supported features and the fleet's finalized ones."""

    def __init__(self, zk: ZooKeeper, supported: Mapping[str, SupportedRange],
                 live: Callable[[], Mapping[int, Mapping[str, Any]]], node_id: Callable[[], int]) -> None:
        self.zk = zk
        self.supported = dict(supported)
        #: Every registered sidecar's registration body, by broker id (Registration's view).
        self._live = live
        self._node_id = node_id
        self._snapshot = FeatureSnapshot(supported=self.supported)

    @property
    def snapshot(self) -> FeatureSnapshot:
        """Supported and finalized features now (a new object on every change)."""
        return self._snapshot

    def owns(self, feature: str) -> bool:
        """True for a feature the sidecar decides (the broker decides the others)."""
        return feature in self.supported or feature in self._snapshot.finalized or feature.startswith("ksidecar.")

    def level(self, feature: str) -> int:
        """The finalized level of ``feature`` (0 when absent)."""
        return self._snapshot.level(feature)

    def registration_ranges(self) -> Mapping[str, SupportedRange]:
        """What this sidecar writes under ``features`` in its registration."""
        return self.supported

    async def start(self) -> None:
        """Create ``/feature`` if missing, check we may run with it, and watch it."""
        raw, stat = await self.zk.call(self._read_or_create)
        finalized = decode_feature_znode(raw)
        check_startup(self.supported, finalized)
        self._install(finalized, stat.version)
        deliver = self.zk.deliver(self._changed)

        def watch(data: bytes | None, stat: ZnodeStat | None) -> None:
            if data is not None and stat is not None:
                deliver(data, stat.version)

        self.zk.client.DataWatch(FEATURE_PATH, watch)

    def _read_or_create(self) -> tuple[bytes, ZnodeStat]:
        client = self.zk.client
        try:
            return client.get(FEATURE_PATH)  # type: ignore[no-any-return]
        except NoNodeError:
            pass
        try:
            client.create(FEATURE_PATH, encode_feature_znode(default_levels(self.supported)))
            log.info("created %s from this release's defaults", FEATURE_PATH)
        except NodeExistsError:
            pass  # another sidecar finalized first: its node stands
        return client.get(FEATURE_PATH)  # type: ignore[no-any-return]

    def _changed(self, raw: bytes, epoch: int) -> None:
        try:
            finalized = decode_feature_znode(raw)
        except ValueError as exc:
            log.error("%s; keeping epoch %d", exc, self._snapshot.epoch)
            return
        self._install(finalized, epoch)

    def _install(self, finalized: Mapping[str, int], epoch: int) -> None:
        # Deliveries may come late: never go back to an older epoch.
        if epoch < self._snapshot.epoch:
            return
        if dict(finalized) != dict(self._snapshot.finalized):
            log.info("finalized features now %s (epoch %d)", dict(finalized) or "{}", epoch)
        if epoch != self._snapshot.epoch or dict(finalized) != dict(self._snapshot.finalized):
            self._snapshot = FeatureSnapshot(supported=self.supported, finalized=dict(finalized), epoch=epoch)

    def live_ranges(self) -> dict[int, Mapping[str, SupportedRange]]:
        """Every live sidecar's supported ranges (this one's included, registered or not)."""
        ranges: dict[int, Mapping[str, SupportedRange]] = {node: parse_registration_features(body.get("features"))
                  for node, body in self._live().items()}
        ranges[self._node_id()] = self.supported
        return ranges

    async def update(self, updates: Sequence[FeatureUpdate], *, validate_only: bool) -> UpdateOutcome:
        """Judge against the node as it is now, then write it compare-and-set (unless validating)."""
        raw, stat = await self.zk.call(self.zk.client.get, FEATURE_PATH)
        finalized = decode_feature_znode(raw)
        plan = plan_update(updates, finalized=finalized, supported=self.supported, live=self.live_ranges())
        if not plan.ok or validate_only or plan.finalized is None:
            return UpdateOutcome(plan=plan)
        try:
            new = await self.zk.call(self.zk.client.set, FEATURE_PATH, encode_feature_znode(plan.finalized),
                                     version=stat.version)
        except BadVersionError:
            return UpdateOutcome(plan=plan, write_error=concurrent_update_error(stat.version))
        except Exception as exc:  # ZooKeeper failed: tell the client
            return UpdateOutcome(plan=plan, write_error=FeatureError(
                code=concurrent_update_error(stat.version).code,
                message=f"Failed to update the finalized features: {exc}"))
        self._install(plan.finalized, new.version)  # read-your-writes
        return UpdateOutcome(plan=plan)
