"""``ksidecar features``: KIP-584 features over the wire, shaped like ``kafka-features.sh``.

    ksidecar features --bootstrap-server HOST:PORT describe
    ksidecar features --bootstrap-server HOST:PORT upgrade --feature group.version=1 [--dry-run]
    ksidecar features --bootstrap-server HOST:PORT downgrade --feature group.version=0 [--unsafe] [--dry-run]
    ksidecar features --bootstrap-server HOST:PORT disable --feature ksidecar.audit.format [--unsafe] [--dry-run]

``describe`` sends ApiVersions v3 and prints one line per feature in FeatureCommand's
format; the others send UpdateFeatures v1 (``--dry-run`` is ValidateOnly) to any sidecar:
every sidecar applies updates to its own features, and forwards the broker's.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from protocol.apis import API_VERSIONS, UPDATE_FEATURES
from proxy.tools.admin_client import AdminClient, AdminError

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def add_parser(sub: Any) -> None:
    """Register the ``features`` subcommand on the main parser."""
    p = sub.add_parser("features", help="describe, upgrade, downgrade or disable KIP-584 features "
                                        "(like kafka-features.sh)")
    p.add_argument("--bootstrap-server", required=True, help="a sidecar (or broker), host:port")
    verbs = p.add_subparsers(dest="verb", required=True)
    verbs.add_parser("describe", help="supported ranges and finalized levels")
    for verb in ("upgrade", "downgrade", "disable"):
        v = verbs.add_parser(verb, help=f"{verb} features")
        v.add_argument("--feature", action="append", required=True,
                       help="name" if verb == "disable" else "name=level (repeatable)")
        v.add_argument("--dry-run", action="store_true", help="validate only")
        if verb != "upgrade":
            v.add_argument("--unsafe", action="store_true", help="an unsafe downgrade (may lose metadata)")


def describe_lines(answer: Any) -> list[str]:
    """FeatureCommand's describe lines from an ApiVersions v3 answer, one per feature, by name.

    A feature finalized but not supported by the node answering (a level the broker or an
    older sidecar release does not know, or a feature finalized before it was removed) is
    listed too, its supported range shown as ``-``: the operator must see a finalized level
    the node cannot run. ``-`` is what FeatureCommand prints for a value it does not have
    (there, an unknown epoch; here also an epoch of -1).
    """
    finalized = {f.Name: f.MaxVersionLevel for f in answer.FinalizedFeatures or []}
    supported = {f.Name: (str(f.MinVersion), str(f.MaxVersion)) for f in answer.SupportedFeatures or []}
    epoch = answer.FinalizedFeaturesEpoch
    shown = "-" if epoch is None or epoch < 0 else str(epoch)
    lines = []
    for name in sorted(set(supported) | set(finalized)):
        low, high = supported.get(name, ("-", "-"))
        lines.append(f"Feature: {name}\tSupportedMinVersion: {low}\tSupportedMaxVersion: {high}\t"
                     f"FinalizedVersionLevel: {finalized.get(name, 0)}\tEpoch: {shown}")
    return lines


def _updates(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    kind = UPGRADE if args.verb == "upgrade" else UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE
    out = []
    for text in args.feature:
        if args.verb == "disable":
            out.append((text, 0, kind))
            continue
        name, sep, level = text.partition("=")
        if not sep or not level.strip().lstrip("-").isdigit():
            raise ValueError(f"--feature {text!r}: expected name=level")
        out.append((name.strip(), int(level), kind))
    return out


def run(args: argparse.Namespace) -> int:
    """Run one ``ksidecar features`` command."""
    try:
        with AdminClient(args.bootstrap_server) as client:
            if args.verb == "describe":
                answer = client.call(API_VERSIONS, 3, {"ClientSoftwareName": "ksidecar-cli",
                                                       "ClientSoftwareVersion": "1"})
                print("\n".join(describe_lines(answer)))
                return 0
            updates = _updates(args)
            answer = client.call(UPDATE_FEATURES, 1, {
                "timeoutMs": 30000, "ValidateOnly": args.dry_run,
                "FeatureUpdates": [{"Feature": n, "MaxVersionLevel": lvl, "UpgradeType": k} for n, lvl, k in updates],
            })
    except (AdminError, ValueError) as exc:
        print(f"ksidecar features: {exc}", file=sys.stderr)
        return 1
    return report(args, updates, answer)


def report(args: argparse.Namespace, updates: list[tuple[str, int, int]], answer: Any) -> int:
    """Print FeatureCommand's line per feature and, when some failed, its count on stderr.

    A feature without a result of its own (v2, or a refusal Kafka answers at the top level
    only, such as an unknown feature's) takes the top level's error and message.
    """
    results = {r.Feature: r for r in answer.Results or []}
    failures = 0
    for name, level, _ in updates:
        result = results.get(name)
        code = result.ErrorCode if result is not None else answer.ErrorCode
        message = (result.ErrorMessage if result is not None else answer.ErrorMessage) or ""
        what = "disabled" if args.verb == "disable" else f"{args.verb}d to {level}"
        if code == 0:
            print(f"{name} can be {what}." if args.dry_run else f"{name} was {what}.")
        else:
            failures += 1
            helper = "Can not" if args.dry_run else "Could not"
            verb = f"disable {name}" if args.verb == "disable" else f"{args.verb} {name} to {level}"
            print(f"{helper} {verb}. {message}")
    if failures:
        print(f"{failures} out of {len(updates)} operation(s) failed.", file=sys.stderr)
    return 1 if failures else 0
