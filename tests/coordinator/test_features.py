"""KIP-584 decisions (coordinator/features.py): rules in PROTOCOL_NOTES' order, node format, epochs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.features import (
    AUDIT_FORMAT,
    FEATURE_UPDATE_FAILED,
    GROUP_VERSION,
    INVALID_REQUEST,
    FeatureSnapshot,
    FeatureUpdate,
    IncompatibleFeatures,
    SupportedRange,
    check_startup,
    check_update,
    concurrent_update_error,
    decode_feature_znode,
    default_levels,
    encode_feature_znode,
    merge_api_versions_features,
    parse_registration_features,
    parse_supported_override,
    plan_update,
    refuse_unknown,
    registration_features,
    supported_features,
    unknown_feature_error,
)

OURS = {GROUP_VERSION: SupportedRange(0, 1), AUDIT_FORMAT: SupportedRange(0, 1)}
LIVE = {1: OURS, 2: OURS}


def check(feature: str, level: int, kind: int = 1, *, finalized: dict[str, int] | None = None,
          live: dict[int, dict[str, SupportedRange]] | None = None, version: int = 1) -> tuple[int, str] | None:
    error = check_update(FeatureUpdate(feature=feature, level=level, upgrade_type=kind, version=version),
                         finalized=finalized or {}, supported=OURS, live=LIVE if live is None else live)
    return None if error is None else (error.code, error.message)


def test_znode_format_is_kafkas() -> None:
    raw = encode_feature_znode({GROUP_VERSION: 1, AUDIT_FORMAT: 0})
    assert json.loads(raw) == {"version": 2, "status": 1, "features": {"group.version": {"max_version_level": 1}}}
    assert decode_feature_znode(raw) == {"group.version": 1}
    assert decode_feature_znode(b'{"version":2,"status":0,"features":{"a":{"max_version_level":3}}}') == {}


@given(st.dictionaries(st.text(min_size=1, max_size=12), st.integers(1, 32767), max_size=5))
def test_znode_round_trip(levels: dict[str, int]) -> None:
    assert decode_feature_znode(encode_feature_znode(levels)) == levels


def test_registration_format() -> None:
    field = registration_features(supported_features(embedded_coordinator=True))
    assert field == {"group.version": {"min_version": 0, "max_version": 1},
                     "ksidecar.audit.format": {"min_version": 0, "max_version": 1},
                     "share.version": {"min_version": 0, "max_version": 1}}
    assert parse_registration_features(field) == {**OURS, "share.version": SupportedRange(0, 1)}
    assert GROUP_VERSION not in supported_features(embedded_coordinator=False)


def test_override() -> None:
    assert parse_supported_override("group.version=0-0, ksidecar.audit.format=0-1") == {
        GROUP_VERSION: SupportedRange(0, 0), AUDIT_FORMAT: SupportedRange(0, 1)}
    with pytest.raises(ValueError):
        parse_supported_override("group.version=2-1")


def test_startup_names_feature_level_and_range() -> None:
    check_startup(OURS, {GROUP_VERSION: 1})
    with pytest.raises(IncompatibleFeatures, match=r"group.version is finalized at level 1 .* supports "
                       r"group.version \[0, 0\]"):
        check_startup({GROUP_VERSION: SupportedRange(0, 0)}, {GROUP_VERSION: 1})
    with pytest.raises(IncompatibleFeatures, match="not at all"):
        check_startup({}, {AUDIT_FORMAT: 1})


def test_rules_in_order() -> None:
    assert check("", 1) == (INVALID_REQUEST, "Feature name can not be empty.")
    assert check(GROUP_VERSION, 1, 7)[1].startswith("Unknown upgrade type 7")  # type: ignore[index]
    assert check(GROUP_VERSION, 0, 2) == (INVALID_REQUEST, "Can not delete non-existing finalized feature: "
                                          "group.version.")
    assert check(GROUP_VERSION, 0, 1, finalized={GROUP_VERSION: 1}) == (
        INVALID_REQUEST, "Can not provide versionLevel: 0 less than 1 without setting the downgradeType to "
        "either SAFE or UNSAFE in the request.")
    assert check(GROUP_VERSION, 0, 1, finalized={GROUP_VERSION: 1}, version=0)[1].endswith(  # type: ignore[index]
        "without setting the allowDowngrade flag to true in the request.")
    assert check(GROUP_VERSION, 1, finalized={GROUP_VERSION: 1}) == (
        INVALID_REQUEST, "Can not upgrade a finalized feature group.version from existing versionLevel:1 to "
        "the same value.")
    assert check(AUDIT_FORMAT, 1, finalized={AUDIT_FORMAT: 2}) == (
        INVALID_REQUEST, "Can not downgrade finalized feature ksidecar.audit.format from existing "
        "versionLevel:2 to provided versionLevel:1, without setting the downgradeType to either SAFE or "
        "UNSAFE in the request.")
    assert check(GROUP_VERSION, 1, 2) == (
        INVALID_REQUEST, "When the downgradeType is set to SAFE in the request, the provided versionLevel:1 "
        "can not be greater than existing versionLevel:0.")
    assert check("metadata.version", 1) == (
        INVALID_REQUEST, "Could not apply finalized feature update because the provided feature "
        "metadata.version is not supported.")
    assert check(GROUP_VERSION, 2) == (
        INVALID_REQUEST, "Could not apply finalized feature update because the provided versionLevel:2 of "
        "group.version is outside the supported range [0, 1].")
    live = {1: OURS, 2: {GROUP_VERSION: SupportedRange(0, 0)}, 3: {}}
    assert check(GROUP_VERSION, 1, live=live) == (
        INVALID_REQUEST, "Could not apply finalized feature update because brokers were found to have "
        "incompatible versions for the feature group.version at versionLevel:1: sidecar 2 supports [0, 0], "
        "sidecar 3 supports [0, 0].")


def test_valid_updates() -> None:
    assert check(GROUP_VERSION, 1) is None
    assert check(GROUP_VERSION, 0, 2, finalized={GROUP_VERSION: 1}) is None
    assert check(GROUP_VERSION, 0, 3, finalized={GROUP_VERSION: 1}) is None
    assert check(GROUP_VERSION, -1, 2, finalized={GROUP_VERSION: 1}, version=0) is None


def test_plan_is_all_or_nothing() -> None:
    good = FeatureUpdate(feature=AUDIT_FORMAT, level=1)
    bad = FeatureUpdate(feature=GROUP_VERSION, level=5)
    plan = plan_update([good, bad], finalized={}, supported=OURS, live=LIVE)
    assert not plan.ok and plan.finalized is None
    assert plan.error is not None and plan.error.code == INVALID_REQUEST
    assert plan.results[0][1] is not None and plan.results[0][1].message.startswith(
        "Not applied: the update of group.version was refused")
    plan = plan_update([good, FeatureUpdate(feature=GROUP_VERSION, level=1)], finalized={}, supported=OURS,
                       live=LIVE)
    assert plan.ok and plan.finalized == {AUDIT_FORMAT: 1, GROUP_VERSION: 1}
    plan = plan_update([FeatureUpdate(feature=GROUP_VERSION, level=0, upgrade_type=2)],
                       finalized={GROUP_VERSION: 1, AUDIT_FORMAT: 1}, supported=OURS, live=LIVE)
    assert plan.finalized == {AUDIT_FORMAT: 1}


def test_wire_v0_flag() -> None:
    update = FeatureUpdate.from_wire(0, {"Feature": "x", "MaxVersionLevel": 0, "AllowDowngrade": True})
    assert update.downgrade and update.upgrade_type == 2
    assert FeatureUpdate.from_wire(2, {"Feature": "x", "MaxVersionLevel": 0, "UpgradeType": 3}).upgrade_type == 3


def test_gates() -> None:
    assert FeatureSnapshot(supported=OURS).disabled_keys() == {68, 69}
    assert FeatureSnapshot(supported=OURS, finalized={GROUP_VERSION: 1}).disabled_keys() == frozenset()
    assert FeatureSnapshot(supported={AUDIT_FORMAT: SupportedRange(0, 1)}).disabled_keys() == frozenset()


def test_merge_with_broker() -> None:
    broker = {"SupportedFeatures": [{"Name": "metadata.version", "MinVersion": 1, "MaxVersion": 20},
                                    {"Name": "group.version", "MinVersion": 0, "MaxVersion": 1}],
              "FinalizedFeatures": [{"Name": "metadata.version", "MinVersionLevel": 20, "MaxVersionLevel": 20}],
              "FinalizedFeaturesEpoch": 40}
    ours = FeatureSnapshot(supported={GROUP_VERSION: SupportedRange(0, 1)}, finalized={GROUP_VERSION: 1}, epoch=3)
    merged = merge_api_versions_features(broker, ours)
    assert merged == {
        "SupportedFeatures": [{"Name": "group.version", "MinVersion": 0, "MaxVersion": 1},
                              {"Name": "metadata.version", "MinVersion": 1, "MaxVersion": 20}],
        "FinalizedFeatures": [{"Name": "group.version", "MinVersionLevel": 1, "MaxVersionLevel": 1},
                              {"Name": "metadata.version", "MinVersionLevel": 20, "MaxVersionLevel": 20}],
        "FinalizedFeaturesEpoch": 43,
    }
    assert merge_api_versions_features(None, FeatureSnapshot(supported={}))["FinalizedFeaturesEpoch"] == -1


@given(st.integers(-1, 1000), st.integers(-1, 1000), st.integers(0, 5), st.integers(0, 5))
def test_merged_epoch_never_goes_backwards(broker: int, ours: int, more_broker: int, more_ours: int) -> None:
    def epoch(b: int, o: int) -> object:
        return merge_api_versions_features({"FinalizedFeaturesEpoch": b},
                                           FeatureSnapshot(supported={}, epoch=o))["FinalizedFeaturesEpoch"]
    before, after = epoch(broker, ours), epoch(broker + more_broker, ours + more_ours)
    assert isinstance(before, int) and isinstance(after, int) and after >= before


def test_concurrent_error() -> None:
    error = concurrent_update_error(4)
    assert error.code == FEATURE_UPDATE_FAILED and "epoch 4" in error.message


def test_defaults_within_the_creators_range() -> None:
    assert default_levels(OURS) == {GROUP_VERSION: 1, AUDIT_FORMAT: 0}
    assert default_levels({GROUP_VERSION: SupportedRange(0, 0)}) == {GROUP_VERSION: 0}


# -- a feature nobody here knows: Kafka 4.x's controller's answer --------------------------------
# Expected values are Kafka 4.3's (FeatureControlManager.updateFeature, QuorumFeatures.reasonNotSupported,
# Feature.featureFromName and QuorumController.updateFeatures), written out by hand: INVALID_UPDATE_VERSION
# is Kafka's error code 95.


def unknown(feature: str, level: int, kind: int = 1) -> tuple[int, str]:
    error = unknown_feature_error(FeatureUpdate(feature=feature, level=level, upgrade_type=kind), node_id=111)
    return error.code, error.message


def test_an_unknown_feature_is_refused_as_kafkas_controller_refuses_it() -> None:
    assert unknown("share.version", 1) == (
        95, "Invalid update version 1 for feature share.version. Local controller 111 does not support this feature.")
    assert unknown("share.version", 3, 2) == (  # support is checked before the direction
        95, "Invalid update version 3 for feature share.version. Local controller 111 does not support this feature.")
    # Level 0 is within an unknown feature's only range (0-0): the name is what fails.
    assert unknown("share.version", 0, 2) == (
        95, "Invalid update version 0 for feature share.version. Feature share.version not found.")
    assert unknown("share.version", 0, 1) == (
        95, "Invalid update version 0 for feature share.version. Feature share.version not found.")
    assert unknown("share.version", -1, 2) == (
        95, "Invalid update version -1 for feature share.version. A feature version cannot be less than 0.")
    assert unknown("share.version", 1, 9) == (  # the upgrade type first of all
        95, "Invalid update version 1 for feature share.version. The controller does not support the given "
        "upgrade type.")


def test_the_first_unknown_feature_refuses_the_whole_request() -> None:
    known = {GROUP_VERSION, AUDIT_FORMAT}
    ours = FeatureUpdate(feature=GROUP_VERSION, level=1)
    assert refuse_unknown([ours], known=known, node_id=111) is None
    assert refuse_unknown([FeatureUpdate(feature="", level=1)], known=known, node_id=111) is None  # check_update's
    error = refuse_unknown([ours, FeatureUpdate(feature="ksidecar.nothing", level=2),
                            FeatureUpdate(feature="share.version", level=1)], known=known, node_id=7)
    assert error is not None and (error.code, error.message) == (
        95, "The update failed for all features since the following feature had an error: Invalid update "
        "version 2 for feature ksidecar.nothing. Local controller 7 does not support this feature.")
