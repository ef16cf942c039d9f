"""``ksidecar features describe``: FeatureCommand's lines from an ApiVersions answer, with
finalized features the answering node does not support listed too (no sidecar needed)."""

from __future__ import annotations

from types import SimpleNamespace

from proxy.tools.features_cli import describe_lines


def answer(supported: dict[str, tuple[int, int]], finalized: dict[str, int], epoch: int) -> SimpleNamespace:
    return SimpleNamespace(
        SupportedFeatures=[SimpleNamespace(Name=n, MinVersion=lo, MaxVersion=hi) for n, (lo, hi) in supported.items()],
        FinalizedFeatures=[SimpleNamespace(Name=n, MinVersionLevel=lvl, MaxVersionLevel=lvl)
                           for n, lvl in finalized.items()],
        FinalizedFeaturesEpoch=epoch)


def test_finalized_but_unsupported_features_are_listed_with_dashes() -> None:
    lines = describe_lines(answer({"ksidecar.audit.format": (0, 0), "group.version": (0, 1)},
                                  {"ksidecar.audit.format": 1, "transaction.version": 2}, 7))
    assert lines == [
        "Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0\tEpoch: 7",
        "Feature: ksidecar.audit.format\tSupportedMinVersion: 0\tSupportedMaxVersion: 0\tFinalizedVersionLevel: 1"
        "\tEpoch: 7",
        "Feature: transaction.version\tSupportedMinVersion: -\tSupportedMaxVersion: -\tFinalizedVersionLevel: 2"
        "\tEpoch: 7",
    ]


def test_an_unknown_epoch_prints_as_a_dash_and_no_features_print_nothing() -> None:
    assert describe_lines(answer({"group.version": (0, 1)}, {}, -1)) == [
        "Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0\tEpoch: -"]
    assert describe_lines(SimpleNamespace(SupportedFeatures=None, FinalizedFeatures=None,
                                          FinalizedFeaturesEpoch=-1)) == []
