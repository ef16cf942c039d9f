"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), answered by the sidecar.

With ``sidecar.authorizer=acls`` the ACLs are the sidecar's own, in ZooKeeper in Kafka's
format (:mod:`proxy.auth.acl.store`), and these requests are answered here on every
listener, so Kafka's admin clients (``kafka-acls.sh``, ``AdminClient.create_acls`` ...)
and ``ksidecar acls`` manage them. Kafka's rules (``AclApis``, ``AclAuthorizer``):

* DescribeAcls needs Describe on the Cluster, CreateAcls and DeleteAcls Alter on the
  Cluster (CLUSTER_AUTHORIZATION_FAILED otherwise: the top-level error of DescribeAcls,
  every result of the other two);
* version 0 knows only LITERAL patterns: its filters read as LITERAL (ANY too), and its
  answers hold literal ACLs only;
* a filter or creation with UNKNOWN elements, an empty name, a Cluster resource not named
  ``kafka-cluster`` or a principal without ``Type:`` is INVALID_REQUEST;
* a creation or deletion that ZooKeeper fails is UNKNOWN_SERVER_ERROR with the reason.

Writes go through the ACL directory (:class:`~proxy.local.ports.AclDirectory`) as an
answer-later: the connection reads on while ZooKeeper is written.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from protocol.apis import ApiRegistry
from protocol.errors import ErrorCode
from proxy.auth.acl.model import (
    CLUSTER_NAME,
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
    invalid_binding,
)
from proxy.local.api import Answer, Context, Later, LocalApi, LocalRequest, Respond
from proxy.local.ports import AclDirectory

log = logging.getLogger(__name__)

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
KEYS = frozenset({DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS})

_CLUSTER_DENIED = (int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "Cluster authorization failed.")
_INVALID = int(ErrorCode.INVALID_REQUEST)
_FAILED = int(ErrorCode.UNKNOWN_SERVER_ERROR)


def _allowed(context: Context, operation: Operation) -> bool:
    acls = context.ports.acls
    assert acls is not None
    return acls.authorizer.authorize(context.principal, context.peer[0], operation, ResourceType.CLUSTER,
                                     CLUSTER_NAME)


def _pattern_type(body: Mapping[str, Any], field: str, version: int) -> PatternType:
    """The filter's pattern type; version 0 has none and reads as LITERAL (ANY too)."""
    value = PatternType.of(int(body.get(field, PatternType.LITERAL)))
    if version == 0 and value == PatternType.ANY:
        return PatternType.LITERAL
    return value


def read_filter(body: Mapping[str, Any], version: int) -> BindingFilter:
    """A DescribeAcls body or a DeleteAcls filter (the same fields) as a :class:`BindingFilter`."""
    pattern = PatternFilter(ResourceType.of(int(body["ResourceTypeFilter"])), body["ResourceNameFilter"],
                            _pattern_type(body, "PatternTypeFilter", version))
    entry = EntryFilter(body["PrincipalFilter"], body["HostFilter"], Operation.of(int(body["Operation"])),
                        Permission.of(int(body["PermissionType"])))
    return BindingFilter(pattern, entry)


def _filter_problem(filter_: BindingFilter, version: int) -> tuple[int, str] | None:
    if filter_.unknown or filter_.pattern.resource_type == ResourceType.UNKNOWN:
        return _INVALID, "Filter contain UNKNOWN elements"
    if version == 0 and filter_.pattern.pattern_type != PatternType.LITERAL:
        return int(ErrorCode.UNSUPPORTED_VERSION), "Version 0 only supports literal resource pattern types"
    return None


def _visible(binding: AclBinding, version: int) -> bool:
    """Version 0 answers carry no pattern type: only literal ACLs can be told."""
    return version > 0 or binding.pattern.pattern_type == PatternType.LITERAL


def describe(request: LocalRequest, context: Context) -> Answer:
    """Answer DescribeAcls from the watched snapshot."""
    acls = context.ports.acls
    assert request.body is not None and acls is not None
    if not _allowed(context, Operation.DESCRIBE):
        code, message = _CLUSTER_DENIED
        return Respond(body={"ThrottleTimeMs": 0, "ErrorCode": code, "ErrorMessage": message, "Resources": []})
    filter_ = read_filter(request.body, request.version)
    problem = _filter_problem(filter_, request.version)
    if problem is not None:
        return Respond(body={"ThrottleTimeMs": 0, "ErrorCode": problem[0], "ErrorMessage": problem[1],
                             "Resources": []})
    return Respond(body=describe_body(acls, filter_, request.version))


def describe_body(acls: AclDirectory, filter_: BindingFilter, version: int) -> dict[str, Any]:
    """The DescribeAcls response for one filter: the matching ACLs grouped by pattern."""
    grouped: dict[ResourcePattern, list[AclEntry]] = {}
    for binding in acls.describe(filter_):
        if _visible(binding, version):
            grouped.setdefault(binding.pattern, []).append(binding.entry)
    resources = [
        {"ResourceType": int(p.resource_type), "ResourceName": p.name, "PatternType": int(p.pattern_type),
         "Acls": [{"Principal": e.principal, "Host": e.host, "Operation": int(e.operation),
                   "PermissionType": int(e.permission)} for e in entries]}
        for p, entries in sorted(grouped.items())
    ]
    return {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "Resources": resources}


