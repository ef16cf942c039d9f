"""Feature versioning across the sidecar fleet (KIP-584), sans-IO.

Theory of operation. Each sidecar release *supports* a range of levels per feature it
owns (:func:`supported_features`); the fleet *finalizes* one level per feature in the
ZooKeeper node ``/feature`` (Kafka's format, :func:`encode_feature_znode`), whose znode
version is the FinalizedFeaturesEpoch. A feature that is not in ``/feature`` is finalized
at level 0. UpdateFeatures requests are judged here (:func:`plan_update`), rule by rule in
the order of PROTOCOL_NOTES ("KIP-584 as Kafka implements it"), all or nothing: either
every update is valid and the new finalized map is written in one compare-and-set, or
nothing is written. A feature this sidecar neither supports nor has finalized is refused
before those rules, as Kafka 4.x's controller refuses one it does not know
(:func:`refuse_unknown`, INVALID_UPDATE_VERSION). The shell
(``proxy/control/features_state.py``) reads and writes the node; this module only decides.
Nothing here does I/O.

Features owned by the sidecar:

* ``group.version`` (only when the coordinator is embedded), with Kafka's meaning
  (``GroupVersion``): level 0 is the classic protocol only, level 1 adds the KIP-848
  consumer protocol (ConsumerGroupHeartbeat, ConsumerGroupDescribe: :data:`GATED_APIS`).
* ``share.version`` (only when the coordinator is embedded), with Kafka's meaning
  (``ShareVersion``): level 1 serves share groups (KIP-932: ShareGroupHeartbeat,
  ShareGroupDescribe, ShareFetch, ShareAcknowledge and the share-group offsets APIs).
  Its default is 0, as the audit format's is: an operator turns queues on once every
  sidecar of the fleet runs a release that serves them.
* ``ksidecar.audit.format``: the audit files' schema version (observers/audit_schema.py).
  Level 0 writes version 2; level 1 writes version 3, which adds the client software
  columns (``client_software_name``, ``client_software_version``) and the ACL refusals
  of each request (``denials``). Every sidecar writes
  the finalized level's version and switches when it changes, so a rolling upgrade never
  writes files the fleet's older readers cannot read. The ``ksidecar.`` prefix keeps the
  name out of Kafka's namespace (Kafka's are ``metadata.version``, ``kraft.version``,
  ``group.version``, ``transaction.version``...).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field

from protocol.apis import (
    ALTER_SHARE_GROUP_OFFSETS,
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    DELETE_SHARE_GROUP_OFFSETS,
    DESCRIBE_SHARE_GROUP_OFFSETS,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    SHARE_GROUP_DESCRIBE,
    SHARE_GROUP_HEARTBEAT,
)
from protocol.errors import ErrorCode

GROUP_VERSION = "group.version"
SHARE_VERSION = "share.version"
AUDIT_FORMAT = "ksidecar.audit.format"
#: The prefix of every feature the sidecar invents (never one of Kafka's).
OWN_PREFIX = "ksidecar."
#: ZooKeeper path of the finalized features (Kafka's FeatureZNode: ``/feature``, singular).
FEATURE_PATH = "/feature"
#: FeatureZNode version 2 (max_version_level only), status 1 = enabled.
ZNODE_VERSION = 2
STATUS_ENABLED = 1

#: API keys served only from a feature level on: ``{api key: (feature, min level)}``.
GATED_APIS: dict[int, tuple[str, int]] = {
    CONSUMER_GROUP_HEARTBEAT: (GROUP_VERSION, 1),  # KIP-848
    CONSUMER_GROUP_DESCRIBE: (GROUP_VERSION, 1),
    SHARE_GROUP_HEARTBEAT: (SHARE_VERSION, 1),  # KIP-932
    SHARE_GROUP_DESCRIBE: (SHARE_VERSION, 1),
    SHARE_FETCH: (SHARE_VERSION, 1),
    SHARE_ACKNOWLEDGE: (SHARE_VERSION, 1),
    DESCRIBE_SHARE_GROUP_OFFSETS: (SHARE_VERSION, 1),
    ALTER_SHARE_GROUP_OFFSETS: (SHARE_VERSION, 1),
    DELETE_SHARE_GROUP_OFFSETS: (SHARE_VERSION, 1),
}

# The error codes feature decisions answer with, by their names in the one enum.
NONE = ErrorCode.NONE
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
INVALID_UPDATE_VERSION = ErrorCode.INVALID_UPDATE_VERSION
FEATURE_UPDATE_FAILED = ErrorCode.FEATURE_UPDATE_FAILED


@dataclass(frozen=True, slots=True)
class SupportedRange:
    """Levels ``min..max`` (inclusive) a sidecar can run with."""

    min: int
    max: int

    def __contains__(self, level: object) -> bool:
        return isinstance(level, int) and self.min <= level <= self.max

    def __str__(self) -> str:
        return f"[{self.min}, {self.max}]"


#: A feature absent from a registration: only level 0 (the feature is off there).
ABSENT = SupportedRange(0, 0)


def supported_features(*, embedded_coordinator: bool) -> dict[str, SupportedRange]:
    """The features this sidecar release supports."""
    features = {AUDIT_FORMAT: SupportedRange(0, 1)}
    if embedded_coordinator:
        features[GROUP_VERSION] = SupportedRange(0, 1)
        features[SHARE_VERSION] = SupportedRange(0, 1)
    return features


def parse_supported_override(text: str) -> dict[str, SupportedRange]:
    """``"group.version=0-0,ksidecar.audit.format=0-1"`` → ranges (test-only override)."""
    result: dict[str, SupportedRange] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, levels = item.partition("=")
        lo, dash, hi = levels.partition("-")
        if not sep or not dash or not lo.strip().isdigit() or not hi.strip().isdigit():
            raise ValueError(f"{item!r}: expected feature=min-max")
        if int(lo) > int(hi):
            raise ValueError(f"{item!r}: min above max")
        result[name.strip()] = SupportedRange(int(lo), int(hi))
    return result


#: Levels a fresh ``/feature`` finalizes (clipped to the creator's range,
#: :func:`default_levels`). ``group.version`` 1 is Kafka 4.0's default and what the embedded
#: coordinator served before features existed (KIP-848 on). The audit format starts at 0
#: (schema version 2), even on a new cluster: ``/feature`` is created by whichever sidecar
#: starts first, and in a rolling upgrade from a release without features that is a new
#: sidecar while old ones still write version 2; a default of 1 would mix formats with no
#: operator decision. Finalizing level 1 is the operator's step, once every sidecar runs a
#: release that supports it.
DEFAULT_LEVELS: dict[str, int] = {GROUP_VERSION: 1, AUDIT_FORMAT: 0}


def default_levels(supported: Mapping[str, SupportedRange]) -> dict[str, int]:
    """What the first sidecar writes to a missing ``/feature``: defaults within its ranges."""
    return {name: min(max(level, supported[name].min), supported[name].max)
            for name, level in DEFAULT_LEVELS.items() if name in supported}


# -- the /feature node and registrations ---------------------------------------------------


def encode_feature_znode(finalized: Mapping[str, int]) -> bytes:
    """``/feature`` body in Kafka's format; level-0 features are absent."""
    body = {
        "version": ZNODE_VERSION,
        "status": STATUS_ENABLED,
        "features": {name: {"max_version_level": level} for name, level in sorted(finalized.items()) if level > 0},
    }
    return json.dumps(body, sort_keys=True).encode()


