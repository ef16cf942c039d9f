"""The GROUP-config local APIs without a sidecar: which requests they take, and what a
ZooKeeper failure costs (one resource's answer, not the connection)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from coordinator.group_configs import (
    AlterResult,
    BrokerGroupSettings,
    ConfigOp,
    DescribeResult,
    describe_group_configs,
)
from protocol.apis import DEFAULT_REGISTRY
from protocol.headers import decode_request_header
from proxy.local.api import Context, Later, LocalRequest, Respond
from proxy.local.group_configs import alter, describe, takes
from proxy.local.ports import Ports
from tests.proxy.test_connection_seam import NoBrokers, NoUpstreamInfo
from tests.proxy.wire import request_frame


class Configs:
    """A port whose writes fail, as ZooKeeper's do when it is unreachable."""

    def describe(self, group_id: str, keys: Sequence[str] | None, *, synonyms: bool,
                 documentation: bool) -> DescribeResult:
        return describe_group_configs(group_id, {"consumer.heartbeat.interval.ms": "6000"}, BrokerGroupSettings(),
                                      keys=keys, include_synonyms=synonyms, include_documentation=documentation)

    async def alter(self, group_id: str, ops: Sequence[ConfigOp], *, validate_only: bool) -> AlterResult:
        raise ConnectionError("ZooKeeper is not reachable")


def context() -> Context:
    return Context(listener="PLAINTEXT", peer=("127.0.0.1", 1), principal="User:ANONYMOUS",
                   ports=Ports(upstream=NoUpstreamInfo(), brokers=NoBrokers(), group_configs=Configs()))


def resources(*types: int) -> list[dict[str, Any]]:
    return [{"ResourceType": t, "ResourceName": f"r{n}", "ConfigurationKeys": None} for n, t in enumerate(types)]


def local_request(key: int, version: int, body: dict[str, Any]) -> LocalRequest:
    header = decode_request_header(memoryview(request_frame(key, version, 1, body))[4:])
    return LocalRequest(header=header, body=body, raw=b"")


def test_only_requests_of_group_resources_alone_are_taken() -> None:
    predicate = takes(DEFAULT_REGISTRY)
    header = decode_request_header(memoryview(request_frame(32, 4, 1, {
        "Resources": [], "IncludeSynonyms": False, "IncludeDocumentation": False}))[4:])
    assert predicate(header, {"Resources": resources(32, 32)}, context())
    assert not predicate(header, {"Resources": resources(32, 2)}, context())  # mixed: the broker's
    assert not predicate(header, {"Resources": resources(2)}, context())
    assert not predicate(header, {"Resources": []}, context())
    assert not predicate(header, None, context())


def test_describe_answers_each_group_with_its_keys() -> None:
    body = {"Resources": [{"ResourceType": 32, "ResourceName": "g", "ConfigurationKeys": [
        "consumer.heartbeat.interval.ms"]}], "IncludeSynonyms": True, "IncludeDocumentation": False}
    answer = describe(local_request(32, 4, body), context())
    assert isinstance(answer, Respond)
    (result,) = answer.body["Results"]
    assert [(c["Name"], c["Value"], c["ConfigSource"]) for c in result["Configs"]] == [
        ("consumer.heartbeat.interval.ms", "6000", 8)]
    assert result["Configs"][0]["Synonyms"] == [{"Name": "consumer.heartbeat.interval.ms", "Value": "6000", "Source": 8}]


async def test_a_zookeeper_failure_is_that_resources_unknown_server_error() -> None:
    body = {"Resources": [{"ResourceType": 32, "ResourceName": "g", "Configs": [
        {"Name": "consumer.heartbeat.interval.ms", "ConfigOperation": 0, "Value": "7000"}]}], "ValidateOnly": False}
    later = alter(local_request(44, 1, body), context())
    assert isinstance(later, Later)
    with trio.fail_after(5):
        answer = await later.answer()
    assert isinstance(answer, Respond)
    assert answer.body["Responses"] == [{"ErrorCode": -1, "ErrorMessage": "ZooKeeper is not reachable",
                                         "ResourceType": 32, "ResourceName": "g"}]


async def test_a_group_named_twice_is_refused_both_times() -> None:
    resource = {"ResourceType": 32, "ResourceName": "g", "Configs": [
        {"Name": "consumer.heartbeat.interval.ms", "ConfigOperation": 0, "Value": "7000"}]}
    later = alter(local_request(44, 1, {"Resources": [resource, resource], "ValidateOnly": False}), context())
    assert isinstance(later, Later)
    answer = await later.answer()
    assert isinstance(answer, Respond)
    assert [(r["ErrorCode"], r["ErrorMessage"]) for r in answer.body["Responses"]] == [
        (42, "Each resource must appear at most once.")] * 2
