"""``ksidecar quotas``: client quotas over the wire, shaped like kafka-configs.sh.

    ksidecar quotas --bootstrap-server HOST:PORT describe [ENTITY]
    ksidecar quotas --bootstrap-server HOST:PORT alter ENTITY
        [--add-config k=v[,k=v...]] [--delete-config k[,k...]]

ENTITY is kafka-configs.sh's: ``--entity-type users|clients|ips``, each followed by
``--entity-name NAME`` or ``--entity-default`` (the i-th name or default goes with the
i-th type, as Kafka pairs them); ``users`` and ``clients`` together name a user's client
id. Or the short forms ``--user NAME``, ``--client NAME``, ``--ip IP``, ``--user-defaults``,
``--client-defaults``, ``--ip-defaults``, which do not mix with the long ones. On describe a
type without a name matches every entity of that type, the default included; describe with
no entity lists every quota the sidecar answers with.

User and client-id quotas take ``producer_byte_rate``, ``consumer_byte_rate``,
``controller_mutation_rate`` and ``request_percentage`` (which the sidecar refuses with its
reason); an IP takes ``connection_creation_rate``. Requests are
DescribeClientQuotas (48) and AlterClientQuotas (49) v1. Exit codes: 0 done, 1 refused by
the sidecar (its message is printed) or unreachable, 2 bad usage (the message names the
option).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from proxy.tools.admin_client import AdminClient, AdminError
from quotas.admin import CLIENT_ID, IP, MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED, RATE_KEY, USER
from quotas.clients import QUOTA_KEYS

DESCRIBE, ALTER = 48, 49

#: kafka-configs.sh's entity types and the wire's.
ENTITY_TYPES = {"users": USER, "clients": CLIENT_ID, "ips": IP}
#: How Kafka names each wire type in its describe output.
DESCRIBED_AS = {USER: "user-principal", CLIENT_ID: "client-id", IP: "ip"}
#: The short forms, in the order Kafka lists them (client, user, ip; then the defaults):
#: the first entity of a command decides Kafka's "Completed updating ..." line.
SHORT_NAMES = (("client", "clients"), ("user", "users"), ("ip", "ips"))
SHORT_DEFAULTS = (("client_defaults", "clients"), ("user_defaults", "users"), ("ip_defaults", "ips"))
SHORT_OPTIONS = "--user, --client, --ip, --user-defaults, --client-defaults, --ip-defaults"


class UsageError(Exception):
    """The command line asks for something that cannot be sent; the message names the option."""


@dataclass(frozen=True)
class Part:
    """One entity type of a command: ``config_type`` as kafka-configs.sh spells it
    (``users``, ``clients``, ``ips``), with a name (``match`` exact), the default entity
    (``name`` None, ``match`` default) or, on describe, any entity (``match`` specified)."""

    config_type: str
    match: int
    name: str | None = None

    @property
    def kind(self) -> str:
        """The wire's entity type: ``user``, ``client-id`` or ``ip``."""
        return ENTITY_TYPES[self.config_type]