class MalformedFeatureNode(ValueError):
    """``/feature`` holds something that is not Kafka's FeatureZNode."""


def decode_feature_znode(raw: bytes) -> dict[str, int]:
    """The finalized levels of a ``/feature`` body (disabled status: none)."""
    try:
        body = json.loads(raw.decode())
        if not isinstance(body, dict):
            raise MalformedFeatureNode(f"/feature: not a JSON object: {raw[:80]!r}")
        if body.get("status", STATUS_ENABLED) != STATUS_ENABLED:
            return {}
        result: dict[str, int] = {}
        for name, value in (body.get("features") or {}).items():
            level = int(value["max_version_level"])
            if level > 0:
                result[str(name)] = level
        return result
    except (UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
        if isinstance(exc, MalformedFeatureNode):
            raise
        raise MalformedFeatureNode(f"/feature: unreadable ({exc}): {raw[:80]!r}") from None


def registration_features(supported: Mapping[str, SupportedRange]) -> dict[str, dict[str, int]]:
    """The ``features`` field of ``/brokers/ids/<id>``: ``{f: {min_version, max_version}}``."""
    return {name: {"min_version": r.min, "max_version": r.max} for name, r in sorted(supported.items())}


def parse_registration_features(value: object) -> dict[str, SupportedRange]:
    """A registration's ``features`` field (unreadable entries are skipped)."""
    result: dict[str, SupportedRange] = {}
    if not isinstance(value, dict):
        return result
    for name, entry in value.items():
        try:
            result[str(name)] = SupportedRange(int(entry["min_version"]), int(entry["max_version"]))
        except (TypeError, KeyError, ValueError):
            continue
    return result


# -- start-up --------------------------------------------------------------------------------


class IncompatibleFeatures(Exception):
    """This sidecar cannot run with the finalized features (it must not start)."""


def check_startup(supported: Mapping[str, SupportedRange], finalized: Mapping[str, int]) -> None:
    """Raise :class:`IncompatibleFeatures` naming the first finalized level out of range."""
    for name, level in sorted(finalized.items()):
        have = supported.get(name, ABSENT)
        if level not in have:
            raise IncompatibleFeatures(
                f"feature {name} is finalized at level {level} in {FEATURE_PATH}, but this sidecar "
                f"supports {name} {have if name in supported else 'not at all'}; run a release that "
                f"supports level {level}, or downgrade the feature first"
            )


# -- snapshots (what ApiVersions and the gates read) ------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class FeatureSnapshot:
    """Supported and finalized features at one epoch (replaced whole on every change)."""

    supported: Mapping[str, SupportedRange]
    finalized: Mapping[str, int] = field(default_factory=dict)
    #: The ``/feature`` znode version; -1 before it was read.
    epoch: int = -1

    def level(self, name: str) -> int:
        """The finalized level of ``name`` (0 when absent)."""
        return self.finalized.get(name, 0)

    def disabled_keys(self) -> frozenset[int]:
        """API keys gated off (:data:`GATED_APIS`) at the current levels of our features."""
        return frozenset(key for key, (name, lo) in GATED_APIS.items()
                         if name in self.supported and self.level(name) < lo)


def merge_api_versions_features(broker: Mapping[str, object] | None, ours: FeatureSnapshot) -> dict[str, object]:
    """ApiVersions' KIP-584 fields: the broker's, with ours replacing any of the same name.

    The epoch is the sum of both epochs (each only grows, so the sum never goes backwards).
    Finalized level 0 is not listed, as Kafka does not list a feature at level 0.
    """
    broker = broker or {}
    ours_names = set(ours.supported) | set(ours.finalized)

    def others(field_name: str) -> list[dict[str, object]]:
        items = broker.get(field_name) or []
        assert isinstance(items, Iterable)
        return [dict(item) for item in items if item["Name"] not in ours_names]

    supported = others("SupportedFeatures") + [
        {"Name": name, "MinVersion": r.min, "MaxVersion": r.max} for name, r in sorted(ours.supported.items())
    ]
    finalized = others("FinalizedFeatures") + [
        {"Name": name, "MinVersionLevel": level, "MaxVersionLevel": level}
        for name, level in sorted(ours.finalized.items()) if level > 0
    ]
    broker_epoch = broker.get("FinalizedFeaturesEpoch", -1)
    assert isinstance(broker_epoch, int)
    epoch = max(broker_epoch, 0) + max(ours.epoch, 0) if max(broker_epoch, ours.epoch) >= 0 else -1
    merged: dict[str, object] = {
        "SupportedFeatures": sorted(supported, key=lambda f: str(f["Name"])),
        "FinalizedFeatures": sorted(finalized, key=lambda f: str(f["Name"])),
        "FinalizedFeaturesEpoch": epoch,
    }
    if "ZkMigrationReady" in broker:
        merged["ZkMigrationReady"] = broker["ZkMigrationReady"]
    return merged


# -- UpdateFeatures ---------------------------------------------------------------------------


class UpgradeType(enum.IntEnum):
    """UpdateFeatures v1+ ``UpgradeType`` (v0: AllowDowngrade false/true → 1/2)."""

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True, kw_only=True, slots=True)
class FeatureUpdate:
    """One requested change: ``level`` < 1 deletes the feature (back to level 0)."""

    feature: str
    level: int
    #: The wire value (an unknown one is refused by :func:`plan_update`).
    upgrade_type: int = UpgradeType.UPGRADE
    #: The request version (messages name v0's ``allowDowngrade`` flag).
    version: int = 1

    @classmethod
    def from_wire(cls, version: int, entry: Mapping[str, object]) -> FeatureUpdate:
        """From one decoded ``FeatureUpdates`` entry."""
        level, name = entry["MaxVersionLevel"], entry["Feature"]
        assert isinstance(level, int)
        kind: int
        if version == 0:
            kind = UpgradeType.SAFE_DOWNGRADE if entry.get("AllowDowngrade") else UpgradeType.UPGRADE
        else:
            raw = entry.get("UpgradeType", 1)
            assert isinstance(raw, int)
            kind = raw
        return cls(feature=str(name or ""), level=level, upgrade_type=int(kind), version=version)

    @property
    def downgrade(self) -> bool:
        """The request allows a downgrade (SAFE or UNSAFE, or v0's flag)."""
        return self.upgrade_type in (UpgradeType.SAFE_DOWNGRADE, UpgradeType.UNSAFE_DOWNGRADE)


