"""Issue 17's Done-when with separate ``ksidecar run`` processes, a real ZooKeeper, Tansu and
real clients (kafka-python, confluent-kafka, the ``ksidecar features`` CLI, Spark).

One fleet per module (starting processes is the slow part), used by the tests in file order:

* 111 and 112 run this release (both features 0-1); 111 audits in its threads, 112 in its
  own audit process. 113 plays the previous release (``ksidecar.audit.format`` 0-0, via the
  test-only ``sidecar.features.supported.override``).
* The first two tests leave ``/feature`` as they found it (``group.version`` 1, the audit
  format 0). The last one stops 113 (the old release leaves the fleet), finalizes the
  audit format at 1 and stops 111 and 112, so it must stay last.

Tansu's node id is 111, so produce requests reach the broker through sidecar 111 whichever
sidecar a client bootstraps from; 112 sees the bootstrap connections (ApiVersions,
Metadata). Metadata names all three sidecars (the embedded coordinator's rule,
docs/coordinator.md), so a client's other requests may go to any of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from kazoo.client import KazooClient

from observers.audit_schema import VERSION_KEY
from proxy.tools.admin_client import AdminClient
from proxy.tools.rig.ports import LOOPBACK, free_port
from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.integration

UPGRADE, SAFE = 1, 2
OLD_RELEASE = "group.version=0-1,ksidecar.audit.format=0-0"


@dataclass
class Fleet:
    """The module's sidecar processes and where they keep things."""

    connect: str
    upstream: str
    work: Path
    sidecars: dict[int, SidecarServer]
    audit: dict[int, Path]

    def address(self, node: int) -> str:
        return self.sidecars[node].bootstrap


def zk(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect, timeout=10)
    client.start(timeout=10)
    return client


