"""Share groups (KIP-932) under ``sidecar.authorizer=acls``, with confluent-kafka's ShareConsumer.

Kafka asks for Read on the group for ShareGroupHeartbeat, ShareFetch and ShareAcknowledge,
Describe on each subscribed topic for the heartbeat and Read on each fetched topic
(proxy/auth/acl/requests.py). alice may Read the group and the topic and is served every
record; bob may Read the topic but not the group and reads nothing, his client reporting
Kafka's GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio

from coordinator.features import FeatureUpdate
from coordinator.group_configs import AlterOp, ConfigOp
from proxy.auth.acl.model import Operation, ResourceType
from proxy.tools.rig.tansu import TansuServer
from tests.auth.acl.test_enforcement import (
    MECHANISM,
    RECORDS,
    acl,
    new_group,
    orders_topic,
    produce_as_broker,
)
from tests.auth.conftest import USERS, StartSasl
from tests.auth.test_clients import confluent_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def share_read(bootstrap: str, user: str, topic: str, group: str, seconds: float) -> tuple[list[bytes], list[str]]:
    """What ``user``'s ShareConsumer reads in ``seconds`` (or until it has every record), and
    the errors its client reported."""
    from confluent_kafka import KafkaException, ShareConsumer

    errors: list[str] = []
    consumer = ShareConsumer({**confluent_config(bootstrap, MECHANISM, user, USERS[user]), "group.id": group,
                              "error_cb": lambda e: errors.append(e.name())})
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and len(values) < len(RECORDS):
            try:
                messages = consumer.poll(0.5)
            except KafkaException as exc:
                errors.append(exc.args[0].name())
                continue
            for message in messages:
                if message.error():
                    errors.append(message.error().name())
                else:
                    values.append(message.value())
    finally:
        consumer.close()
    return values, errors


async def test_group_read_decides_who_is_served(sasl_sidecar: StartSasl, tansu: TansuServer) -> None:
    group = new_group()
    rig = await sasl_sidecar(sidecar_authorizer="acls", sidecar_coordinator="embedded",
                             group_share_heartbeat_interval_ms="500")
    sidecar = rig.sidecar
    assert sidecar.acls is not None and sidecar.features is not None and sidecar.group_configs is not None
    outcome = await sidecar.features.update([FeatureUpdate(feature="share.version", level=1)], validate_only=False)
    assert outcome.plan.ok and outcome.write_error is None
    topic = await orders_topic(tansu)
    await sidecar.acls.create([
        acl(ResourceType.TOPIC, "orders-", Operation.READ, prefixed=True),
        acl(ResourceType.TOPIC, "orders-", Operation.READ, prefixed=True, principal="User:bob"),
        acl(ResourceType.GROUP, group, Operation.READ)])
    result = await sidecar.group_configs.alter(
        group, [ConfigOp(name="share.auto.offset.reset", operation=AlterOp.SET, value="earliest")], validate_only=False)
    assert result.error_code == 0, result
    await trio.to_thread.run_sync(produce_as_broker, tansu, topic)
    with trio.fail_after(90):
        bob: Any = await trio.to_thread.run_sync(share_read, rig.bootstrap, "bob", topic, group, 3.0)
        alice: Any = await trio.to_thread.run_sync(share_read, rig.bootstrap, "alice", topic, group, 30.0)
    assert bob[0] == [], bob
    assert "GROUP_AUTHORIZATION_FAILED" in bob[1], bob
    assert sorted(alice[0]) == sorted(value for _, value in RECORDS), alice
