"""Issue 22's rollout, end to end: shadow mode, the audit's denials, the least-privilege
proposal, and enforcement of exactly that proposal. Real Tansu, real ZooKeeper, local Spark,
confluent-kafka as the client.

1. A SASL sidecar with ``sidecar.authorizer=acls`` in shadow mode, the audit observer on and
   ``ksidecar.audit.format`` finalized at 1 (audit schema version 3, with ``denials``). bob,
   who has no ACL at all, produces to a topic and consumes it in a group with a commit:
   nothing is refused, and the audit has bob's would-be denials.
2. ``spark_jobs.least_privilege`` over that audit proposes bob's ACLs.
3. A second sidecar on the same ZooKeeper, enforcing, runs the proposal's own ``ksidecar acls``
   command lines (its PLAINTEXT listener is for the administrator); the same workload as bob
   passes, and a topic outside the proposal is still refused.
"""

from __future__ import annotations

import shlex
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.dataset as ds
import pytest
import trio

from coordinator.features import AUDIT_FORMAT, FeatureUpdate
from proxy.auth.acl.model import ANY_BINDING
from proxy.config.keys import build_config
from proxy.control.server import Sidecar
from proxy.tools.cli import main as cli_main
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from spark_jobs import least_privilege, options
from tests.auth.acl.test_enforcement import RECORDS, TOPIC_AUTHORIZATION_FAILED, confluent_flow
from tests.auth.conftest import USERS, SaslRig, new_topic
from tests.proxy.conftest import sidecar_keys

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def keys(tansu: TansuServer, connect: str, plain_file: Path, **extra: str) -> dict[str, str]:
    """A SASL-terminating sidecar with ACLs on, and a PLAINTEXT listener for the administrator."""
    return sidecar_keys(
        tansu.bootstrap, listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        zookeeper_connect=connect, sidecar_sasl_plain_users_file=str(plain_file),
        sidecar_authorizer="acls", super_users="User:ANONYMOUS", **extra,
    )


def bootstrap(sidecar: Sidecar, listener: str = "SASL_PLAINTEXT") -> str:
    return f"127.0.0.1:{sidecar.bound[listener].port}"


async def test_shadow_audit_proposes_acls_that_enforcement_then_accepts(
    tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str, spark: SparkSession, tmp_path: Path,
) -> None:
    connect = zookeeper.connect_string(zk_path)
    plain_file = tmp_path / "plain-users"
    users = SaslRig(None, connect, plain_file, tmp_path)  # type: ignore[arg-type]  # users only
    for name, password in USERS.items():
        assert await trio.to_thread.run_sync(lambda n=name, p=password: users.users("add", n, password=p)) == 0
        assert await trio.to_thread.run_sync(lambda n=name, p=password: users.plain_users("add", n, password=p)) == 0
    topic = await new_topic(tansu, "orders-")
    other = await new_topic(tansu, "payments-")
    group = f"billing-{uuid.uuid4().hex[:6]}"
    audit = tmp_path / "audit"

    # 1. Shadow mode, audited in schema version 3: bob is served, his denials recorded.
    shadow_keys = keys(tansu, connect, plain_file, sidecar_authorizer_mode="shadow")
    shadow_keys |= {"observer.class.names": "audit", "observer.audit.dir": str(audit),
                    "observer.audit.flush.interval.ms": "200"}
    async with trio.open_nursery() as nursery:
        shadow: Sidecar = await nursery.start(Sidecar(build_config(shadow_keys)).serve)
        assert shadow.features is not None and shadow.acls is not None
        outcome = await shadow.features.update([FeatureUpdate(feature=AUDIT_FORMAT, level=1)], validate_only=False)
        assert outcome.plan.ok and outcome.write_error is None
        assert shadow.feature_level(AUDIT_FORMAT) == 1
        assert shadow.acls.describe(ANY_BINDING) == []  # bob (and everyone) has nothing
        with trio.fail_after(90):
            served = await trio.to_thread.run_sync(confluent_flow, bootstrap(shadow), "bob", topic, group)
        nursery.cancel_scope.cancel()  # stops the sidecar: the audit completes its files
    assert served["delivery"] == [None] * len(RECORDS)
    assert served["got"] == RECORDS and "consume_error" not in served and served["listed"] is True

    rows = ds.dataset(audit, format="parquet", partitioning="hive").to_table().to_pylist()
    bob = [r for r in rows if r["principal"] == "User:bob"]
    denials = {(d["resource_type"], d["resource_name"], d["operation"], d["mode"])
               for r in bob for d in r["denials"] or []}
    assert {("Topic", topic, "Write", "shadow"), ("Topic", topic, "Read", "shadow"),
            ("Topic", topic, "Describe", "shadow"), ("Group", group, "Read", "shadow")} <= denials
    assert {mode for *_, mode in denials} == {"shadow"}
    assert all(r["first_row"] for r in bob if r["denials"])
    assert not any(r["error_code"] in (29, 30, 31) for r in bob)  # nothing refused

    # 2. The proposal, from that audit, with local Spark.
    out = tmp_path / "proposal"
    args = options.job_parser("", options.add_least_privilege).parse_args(
        ["--audit", str(audit), "--out", str(out)])
    await trio.to_thread.run_sync(least_privilege.run, spark, args)
    proposed = ds.dataset(out / "acls", format="parquet").to_table().to_pylist()
    assert [(a["principal"], a["resource_type"], a["pattern_type"], a["name"], a["operation"]) for a in proposed] == [
        ("User:bob", "Group", "LITERAL", group, "Read"),
        ("User:bob", "Topic", "LITERAL", topic, "Read"),
        ("User:bob", "Topic", "LITERAL", topic, "Write"),
    ]
    script = (out / "acls.sh").read_text().splitlines()
    commands = [line for line in script if line.startswith("ksidecar acls ")]
    assert commands == [a["ksidecar_command"] for a in proposed]

    # 3. Enforcement on the same ZooKeeper, the proposal applied with its own command lines.
    async with trio.open_nursery() as nursery:
        enforce: Sidecar = await nursery.start(Sidecar(build_config(
            keys(tansu, connect, plain_file, sidecar_authorizer_mode="enforce"))).serve)
        assert enforce.acls is not None
        admin = bootstrap(enforce, "PLAINTEXT")
        for line in commands:
            words = shlex.split(line.replace('"$BOOTSTRAP"', admin))
            assert await trio.to_thread.run_sync(cli_main, words[1:]) == 0, line
        with trio.fail_after(5):
            while len(enforce.acls.describe(ANY_BINDING)) < len(proposed):
                await trio.sleep(0.05)
        with trio.fail_after(120):
            again = await trio.to_thread.run_sync(confluent_flow, bootstrap(enforce), "bob", topic, group)
            refused = await trio.to_thread.run_sync(confluent_flow, bootstrap(enforce), "bob", other, group)
        nursery.cancel_scope.cancel()
    assert again["delivery"] == [None] * len(RECORDS)
    assert again["got"] == RECORDS and "consume_error" not in again and again["listed"] is True
    assert refused["delivery"] == [TOPIC_AUTHORIZATION_FAILED] * len(RECORDS)
    assert refused["got"] == [] and refused["listed"] is False
