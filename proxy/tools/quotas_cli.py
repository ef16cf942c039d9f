"""``ksidecar quotas``: per-IP connection quotas, with kafka-configs.sh habits.

    ksidecar quotas --bootstrap-server HOST:PORT describe [--ip IP | --ip-defaults]
    ksidecar quotas --bootstrap-server HOST:PORT alter (--ip IP | --ip-defaults)
        [--add-config connection_creation_rate=N] [--delete-config connection_creation_rate]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from proxy.tools.admin_client import AdminClient, AdminError
from quotas.admin import MATCH_DEFAULT, MATCH_EXACT, RATE_KEY

DESCRIBE, ALTER = 48, 49


def add_parser(sub: Any) -> None:
    """Register the ``quotas`` subcommand on the main parser."""
    parser = sub.add_parser("quotas", help="describe or alter per-IP connection quotas (KIP-612)")
    parser.add_argument("--bootstrap-server", required=True, help="a sidecar, host:port")
    verbs = parser.add_subparsers(dest="verb", required=True)
    for verb in ("describe", "alter"):
        p = verbs.add_parser(verb)
        who = p.add_mutually_exclusive_group(required=verb == "alter")
        who.add_argument("--ip", help="one client IP address")
        who.add_argument("--ip-defaults", action="store_true", help="the default for every IP")
        if verb == "alter":
            p.add_argument("--add-config", help=f"{RATE_KEY}=N")
            p.add_argument("--delete-config", help=RATE_KEY)


def _name(entity: str | None) -> str:
    return "the default IP" if entity is None else f"ip '{entity}'"


def run(args: argparse.Namespace) -> int:
    """Run one ``quotas`` command; 0 on success, 1 on a refused change, 2 on bad usage."""
    try:
        with AdminClient(args.bootstrap_server) as client:
            if args.verb == "describe":
                return _describe(client, args)
            return _alter(client, args)
    except AdminError as exc:
        print(f"ksidecar quotas: {exc}", file=sys.stderr)
        return 1


def _describe(client: AdminClient, args: argparse.Namespace) -> int:
    # No filter lists every IP entity, the default included (strict=false).
    components: list[dict[str, Any]] = []
    if args.ip:
        components = [{"EntityType": "ip", "MatchType": MATCH_EXACT, "Match": args.ip}]
    elif args.ip_defaults:
        components = [{"EntityType": "ip", "MatchType": MATCH_DEFAULT, "Match": None}]
    body = client.call(DESCRIBE, 1, {"Components": components, "Strict": False})
    if body.ErrorCode:
        print(f"ksidecar quotas: error {body.ErrorCode}: {body.ErrorMessage}", file=sys.stderr)
        return 1
    entries = body.Entries or []
    if not entries:
        print("No per-IP quotas.")
    for entry in entries:
        name = entry.Entity[0].EntityName
        values = ", ".join(f"{v.Key}={v.Value:g}" for v in entry.Values)
        print(f"Quota configs for {_name(name)} are {values}")
    return 0


def _alter(client: AdminClient, args: argparse.Namespace) -> int:
    ops: list[dict[str, Any]] = []
    if args.add_config:
        key, sep, value = args.add_config.partition("=")
        if not sep or key.strip() != RATE_KEY:
            print(f"ksidecar quotas: --add-config takes {RATE_KEY}=N", file=sys.stderr)
            return 2
        try:
            ops.append({"Key": RATE_KEY, "Value": float(value), "Remove": False})
        except ValueError:
            print(f"ksidecar quotas: {value!r} is not a number", file=sys.stderr)
            return 2
    if args.delete_config:
        if args.delete_config.strip() != RATE_KEY:
            print(f"ksidecar quotas: --delete-config takes {RATE_KEY}", file=sys.stderr)
            return 2
        ops.append({"Key": RATE_KEY, "Value": 0.0, "Remove": True})
    if not ops:
        print("ksidecar quotas: alter needs --add-config or --delete-config", file=sys.stderr)
        return 2
    entity = None if args.ip_defaults else args.ip
    body = client.call(ALTER, 1, {
        "Entries": [{"Entity": [{"EntityType": "ip", "EntityName": entity}], "Ops": ops}],
        "ValidateOnly": False,
    })
    result = body.Entries[0]
    if result.ErrorCode:
        print(f"ksidecar quotas: refused ({result.ErrorCode}): {result.ErrorMessage}", file=sys.stderr)
        return 1
    print(f"Completed updating config for {_name(entity)}.")
    return 0