def read_node(connect: str, path: str) -> tuple[Any, int]:
    client = zk(connect)
    try:
        raw, stat = client.get(path)
        return json.loads(raw), stat.version
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="module")
def fleet(tansu: TansuServer, zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("features-processes")
    chroot = f"/ksidecar-tests/features-processes-{uuid.uuid4().hex[:8]}"
    client = zk(zookeeper.connect)
    client.ensure_path(chroot)
    client.stop()
    client.close()
    connect = zookeeper.connect_string(chroot)
    common = {"zookeeper.connect": connect, "sidecar.coordinator": "embedded", "super.users": "User:ANONYMOUS"}
    audit = {111: work / "audit-111", 112: work / "audit-112"}
    extra = {
        111: {"observer.class.names": "audit", "observer.audit.dir": str(audit[111])},
        112: {"observer.class.names": "audit", "observer.audit.dir": str(audit[112]),
              "observer.audit.isolation": "process"},
        113: {"sidecar.features.supported.override": OLD_RELEASE},
    }
    with ThreadPoolExecutor(3) as pool:
        futures = {node: pool.submit(start_sidecar, work, tansu.bootstrap, name=f"sidecar-{node}",
                                     keys={**common, "broker.id": str(node), **keys})
                   for node, keys in extra.items()}
    sidecars: dict[int, SidecarServer] = {}
    failure: BaseException | None = None
    for node, future in futures.items():
        try:
            sidecars[node] = future.result()
        except BaseException as exc:  # the others are stopped below before it propagates
            failure = exc
    try:
        if failure is not None:
            raise failure
        yield Fleet(connect, tansu.bootstrap, work, sidecars, audit)
    finally:
        for sidecar in sidecars.values():
            sidecar.stop()
        client = zk(zookeeper.connect)
        client.delete(chroot, recursive=True)
        client.stop()
        client.close()


def call(address: str, key: int, version: int, body: dict[str, Any]) -> Any:
    with AdminClient(address) as client:
        return client.call(key, version, body)


def api_versions(address: str) -> Any:
    return call(address, 18, 3, {"ClientSoftwareName": "features-test", "ClientSoftwareVersion": "1"})


def finalized(answer: Any) -> dict[str, int]:
    return {f.Name: f.MaxVersionLevel for f in answer.FinalizedFeatures}


def update(address: str, version: int, *updates: tuple[str, int, int]) -> Any:
    entries = [{"Feature": f, "MaxVersionLevel": level, "UpgradeType": kind} for f, level, kind in updates]
    return call(address, 57, version, {"timeoutMs": 10000, "FeatureUpdates": entries, "ValidateOnly": False})


def wait_for(condition: Callable[[], bool], within: float, what: str) -> float:
    """Poll ``condition`` (a round trip to real processes) until true; return the seconds it
    took, failing after ``within``."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > within:
            pytest.fail(f"not within {within} s: {what}")
        time.sleep(0.02)
    return time.monotonic() - began


def test_ranges_rules_and_an_upgrade_every_sidecar_shows_within_a_second(fleet: Fleet) -> None:
    registration, _ = read_node(fleet.connect, "/brokers/ids/113")
    assert registration["features"] == {"group.version": {"min_version": 0, "max_version": 1},
                                        "ksidecar.audit.format": {"min_version": 0, "max_version": 0}}
    node, version = read_node(fleet.connect, "/feature")
    assert node["features"] == {"group.version": {"max_version_level": 1}}  # the defaults
    epochs = {n: api_versions(fleet.address(n)).FinalizedFeaturesEpoch for n in fleet.sidecars}
    assert len(set(epochs.values())) == 1
    start = epochs[111]  # the broker's epoch (if any) plus /feature's version

    # Beyond 113's range: refused naming it, through a sidecar that does support level 1.
    refused = update(fleet.address(111), 1, ("ksidecar.audit.format", 1, UPGRADE))
    assert (refused.ErrorCode, refused.Results[0].ErrorCode) == (42, 42)
    assert refused.Results[0].ErrorMessage == (
        "Could not apply finalized feature update because brokers were found to have incompatible versions "
        "for the feature ksidecar.audit.format at versionLevel:1: sidecar 113 supports [0, 0].")
    # A downgrade without the downgrade type: refused.
    refused = update(fleet.address(112), 1, ("group.version", 0, UPGRADE))
    assert (refused.ErrorCode, refused.Results[0].ErrorMessage) == (42, (
        "Can not provide versionLevel: 0 less than 1 without setting the downgradeType to either SAFE or "
        "UNSAFE in the request."))
    assert read_node(fleet.connect, "/feature")[1] == version  # neither wrote anything

    # A safe downgrade through the old release, then the upgrade through 112.
    assert update(fleet.address(113), 1, ("group.version", 0, SAFE)).Results[0].ErrorCode == 0
    wait_for(lambda: all(api_versions(fleet.address(n)).FinalizedFeaturesEpoch == start + 1 for n in fleet.sidecars),
             1.0, "every sidecar at the downgrade's epoch")
    answer = update(fleet.address(112), 2, ("group.version", 1, UPGRADE))
    assert answer.ErrorCode == 0

    def everywhere() -> bool:
        for n in fleet.sidecars:
            seen = api_versions(fleet.address(n))
            if seen.FinalizedFeaturesEpoch != start + 2 or finalized(seen) != {"group.version": 1}:
                return False
            assert {68, 69} <= {k.ApiKey for k in seen.ApiKeys}  # KIP-848 served again
        return True

    wait_for(everywhere, 1.0, "every sidecar's ApiVersions at the upgrade's epoch")
    assert read_node(fleet.connect, "/feature") == (node, version + 2)


def update_features_served(fleet: Fleet) -> dict[int, float]:
    """UpdateFeatures requests each live sidecar answered itself (its /metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    served = {}
    for node, sidecar in fleet.sidecars.items():
        if sidecar.process.running:
            served[node] = sum(
                sample.value for family in text_string_to_metric_families(sidecar.scrape())
                for sample in family.samples if sample.name == "ksidecar_requests_total"
                and sample.labels["api"] == "UpdateFeatures" and sample.labels["outcome"] == "local")
    return served


def test_kafka_python_admin_bootstrapped_at_a_sidecar_that_does_not_write(fleet: Fleet) -> None:
    """kafka-python bootstrapped at 113 sends its feature calls to "the controller": the
    sidecar registered under the broker's ControllerId (111, Tansu's node id), which applies
    the writes; 113, which served the bootstrap, shows each within a second."""
    from kafka.admin import KafkaAdminClient

    served = update_features_served(fleet)
    admin = KafkaAdminClient(bootstrap_servers=fleet.address(113), request_timeout_ms=10000)
    try:
        # Described by the controller: by default kafka-python asks any broker Metadata
        # names, and it names all three sidecars, whose supported ranges differ.
        before = admin.describe_features(send_request_to_controller=True)
        downgraded = admin.update_features({"group.version": ("SAFE_DOWNGRADE", 0)})
        wait_for(lambda: "group.version" not in finalized(api_versions(fleet.address(113))), 1.0,
                 "113 without group.version")
        upgraded = admin.update_features({"group.version": 1})
        wait_for(lambda: finalized(api_versions(fleet.address(113))) == {"group.version": 1}, 1.0,
                 "113 at group.version 1")
        # Each sidecar sees the change in its own time (within a second): every one is
        # asked first.
        wait_for(lambda: all(finalized(api_versions(fleet.address(n))) == {"group.version": 1}
                             for n in (111, 112, 113)), 1.0, "every sidecar at group.version 1")
        after = admin.describe_features(send_request_to_controller=True)
    finally:
        admin.close()
    assert downgraded == {"group.version": "OK"} and upgraded == {"group.version": "OK"}
    now = update_features_served(fleet)
    assert {n: now[n] - served[n] for n in now} == {111: 2, 112: 0, 113: 0}
    # Described by 111, the controller (this release's ranges), two epochs apart.
    assert before["group.version"]["supported"] == (0, 1) and before["group.version"]["finalized"] == (1, 1)
    assert before["ksidecar.audit.format"] == {"supported": (0, 1)}  # level 0: not finalized
    assert after["group.version"]["finalized_epoch"] == before["group.version"]["finalized_epoch"] + 2


def produce(address: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": address, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, value=f"{topic}-{i}".encode())
    assert producer.flush(30) == 0


def audit_files(directory: Path) -> list[tuple[bytes, list[dict[str, Any]]]]:
    """Each visible audit file's schema version and rows."""
    found = []
    for path in directory.glob("dt=*/hour=*/part-*.parquet"):
        table = pq.read_table(path)
        found.append((table.schema.metadata[VERSION_KEY.encode()], table.to_pylist()))
    return found


def start_refused(fleet: Fleet, node: int, supported: str) -> subprocess.CompletedProcess[str]:
    """``ksidecar run`` for a sidecar that should refuse to start (it gets 60 s)."""
    config = fleet.work / f"sidecar-{node}.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in {
        "listeners": f"PLAINTEXT://{LOOPBACK}:{free_port(LOOPBACK)}", "sidecar.upstream": fleet.upstream,
        "zookeeper.connect": fleet.connect, "broker.id": str(node), "sidecar.coordinator": "embedded",
        "sidecar.features.supported.override": supported}.items()))
    return subprocess.run([sys.executable, "-m", "proxy.tools.cli", "run", "--config", str(config)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_audit_format_old_files_before_new_after_spark_reads_both(fleet: Fleet, spark: Any) -> None:
    import confluent_kafka
    from confluent_kafka.admin import AdminClient as ConfluentAdmin
    from confluent_kafka.cimpl import NewTopic
    from pyspark.sql import functions as F

    from spark_jobs.common import read_audit

    before, after = (f"audit-{name}-{uuid.uuid4().hex[:6]}" for name in ("before", "after"))
    admin = ConfluentAdmin({"bootstrap.servers": fleet.address(111)})
    for future in admin.create_topics([NewTopic(before, 1, 1), NewTopic(after, 1, 1)]).values():
        future.result(30)
    produce(fleet.address(112), before, 5)  # level 0: both sidecars write schema version 2

    # The old release leaves the fleet (its registration goes with its session); then the
    # operator finalizes level 1 with the CLI, over the wire, as a separate process.
    fleet.sidecars[113].stop()
    wait_for(lambda: update_dry_run(fleet.address(112)) == 0, 15.0, "the fleet without 113")
    cli = subprocess.run([sys.executable, "-m", "proxy.tools.cli", "features", "--bootstrap-server",
                          fleet.address(112), "upgrade", "--feature", "ksidecar.audit.format=1"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (cli.returncode, cli.stdout) == (0, "ksidecar.audit.format was upgraded to 1.\n"), cli.stderr
    # Each audit completes its version 2 files when it takes the new level (nothing else
    # completes them before the roll interval, 5 minutes): then new rows are version 3.
    wait_for(lambda: all(audit_files(fleet.audit[n]) for n in (111, 112)), 10.0, "the audits' v2 files")
    produce(fleet.address(112), after, 7)

    # A sidecar of the old release can no longer join: it refuses to start, saying why.
    refused = start_refused(fleet, 114, OLD_RELEASE)
    assert refused.returncode == 2
    assert ("ksidecar: cannot start: feature ksidecar.audit.format is finalized at level 1 in /feature, but this "
            "sidecar supports ksidecar.audit.format [0, 0]; run a release that supports level 1, or downgrade the "
            "feature first") in refused.stderr.splitlines()

    for node in (111, 112):  # SIGTERM: every audit row lands in a visible file
        assert fleet.sidecars[node].stop() == 0

    software = ("confluent-kafka-python", f"{confluent_kafka.__version__}-rdkafka-{confluent_kafka.libversion()[0]}")
    old = [r for v, rows in audit_files(fleet.audit[111]) if v == b"2" for r in rows]
    new = [r for v, rows in audit_files(fleet.audit[111]) if v == b"3" for r in rows]
    assert {v for v, _ in audit_files(fleet.audit[111])} == {b"2", b"3"}

    def produced(rows: list[dict[str, Any]], topic: str) -> int:
        return sum(r["records"] for r in rows if r["api_name"] == "Produce" and r["topic"] == topic)

    assert (produced(old, before), produced(old, after)) == (5, 0)
    assert (produced(new, before), produced(new, after)) == (0, 7)
    assert all("client_software_name" not in r for r in old)
    assert {(r["client_software_name"], r["client_software_version"]) for r in new
            if r["api_name"] == "Produce"} == {software}
    # 112, in its own audit process, switched too: the producer's bootstrap Metadata there.
    versions_112 = {v for v, _ in audit_files(fleet.audit[112])}
    assert versions_112 == {b"2", b"3"}
    metadata_112 = {(r["client_software_name"], r["client_software_version"])
                    for v, rows in audit_files(fleet.audit[112]) if v == b"3"
                    for r in rows if r["api_name"] == "Metadata"}
    assert software in metadata_112

    # Spark reads both versions together with today's schema (version 2 rows: nulls).
    df = read_audit(spark, str(fleet.audit[111]))
    totals = {(r["topic"], r["client_software_name"]): r["records"] for r in (
        df.where((F.col("api_key") == 0) & F.col("topic").isin(before, after))
        .groupBy("topic", "client_software_name").agg(F.sum("records").alias("records")).collect())}
    assert totals == {(before, None): 5, (after, "confluent-kafka-python"): 7}


def update_dry_run(address: str) -> int:
    """The error of a ValidateOnly upgrade of the audit format to 1 (0 when it would apply)."""
    answer = call(address, 57, 1, {"timeoutMs": 10000, "ValidateOnly": True, "FeatureUpdates": [
        {"Feature": "ksidecar.audit.format", "MaxVersionLevel": 1, "UpgradeType": UPGRADE}]})
    code: int = answer.Results[0].ErrorCode
    return code