class _InOrder(argparse.Action):
    """Append to one list in command-line order: ``--entity-name`` its value,
    ``--entity-default`` None, so each lines up with its ``--entity-type``."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        items = list(getattr(namespace, self.dest) or [])
        items.append(self.const if self.nargs == 0 else values)
        setattr(namespace, self.dest, items)


def add_parser(sub: Any) -> None:
    """Register the ``quotas`` subcommand on the main parser."""
    parser = sub.add_parser("quotas", help="describe or alter client quotas: users, client ids (KIP-55), IPs (KIP-612)")
    parser.add_argument("--bootstrap-server", required=True, help="a sidecar, host:port")
    verbs = parser.add_subparsers(dest="verb", required=True)
    for verb in ("describe", "alter"):
        p = verbs.add_parser(verb)
        p.add_argument("--entity-type", action="append", dest="entity_types", default=[], metavar="TYPE",
                       help="users, clients or ips (repeatable: users and clients together)")
        p.add_argument("--entity-name", action=_InOrder, dest="entity_names", default=[], metavar="NAME",
                       help="the name for the --entity-type in the same position")
        p.add_argument("--entity-default", action=_InOrder, dest="entity_names", nargs=0, const=None,
                       help="the default entity for the --entity-type in the same position")
        p.add_argument("--user", metavar="NAME", help="a user principal's name")
        p.add_argument("--client", metavar="ID", help="a client id")
        p.add_argument("--ip", help="one client IP address")
        p.add_argument("--user-defaults", action="store_true", help="the default for every user")
        p.add_argument("--client-defaults", action="store_true", help="the default for every client id")
        p.add_argument("--ip-defaults", action="store_true", help="the default for every IP")
        if verb == "alter":
            p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]",
                           help=f"quotas to set: {', '.join(sorted(QUOTA_KEYS))} (users, clients); {RATE_KEY} (ips)")
            p.add_argument("--delete-config", action="append", default=[], metavar="K[,K]",
                           help="quota keys to remove")


def entity_parts(args: argparse.Namespace) -> list[Part]:
    """The entity a command names, its types in Kafka's order; checked as kafka-configs.sh
    checks it (:class:`UsageError` otherwise)."""
    names: list[str | None] = list(args.entity_names)
    short = [flag for flag, _ in SHORT_NAMES + SHORT_DEFAULTS if getattr(args, flag)]
    if short and (args.entity_types or names):
        raise UsageError(f"--entity-type, --entity-name and --entity-default do not mix with {SHORT_OPTIONS}")
    if short:
        types = [config_type for flag, config_type in SHORT_NAMES if getattr(args, flag) is not None]
        names = [getattr(args, flag) for flag, _ in SHORT_NAMES if getattr(args, flag) is not None]
        types += [config_type for flag, config_type in SHORT_DEFAULTS if getattr(args, flag)]
        names += [None for flag, _ in SHORT_DEFAULTS if getattr(args, flag)]
    else:
        types = list(args.entity_types)
    for config_type in types:
        if config_type not in ENTITY_TYPES:
            raise UsageError(f"--entity-type: {config_type!r} is not an entity type here (users, clients or ips)")
    duplicates = sorted({t for t in types if types.count(t) > 1})
    if duplicates:
        raise UsageError(f"duplicate entity type(s): {', '.join(duplicates)}")
    if len(types) > 1 and set(types) != {"users", "clients"}:
        raise UsageError("only 'users' and 'clients' entity types may be specified together")
    if len(names) > len(types):
        raise UsageError("more --entity-name/--entity-default than --entity-type")
    if any(name == "" for name in names):
        raise UsageError("an empty entity name: --entity-default (or --user-defaults, --client-defaults, "
                         "--ip-defaults) names the default entity")
    parts: list[Part] = []
    for i, config_type in enumerate(types):
        if i >= len(names):
            parts.append(Part(config_type, MATCH_SPECIFIED))
        elif names[i] is None:
            parts.append(Part(config_type, MATCH_DEFAULT))
        else:
            parts.append(Part(config_type, MATCH_EXACT, names[i]))
    if args.verb == "alter":
        if not parts:
            raise UsageError(f"alter needs an entity: --entity-type users|clients|ips with --entity-name or "
                             f"--entity-default, or one of {SHORT_OPTIONS}")
        if any(part.match == MATCH_SPECIFIED for part in parts):
            raise UsageError("alter needs --entity-name or --entity-default with each --entity-type")
    return parts


def describe_request(parts: Sequence[Part]) -> dict[str, Any]:
    """The DescribeClientQuotas v1 body for ``parts``: none lists everything (an empty,
    non-strict filter); an IP filter is not strict, as before user quotas came; users and
    clients are strict, as kafka-configs.sh asks (``ClientQuotaFilter.containsOnly``)."""
    components = [{"EntityType": part.kind, "MatchType": part.match, "Match": part.name} for part in parts]
    strict = bool(parts) and parts[0].kind != IP
    return {"Components": components, "Strict": strict}


def parse_add_config(items: Sequence[str]) -> dict[str, str]:
    """``--add-config`` values (each ``k=v[,k=v...]``) as ``{key: value text}``, the last
    of a key winning as in Kafka's."""
    pairs: dict[str, str] = {}
    for item in items:
        for piece in item.split(","):
            if piece.count("=") != 1 or not piece.partition("=")[0].strip():
                raise UsageError(f'--add-config: {piece!r}: all configs to be added must be in the format "key=val"')
            key, _, value = piece.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def parse_delete_config(items: Sequence[str]) -> list[str]:
    """``--delete-config`` values (each ``k[,k...]``) as keys, in order, each once."""
    keys: list[str] = []
    for item in items:
        for piece in item.split(","):
            key = piece.strip()
            if not key:
                raise UsageError(f"--delete-config: an empty key in {item!r}")
            if key not in keys:
                keys.append(key)
    return keys


