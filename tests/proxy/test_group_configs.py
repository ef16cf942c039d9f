"""Group configs (KIP-848) of the groups an embedded coordinator serves: kafka-python's
admin client alters and describes them through the sidecar (real Tansu, real ZooKeeper),
ZooKeeper holds them where docs/coordinator.md says, a value outside Kafka's bounds is
refused with Kafka's INVALID_CONFIG, and the coordinator answers a KIP-848 heartbeat of that
group with the group's own heartbeat interval while another group keeps the key table's."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import trio
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kazoo.client import KazooClient

from protocol.apis import DEFAULT_REGISTRY
from protocol.schema import decode
from proxy.control.server import Sidecar
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.proxy.conftest import StartSidecar, sidecar_keys
from tests.proxy.wire import Wire, response_body

pytestmark = pytest.mark.integration

INVALID_CONFIG = 40
GROUP_CONFIG, DEFAULT_CONFIG = 8, 5  # DescribeConfigs ConfigSource


async def embedded(start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer,
                   chroot: str) -> Sidecar:
    return await start_sidecar(sidecar_keys(
        tansu.bootstrap, zookeeper_connect=f"{zookeeper.connect}{chroot}", sidecar_coordinator="embedded",
        group_consumer_heartbeat_interval_ms="5000", group_consumer_session_timeout_ms="45000"))


async def call(sidecar: Sidecar, key: int, version: int, body: dict[str, Any]) -> Any:
    wire = await Wire.connect("127.0.0.1", sidecar.bound["PLAINTEXT"].port)
    try:
        frame = await wire.call(key, version, 1, body)
    finally:
        await wire.aclose()
    _, raw = response_body(frame, key, version)
    return decode(DEFAULT_REGISTRY.api(key).response, version, raw)


async def heartbeat_interval(sidecar: Sidecar, group: str) -> int:
    """A new KIP-848 member's first ConsumerGroupHeartbeat: the interval it is told."""
    answer = await call(sidecar, 68, 0, {"GroupId": group, "MemberId": str(uuid.uuid4()), "MemberEpoch": 0,
                                         "RebalanceTimeoutMs": 30000, "SubscribedTopicNames": ["t"],
                                         "TopicPartitions": [], "ServerAssignor": None, "InstanceId": None,
                                         "RackId": None})
    assert answer.ErrorCode == 0, answer
    interval: int = answer.HeartbeatIntervalMs
    return interval


async def test_group_configs_are_the_sidecars_and_its_coordinator_uses_them(
        start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer) -> None:
    chroot = f"/ksidecar-tests/group-configs-{uuid.uuid4().hex[:8]}"
    sidecar = await embedded(start_sidecar, tansu, zookeeper, chroot)
    group, other = f"g-{uuid.uuid4().hex[:6]}", f"o-{uuid.uuid4().hex[:6]}"
    bootstrap = f"127.0.0.1:{sidecar.bound['PLAINTEXT'].port}"

    def alter_and_describe() -> tuple[Any, Any]:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        try:
            altered = admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group, configs={
                "consumer.heartbeat.interval.ms": "6000", "consumer.session.timeout.ms": "50000"})],
                incremental=True, raise_on_unknown=False)
            described = admin.describe_configs([ConfigResource(ConfigResourceType.GROUP, group)],
                                               config_filter="all")
            return altered, described
        finally:
            admin.close()

    with trio.fail_after(30):
        altered, described = await trio.to_thread.run_sync(alter_and_describe)
    assert "6000" in json.dumps(described, default=str) and "50000" in json.dumps(described, default=str)
    assert altered is not None

    # The same, field by field, on the wire (our encoder, the answer decoded by our schema).
    with trio.fail_after(10):
        answer = await call(sidecar, 32, 4, {"Resources": [{"ResourceType": 32, "ResourceName": group,
                                                            "ConfigurationKeys": None}],
                                             "IncludeSynonyms": False, "IncludeDocumentation": False})
    (result,) = answer.Results
    assert (result.ErrorCode, result.ResourceType, result.ResourceName) == (0, 32, group)
    configs = {c.Name: (c.Value, c.ConfigSource) for c in result.Configs}
    assert configs["consumer.heartbeat.interval.ms"] == ("6000", GROUP_CONFIG)
    assert configs["consumer.session.timeout.ms"] == ("50000", GROUP_CONFIG)
    assert configs["share.record.lock.duration.ms"] == ("30000", DEFAULT_CONFIG)  # Kafka's default

    # Outside Kafka's bounds (group.consumer.min.session.timeout.ms, 45 s): refused, unchanged.
    with trio.fail_after(10):
        refused = await call(sidecar, 44, 1, {"Resources": [{"ResourceType": 32, "ResourceName": group, "Configs": [
            {"Name": "consumer.session.timeout.ms", "ConfigOperation": 0, "Value": "1000"}]}], "ValidateOnly": False})
    (outcome,) = refused.Responses
    assert outcome.ErrorCode == INVALID_CONFIG and "consumer.session.timeout.ms" in outcome.ErrorMessage

    # ZooKeeper holds Kafka's dynamic-config JSON at /config/groups/<group>.
    def stored() -> dict[str, Any]:
        zk = KazooClient(hosts=f"{zookeeper.connect}{chroot}")
        zk.start(10)
        try:
            data: dict[str, Any] = json.loads(zk.get(f"/config/groups/{group}")[0])
            return data
        finally:
            zk.stop()
            zk.close()

    assert await trio.to_thread.run_sync(stored) == {"version": 1, "config": {
        "consumer.heartbeat.interval.ms": "6000", "consumer.session.timeout.ms": "50000"}}

    # The coordinator tells this group's members its own interval; another group, the key table's.
    with trio.fail_after(10):
        assert await heartbeat_interval(sidecar, group) == 6000
        assert await heartbeat_interval(sidecar, other) == 5000
        # A change after the coordinator used the group's values: the next member is told the new one.
        changed = await call(sidecar, 44, 1, {"Resources": [{"ResourceType": 32, "ResourceName": group, "Configs": [
            {"Name": "consumer.heartbeat.interval.ms", "ConfigOperation": 0, "Value": "7000"}]}], "ValidateOnly": False})
        assert changed.Responses[0].ErrorCode == 0
        assert await heartbeat_interval(sidecar, group) == 7000


