"""The ACL local APIs, sans-IO: Kafka's refusals and version 0, answers encoded with our schemas."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from protocol.apis import DEFAULT_REGISTRY
from protocol.headers import RequestHeader
from protocol.schema import encode
from proxy.auth.acl.evaluate import AclIndex, Authorizer
from proxy.auth.acl.model import (
    AclBinding,
    AclEntry,
    BindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from proxy.local import acls
from proxy.local.api import Context, Later, LocalRequest, Respond

LIT = AclBinding(ResourcePattern(ResourceType.TOPIC, "t"), AclEntry("User:a", "*", Operation.READ, Permission.ALLOW))
PRE = AclBinding(ResourcePattern(ResourceType.TOPIC, "t", PatternType.PREFIXED),
                 AclEntry("User:a", "*", Operation.WRITE, Permission.ALLOW))


class Directory:
    """A plain in-memory AclDirectory."""

    def __init__(self, *bindings: AclBinding) -> None:
        self.bindings = list(bindings)

    @property
    def authorizer(self) -> Authorizer:
        return Authorizer(AclIndex(self.bindings), super_users=frozenset({"User:admin"}))

    def describe(self, filter_: BindingFilter) -> list[AclBinding]:
        return [b for b in self.bindings if filter_.matches(b)]

    async def create(self, bindings: Sequence[AclBinding]) -> list[Exception | None]:
        self.bindings += bindings
        return [None] * len(bindings)

    async def delete(self, filters: Sequence[BindingFilter]) -> list[list[tuple[AclBinding, Exception | None]]]:
        out: list[list[tuple[AclBinding, Exception | None]]] = []
        for f in filters:
            gone = [b for b in self.bindings if f.matches(b)]
            self.bindings = [b for b in self.bindings if b not in gone]
            out.append([(b, None) for b in gone])
        return out


class Ports:
    def __init__(self, directory: Directory) -> None:
        self.acls = directory


def call(handler: Any, key: int, version: int, body: dict[str, Any], principal: str, directory: Directory) -> Any:
    context = Context(listener="L", peer=("10.0.0.1", 1), ports=Ports(directory), principal=principal)  # type: ignore[arg-type]
    header = RequestHeader(api_key=key, api_version=version, correlation_id=1, client_id=None, header_version=2,
                           size=0)
    answer = handler(LocalRequest(header=header, body=body, raw=b""), context)
    if isinstance(answer, Later):
        answer = trio.run(answer.answer)
    assert isinstance(answer, Respond) and isinstance(answer.body, dict)
    encode(DEFAULT_REGISTRY.api(key).response, version, answer.body)  # Kafka-shaped at that version
    return answer.body


FILTER_ALL = {"ResourceTypeFilter": 1, "ResourceNameFilter": None, "PatternTypeFilter": 1, "PrincipalFilter": None,
              "HostFilter": None, "Operation": 1, "PermissionType": 1}


def test_describe_refused_without_cluster_describe_and_v0_sees_literal_only() -> None:
    directory = Directory(LIT, PRE)
    assert call(acls.describe, 29, 1, FILTER_ALL, "User:bob", directory)["ErrorCode"] == 31
    every = call(acls.describe, 29, 1, FILTER_ALL, "User:admin", directory)
    assert [(r["ResourceName"], r["PatternType"]) for r in every["Resources"]] == [("t", 3), ("t", 4)]
    v0 = {k: v for k, v in FILTER_ALL.items() if k != "PatternTypeFilter"}
    assert [r["PatternType"] for r in call(acls.describe, 29, 0, v0, "User:admin", directory)["Resources"]] == [3]
    unknown = call(acls.describe, 29, 1, {**FILTER_ALL, "Operation": 0}, "User:admin", directory)
    assert unknown["ErrorCode"] == 42


def test_create_checks_each_creation_and_needs_cluster_alter() -> None:
    directory = Directory()
    good = {"ResourceType": 2, "ResourceName": "orders-", "ResourcePatternType": 4, "Principal": "User:a",
            "Host": "*", "Operation": 4, "PermissionType": 3}
    cluster = {**good, "ResourceType": 4, "ResourceName": "x", "ResourcePatternType": 3}
    refused = call(acls.create, 30, 2, {"Creations": [good]}, "User:bob", directory)
    assert [r["ErrorCode"] for r in refused["Results"]] == [31] and directory.bindings == []
    body = call(acls.create, 30, 2, {"Creations": [good, cluster, {**good, "Principal": "alice"}]}, "User:admin",
                directory)
    assert [r["ErrorCode"] for r in body["Results"]] == [0, 42, 42]
    assert [b.pattern.pattern_type for b in directory.bindings] == [PatternType.PREFIXED]
    # Cluster Alter granted by an ACL (not only super.users) is enough.
    directory.bindings.append(AclBinding(ResourcePattern(ResourceType.CLUSTER, "kafka-cluster"),
                                         AclEntry("User:ops", "*", Operation.ALTER, Permission.ALLOW)))
    assert call(acls.create, 30, 2, {"Creations": [{**good, "ResourceName": "x"}]}, "User:ops",
                directory)["Results"][0]["ErrorCode"] == 0


def test_delete_reports_each_removed_acl() -> None:
    directory = Directory(LIT, PRE)
    body = call(acls.delete, 31, 3, {"Filters": [{**FILTER_ALL, "PatternTypeFilter": 4}]}, "User:admin", directory)
    [result] = body["FilterResults"]
    assert result["ErrorCode"] == 0
    assert [(m["ResourceName"], m["PatternType"], m["Operation"]) for m in result["MatchingAcls"]] == [("t", 4, 4)]
    assert directory.bindings == [LIT]
    assert call(acls.delete, 31, 3, {"Filters": [FILTER_ALL]}, "User:bob", directory)["FilterResults"][0][
        "ErrorCode"] == 31