def read_creation(item: Mapping[str, Any]) -> AclBinding:
    """One CreateAcls creation as a binding (v0: LITERAL)."""
    pattern = ResourcePattern(ResourceType.of(int(item["ResourceType"])), item["ResourceName"],
                              PatternType.of(int(item.get("ResourcePatternType", PatternType.LITERAL))))
    entry = AclEntry(item["Principal"], item["Host"], Operation.of(int(item["Operation"])),
                     Permission.of(int(item["PermissionType"])))
    return AclBinding(pattern, entry)


def create(request: LocalRequest, context: Context) -> Answer:
    """Answer CreateAcls: later, once ZooKeeper holds the new ACLs."""
    acls = context.ports.acls
    body = request.body
    assert body is not None and acls is not None
    creations = list(body["Creations"])
    if not _allowed(context, Operation.ALTER):
        code, message = _CLUSTER_DENIED
        return Respond(body={"ThrottleTimeMs": 0, "Results": [{"ErrorCode": code, "ErrorMessage": message}
                                                              for _ in creations]})
    results: list[dict[str, Any]] = []
    valid: list[tuple[int, AclBinding]] = []
    for i, item in enumerate(creations):
        binding = read_creation(item)
        problem = invalid_binding(binding)
        if problem is None and request.version == 0 and binding.pattern.pattern_type != PatternType.LITERAL:
            problem = "Version 0 only supports literal resource pattern types"
        results.append({"ErrorCode": _INVALID if problem else 0, "ErrorMessage": problem})
        if problem is None:
            valid.append((i, binding))
    response = {"ThrottleTimeMs": 0, "Results": results}
    if not valid:
        return Respond(body=response)

    async def answer() -> Respond:
        try:
            failures = await acls.create([b for _, b in valid])
        except Exception as exc:  # ZooKeeper failed: tell the client, keep the connection
            failures = [exc] * len(valid)
        for (i, binding), failure in zip(valid, failures, strict=True):
            if failure is not None:
                log.warning("CreateAcls: %s %s failed: %s", binding.pattern, binding.entry, failure)
                results[i].update(ErrorCode=_FAILED, ErrorMessage=f"ZooKeeper write failed: {failure}")
            else:
                log.info("ACL added by %s: %s %s", context.principal, binding.pattern, binding.entry)
        return Respond(body=response)

    return Later(answer=answer)


def delete(request: LocalRequest, context: Context) -> Answer:
    """Answer DeleteAcls: later, once ZooKeeper no longer holds the matching ACLs."""
    acls = context.ports.acls
    body = request.body
    assert body is not None and acls is not None
    items = list(body["Filters"])
    if not _allowed(context, Operation.ALTER):
        code, message = _CLUSTER_DENIED
        return Respond(body={"ThrottleTimeMs": 0, "FilterResults": [
            {"ErrorCode": code, "ErrorMessage": message, "MatchingAcls": []} for _ in items]})
    results: list[dict[str, Any]] = []
    valid: list[tuple[int, BindingFilter]] = []
    for i, item in enumerate(items):
        filter_ = read_filter(item, request.version)
        problem = _filter_problem(filter_, request.version)
        results.append({"ErrorCode": problem[0] if problem else 0, "ErrorMessage": problem[1] if problem else None,
                        "MatchingAcls": []})
        if problem is None:
            valid.append((i, filter_))
    response = {"ThrottleTimeMs": 0, "FilterResults": results}
    if not valid:
        return Respond(body=response)

    async def answer() -> Respond:
        try:
            removed = await acls.delete([f for _, f in valid])
        except Exception as exc:  # ZooKeeper failed: every filter fails
            for i, _ in valid:
                results[i].update(ErrorCode=_FAILED, ErrorMessage=f"ZooKeeper write failed: {exc}")
            return Respond(body=response)
        for (i, _), gone in zip(valid, removed, strict=True):
            for binding, failure in gone:
                p, e = binding.pattern, binding.entry
                results[i]["MatchingAcls"].append({
                    "ErrorCode": _FAILED if failure else 0,
                    "ErrorMessage": f"ZooKeeper write failed: {failure}" if failure else None,
                    "ResourceType": int(p.resource_type), "ResourceName": p.name, "PatternType": int(p.pattern_type),
                    "Principal": e.principal, "Host": e.host, "Operation": int(e.operation),
                    "PermissionType": int(e.permission)})
                if failure is None:
                    log.info("ACL removed by %s: %s %s", context.principal, p, e)
        return Respond(body=response)

    return Later(answer=answer)


def entries(registry: ApiRegistry) -> list[LocalApi]:
    """The table entries for the three ACL APIs, every version our schemas have."""
    out = []
    for key, handler in ((DESCRIBE_ACLS, describe), (CREATE_ACLS, create), (DELETE_ACLS, delete)):
        api = registry.api(key)
        assert api.versions.hi is not None
        out.append(LocalApi(key=key, name=api.name, versions=(api.versions.lo, api.versions.hi), handler=handler))
    return out