async def test_a_request_mixing_group_and_topic_resources_stays_the_brokers(
        start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer) -> None:
    sidecar = await embedded(start_sidecar, tansu, zookeeper, f"/ksidecar-tests/group-configs-{uuid.uuid4().hex[:8]}")
    with trio.fail_after(10):
        answer = await call(sidecar, 32, 4, {"Resources": [
            {"ResourceType": 32, "ResourceName": "g", "ConfigurationKeys": None},
            {"ResourceType": 2, "ResourceName": "no-such-topic", "ConfigurationKeys": None}],
            "IncludeSynonyms": False, "IncludeDocumentation": False})
    # Tansu's answer, not the sidecar's: the sidecar would have listed the group's keys.
    group_result = next(r for r in answer.Results if r.ResourceType == 32)
    assert not any(c.Name == "consumer.session.timeout.ms" for c in group_result.Configs)


def test_every_worker_answers_from_the_same_configs(tmp_path: Any, tansu: TansuServer,
                                                     zookeeper: ZooKeeperServer) -> None:
    """Two workers: an alter through one connection is described through the others (the
    supervisor owns the APIs of the sidecar-wide state)."""
    from proxy.tools.rig.sidecar import start_sidecar as start_process

    chroot = f"/ksidecar-tests/group-configs-{uuid.uuid4().hex[:8]}"
    keys = {"sidecar.workers": "2", "zookeeper.connect": f"{zookeeper.connect}{chroot}",
            "sidecar.coordinator": "embedded"}
    with start_process(tmp_path, tansu.bootstrap, name="group-configs", keys=keys) as server:

        async def scenario() -> list[str | None]:
            wires = [await Wire.connect(server.host, server.port) for _ in range(3)]
            frame = await wires[0].call(44, 1, 1, {"Resources": [{"ResourceType": 32, "ResourceName": "shared",
                "Configs": [{"Name": "consumer.heartbeat.interval.ms", "ConfigOperation": 0, "Value": "7000"}]}],
                "ValidateOnly": False})
            _, raw = response_body(frame, 44, 1)
            assert decode(DEFAULT_REGISTRY.api(44).response, 1, raw).Responses[0].ErrorCode == 0
            seen = []
            for n, wire in enumerate(wires[1:]):
                frame = await wire.call(32, 4, 2 + n, {"Resources": [{
                    "ResourceType": 32, "ResourceName": "shared", "ConfigurationKeys": ["consumer.heartbeat.interval.ms"]}],
                    "IncludeSynonyms": False, "IncludeDocumentation": False})
                _, raw = response_body(frame, 32, 4)
                (result,) = decode(DEFAULT_REGISTRY.api(32).response, 4, raw).Results
                seen.append(result.Configs[0].Value)
            return seen

        assert trio.run(scenario) == ["7000", "7000"]
        assert [server.sample("ksidecar_worker_connections", worker=w) for w in "01"] != [3.0, 0.0]
