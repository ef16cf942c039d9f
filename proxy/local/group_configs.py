"""DescribeConfigs (32) and IncrementalAlterConfigs (44) of GROUP resources, answered by
the embedded coordinator (``sidecar.coordinator=embedded``).

A group the sidecar coordinates is unknown to its broker, so the broker cannot hold its
configs: a request whose resources are all GROUP configs (ConfigResource type 32, what
``kafka-configs.sh --entity-type groups`` and the clients' group-config calls send) is
taken here (:func:`takes`); any other goes to the broker as before, a request that mixes
GROUP resources with others included (Kafka's admin clients send one entity type at a
time from the tools; a mixed request is the broker's, whose answer for the groups is its
own). Kafka's rules are :mod:`coordinator.group_configs`; the configs live in ZooKeeper
(:class:`~proxy.local.ports.GroupConfigPort`). Authorization (DESCRIBE_CONFIGS, ALTER_CONFIGS
on the group) is the ACL filter's, before the request reaches this module.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from coordinator.group_configs import ConfigOp
from protocol.apis import ApiRegistry
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader
from proxy.local.api import Answer, Context, Later, LocalApi, LocalRequest, Respond, Takes
from proxy.local.messages.configs import (
    GROUP_RESOURCE,
    AlterResult,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeResult,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

log = logging.getLogger(__name__)

DESCRIBE_CONFIGS = 32
INCREMENTAL_ALTER_CONFIGS = 44


def takes(registry: ApiRegistry) -> Takes:
    """True when every resource of the request is a GROUP config (and there is one)."""

    def predicate(header: RequestHeader, request: Mapping[str, Any] | None, context: Context) -> bool:
        del context
        api = registry.api(header.api_key)
        if request is None or header.api_version not in api.versions:
            return False  # unreadable here: the broker answers it as it would
        resources = request["Resources"]
        return bool(resources) and all(r["ResourceType"] == GROUP_RESOURCE for r in resources)

    return predicate


def describe(request: LocalRequest, context: Context) -> Answer:
    """DescribeConfigs of GROUP resources, from the watched configs."""
    port = context.ports.group_configs
    assert request.body is not None and port is not None
    asked = DescribeConfigsRequest.from_wire(request.version, request.body)
    results = []
    for resource in asked.resources:
        outcome = port.describe(resource.name, resource.keys or None, synonyms=asked.include_synonyms,
                                documentation=asked.include_documentation)
        results.append(DescribeResult(resource_type=resource.resource_type, name=resource.name,
                                      error=ErrorCode(outcome.error_code), error_message=outcome.error_message,
                                      configs=outcome.configs))
    return Respond(body=DescribeConfigsResponse(results=tuple(results)).to_wire(request.version))


def alter(request: LocalRequest, context: Context) -> Answer:
    """IncrementalAlterConfigs of GROUP resources: later, once ZooKeeper holds them."""
    port = context.ports.group_configs
    assert request.body is not None and port is not None
    version = request.version
    asked = IncrementalAlterConfigsRequest.from_wire(version, request.body)

    names = [r.name for r in asked.resources]

    async def answer() -> Respond:
        results = []
        for resource in asked.resources:
            if names.count(resource.name) > 1:  # Kafka: every copy refused, the others go on
                results.append(AlterResult(resource_type=resource.resource_type, name=resource.name,
                                           error=ErrorCode.INVALID_REQUEST,
                                           error_message="Each resource must appear at most once."))
                continue
            ops = [ConfigOp(name=c.name, operation=c.operation, value=c.value) for c in resource.configs]
            try:
                outcome = await port.alter(resource.name, ops, validate_only=asked.validate_only)
            except Exception as exc:  # ZooKeeper failed: this resource's answer says so
                log.warning("group %r: configs not written: %s", resource.name, exc)
                results.append(AlterResult(resource_type=resource.resource_type, name=resource.name,
                                           error=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=str(exc)))
                continue
            if outcome.changed:
                log.info("group %r: configs now %s (IncrementalAlterConfigs from %s)", resource.name,
                         dict(outcome.configs), context.principal)
            results.append(AlterResult(resource_type=resource.resource_type, name=resource.name,
                                       error=ErrorCode(outcome.error_code), error_message=outcome.error_message))
        return Respond(body=IncrementalAlterConfigsResponse(results=tuple(results)).to_wire(version))

    return Later(answer=answer)


#: The versions served, Kafka 4.x's: DescribeConfigs v0 (``IsDefault`` where v1 has a source)
#: is gone from Kafka 4.0, and GROUP resources never had it.
SERVED_VERSIONS = {DESCRIBE_CONFIGS: (1, 4), INCREMENTAL_ALTER_CONFIGS: (0, 1)}


def entries(registry: ApiRegistry) -> list[LocalApi]:
    """The two table entries."""
    out = []
    for key, handler in ((DESCRIBE_CONFIGS, describe), (INCREMENTAL_ALTER_CONFIGS, alter)):
        api = registry.api(key)
        out.append(LocalApi(key=key, name=api.name, versions=SERVED_VERSIONS[key], handler=handler,
                            takes=takes(registry)))
    return out
