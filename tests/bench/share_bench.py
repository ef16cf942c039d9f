"""``python -m tests.bench.share_bench``: a share group (KIP-932) read through one sidecar,
and what it costs ZooKeeper.

A ``ksidecar run`` process in front of Tansu, with ZooKeeper; ``--records`` records of
``--size`` bytes produced to a three-partition topic first; then ``--members`` confluent-kafka
ShareConsumers (implicit acknowledgement, the default) read them all. Reported: records per
second read, records acknowledged per second, the ZooKeeper transactions that made those
acknowledgements durable (``ksidecar_share_state_transactions``) per second and per thousand
records, and the sidecar's CPU per record. Every loop is bounded (``--timeout``).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient

from proxy.tools.admin_client import AdminClient
from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from proxy.tools.rig.tansu import start_broker
from proxy.tools.rig.zookeeper import start_zookeeper
from tests.bench.procfs import tree_cpu_seconds

PARTITIONS = 3


def metric(sidecar: SidecarServer, name: str) -> float:
    """A sample of the sidecar's /metrics (0 when absent)."""
    try:
        return sidecar.sample(name)
    except (KeyError, ValueError):
        return 0.0


def prepare(bootstrap: str, topic: str, group: str, records: int, size: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient as ConfluentAdmin
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        ResourceType,
    )

    admin = ConfluentAdmin({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(10)
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])]).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    value = b"x" * size
    for i in range(records):
        producer.produce(topic, value, partition=i % PARTITIONS)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def read(bootstrap: str, topic: str, group: str, records: int, members: int, timeout: float) -> float:
    """Seconds from the first record read to the last, ``members`` ShareConsumers reading
    ``records`` records between them (what goes before, the members' join and their first
    assignment, one heartbeat interval after the share-partitions are initialized, is not
    counted)."""
    from confluent_kafka import ShareConsumer

    counts = [0] * members
    done = threading.Event()
    first: list[float] = []

    def member(index: int) -> None:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        consumer.subscribe([topic])
        try:
            deadline = time.monotonic() + timeout
            while not done.is_set() and time.monotonic() < deadline:
                got = sum(1 for m in consumer.poll(0.2) if not m.error())
                if got and not first:
                    first.append(time.monotonic())
                counts[index] += got
                if sum(counts) >= records:
                    ended.append(time.monotonic())
                    done.set()
        finally:
            consumer.close()

    ended: list[float] = []
    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(members)]
    for thread in threads:
        thread.start()
    done.wait(timeout)
    done.set()
    for thread in threads:
        thread.join(30)
    if sum(counts) < records or not ended:
        raise SystemExit(f"only {sum(counts)} of {records} records read in {timeout:g} s")
    return max(ended[0] - first[0], 1e-3)


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print one Markdown table row per member count."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench.share_bench")
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--size", type=int, default=100, help="bytes per record")
    parser.add_argument("--members", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    print("| members | records | read in | records/s | acknowledged/s | ZooKeeper transactions/s "
          "| transactions per 1,000 records | sidecar CPU µs per record |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="share-bench-") as scratch:
        work = Path(scratch)
        with start_broker(work) as broker, start_zookeeper(work) as zookeeper:
            client = KazooClient(hosts=zookeeper.connect, timeout=10)
            client.start(timeout=10)
            client.ensure_path("/share-bench")
            client.stop()
            client.close()
            sidecar = start_sidecar(work, broker.bootstrap, name="sidecar-share-bench", keys={
                "zookeeper.connect": zookeeper.connect_string("/share-bench"), "sidecar.coordinator": "embedded",
                "super.users": "User:ANONYMOUS"})
            try:
                with AdminClient(sidecar.bootstrap) as admin:
                    answer = admin.call(57, 1, {"timeoutMs": 10000, "ValidateOnly": False, "FeatureUpdates": [
                        {"Feature": "share.version", "MaxVersionLevel": 1, "UpgradeType": 1}]})
                assert answer.ErrorCode == 0, answer
                for members in args.members:
                    topic, group = f"bench-{members}-{time.time_ns()}", f"bench-{members}-{time.time_ns()}"
                    prepare(sidecar.bootstrap, topic, group, args.records, args.size)
                    pid = sidecar.process.pid
                    assert pid is not None
                    acked0 = metric(sidecar, "ksidecar_share_acknowledged_records_total")
                    writes0 = metric(sidecar, "ksidecar_share_state_transactions_total")
                    cpu0 = tree_cpu_seconds(pid)
                    took = read(sidecar.bootstrap, topic, group, args.records, members, args.timeout)
                    time.sleep(1.0)  # the last acknowledgements (sent at close) land
                    cpu = tree_cpu_seconds(pid) - cpu0
                    acked = metric(sidecar, "ksidecar_share_acknowledged_records_total") - acked0
                    writes = metric(sidecar, "ksidecar_share_state_transactions_total") - writes0
                    print(f"| {members} | {args.records:,} | {took:.3f} s | {args.records / took:,.0f} "
                          f"| {acked / took:,.0f} | {writes / took:,.0f} | {1000 * writes / max(acked, 1):.1f} "
                          f"| {cpu * 1e6 / args.records:.1f} |", flush=True)
            finally:
                sidecar.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
