"""AuthorizedOperations as confluent-kafka's AdminClient reports them, for groups the embedded
coordinator serves, with a real Tansu and real ZooKeeper.

``describe_consumer_groups(..., include_authorized_operations=True)`` describes a classic
group (librdkafka falls back to DescribeGroups) and a KIP-848 group (ConsumerGroupDescribe).
Without an authorizer every group operation is reported; with ``sidecar.authorizer=acls``,
alice, who may Read the groups, gets Read and the Describe it implies, and bob, allowed All
but denied Delete, everything but Delete. The sets are Kafka's group operations written out
by hand; a request that does not ask gets none.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import trio

from proxy.auth.acl.model import Operation, ResourceType
from proxy.tools.rig.tansu import TansuServer
from tests.auth.acl.test_enforcement import MECHANISM, acl, orders_topic
from tests.auth.conftest import USERS, SaslRig, StartSasl
from tests.auth.test_clients import confluent_config
from tests.proxy.wire import sample

pytestmark = pytest.mark.integration

EVERY_GROUP_OPERATION = {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
EMBEDDED = {"sidecar_coordinator": "embedded", "group_consumer_heartbeat_interval_ms": "500",
            "group_initial_rebalance_delay_ms": "200"}


def make_groups(bootstrap: str, user: str, topic: str, classic: str, kip848: str) -> None:
    """``classic``: one committed offset, no member (Empty); ``kip848``: one KIP-848 member
    that took its assignment and left (Empty)."""
    from confluent_kafka import Consumer, TopicPartition

    common = confluent_config(bootstrap, MECHANISM, user, USERS[user])
    committer = Consumer({**common, "group.id": classic, "enable.auto.commit": False})
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        committer.close()
    member = Consumer({**common, "group.id": kip848, "group.protocol": "consumer", "enable.auto.commit": False})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment(), "the KIP-848 member got no assignment"
    finally:
        member.close()


def described(bootstrap: str, user: str, groups: list[str], include: bool) -> dict[str, Any]:
    """Group id → the names of its reported authorized operations (``None``: none reported)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(confluent_config(bootstrap, MECHANISM, user, USERS[user]))
    out: dict[str, Any] = {}
    for group, future in admin.describe_consumer_groups(groups, include_authorized_operations=include).items():
        description = future.result(20)
        operations = description.authorized_operations
        out[group] = None if operations is None else {op.name for op in operations}
    return out


async def groups_of(rig: SaslRig, tansu: TansuServer, prefix: str) -> tuple[str, str]:
    """A classic and a KIP-848 group named ``<prefix>-…``, made by alice on a topic of hers."""
    topic = await orders_topic(tansu)
    classic, kip848 = f"{prefix}-classic", f"{prefix}-kip848"
    with trio.fail_after(60):
        await trio.to_thread.run_sync(make_groups, rig.bootstrap, "alice", topic, classic, kip848)
    return classic, kip848


def answered_by_both_apis(rig: SaslRig) -> bool:
    """The sidecar itself answered DescribeGroups and ConsumerGroupDescribe."""
    return all(sample(rig.sidecar, "ksidecar_local_responses_total", api=api) > 0
               for api in ("DescribeGroups", "ConsumerGroupDescribe"))


async def test_without_an_authorizer_every_group_operation(sasl_sidecar: StartSasl, tansu: TansuServer) -> None:
    rig = await sasl_sidecar(**EMBEDDED)
    classic, kip848 = await groups_of(rig, tansu, f"ops-{uuid.uuid4().hex[:6]}")
    with trio.fail_after(60):
        asked = await trio.to_thread.run_sync(described, rig.bootstrap, "alice", [classic, kip848], True)
        not_asked = await trio.to_thread.run_sync(described, rig.bootstrap, "alice", [classic, kip848], False)
    assert asked == {classic: EVERY_GROUP_OPERATION, kip848: EVERY_GROUP_OPERATION}
    assert not_asked == {classic: None, kip848: None}
    assert answered_by_both_apis(rig)


async def test_with_acls_what_each_principal_is_allowed(sasl_sidecar: StartSasl, tansu: TansuServer) -> None:
    rig = await sasl_sidecar(sidecar_authorizer="acls", **EMBEDDED)
    assert rig.sidecar.acls is not None
    prefix = f"ops-{uuid.uuid4().hex[:6]}"
    await rig.sidecar.acls.create([
        acl(ResourceType.TOPIC, "orders-", Operation.READ, prefixed=True),
        acl(ResourceType.GROUP, prefix, Operation.READ, prefixed=True),
        acl(ResourceType.GROUP, prefix, Operation.ALL, prefixed=True, principal="User:bob"),
        acl(ResourceType.GROUP, prefix, Operation.DELETE, prefixed=True, principal="User:bob", deny=True),
    ])
    classic, kip848 = await groups_of(rig, tansu, prefix)
    with trio.fail_after(60):
        alice = await trio.to_thread.run_sync(described, rig.bootstrap, "alice", [classic, kip848], True)
        bob = await trio.to_thread.run_sync(described, rig.bootstrap, "bob", [classic, kip848], True)
        not_asked = await trio.to_thread.run_sync(described, rig.bootstrap, "alice", [classic, kip848], False)
    assert alice == {classic: {"READ", "DESCRIBE"}, kip848: {"READ", "DESCRIBE"}}
    assert bob == {classic: {"READ", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"},
                   kip848: {"READ", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}}
    assert not_asked == {classic: None, kip848: None}
    assert answered_by_both_apis(rig)
