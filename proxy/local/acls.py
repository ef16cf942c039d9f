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

:func:`group_operations` serves the other local APIs: the AuthorizedOperations of a group
that the group-describe answers carry when asked (:mod:`proxy.auth.acl.authorized`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from protocol.apis import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS, ApiRegistry
from protocol.errors import ErrorCode
from proxy.auth.acl.authorized import authorized_operations
from proxy.auth.acl.model import (
    CLUSTER_NAME,
    AclBinding,
    AclEntry,
    BindingFilter,
    Operation,
    PatternType,
    ResourcePattern,
    ResourceType,
    invalid_binding,
)
from proxy.local.api import Answer, Context, Later, LocalApi, LocalRequest, Respond
from proxy.local.messages.acls import (
    AclOutcome,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeletedAcl,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribedResource,
    FilterResult,
)
from proxy.local.ports import AclDirectory

log = logging.getLogger(__name__)

KEYS = frozenset({DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS})

_CLUSTER_DENIED = AclOutcome(error=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                             error_message="Cluster authorization failed.")


def _allowed(context: Context, operation: Operation) -> bool:
    acls = context.ports.acls
    assert acls is not None
    return acls.authorizer.authorize(context.principal, context.peer[0], operation, ResourceType.CLUSTER,
                                     CLUSTER_NAME)


def group_operations(context: Context) -> Callable[[str], int]:
    """A group id → the AuthorizedOperations of that group for the client of ``context``
    (its principal, from its IP), from the ACLs as they are now; every group operation when
    the sidecar enforces no ACLs (``sidecar.authorizer=none``, or ``shadow`` mode, which
    changes nothing a client sees), as Kafka's broker answers without an authorizer."""
    acls = context.ports.acls
    authorizer = acls.authorizer if acls is not None and acls.enforcing else None
    principal, host = context.principal, context.peer[0]
    return lambda group_id: authorized_operations(authorizer, principal, host, ResourceType.GROUP, group_id)


def _filter_problem(filter_: BindingFilter, version: int) -> AclOutcome | None:
    if filter_.unknown or filter_.pattern.resource_type == ResourceType.UNKNOWN:
        return AclOutcome(error=ErrorCode.INVALID_REQUEST, error_message="Filter contain UNKNOWN elements")
    if version == 0 and filter_.pattern.pattern_type != PatternType.LITERAL:
        return AclOutcome(error=ErrorCode.UNSUPPORTED_VERSION,
                          error_message="Version 0 only supports literal resource pattern types")
    return None


def _visible(binding: AclBinding, version: int) -> bool:
    """Version 0 answers carry no pattern type: only literal ACLs can be told."""
    return version > 0 or binding.pattern.pattern_type == PatternType.LITERAL


def _write_failed(failure: object) -> str:
    return f"ZooKeeper write failed: {failure}"


def describe(request: LocalRequest, context: Context) -> Answer:
    """Answer DescribeAcls from the watched snapshot."""
    acls = context.ports.acls
    assert request.body is not None and acls is not None
    version = request.version
    asked = DescribeAclsRequest.from_wire(version, request.body)
    refusal = _CLUSTER_DENIED if not _allowed(context, Operation.DESCRIBE) else _filter_problem(asked.filter, version)
    if refusal is not None:
        response = DescribeAclsResponse(error=refusal.error, error_message=refusal.error_message)
        return Respond(body=response.to_wire(version))
    return Respond(body=describe_response(acls, asked.filter, version).to_wire(version))


def describe_response(acls: AclDirectory, filter_: BindingFilter, version: int) -> DescribeAclsResponse:
    """The DescribeAcls answer for one filter: the matching ACLs grouped by pattern."""
    grouped: dict[ResourcePattern, list[AclEntry]] = {}
    for binding in acls.describe(filter_):
        if _visible(binding, version):
            grouped.setdefault(binding.pattern, []).append(binding.entry)
    return DescribeAclsResponse(resources=tuple(
        DescribedResource(pattern=pattern, acls=tuple(entries)) for pattern, entries in sorted(grouped.items())))


def create(request: LocalRequest, context: Context) -> Answer:
    """Answer CreateAcls: later, once ZooKeeper holds the new ACLs."""
    acls = context.ports.acls
    assert request.body is not None and acls is not None
    version = request.version
    asked = CreateAclsRequest.from_wire(version, request.body)
    if not _allowed(context, Operation.ALTER):
        denied = CreateAclsResponse(results=tuple(_CLUSTER_DENIED for _ in asked.creations))
        return Respond(body=denied.to_wire(version))
    results: list[AclOutcome] = []
    valid: list[tuple[int, AclBinding]] = []
    for i, binding in enumerate(asked.creations):
        problem = invalid_binding(binding)
        if problem is None and version == 0 and binding.pattern.pattern_type != PatternType.LITERAL:
            problem = "Version 0 only supports literal resource pattern types"
        if problem is None:
            results.append(AclOutcome())
            valid.append((i, binding))
        else:
            results.append(AclOutcome(error=ErrorCode.INVALID_REQUEST, error_message=problem))
    if not valid:
        return Respond(body=CreateAclsResponse(results=tuple(results)).to_wire(version))

    async def answer() -> Respond:
        try:
            failures = await acls.create([b for _, b in valid])
        except Exception as exc:  # ZooKeeper failed: tell the client, keep the connection
            failures = [exc] * len(valid)
        for (i, binding), failure in zip(valid, failures, strict=True):
            if failure is not None:
                log.warning("CreateAcls: %s %s failed: %s", binding.pattern, binding.entry, failure)
                results[i] = AclOutcome(error=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=_write_failed(failure))
            else:
                log.info("ACL added by %s: %s %s", context.principal, binding.pattern, binding.entry)
        return Respond(body=CreateAclsResponse(results=tuple(results)).to_wire(version))

    return Later(answer=answer)


def delete(request: LocalRequest, context: Context) -> Answer:
    """Answer DeleteAcls: later, once ZooKeeper no longer holds the matching ACLs."""
    acls = context.ports.acls
    assert request.body is not None and acls is not None
    version = request.version
    asked = DeleteAclsRequest.from_wire(version, request.body)
    if not _allowed(context, Operation.ALTER):
        denied = DeleteAclsResponse(filter_results=tuple(
            FilterResult(error=_CLUSTER_DENIED.error, error_message=_CLUSTER_DENIED.error_message)
            for _ in asked.filters))
        return Respond(body=denied.to_wire(version))
    results: list[FilterResult] = []
    valid: list[tuple[int, BindingFilter]] = []
    for i, filter_ in enumerate(asked.filters):
        problem = _filter_problem(filter_, version)
        if problem is None:
            results.append(FilterResult())
            valid.append((i, filter_))
        else:
            results.append(FilterResult(error=problem.error, error_message=problem.error_message))
    if not valid:
        return Respond(body=DeleteAclsResponse(filter_results=tuple(results)).to_wire(version))

    async def answer() -> Respond:
        try:
            removed = await acls.delete([f for _, f in valid])
        except Exception as exc:  # ZooKeeper failed: every filter fails
            for i, _ in valid:
                results[i] = FilterResult(error=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=_write_failed(exc))
            return Respond(body=DeleteAclsResponse(filter_results=tuple(results)).to_wire(version))
        for (i, _), gone in zip(valid, removed, strict=True):
            matching: list[DeletedAcl] = []
            for binding, failure in gone:
                if failure is None:
                    matching.append(DeletedAcl(binding=binding))
                    log.info("ACL removed by %s: %s %s", context.principal, binding.pattern, binding.entry)
                else:
                    matching.append(DeletedAcl(binding=binding, error=ErrorCode.UNKNOWN_SERVER_ERROR,
                                               error_message=_write_failed(failure)))
            results[i] = FilterResult(matching=tuple(matching))
        return Respond(body=DeleteAclsResponse(filter_results=tuple(results)).to_wire(version))

    return Later(answer=answer)


def entries(registry: ApiRegistry) -> list[LocalApi]:
    """The table entries for the three ACL APIs, every version our schemas have."""
    out = []
    for key, handler in ((DESCRIBE_ACLS, describe), (CREATE_ACLS, create), (DELETE_ACLS, delete)):
        api = registry.api(key)
        assert api.versions.hi is not None
        out.append(LocalApi(key=key, name=api.name, versions=(api.versions.lo, api.versions.hi), handler=handler))
    return out
