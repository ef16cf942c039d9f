"""KIP-584 across a sidecar fleet: real ZooKeeper, a real broker, three in-process sidecars.

Sidecar 111 and 112 support every level of this release; 113 plays an older release
(``sidecar.features.supported.override``: ``ksidecar.audit.format`` 0-0). Requests go over
the wire with the CLI's admin client; expectations are written out by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
from typing import Any

import pytest
import trio
from kazoo.client import KazooClient

from coordinator.features import IncompatibleFeatures
from proxy.control.server import Sidecar
from proxy.tools import features_cli
from proxy.tools.admin_client import AdminClient
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.proxy.conftest import StartSidecar, sidecar_keys

pytestmark = pytest.mark.integration

UPDATE, SAFE = 1, 2


def call(sidecar: Sidecar, key: int, version: int, body: dict[str, Any]) -> Any:
    with AdminClient(f"127.0.0.1:{sidecar.bound['PLAINTEXT'].port}") as client:
        return client.call(key, version, body)


def api_versions(sidecar: Sidecar) -> Any:
    return call(sidecar, 18, 3, {"ClientSoftwareName": "test", "ClientSoftwareVersion": "1"})


def finalized(answer: Any) -> dict[str, int]:
    return {f.Name: f.MaxVersionLevel for f in answer.FinalizedFeatures}


def update(sidecar: Sidecar, version: int, *updates: tuple[str, int, int], validate_only: bool = False) -> Any:
    entries = [({"Feature": f, "MaxVersionLevel": level, "AllowDowngrade": kind != UPDATE} if version == 0
                else {"Feature": f, "MaxVersionLevel": level, "UpgradeType": kind}) for f, level, kind in updates]
    return call(sidecar, 57, version, {"timeoutMs": 10000, "FeatureUpdates": entries, "ValidateOnly": validate_only})


def read_node(connect: str, path: str) -> tuple[Any, int]:
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=10)
    try:
        raw, stat = zk.get(path)
        return json.loads(raw), stat.version
    finally:
        zk.stop()
        zk.close()


async def test_fleet(start_sidecar: StartSidecar, zookeeper: ZooKeeperServer, zk_path: str, tansu: Any) -> None:
    connect = zookeeper.connect_string(zk_path)
    common = {"zookeeper_connect": connect, "sidecar_coordinator": "embedded", "super_users": "User:ANONYMOUS"}
    a = await start_sidecar(sidecar_keys(tansu.bootstrap, broker_id="111", **common))
    b = await start_sidecar(sidecar_keys(tansu.bootstrap, broker_id="112", **common))
    c = await start_sidecar(sidecar_keys(
        tansu.bootstrap, broker_id="113", sidecar_features_supported_override="group.version=0-1,"
        "ksidecar.audit.format=0-0", **{**common, "super_users": ""}))
    run = trio.to_thread.run_sync

    # /feature was created from the defaults; registrations carry Kafka's features field.
    node, epoch = await run(read_node, connect, "/feature")
    assert node == {"version": 2, "status": 1, "features": {"group.version": {"max_version_level": 1}}}
    registration, _ = await run(read_node, connect, "/brokers/ids/113")
    assert registration["features"] == {"group.version": {"min_version": 0, "max_version": 1},
                                        "ksidecar.audit.format": {"min_version": 0, "max_version": 0}}
    answer = await run(api_versions, a)
    assert finalized(answer) == {"group.version": 1}
    supported = {f.Name: (f.MinVersion, f.MaxVersion) for f in answer.SupportedFeatures}
    assert supported["group.version"] == (0, 1) and supported["ksidecar.audit.format"] == (0, 1)
    broker_epoch = answer.FinalizedFeaturesEpoch - epoch

    # Not a super user: refused before anything else.
    refused = await run(update, c, 1, ("group.version", 0, SAFE))
    assert refused.ErrorCode == 31 and refused.Results[0].ErrorCode == 31
    # Beyond 113's range: refused naming it.
    refused = await run(update, a, 1, ("ksidecar.audit.format", 1, UPDATE))
    assert refused.ErrorCode == 42
    assert refused.Results[0].ErrorMessage == (
        "Could not apply finalized feature update because brokers were found to have incompatible versions "
        "for the feature ksidecar.audit.format at versionLevel:1: sidecar 113 supports [0, 0].")
    # A downgrade without the flag: refused (v0 names allowDowngrade, v2 answers at the top level).
    refused = await run(update, b, 0, ("group.version", 0, UPDATE))
    assert refused.Results[0].ErrorMessage == ("Can not provide versionLevel: 0 less than 1 without setting "
                                               "the allowDowngrade flag to true in the request.")
    refused = await run(update, b, 2, ("group.version", 0, UPDATE))
    assert (refused.ErrorCode, refused.ErrorMessage) == (42, "Can not provide versionLevel: 0 less than 1 "
                                                         "without setting the downgradeType to either SAFE or "
                                                         "UNSAFE in the request.")
    # Mixed with a feature nobody here decides (Tansu serves no UpdateFeatures): refused whole with
    # Kafka's answer to a feature its controller does not know (a broker that serves the API gets the
    # "separate requests" refusal instead: tests/proxy/test_features_local.py).
    refused = await run(update, a, 2, ("group.version", 0, SAFE), ("metadata.version", 20, UPDATE))
    assert (refused.ErrorCode, refused.ErrorMessage) == (95, (
        "The update failed for all features since the following feature had an error: Invalid update version 20 "
        "for feature metadata.version. Local controller 111 does not support this feature."))
    # ValidateOnly writes nothing.
    ok = await run(lambda: update(a, 1, ("group.version", 0, SAFE), validate_only=True))
    assert ok.ErrorCode == 0 and (await run(read_node, connect, "/feature"))[1] == epoch

    # A valid downgrade through 112: every sidecar sees the new epoch within a second, KIP-848 off.
    ok = await run(update, b, 1, ("group.version", 0, SAFE))
    assert ok.ErrorCode == 0 and ok.Results[0].ErrorCode == 0
    with trio.fail_after(1):
        for sidecar in (a, b, c):
            while (await run(api_versions, sidecar)).FinalizedFeaturesEpoch != broker_epoch + epoch + 1:
                await trio.sleep(0.05)
    answer = await run(api_versions, a)
    assert finalized(answer) == {} and not {k.ApiKey for k in answer.ApiKeys} & {68, 69}
    heartbeat = await run(call, a, 68, 0, {"GroupId": "g", "MemberId": "m", "MemberEpoch": 0,
                                            "RebalanceTimeoutMs": 1000, "SubscribedTopicNames": ["t"],
                                            "TopicPartitions": []})
    assert heartbeat.ErrorCode == 35

    # Upgrade again through 113's peer 111: KIP-848 is back on every sidecar, no restart.
    ok = await run(update, a, 2, ("group.version", 1, UPDATE))
    assert ok.ErrorCode == 0
    with trio.fail_after(1):
        while not {k.ApiKey for k in (await run(api_versions, c)).ApiKeys} >= {68, 69}:
            await trio.sleep(0.05)

    # The CLI, over the wire: describe in FeatureCommand's format, a dry run, a refused upgrade.
    def cli(*argv: str) -> tuple[int, str]:
        parser = argparse.ArgumentParser()
        features_cli.add_parser(parser.add_subparsers(dest="command"))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = features_cli.run(parser.parse_args(
                ["features", "--bootstrap-server", f"127.0.0.1:{b.bound['PLAINTEXT'].port}", *argv]))
        return code, out.getvalue()

    epoch_now = (await run(api_versions, b)).FinalizedFeaturesEpoch
    code, text = await run(cli, "describe")
    assert code == 0
    assert (f"Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1"
            f"\tEpoch: {epoch_now}") in text.splitlines()
    assert await run(cli, "disable", "--feature", "group.version", "--dry-run") == (
        0, "group.version can be disabled.\n")
    code, text = await run(cli, "upgrade", "--feature", "ksidecar.audit.format=1")
    assert code == 1 and text.startswith("Could not upgrade ksidecar.audit.format to 1. Could not apply")

    # A fourth sidecar whose range excludes the finalized level refuses to start.
    with pytest.raises(BaseException) as caught:
        await start_sidecar(sidecar_keys(tansu.bootstrap, broker_id="114",
                                         sidecar_features_supported_override="group.version=0-0", **common))
    assert "group.version is finalized at level 1" in repr(caught.value)
    assert caught.group_contains(IncompatibleFeatures) if isinstance(caught.value, BaseExceptionGroup) else \
        isinstance(caught.value, IncompatibleFeatures)


async def test_kafka_python_admin(start_sidecar: StartSidecar, zookeeper: ZooKeeperServer, zk_path: str,
                                  tansu: Any) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidRequestError

    connect = zookeeper.connect_string(zk_path)
    common = {"zookeeper_connect": connect, "sidecar_coordinator": "embedded", "super_users": "User:ANONYMOUS"}
    a = await start_sidecar(sidecar_keys(tansu.bootstrap, broker_id="111", **common))
    b = await start_sidecar(sidecar_keys(tansu.bootstrap, broker_id="112", **common))

    def admin_calls() -> tuple[Any, Any, Any, Any]:
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{b.bound['PLAINTEXT'].port}",
                                 request_timeout_ms=10000)
        try:
            # The controller (111): Metadata names both sidecars, and the one that applied
            # the update shows it first.
            before = admin.describe_features(send_request_to_controller=True)
            try:
                refused: Any = admin.update_features({"ksidecar.audit.format": 7})
            except InvalidRequestError as exc:  # v2 answers refusals at the top level
                refused = exc
            applied = admin.update_features({"group.version": ("SAFE_DOWNGRADE", 0)})
            after = admin.describe_features(send_request_to_controller=True)
            return before, refused, applied, after
        finally:
            admin.close()

    before, refused, applied, after = await trio.to_thread.run_sync(admin_calls)
    # kafka-python 3.0's shape: {name: {"supported": (min, max), "finalized": (min, max), "finalized_epoch": e}}.
    assert before["group.version"]["supported"] == (0, 1)
    assert before["group.version"]["finalized"] == (1, 1)
    assert isinstance(refused, InvalidRequestError)
    assert "provided versionLevel:7 of ksidecar.audit.format is outside the supported range [0, 1]" in str(refused)
    assert applied == {"group.version": "OK"}
    assert "finalized" not in after["group.version"]
    assert after["ksidecar.audit.format"]["supported"] == (0, 1)
    with trio.fail_after(1):
        while (await trio.to_thread.run_sync(api_versions, a)).FinalizedFeatures:
            await trio.sleep(0.05)


async def test_concurrent_updates_one_wins(start_sidecar: StartSidecar, zookeeper: ZooKeeperServer,
                                           zk_path: str, tansu: Any) -> None:
    """Another writer changes /feature between this sidecar's read and its write: ours loses."""
    connect = zookeeper.connect_string(zk_path)
    a = await start_sidecar(sidecar_keys(tansu.bootstrap, broker_id="111", zookeeper_connect=connect,
                                         sidecar_coordinator="embedded", super_users="User:ANONYMOUS"))
    assert a.zk is not None
    client, real_get = a.zk.client, a.zk.client.get
    raced: list[int] = []

    def get_then_race(path: str, *args: Any, **kwargs: Any) -> Any:
        found = real_get(path, *args, **kwargs)
        if path == "/feature" and not raced:  # the other writer: bump the version under us
            raced.append(client.set("/feature", found[0]).version)
        return found

    client.get = get_then_race
    try:
        lost = await trio.to_thread.run_sync(update, a, 2, ("group.version", 0, SAFE))
    finally:
        client.get = real_get
    assert lost.ErrorCode == 96
    assert lost.ErrorMessage == (f"Failed to update the finalized features: /feature changed concurrently "
                                 f"(epoch {raced[0] - 1} is no longer current); read the features again and retry.")
    node, _ = await trio.to_thread.run_sync(read_node, connect, "/feature")
    assert node["features"] == {"group.version": {"max_version_level": 1}}  # nothing of ours was written
    won = await trio.to_thread.run_sync(update, a, 2, ("group.version", 0, SAFE))
    assert won.ErrorCode == 0