def alter_ops(parts: Sequence[Part], add: dict[str, str], delete: Sequence[str]) -> list[dict[str, Any]]:
    """The AlterClientQuotas ops: each added key with its value as a double, then each
    removed key; keys and numbers are checked here, values against the quota's rules by the
    sidecar."""
    ip = parts[0].kind == IP
    ops: list[dict[str, Any]] = []
    for key, text in add.items():
        if ip:
            if key != RATE_KEY:
                raise UsageError(f"--add-config takes {RATE_KEY}=N")
            try:
                value = float(text)
            except ValueError:
                raise UsageError(f"{text!r} is not a number") from None
        else:
            if key not in QUOTA_KEYS:
                raise UsageError(f"--add-config: {key!r} is not a user or client-id quota "
                                 f"({', '.join(sorted(QUOTA_KEYS))}; SCRAM credentials: ksidecar users)")
            value = _java_double(key, text)
        ops.append({"Key": key, "Value": value, "Remove": False})
    for key in delete:
        if ip and key != RATE_KEY:
            raise UsageError(f"--delete-config takes {RATE_KEY}")
        if not ip and key not in QUOTA_KEYS:
            raise UsageError(f"--delete-config: {key!r} is not a user or client-id quota "
                             f"({', '.join(sorted(QUOTA_KEYS))})")
        ops.append({"Key": key, "Value": 0.0, "Remove": True})
    if not ops:
        raise UsageError("alter needs --add-config or --delete-config")
    return ops


def alter_request(parts: Sequence[Part], ops: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The AlterClientQuotas v1 body: one entry, the entity user first, a default as a null
    name."""
    ordered = sorted(parts, key=lambda part: part.kind != USER)
    entity = [{"EntityType": part.kind, "EntityName": part.name} for part in ordered]
    return {"Entries": [{"Entity": entity, "Ops": list(ops)}], "ValidateOnly": False}


def _java_double(key: str, text: str) -> float:
    # Java's Double.parseDouble takes neither digit separators nor Python's "inf"/"nan"
    # spellings; it does take "Infinity" and "NaN", which the sidecar refuses with its reason.
    if "_" in text or text.lower().lstrip("+-") in ("inf", "nan"):
        raise UsageError(f"--add-config: cannot parse quota configuration value for {key}: {text}")
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"--add-config: cannot parse quota configuration value for {key}: {text}") from None


def java_double_text(value: float) -> str:
    """``value`` as Java's ``Double.toString`` writes it, as Kafka prints quota values:
    ``1048576.0``, ``0.5``, ``1.0E7`` (scientific from 10^7 up and below 10^-3)."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0.0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        return repr(value)  # Python writes this range positionally, shortest digits, ".0" kept
    exact = Decimal(repr(value))
    digits = "".join(str(d) for d in exact.as_tuple().digits).rstrip("0") or "0"
    sign = "-" if value < 0 else ""
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exact.adjusted()}"


