"""Authorized operations: what a describe answer tells a client it may do with a resource.

DescribeGroups v3+, ConsumerGroupDescribe and ShareGroupDescribe (like DescribeCluster and
Metadata for their resources) carry an ``AuthorizedOperations`` bitfield when the request's
``IncludeAuthorizedOperations`` is true (KIP-430). Kafka's broker computes it in
``AuthHelper.authorizedOperations`` (core/src/main/scala/kafka/server/AuthHelper.scala):

* the operations the resource type supports (``AclEntry.supportedOperations``:
  :data:`~proxy.auth.acl.model.SUPPORTED_OPERATIONS`; never ALL, ANY or UNKNOWN);
* with an authorizer, those the principal is allowed on the resource's LITERAL pattern, each
  asked on its own, so ACL implication counts (an ALLOW of Read allows Describe, a DENY of
  Delete takes only Delete away) and so do the wildcard and prefixed ACLs that apply to the
  name; without one, all of them;
* as a 32-bit field, bit ``operation.code`` set for each (``Utils.to32BitField``).

A request that did not ask gets Int.MinValue, the schema's default; that stays with the
messages (``AUTHORIZED_OPERATIONS_OMITTED`` in :mod:`coordinator.messages.admin`).
"""

from __future__ import annotations

from collections.abc import Iterable

from proxy.auth.acl.evaluate import Authorizer
from proxy.auth.acl.model import SUPPORTED_OPERATIONS, Operation, ResourceType


def bitfield(operations: Iterable[Operation]) -> int:
    """Kafka's ``Utils.to32BitField``: the sum of ``1 << code`` over distinct operations."""
    value = 0
    for operation in operations:
        if not 0 <= operation.value <= 31:
            raise ValueError(f"operation code out of a 32-bit field: {operation.value}")
        value |= 1 << operation.value
    return value


def authorized_operations(authorizer: Authorizer | None, principal: str, host: str,
                          resource_type: ResourceType, name: str) -> int:
    """The ``AuthorizedOperations`` of resource ``(resource_type, name)`` for ``principal``
    connected from ``host``; ``authorizer`` ``None``: the sidecar authorizes nothing."""
    supported = SUPPORTED_OPERATIONS[resource_type]
    if authorizer is None:
        return bitfield(supported)
    return bitfield(op for op in supported if authorizer.authorize(principal, host, op, resource_type, name))