class _Log:
    """librdkafka's log lines (it reports a missing KIP-848 API in its log, not as an error)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level: int, fmt: str, *args: Any) -> None:
        self.lines.append(fmt % args if args else fmt)


@pytest.mark.slow
async def test_group_version_upgraded_live_with_confluent_kafka(
        start_sidecar: StartSidecar, zookeeper: ZooKeeperServer, zk_path: str, tansu: Any) -> None:
    """group.version 0: a KIP-848 consumer fails cleanly; after the upgrade a new one consumes."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient as ConfluentAdmin
    from confluent_kafka.cimpl import NewTopic

    connect = zookeeper.connect_string(zk_path)
    a = await start_sidecar(sidecar_keys(
        tansu.bootstrap, broker_id="111", zookeeper_connect=connect, sidecar_coordinator="embedded",
        super_users="User:ANONYMOUS", group_consumer_heartbeat_interval_ms="500"))
    bootstrap = f"127.0.0.1:{a.bound['PLAINTEXT'].port}"
    topic = f"features-{zk_path.rsplit('-', 1)[-1]}"
    assert (await trio.to_thread.run_sync(update, a, 2, ("group.version", 0, SAFE))).ErrorCode == 0

    def produce() -> None:
        admin = ConfluentAdmin({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(10):
            producer.produce(topic, value=str(i).encode())
        assert producer.flush(10) == 0

    def consume(seconds: float) -> tuple[list[bytes], list[str]]:
        values: list[bytes] = []
        errors: list[Any] = []
        log = _Log()
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "group.protocol": "consumer",
                             "auto.offset.reset": "earliest", "error_cb": errors.append, "debug": "cgrp", "logger": log})
        consumer.subscribe([topic])
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline and len(values) < 10:
                message = consumer.poll(0.2)
                if message is None:
                    continue
                if message.error():
                    errors.append(message.error())
                else:
                    values.append(message.value() or b"")
        finally:
            consumer.close()
        return values, [str(e) for e in errors] + log.lines

    await trio.to_thread.run_sync(produce)
    values, lines = await trio.to_thread.run_sync(consume, 5.0)
    assert values == [], "KIP-848 must not work below group.version 1"
    assert any("ConsumerGroupHeartbeatRequest not supported by broker" in line for line in lines)
    assert (await trio.to_thread.run_sync(update, a, 2, ("group.version", 1, UPDATE))).ErrorCode == 0
    values, _ = await trio.to_thread.run_sync(consume, 30.0)
    assert sorted(values) == [str(i).encode() for i in range(10)]
