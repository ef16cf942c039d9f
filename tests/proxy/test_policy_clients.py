"""The ``policy`` filter and an operator's own filters, end to end: real Tansu, real ZooKeeper
(the audit's schema version 3 is a finalized feature), confluent-kafka and kafka-python.

1. Enforcing: a protected topic refuses acks=1 (INVALID_REQUIRED_ACKS, nothing written) and
   takes acks=all; an acks=0 producer's connection is closed and its refusal is audited;
   CreateTopics of 1 partition is refused under ``min 3`` (POLICY_VIOLATION) and 3 accepted.
2. Shadow: the same requests are all served; the audit holds the would-be refusals.
3. Filters written here, loaded through ``filter.class.names``: one changes CreateTopics (the
   broker creates what it asked), one raises on DescribeConfigs (only that request fails).

Expected error codes are Kafka's (``Errors.java``: 21, 44, -1); record counts are read from
the broker directly, not through the sidecar.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import trio

from coordinator.features import AUDIT_FORMAT, FeatureUpdate
from proxy.config.keys import build_config
from proxy.control.server import Sidecar
from proxy.datapath.filters import Change, FilterContext, FilterRequest
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.auth.conftest import new_topic
from tests.proxy.conftest import sidecar_keys

pytestmark = pytest.mark.integration

RECORDS = 5


class TwoPartitions:
    """An operator's filter: every topic created gets two partitions."""

    api_keys = frozenset({19})

    def on_request(self, request: FilterRequest, context: FilterContext) -> Change:
        body = request.body
        for topic in body["Topics"]:
            topic["NumPartitions"] = 2
        return Change(body)


class Broken:
    """An operator's filter with a bug: it fails on every DeleteTopics."""

    api_keys = frozenset({20})

    def configure(self, config: Mapping[str, str]) -> None:
        assert config["filter.broken.note"] == "given"  # its own key reaches it

    def on_request(self, request: FilterRequest, context: FilterContext) -> None:
        raise RuntimeError("a bug")


async def started(nursery: trio.Nursery, tansu: TansuServer, connect: str, audit: Path, **keys: str) -> Sidecar:
    raw = sidecar_keys(tansu.bootstrap, zookeeper_connect=connect)
    raw |= {"observer.class.names": "audit", "observer.audit.dir": str(audit),
            "observer.audit.flush.interval.ms": "200", **keys}
    sidecar: Sidecar = await nursery.start(Sidecar(build_config(raw)).serve)
    assert sidecar.features is not None
    outcome = await sidecar.features.update([FeatureUpdate(feature=AUDIT_FORMAT, level=1)], validate_only=False)
    assert outcome.plan.ok and sidecar.feature_level(AUDIT_FORMAT) == 1
    return sidecar


def produce(bootstrap: str, topic: str, acks: str) -> list[int | None]:
    """``RECORDS`` records with ``acks``: each delivery's error code (None: delivered)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 1,
                         "message.timeout.ms": 8000, "retries": 0})
    out: list[int | None] = []
    for i in range(RECORDS):
        producer.produce(topic, f"r{i}".encode(), partition=0,
                         on_delivery=lambda err, _m: out.append(None if err is None else err.code()))
    producer.flush(15)
    return out


def written(tansu: TansuServer, topic: str) -> int:
    """Records in partition 0, read from the broker itself to its end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": f"count-{uuid.uuid4().hex[:6]}",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    count = 0
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                break
            count += 1
        return count
    finally:
        consumer.close()


