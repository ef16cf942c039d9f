"""Principals from client certificates, end to end (issue 35): an SSL listener with
``ssl.client.auth=required`` and ``ssl.principal.mapping.rules``, ACLs enforced over a real
ZooKeeper, the audit observer on, confluent-kafka as the client, real Tansu behind.

alice's certificate (``CN=alice,OU=eng,O=Acme``) maps to ``User:alice``, who has an ACL and
produces; bob's (``CN=bob,OU=ops,O=Acme``) falls through to ``DEFAULT``, a principal with no
ACL, and is refused TOPIC_AUTHORIZATION_FAILED. The audit names ``User:alice``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import trio
import trustme

from proxy.auth.acl.model import Operation, ResourceType
from proxy.config.keys import build_config
from proxy.control.server import Sidecar
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.auth.acl.test_enforcement import RECORDS, TOPIC_AUTHORIZATION_FAILED, acl
from tests.auth.conftest import new_topic
from tests.proxy.conftest import sidecar_keys
from tests.proxy.wire import sample

pytestmark = pytest.mark.integration

RULES = "RULE:^CN=([^,]+),OU=eng,O=Acme$/$1/,DEFAULT"


def produce(bootstrap: str, ca: Path, client: Path, topic: str) -> list[int | None]:
    """confluent-kafka over TLS with a client certificate; each record's delivery error code."""
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(ca),
        "ssl.certificate.location": str(client), "ssl.key.location": str(client),
        "linger.ms": 1, "message.timeout.ms": 8000,
    })
    delivery: list[int | None] = []

    def delivered(err: Any, _msg: Any) -> None:
        delivery.append(None if err is None else err.code())

    for key, value in RECORDS:
        producer.produce(topic, value=value, key=key, partition=0, on_delivery=delivered)
    producer.flush(20)
    return delivery


async def test_certificate_subjects_become_principals_acls_and_the_audit_see(
    tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str, tmp_path: Path,
) -> None:
    ca = trustme.CA()
    ca_path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    keystore = tmp_path / "sidecar.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(keystore))
    alice, bob = tmp_path / "alice.pem", tmp_path / "bob.pem"
    ca.issue_cert("alice.clients", common_name="alice", organization_name="Acme",
                  organization_unit_name="eng").private_key_and_cert_chain_pem.write_to_path(str(alice))
    ca.issue_cert("bob.clients", common_name="bob", organization_name="Acme",
                  organization_unit_name="ops").private_key_and_cert_chain_pem.write_to_path(str(bob))
    topic = await new_topic(tansu, "tls-orders-")
    audit = tmp_path / "audit"
    raw = sidecar_keys(
        tansu.bootstrap, listeners="SSL://127.0.0.1:0", ssl_keystore_location=str(keystore),
        ssl_client_auth="required", ssl_truststore_location=str(ca_path),
        ssl_principal_mapping_rules=RULES, zookeeper_connect=zookeeper.connect_string(zk_path),
        sidecar_authorizer="acls",
    ) | {"observer.class.names": "audit", "observer.audit.dir": str(audit),
         "observer.audit.flush.interval.ms": "200"}
    async with trio.open_nursery() as nursery:
        sidecar: Sidecar = await nursery.start(Sidecar(build_config(raw)).serve)
        assert sidecar.acls is not None
        await sidecar.acls.create([acl(ResourceType.TOPIC, topic, Operation.WRITE)])  # User:alice
        bootstrap = f"127.0.0.1:{sidecar.bound['SSL'].port}"
        with trio.fail_after(60):
            served = await trio.to_thread.run_sync(produce, bootstrap, ca_path, alice, topic)
            refused = await trio.to_thread.run_sync(produce, bootstrap, ca_path, bob, topic)
        # bob learns the refusal from Metadata (Describe) before he would produce.
        denials = sample(sidecar, "ksidecar_authorization_denials_total", operation="Describe",
                         resource_type="Topic", mode="enforce")
        nursery.cancel_scope.cancel()  # stops the sidecar: the audit completes its files
    assert served == [None] * len(RECORDS)
    assert refused == [TOPIC_AUTHORIZATION_FAILED] * len(RECORDS)
    assert denials is not None and denials >= 1
    rows = ds.dataset(audit, format="parquet", partitioning="hive").to_table().to_pylist()
    principals = {r["principal"] for r in rows}
    assert "User:alice" in principals
    assert "User:CN=bob,OU=ops,O=Acme" in principals  # DEFAULT: the whole subject
    produced = [r for r in rows if r["principal"] == "User:alice" and r["api_key"] == 0]
    assert produced and all(r["error_code"] == 0 for r in produced)