def describe_line(entity: Sequence[tuple[str, str | None]], values: Sequence[tuple[str, float]]) -> str:
    """One describe line. User and client-id entities as kafka-configs.sh prints them
    ("Quota configs for user-principal 'alice', client-id 'p1' are producer_byte_rate=1048576.0");
    an IP entity as this command always has ("Quota configs for ip '10.1.2.3' are
    connection_creation_rate=100")."""
    parts = dict(entity)
    if set(parts) == {IP}:
        name = parts[IP]
        who = "the default IP" if name is None else f"ip '{name}'"
        return f"Quota configs for {who} are " + ", ".join(f"{k}={v:g}" for k, v in values)
    order = [USER, CLIENT_ID, IP, *sorted(set(parts) - {USER, CLIENT_ID, IP})]
    described = []
    for kind in order:
        if kind in parts:
            label = DESCRIBED_AS.get(kind, kind)
            name = parts[kind]
            described.append(f"the default {label}" if name is None else f"{label} '{name}'")
    text = ", ".join(f"{k}={java_double_text(v)}" for k, v in values)
    return f"Quota configs for {', '.join(described)} are {text}"


def completed_line(parts: Sequence[Part]) -> str:
    """What a successful alter prints. Users and client ids: kafka-configs.sh's line, which
    names the first entity type of the command only ("Completed updating config for user
    alice.", "Completed updating default config for users in the cluster."); an IP: this
    command's ("Completed updating config for ip '10.1.2.3'.")."""
    head = parts[0]
    if head.kind == IP:
        return "Completed updating config for " + ("the default IP." if head.name is None else f"ip '{head.name}'.")
    if head.name is None:
        return f"Completed updating default config for {head.config_type} in the cluster."
    return f"Completed updating config for {head.config_type[:-1]} {head.name}."


def run(args: argparse.Namespace) -> int:
    """Run one ``quotas`` command; 0 on success, 1 on a refused change, 2 on bad usage."""
    ops: list[dict[str, Any]] = []
    try:
        parts = entity_parts(args)
        if args.verb == "alter":
            ops = alter_ops(parts, parse_add_config(args.add_config), parse_delete_config(args.delete_config))
    except UsageError as exc:
        print(f"ksidecar quotas: {exc}", file=sys.stderr)
        return 2
    try:
        with AdminClient(args.bootstrap_server) as client:
            if args.verb == "describe":
                return _describe(client, parts)
            return _alter(client, parts, ops)
    except AdminError as exc:
        print(f"ksidecar quotas: {exc}", file=sys.stderr)
        return 1


def _entries(body: Any) -> list[tuple[list[tuple[str, str | None]], list[tuple[str, float]]]]:
    return [([(p.EntityType, p.EntityName) for p in entry.Entity], [(v.Key, v.Value) for v in entry.Values])
            for entry in body.Entries or []]


def _describe(client: AdminClient, parts: Sequence[Part]) -> int:
    body = client.call(DESCRIBE, 1, describe_request(parts))
    if body.ErrorCode:
        print(f"ksidecar quotas: error {body.ErrorCode}: {body.ErrorMessage}", file=sys.stderr)
        return 1
    entries = _entries(body)
    if not entries and not parts:
        print("No quotas.")
    elif not entries and parts[0].kind == IP:
        print("No per-IP quotas.")
    # kafka-configs.sh prints nothing when no user or client-id entity matches.
    for entity, values in entries:
        print(describe_line(entity, values))
    return 0


def _alter(client: AdminClient, parts: Sequence[Part], ops: Sequence[dict[str, Any]]) -> int:
    removed = [op["Key"] for op in ops if op["Remove"]]
    if removed and parts[0].kind != IP:
        # kafka-configs.sh reads the entity first and refuses to remove what it does not have.
        body = client.call(DESCRIBE, 1, {**describe_request(parts), "Strict": True})
        if body.ErrorCode:
            print(f"ksidecar quotas: error {body.ErrorCode}: {body.ErrorMessage}", file=sys.stderr)
            return 1
        entries = _entries(body)
        present = {key for key, _ in entries[0][1]} if entries else set()
        missing = [key for key in removed if key not in present]
        if missing:
            print(f"ksidecar quotas: Invalid config(s): {','.join(missing)}", file=sys.stderr)
            return 1
    body = client.call(ALTER, 1, alter_request(parts, ops))
    result = body.Entries[0]
    if result.ErrorCode:
        print(f"ksidecar quotas: refused ({result.ErrorCode}): {result.ErrorMessage}", file=sys.stderr)
        return 1
    print(completed_line(parts))
    return 0