def create(bootstrap: str, name: str, partitions: int) -> str | None:
    """kafka-python's CreateTopics; the error's class name, or None."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    except Exception as exc:
        return type(exc).__name__
    finally:
        admin.close()
    return None


def audited(audit: Path) -> set[tuple[str, str, str, str]]:
    rows = ds.dataset(audit, format="parquet", partitioning="hive").to_table().to_pylist()
    return {(d["resource_type"], d["resource_name"], d["operation"], d["mode"]) for r in rows for d in r["denials"] or []}


def metric(sidecar: Sidecar, name: str) -> str:
    from prometheus_client import generate_latest

    return "\n".join(line for line in generate_latest(sidecar.metrics.registry).decode().splitlines()
                     if line.startswith(name))


POLICY = {"filter.class.names": "policy", "policy.acks.all.topics.pattern": "protected-.*",
          "policy.create.topics.partitions.min": "3"}


@pytest.mark.parametrize("mode", ["enforce", "shadow"])
async def test_the_policy_filter_with_real_clients(
    mode: str, tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str, tmp_path: Path
) -> None:
    protected = await new_topic(tansu, "protected-")
    silent = await new_topic(tansu, "protected-")
    open_topic = await new_topic(tansu, "open-")
    small, big = f"small-{uuid.uuid4().hex[:8]}", f"big-{uuid.uuid4().hex[:8]}"
    audit = tmp_path / "audit"
    async with trio.open_nursery() as nursery:
        sidecar = await started(nursery, tansu, zookeeper.connect_string(zk_path), audit,
                                **POLICY, **{"policy.mode": mode})
        through = f"127.0.0.1:{sidecar.bound['PLAINTEXT'].port}"
        with trio.fail_after(90):
            acks_one = await trio.to_thread.run_sync(produce, through, protected, "1")
            acks_all = await trio.to_thread.run_sync(produce, through, protected, "all")
            acks_zero = await trio.to_thread.run_sync(produce, through, silent, "0")  # no answer to learn from
            unprotected = await trio.to_thread.run_sync(produce, through, open_topic, "1")
            refused_create = await trio.to_thread.run_sync(create, through, small, 1)
            accepted_create = await trio.to_thread.run_sync(create, through, big, 3)
            in_protected = await trio.to_thread.run_sync(written, tansu, protected)
            in_silent = await trio.to_thread.run_sync(written, tansu, silent)
        closed = metric(sidecar, "ksidecar_connections_closed_total")
        refusals = metric(sidecar, "ksidecar_filter_refusals_total")
        nursery.cancel_scope.cancel()  # the audit completes its files

    assert acks_all == [None] * RECORDS and unprotected == [None] * RECORDS
    assert accepted_create is None
    denials = audited(audit)
    if mode == "enforce":
        assert acks_one == [21] * RECORDS  # INVALID_REQUIRED_ACKS
        assert in_protected == RECORDS  # only the acks=all ones
        assert in_silent == 0
        assert 'reason="policy_violation"' in closed
        assert refused_create == "PolicyViolationError"
    else:
        assert acks_one == [None] * RECORDS and in_protected == 2 * RECORDS and in_silent == RECORDS
        assert refused_create is None
        assert 'reason="policy_violation"' not in closed
    assert ("Topic", protected, "policy:acks.all", mode) in denials
    assert ("Topic", silent, "policy:acks.all", mode) in denials
    assert ("Topic", small, "policy:create.topics.partitions", mode) in denials
    assert not any(name in (open_topic, big) for _, name, _, _ in denials)
    assert acks_zero == [None] * RECORDS  # acks=0: librdkafka hears nothing either way
    assert 'rule="acks.all"' in refusals and f'mode="{mode}"' in refusals


async def test_an_operators_filters_change_a_request_and_fail_alone(
    tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str, tmp_path: Path
) -> None:
    from kafka.admin import KafkaAdminClient

    name = f"changed-{uuid.uuid4().hex[:8]}"
    here = "tests.proxy.test_policy_clients"
    async with trio.open_nursery() as nursery:
        sidecar = await started(nursery, tansu, zookeeper.connect_string(zk_path), tmp_path / "audit", **{
            "filter.class.names": f"{here}.TwoPartitions,{here}:Broken", "filter.broken.note": "given"})
        through = f"127.0.0.1:{sidecar.bound['PLAINTEXT'].port}"

        def admin_flow() -> dict[str, Any]:
            admin = KafkaAdminClient(bootstrap_servers=through, request_timeout_ms=10000)
            out: dict[str, Any] = {}
            try:
                out["created"] = create(through, name, 1)
                try:
                    admin.delete_topics([name])
                    out["delete"] = None
                except Exception as exc:
                    out["delete"] = f"{type(exc).__name__}: {exc}"
                out["listed"] = name in admin.list_topics()  # the same client goes on
            finally:
                admin.close()
            return out

        with trio.fail_after(60):
            out = await trio.to_thread.run_sync(admin_flow)
        errors = metric(sidecar, "ksidecar_filter_errors_total")
        nursery.cancel_scope.cancel()

    from confluent_kafka.admin import AdminClient

    described = AdminClient({"bootstrap.servers": tansu.bootstrap}).list_topics(name, timeout=10)
    assert out["created"] is None and len(described.topics[name].partitions) == 2  # the broker saw the change
    assert out["delete"].startswith("UnknownError")  # UNKNOWN_SERVER_ERROR (-1), with the filter named:
    assert "error_message='request filter broken failed: RuntimeError'" in out["delete"]
    assert out["listed"] is True  # the same client goes on, and the topic was not deleted
    assert 'filter="broken"' in errors and errors.rstrip().endswith("1.0")