@dataclass(frozen=True, kw_only=True, slots=True)
class FeatureError:
    """Why one update is refused."""

    code: int
    message: str


@dataclass(frozen=True, kw_only=True, slots=True)
class UpdatePlan:
    """The decision on one UpdateFeatures request."""

    #: Per feature, in request order: ``None`` when valid.
    results: tuple[tuple[str, FeatureError | None], ...]
    #: The finalized levels to write (``None``: nothing to write, refused or no change).
    finalized: Mapping[str, int] | None
    #: The first refusal (the top-level answer of v2, where results are not sent).
    error: FeatureError | None = None

    @property
    def ok(self) -> bool:
        """Every update is valid."""
        return self.error is None


def _invalid(message: str) -> FeatureError:
    return FeatureError(code=ErrorCode.INVALID_REQUEST, message=message)


def _flag_words(update: FeatureUpdate) -> str:
    return ("setting the allowDowngrade flag to true" if update.version == 0
            else "setting the downgradeType to either SAFE or UNSAFE")


def check_update(
    update: FeatureUpdate,
    *,
    finalized: Mapping[str, int],
    supported: Mapping[str, SupportedRange],
    live: Mapping[int, Mapping[str, SupportedRange]],
) -> FeatureError | None:
    """One update against the rules, in PROTOCOL_NOTES' order; ``None`` when valid.

    ``supported`` is this sidecar's; ``live`` every registered sidecar's (by broker id).
    """
    name, level = update.feature, update.level
    if not name:
        return _invalid("Feature name can not be empty.")
    if update.upgrade_type not in tuple(UpgradeType):
        return _invalid(f"Unknown upgrade type {update.upgrade_type} for feature {name}; "
                        "expected 1 (UPGRADE), 2 (SAFE_DOWNGRADE) or 3 (UNSAFE_DOWNGRADE).")
    existing = finalized.get(name)
    if level < 1 and existing is None:
        return _invalid(f"Can not delete non-existing finalized feature: {name}.")
    if level < 1 and not update.downgrade:
        return _invalid(f"Can not provide versionLevel: {level} less than 1 without {_flag_words(update)} "
                        "in the request.")
    current = existing if existing is not None else 0
    if level == current:
        verb = "downgrade" if update.downgrade else "upgrade"
        return _invalid(f"Can not {verb} a finalized feature {name} from existing versionLevel:{current} "
                        "to the same value.")
    if level < current and not update.downgrade:
        return _invalid(f"Can not downgrade finalized feature {name} from existing versionLevel:{current} "
                        f"to provided versionLevel:{level}, without {_flag_words(update)} in the request.")
    if level > current and update.downgrade:
        kind = ("the allowDowngrade flag is set" if update.version == 0 else
                f"the downgradeType is set to {'SAFE' if update.upgrade_type == 2 else 'UNSAFE'}")
        return _invalid(f"When {kind} in the request, the provided versionLevel:{level} can not be "
                        f"greater than existing versionLevel:{current}.")
    target = max(level, 0)
    if name not in supported:
        return _invalid(f"Could not apply finalized feature update because the provided feature {name} "
                        "is not supported.")
    if target not in supported[name]:
        return _invalid(f"Could not apply finalized feature update because the provided versionLevel:{target} "
                        f"of {name} is outside the supported range {supported[name]}.")
    misfits = [(node, ranges.get(name, ABSENT)) for node, ranges in sorted(live.items())
               if target not in ranges.get(name, ABSENT)]
    if misfits:
        named = ", ".join(f"sidecar {node} supports {r}" for node, r in misfits)
        return _invalid(f"Could not apply finalized feature update because brokers were found to have "
                        f"incompatible versions for the feature {name} at versionLevel:{target}: {named}.")
    return None


