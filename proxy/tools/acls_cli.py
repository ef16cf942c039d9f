"""``ksidecar acls``: Kafka ACLs over the wire, shaped like ``kafka-acls.sh``.

    ksidecar acls --bootstrap-server HOST:PORT --add --allow-principal User:alice --operation Write \\
        --topic orders- --resource-pattern-type prefixed
    ksidecar acls --bootstrap-server HOST:PORT --add --deny-principal User:alice --deny-host 10.0.0.7 \\
        --operation Write --topic orders-eu
    ksidecar acls --bootstrap-server HOST:PORT --list [--topic T] [--principal User:alice]
    ksidecar acls --bootstrap-server HOST:PORT --remove --topic orders-eu [--force]

The options and their defaults are ``AclCommand``'s: ``--operation`` defaults to All,
hosts to ``*``, ``--resource-pattern-type`` to literal (``any`` and ``match`` only for
``--list`` and ``--remove``); operations a resource type does not have are refused. The
requests are CreateAcls, DescribeAcls and DeleteAcls (v2) sent to the sidecar (or any
Kafka broker). The connection is not authenticated: it runs as ``User:ANONYMOUS``, so use a
listener where that principal may administer ACLs (``super.users`` or a Cluster Alter ACL).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

from protocol.apis import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from proxy.auth.acl.model import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    AclBinding,
    AclEntry,
    BindingFilter,
    EntryFilter,
    Operation,
    PatternFilter,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    parse_principal,
)
from proxy.tools.admin_client import AdminClient, AdminError

VERSION = 2


class UsageError(Exception):
    """Bad options (exit code 2)."""


def add_parser(sub: Any) -> None:
    """Register the ``acls`` subcommand on the main parser."""
    p = sub.add_parser("acls", help="add, remove or list Kafka ACLs (like kafka-acls.sh)")
    p.add_argument("--bootstrap-server", required=True, help="a sidecar (or broker), host:port")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--allow-principal", action="append", default=[], help="Type:name (repeatable)")
    p.add_argument("--deny-principal", action="append", default=[], help="Type:name (repeatable)")
    p.add_argument("--allow-host", action="append", default=[], help="for --allow-principal (default *)")
    p.add_argument("--deny-host", action="append", default=[], help="for --deny-principal (default *)")
    p.add_argument("--host", action="append", default=[], help="both --allow-host and --deny-host")
    p.add_argument("--operation", action="append", default=[], help="e.g. Read, Write, Describe (default All)")
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default="literal", help="literal|prefixed (any|match: list, remove)")
    p.add_argument("--principal", action="append", default=[], help="--list: only this principal's ACLs")
    p.add_argument("--force", action="store_true", help="--remove without asking")


def run(args: argparse.Namespace) -> int:
    """Run one ``acls`` command; 0 on success, 1 on a refused or failed request, 2 on bad usage."""
    try:
        pattern_type = _pattern_type(args)
        resources = _resources(args, pattern_type)
        if args.list:
            with AdminClient(args.bootstrap_server) as client:
                return _list(client, resources, args.principal)
        entries = _entries(args)
        if args.add:
            if not entries:
                raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
            with AdminClient(args.bootstrap_server) as client:
                return _add(client, resources, entries)
        with AdminClient(args.bootstrap_server) as client:
            return _remove(client, resources, entries, args.force)
    except UsageError as exc:
        print(f"ksidecar acls: {exc}", file=sys.stderr)
        return 2
    except AdminError as exc:
        print(f"ksidecar acls: {exc}", file=sys.stderr)
        return 1


def _pattern_type(args: argparse.Namespace) -> PatternType:
    kind = PatternType.parse(args.resource_pattern_type)
    if kind == PatternType.UNKNOWN:
        raise UsageError(f"Unknown resource-pattern-type: {args.resource_pattern_type}")
    if args.add and kind not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError(f"A '--resource-pattern-type' value of '{kind.name}' is not valid when adding acls.")
    return kind


def _resources(args: argparse.Namespace, kind: PatternType) -> list[PatternFilter]:
    found = [PatternFilter(ResourceType.TOPIC, t.strip(), kind) for t in args.topic]
    if args.cluster and kind == PatternType.LITERAL:
        found.append(PatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, kind))
    found += [PatternFilter(ResourceType.GROUP, g.strip(), kind) for g in args.group]
    found += [PatternFilter(ResourceType.TRANSACTIONAL_ID, x, kind) for x in args.transactional_id]
    if not found and not args.list:
        raise UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
                         "or --transactional-id <id>")
    return found


def _principals(values: Iterable[str]) -> list[str]:
    out = []
    for value in values:
        principal = parse_principal(value.strip())
        if principal is None:
            raise UsageError(f"expected a string in format principalType:principalName but got {value}")
        out.append(principal)
    return out


def _entries(args: argparse.Namespace) -> list[AclEntry]:
    operations = []
    for name in args.operation or ["All"]:
        op = Operation.parse(name)
        if op in (Operation.UNKNOWN, Operation.ANY):
            raise UsageError(f"unknown operation {name!r}")
        operations.append(op)
    entries: list[AclEntry] = []
    for permission, principals, hosts in (
        (Permission.ALLOW, _principals(args.allow_principal), args.allow_host + args.host),
        (Permission.DENY, _principals(args.deny_principal), args.deny_host + args.host),
    ):
        for principal in principals:
            for host in [h.strip() for h in hosts] or [WILDCARD_HOST]:
                entries.extend(AclEntry(principal, host, op, permission) for op in operations)
    for resource in _resources(args, _pattern_type(args)):
        valid = SUPPORTED_OPERATIONS[resource.resource_type] | {Operation.ALL}
        if any(e.operation not in valid for e in entries):
            raise UsageError(f"ResourceType {resource.resource_type.name} only supports operations "
                             f"{', '.join(sorted(op.pascal for op in valid))}")
    return sorted(set(entries))


def _describe(client: AdminClient, filter_: BindingFilter) -> dict[ResourcePattern, list[AclEntry]]:
    body = client.call(DESCRIBE_ACLS, VERSION, {
        "ResourceTypeFilter": int(filter_.pattern.resource_type), "ResourceNameFilter": filter_.pattern.name,
        "PatternTypeFilter": int(filter_.pattern.pattern_type), "PrincipalFilter": filter_.entry.principal,
        "HostFilter": filter_.entry.host, "Operation": int(filter_.entry.operation),
        "PermissionType": int(filter_.entry.permission)})
    if body.ErrorCode:
        raise AdminError(f"DescribeAcls refused ({body.ErrorCode}): {body.ErrorMessage}")
    found: dict[ResourcePattern, list[AclEntry]] = {}
    for resource in body.Resources:
        pattern = ResourcePattern(ResourceType.of(resource.ResourceType), resource.ResourceName,
                                  PatternType.of(resource.PatternType))
        found[pattern] = [AclEntry(a.Principal, a.Host, Operation.of(a.Operation), Permission.of(a.PermissionType))
                          for a in resource.Acls]
    return found


def _print(title: str, pattern: ResourcePattern | PatternFilter, entries: Iterable[AclEntry]) -> None:
    shown = pattern if isinstance(pattern, ResourcePattern) else (
        f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
        f"patternType={pattern.pattern_type.name})")
    lines = "\n".join(f"\t{e}" for e in entries)
    print(f"{title} `{shown}`: \n {lines} \n")


def _list(client: AdminClient, resources: list[PatternFilter], principals: list[str]) -> int:
    wanted = set(_principals(principals))
    filters = resources or [PatternFilter(ResourceType.ANY, None, PatternType.ANY)]
    for resource in filters:
        for pattern, entries in sorted(_describe(client, BindingFilter(resource, EntryFilter())).items()):
            shown = [e for e in entries if not wanted or e.principal in wanted]
            if shown:
                _print("Current ACLs for resource", pattern, shown)
    return 0


def _add(client: AdminClient, resources: list[PatternFilter], entries: list[AclEntry]) -> int:
    failed = 0
    for resource in resources:
        pattern = ResourcePattern(resource.resource_type, resource.name or "", resource.pattern_type)
        _print("Adding ACLs for resource", pattern, entries)
        bindings = [AclBinding(pattern, e) for e in entries]
        body = client.call(CREATE_ACLS, VERSION, {"Creations": [
            {"ResourceType": int(pattern.resource_type), "ResourceName": pattern.name,
             "ResourcePatternType": int(pattern.pattern_type), "Principal": b.entry.principal,
             "Host": b.entry.host, "Operation": int(b.entry.operation), "PermissionType": int(b.entry.permission)}
            for b in bindings]})
        for binding, result in zip(bindings, body.Results, strict=True):
            if result.ErrorCode:
                failed += 1
                print(f"ksidecar acls: {binding.entry} refused ({result.ErrorCode}): {result.ErrorMessage}",
                      file=sys.stderr)
    if not failed:
        _list(client, resources, [])
    return 1 if failed else 0


def _remove(client: AdminClient, resources: list[PatternFilter], entries: list[AclEntry], force: bool) -> int:
    failed = 0
    for resource in resources:
        if not force:
            what = "all ACLs" if not entries else "ACLs: " + ", ".join(str(e) for e in entries)
            answer = input(f"Are you sure you want to delete {what} for resource filter `{resource}`? (y/n)\n")
            if answer.strip().lower() != "y":
                continue
        filters = [EntryFilter(e.principal, e.host, e.operation, e.permission) for e in entries] or [EntryFilter()]
        body = client.call(DELETE_ACLS, VERSION, {"Filters": [
            {"ResourceTypeFilter": int(resource.resource_type), "ResourceNameFilter": resource.name,
             "PatternTypeFilter": int(resource.pattern_type), "PrincipalFilter": f.principal,
             "HostFilter": f.host, "Operation": int(f.operation), "PermissionType": int(f.permission)}
            for f in filters]})
        for result in body.FilterResults:
            problems = [(result.ErrorCode, result.ErrorMessage)] if result.ErrorCode else []
            problems += [(m.ErrorCode, m.ErrorMessage) for m in result.MatchingAcls if m.ErrorCode]
            for code, message in problems:
                failed += 1
                print(f"ksidecar acls: removal refused ({code}): {message}", file=sys.stderr)
    if not failed:
        _list(client, resources, [])
    return 1 if failed else 0