def plan_update(
    updates: Iterable[FeatureUpdate],
    *,
    finalized: Mapping[str, int],
    supported: Mapping[str, SupportedRange],
    live: Mapping[int, Mapping[str, SupportedRange]],
) -> UpdatePlan:
    """Judge a whole request, all or nothing (ValidateOnly is the caller's: it writes nothing).

    Valid updates of a refused request are not applied either; they are reported with the
    first refusal's code and a message saying so.
    """
    updates = list(updates)
    checked = [(u.feature, check_update(u, finalized=finalized, supported=supported, live=live))
               for u in updates]
    first = next((error for _, error in checked if error is not None), None)
    if first is not None:
        failed = next(n for n, e in checked if e is not None)
        results = tuple(
            (n, e if e is not None else FeatureError(
                code=first.code, message=f"Not applied: the update of {failed} was refused, and "
                "updates apply all or nothing."))
            for n, e in checked)
        return UpdatePlan(results=results, finalized=None, error=first)
    target = dict(finalized)
    for update in updates:
        if update.level < 1:
            target.pop(update.feature, None)
        else:
            target[update.feature] = update.level
    return UpdatePlan(results=tuple((n, None) for n, _ in checked), finalized=target)


def concurrent_update_error(epoch: int) -> FeatureError:
    """The answer when another writer changed ``/feature`` between our read and our write."""
    return FeatureError(code=ErrorCode.FEATURE_UPDATE_FAILED, message=(
        f"Failed to update the finalized features: {FEATURE_PATH} changed concurrently (epoch {epoch} "
        "is no longer current); read the features again and retry."))


# -- features nobody here knows ----------------------------------------------------------------

#: What Kafka's controller puts before the refusal of one feature in the top-level message
#: (``QuorumController.updateFeatures``, Kafka 4.x), where it answers no per-feature results.
FAILED_FOR_ALL = "The update failed for all features since the following feature had an error: "


def unknown_feature_error(update: FeatureUpdate, *, node_id: int) -> FeatureError:
    """Kafka's refusal of an update to a feature the controller does not know.

    Kafka 4.x's controller (``FeatureControlManager.updateFeature``) answers
    INVALID_UPDATE_VERSION, checking in this order: an unknown upgrade type; a level below
    0; a level the controller does not support (an unknown feature supports only level 0,
    ``QuorumFeatures.DISABLED``), said of the "Local controller" by its node id; and, at
    level 0, the feature's name, which it cannot find. ``node_id`` is the answering
    sidecar's ``broker.id``: the sidecar plays the controller for UpdateFeatures.
    """
    name, level = update.feature, update.level
    if update.upgrade_type not in tuple(UpgradeType):
        reason = "The controller does not support the given upgrade type."
    elif level < 0:
        reason = "A feature version cannot be less than 0."
    elif level > 0:
        reason = f"Local controller {node_id} does not support this feature."
    else:
        reason = f"Feature {name} not found."
    return FeatureError(code=INVALID_UPDATE_VERSION,
                        message=f"Invalid update version {level} for feature {name}. {reason}")


def refuse_unknown(updates: Iterable[FeatureUpdate], *, known: Container[str], node_id: int) -> FeatureError | None:
    """The whole request's refusal when it names a feature not in ``known``, else ``None``.

    As Kafka's controller: the first such feature (in request order; Kafka's is its map's)
    refuses every update, nothing is written, and the message is the top level's
    (:data:`FAILED_FOR_ALL` before that feature's :func:`unknown_feature_error`). An empty
    name is left to :func:`check_update` ("Feature name can not be empty.").
    """
    for update in updates:
        if update.feature and update.feature not in known:
            error = unknown_feature_error(update, node_id=node_id)
            return FeatureError(code=error.code, message=FAILED_FOR_ALL + error.message)
    return None
