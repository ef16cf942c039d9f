"""`python -m proxy.tools.demo`: real Kafka traffic end to end on loopback, then a report.

Starts a real Tansu broker and a real ZooKeeper on free loopback ports (through `proxy.tools.rig`),
creates a topic and a second one it never uses, produces records with confluent-kafka
(anonymously, on the plaintext listener), consumes them in a consumer group with commits
as a SCRAM-SHA-256 user created in ZooKeeper (on the SASL listener), checks every value
arrived, stops everything it started (also on Ctrl-C or SIGTERM), then runs the audit
report's Spark jobs over the audit trail the sidecar wrote and prints a summary and where
the HTML report is. The report finds both topics in the audit's own inventory (no topic
list is given) and the second one unused; the consumer group's JoinGroup and its Fetch
long polls are reported as long polls, not as SLO breaches.

Clients get their bootstrap address from `choose_bootstrap`, which starts a real
`ksidecar run` process in front of the broker (registered in ZooKeeper) and returns its
addresses: every request and response of the demo passes through the sidecar.

Before any traffic the demo finalizes the sidecar feature `ksidecar.audit.format` at level
1 with `ksidecar features upgrade` over the wire (KIP-584, docs/features.md), as an
operator would once every sidecar runs a release that supports it: the audit then writes
schema version 3, whose rows name the client software (confluent-kafka-python, from its
ApiVersions request) that the upgrade readiness report reads.
"""

from __future__ import annotations

import argparse
import json
import secrets
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from proxy.tools.rig.mockcluster import MockCluster, start_mock_cluster
from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from proxy.tools.rig.tansu import TansuServer, start_broker
from proxy.tools.rig.zookeeper import ZooKeeperServer, start_zookeeper

CHROOT = "/ksidecar"
"""The ZooKeeper chroot the sidecars will share (see DESIGN.md, "State in ZooKeeper")."""

ANONYMOUS = "User:ANONYMOUS"
READER = "demo-reader"
"""The SCRAM user the demo's consumer logs in as (created in ZooKeeper by the demo)."""


@dataclass(frozen=True)
class DemoResult:
    """What one demo run did, for the summary."""

    broker: str
    broker_startup: float
    zookeeper: str
    zookeeper_startup: float
    zookeeper_version: str
    bootstrap: str
    via: str
    topic: str
    partitions: int
    group: str
    produced: int
    consumed: int
    committed: int
    missing: int
    elapsed: float
    quota: str = ""
    #: A user's byte-rate quota set through the sidecar (issue 33), in one line.
    client_quota: str = ""
    #: The sidecar's SASL_PLAINTEXT listener (``bootstrap`` is its PLAINTEXT one).
    sasl_bootstrap: str = ""
    #: The principal the consumer authenticated as (SCRAM-SHA-256).
    reader: str = ""
    #: Where the audit Parquet and the HTML report are.
    audit_dir: str = ""
    report: str = ""
    #: Audit rows written, and what the report's traffic table says of the demo topic:
    #: records produced and consumed per principal.
    audit_rows: int = 0
    audited_in: dict[str, int] = field(default_factory=dict)
    audited_out: dict[str, int] = field(default_factory=dict)
    #: The topic the demo creates and never uses.
    idle_topic: str = ""
    #: What the report's unused_topics job says, with no topic list supplied: topic →
    #: partitions from the audit's inventory, and the unused ones.
    inventory: dict[str, int | None] = field(default_factory=dict)
    unused: tuple[str, ...] = ()
    #: APIs the report's SLO table judges and finds over the SLO, and the long polls it
    #: reports apart (held by design, not judged).
    slo_breaches: tuple[str, ...] = ()
    long_polls: tuple[str, ...] = ()
    #: The group's committed offsets as the embedded coordinator stored them in ZooKeeper
    #: (``/consumers/<group>/offsets/<topic>/<partition>``).
    zookeeper_offsets: dict[int, int] = field(default_factory=dict)
    #: What ``ksidecar features upgrade --feature ksidecar.audit.format=1`` printed.
    audit_format: str = ""
    #: Audit rows per schema version (of the files' metadata), and the client software
    #: names the rows carry.
    audit_versions: dict[str, int] = field(default_factory=dict)
    client_software: tuple[str, ...] = ()
    #: How many brokers, each with a sidecar in front (``--brokers``), and what they are.
    brokers: int = 1
    broker_kind: str = "Tansu"
    #: Per sidecar (by broker id, in the deployed shape): requests forwarded to its broker
    #: by API, the groups it owned, and the partitions its broker led.
    forwarded: dict[int, dict[str, int]] = field(default_factory=dict)
    owned_groups: dict[int, tuple[str, ...]] = field(default_factory=dict)
    led: dict[int, tuple[int, ...]] = field(default_factory=dict)
    #: What the policy filter said to a topic outside the demo's prefix.
    policy: str = ""
    #: What ``ksidecar reload`` said, and what the policy said to that topic afterwards.
    reload: str = ""
    #: What the share group (KIP-932) read of the demo topic.
    queue: str = ""
    #: Each sidecar's worker processes (``sidecar.workers``): ``(ready, of)``, by broker id.
    workers: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every record consumed and committed, and the audit report accounts for each."""
        moved = self.missing == 0 and self.consumed == self.produced == self.committed
        coordinated = sum(self.zookeeper_offsets.values()) == self.committed
        audited = (
            self.audited_in == {ANONYMOUS: self.produced}
            and self.audited_out.get(self.reader, 0) >= self.consumed
        )
        inventoried = (
            self.inventory.get(self.topic) == self.partitions
            and self.idle_topic in self.unused and self.topic not in self.unused
        )
        held = not {"JoinGroup", "SyncGroup", "ShareFetch"} & set(self.slo_breaches)
        # Finalized before any traffic: version 3 rows name the client; the only row before
        # it (version 2) may be the UpdateFeatures request itself.
        named = (self.audit_versions.get("2", 0) <= 1 and self.audit_versions.get("3", 0) > 0
                 and "confluent-kafka-python" in self.client_software)
        # In the deployed shape every sidecar whose broker leads a partition forwarded its
        # Produce requests, and the group is owned by exactly one sidecar.
        spread = self.brokers == 1 or (
            all(self.forwarded.get(n, {}).get("Produce", 0) > 0 for n, led in self.led.items() if led)
            and sum(self.group in g for g in self.owned_groups.values()) == 1
        )
        refused = self.brokers > 1 or "POLICY_VIOLATION" in self.policy
        reloaded = "reloaded (ksidecar reload): policy.create.topics.name.pattern" in self.reload and (
            self.brokers > 1 or "was not refused" in self.reload)
        working = bool(self.workers) and all(ready == of for ready, of in self.workers.values())
        queued = f"read {self.produced} of {self.produced} records" in self.queue and ", 0 twice, 0 missing" in self.queue
        return (moved and coordinated and audited and inventoried and held and named and spread and refused
                and reloaded and working and queued and bool(self.report))


@dataclass(frozen=True)
class Bootstrap:
    """Where the demo's clients connect."""

    plaintext: str
    sasl: str
    via: str
    #: The sidecars, by broker id (-1: the one sidecar in front of Tansu learns its id).
    sidecars: dict[int, SidecarServer] = field(default_factory=dict)

    @property
    def first(self) -> str:
        """One sidecar's PLAINTEXT address (for tools that take a single server)."""
        return self.plaintext.split(",")[0]


def choose_bootstrap(
    upstreams: dict[int, str], log_dir: Path, zookeeper: ZooKeeperServer, stack: ExitStack, audit_dir: Path
) -> Bootstrap:
    """Start a sidecar (`ksidecar run`) in front of each broker in `upstreams` (broker id →
    address; id -1: the sidecar learns it from the broker); return their client addresses.

    The sidecars register in ZooKeeper under the demo's chroot and map broker addresses
    through those registrations, so clients only ever see sidecars. Each has a plaintext and
    a SASL listener (SCRAM users from ZooKeeper) and writes the audit trail to `audit_dir`.
    """
    sidecars: dict[int, SidecarServer] = {}
    for node, upstream in upstreams.items():
        name = "ksidecar" if node < 0 else f"ksidecar-{node}"
        keys = {
            "zookeeper.connect": zookeeper.connect_string(CHROOT),
            # Consumer groups are coordinated by the sidecars themselves (docs/coordinator.md):
            # the demo's group and its offsets live in ZooKeeper, not in the broker.
            "sidecar.coordinator": "embedded",
            # The features CLI connects unauthenticated (kafka-features.sh does too, without
            # a command config): on loopback the anonymous principal may update features.
            "super.users": ANONYMOUS,
            "group.initial.rebalance.delay.ms": "500",
            # A share group's members get their partitions at their next heartbeat after the
            # group's share-partitions are initialized (Kafka's 5 s is long for a demo).
            "group.share.heartbeat.interval.ms": "500",
            "tag.demo": "true",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            # The audit trail (KIP-388): Parquet under <work dir>/audit, flushed on stop; the
            # files carry each sidecar's broker id, so a fleet shares the directory.
            "observer.class.names": "audit,prometheus",
            "observer.audit.dir": str(audit_dir),
            # A traffic policy (docs/filters.md): topics are created under the demo's prefix only.
            "filter.class.names": "policy",
            "policy.create.topics.name.pattern": "demo-.*",
            # The demo reloads with `ksidecar reload` (demo_reload), not by the file watch.
            "sidecar.config.watch.ms": "0",
        }
        if node >= 0:
            keys["broker.id"] = str(node)  # as deploy/k8s does, from the pod's ordinal
        sidecar = stack.enter_context(
            start_sidecar(log_dir, upstream, name=name, extra_listeners=("SASL_PLAINTEXT",), keys=keys))
        stack.callback(_print_sidecar_counts, sidecar, "" if node < 0 else f" {node}")
        sidecars[node] = sidecar
    plaintext = ",".join(s.bootstrap for s in sidecars.values())
    sasl = ",".join(f"{s.host}:{s.extra_ports['SASL_PLAINTEXT']}" for s in sidecars.values())
    if len(sidecars) == 1:
        (only,) = sidecars.values()
        via = f"ksidecar run in front of the broker (metrics {only.metrics_url})"
    else:
        via = f"a ksidecar run in front of each of the {len(sidecars)} brokers (as deployed: deploy/k8s)"
    return Bootstrap(plaintext, sasl, via, sidecars)


AUDIT_FORMAT = "ksidecar.audit.format"
SHARE_VERSION = "share.version"


def finalize_audit_format(bootstrap: str) -> str:
    """``ksidecar features upgrade --feature ksidecar.audit.format=1 --feature share.version=1``
    against the sidecar at ``bootstrap`` (UpdateFeatures over the wire: the audit's schema
    version 3, and share groups on); return what it printed.

    Raises ``RuntimeError`` when the upgrade is refused. The sidecar applies the update
    itself and installs it before answering; its audit follows the level at its next tick
    (observers.api.TICK_INTERVAL), so the demo waits a few ticks before its traffic.
    """
    import argparse
    import contextlib
    import io

    from observers.api import TICK_INTERVAL
    from proxy.tools import features_cli

    parser = argparse.ArgumentParser(prog="ksidecar")
    features_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["features", "--bootstrap-server", bootstrap, "upgrade",
                              "--feature", f"{AUDIT_FORMAT}=1", "--feature", f"{SHARE_VERSION}=1"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = features_cli.run(args)
    printed = "; ".join(line.strip() for line in out.getvalue().splitlines() if line.strip())
    if code != 0:
        raise RuntimeError(f"ksidecar features upgrade failed: {printed}")
    time.sleep(3 * TICK_INTERVAL)
    return printed


def add_reader(zookeeper: ZooKeeperServer) -> str:
    """Create the SCRAM user :data:`READER` with a fresh random password; return it.

    The password lives only in this process; ZooKeeper gets salted keys (``ksidecar users``
    does the same from the shell).
    """
    from kazoo.client import KazooClient

    from proxy.auth.sasl.scram import MECHANISMS, derive_credential
    from proxy.auth.user_store import UserStore

    password = secrets.token_urlsafe(18)
    client = KazooClient(hosts=zookeeper.connect_string(CHROOT), timeout=10.0)
    client.start(timeout=10.0)
    try:
        UserStore(client).apply(READER, {
            name: derive_credential(MECHANISMS[name], password, 4096)
            for name in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        })
    finally:
        client.stop()
        client.close()
    return password


def group_offsets(zookeeper: ZooKeeperServer, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets, read from ZooKeeper where the embedded coordinator
    wrote them (docs/coordinator.md, "Stored format")."""
    import json

    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect_string(CHROOT), timeout=10.0)
    client.start(timeout=10.0)
    try:
        base = f"/consumers/{group}/offsets/{topic}"
        return {int(p): int(json.loads(client.get(f"{base}/{p}")[0])["offset"])
                for p in client.get_children(base)}
    finally:
        client.stop()
        client.close()


def _print_sidecar_counts(sidecar: SidecarServer, which: str = "") -> None:
    """Print what the sidecar counted, from its /metrics, before it is stopped."""
    try:
        totals = request_counts(sidecar)
    except OSError as exc:
        print(f"  (could not scrape the sidecar: {exc})")
        return
    lines = ", ".join(f"{api}/{outcome} {n}" for (api, outcome), n in sorted(totals.items()))
    print(f"  sidecar{which} counted requests: {lines}", flush=True)


def worker_counts(sidecar: SidecarServer) -> tuple[int, int]:
    """``(ready, of)``: the sidecar's worker processes (``ksidecar_worker_up``; one process
    has no such series and counts as one ready)."""
    up = [sample.value for family in text_string_to_metric_families(sidecar.scrape())
          for sample in family.samples if sample.name == "ksidecar_worker_up"]
    return (sum(1 for v in up if v == 1.0), len(up)) if up else (1, 1)


def request_counts(sidecar: SidecarServer) -> dict[tuple[str, str], int]:
    """The sidecar's ``ksidecar_requests_total`` by (API, outcome), versions summed."""
    totals: dict[tuple[str, str], int] = {}
    for family in text_string_to_metric_families(sidecar.scrape()):
        for sample in family.samples:
            if sample.name == "ksidecar_requests_total":
                key = (sample.labels["api"], sample.labels["outcome"])
                totals[key] = totals.get(key, 0) + int(sample.value)
    return totals


DEMO_IP = "127.0.0.99"


def demo_ip_quota(bootstrap: str, zookeeper: ZooKeeperServer) -> str:
    """Set a per-IP connection quota through the sidecar (AlterClientQuotas, KIP-612) and
    read it back over the wire and from ZooKeeper; return a one-line account."""

    from proxy.tools.admin_client import AdminClient

    with AdminClient(bootstrap) as client:
        altered = client.call(49, 1, {
            "Entries": [{"Entity": [{"EntityType": "ip", "EntityName": DEMO_IP}],
                         "Ops": [{"Key": "connection_creation_rate", "Value": 10.0, "Remove": False}]}],
            "ValidateOnly": False,
        })
        if altered.Entries[0].ErrorCode:
            return f"AlterClientQuotas refused: {altered.Entries[0].ErrorMessage}"
        described = client.call(48, 1, {"Components": [{"EntityType": "ip", "MatchType": 0, "Match": DEMO_IP}],
                                        "Strict": False})
    rate = described.Entries[0].Values[0].Value if described.Entries else None
    stored = _znode(zookeeper, f"/config/ips/{DEMO_IP}")
    return f"{DEMO_IP} limited to {rate:g} connections/s via AlterClientQuotas; ZooKeeper holds {stored}"


def demo_client_quota(bootstrap: str, zookeeper: ZooKeeperServer) -> str:
    """Give the demo's reader a producer_byte_rate through the sidecar (AlterClientQuotas
    for a user, KIP-55), read it back over the wire and from ZooKeeper; one line."""

    from proxy.tools.admin_client import AdminClient

    entity = [{"EntityType": "user", "EntityName": READER}]
    with AdminClient(bootstrap) as client:
        altered = client.call(49, 1, {"Entries": [{"Entity": entity, "Ops": [
            {"Key": "producer_byte_rate", "Value": 1048576.0, "Remove": False}]}], "ValidateOnly": False})
        if altered.Entries[0].ErrorCode:
            return f"AlterClientQuotas refused: {altered.Entries[0].ErrorMessage}"
        described = client.call(48, 1, {"Components": [{"EntityType": "user", "MatchType": 0, "Match": READER}],
                                        "Strict": True})
    rate = described.Entries[0].Values[0].Value if described.Entries else None
    quota = json.loads(_znode(zookeeper, f"/config/users/{READER}"))["config"].get("producer_byte_rate")  # (its SCRAM keys stay unshown)
    if quota is None:
        return f"user {READER} held to producer_byte_rate {rate:.0f} B/s via AlterClientQuotas, by the broker"
    return (f"user {READER} held to producer_byte_rate {rate:.0f} B/s via AlterClientQuotas, enforced by the "
            f"sidecar (sidecar.client.quotas=auto); ZooKeeper /config/users/{READER} holds producer_byte_rate={quota}")


def _znode(zookeeper: ZooKeeperServer, path: str) -> str:
    """The text of one znode under the demo's chroot."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zookeeper.connect_string(CHROOT), timeout=10)
    zk.start(timeout=10)
    try:
        return str(zk.get(path)[0].decode())
    finally:
        zk.stop()
        zk.close()


def demo_policy(bootstrap: str, name: str) -> str:
    """Ask to create a topic the policy filter refuses; return a one-line account."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(name, num_partitions=1)])[name]
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        error = exc.args[0]
        return f"CreateTopics {name} refused: {error.name()} ({error.str()})"
    return f"CreateTopics {name} was not refused"


def demo_reload(sidecars: Sequence[SidecarServer], bootstrap: str, scratch: str | None) -> str:
    """Widen the policy's topic-name pattern in each sidecar's file, ``ksidecar reload``
    each (no restart), then (``scratch``: the name refused before) create that topic; return
    a one-line account."""
    import subprocess

    lines = []
    for sidecar in sidecars:
        assert sidecar.config_path is not None
        text = sidecar.config_path.read_text().replace(
            "policy.create.topics.name.pattern=demo-.*", "policy.create.topics.name.pattern=(demo|scratch)-.*")
        sidecar.config_path.write_text(text)
        done = subprocess.run([sys.executable, "-m", "proxy.tools.cli", "reload", "--config",
                               str(sidecar.config_path)], capture_output=True, text=True, timeout=60, check=False)
        lines.append((done.stdout or done.stderr).strip())
    account = f"ksidecar reload: {lines[0]}" + (f" (and {len(lines) - 1} more sidecars)" if len(lines) > 1 else "")
    if scratch is not None:
        account += "; then " + demo_policy(bootstrap, scratch)
    return account


def demo_queue(bootstrap: str, topic: str, group: str, records: int) -> str:
    """Two confluent-kafka ShareConsumers in one share group (KIP-932) read the demo topic as
    a queue: each record goes to one of them; return a one-line account."""
    import threading

    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                                  incremental_configs=[entry])]).values():
        future.result(30)
    got: list[list[bytes]] = [[], []]
    done = threading.Event()

    def member(seen: list[bytes]) -> None:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        consumer.subscribe([topic])
        try:
            deadline = time.monotonic() + 30
            while not done.is_set() and time.monotonic() < deadline:
                seen.extend(m.value() or b"" for m in consumer.poll(0.2) if not m.error())
                if sum(len(g) for g in got) >= records:
                    done.set()
        finally:
            consumer.close()

    threads = [threading.Thread(target=member, args=(seen,), daemon=True) for seen in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(40)
    values = [v for seen in got for v in seen]
    twice = len(values) - len(set(values))
    return (f"share group {group}: 2 ShareConsumers read {len(set(values))} of {records} records as a queue "
            f"({len(got[0])} and {len(got[1])}), {twice} twice, {records - len(set(values))} missing")


def prepare_zookeeper(zookeeper: ZooKeeperServer) -> str:
    """Create the sidecars' chroot node; return the server's version."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect, timeout=10.0)
    client.start(timeout=10.0)
    try:
        client.ensure_path(CHROOT)
        return ".".join(str(part) for part in client.server_version())
    finally:
        client.stop()
        client.close()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create `topic` with `partitions` partitions (replication factor 1)."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions)])
    futures[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, values: Sequence[bytes]) -> int:
    """Produce `values` (acks=all); return how many the broker acknowledged."""
    from confluent_kafka import Producer

    acknowledged = 0
    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal acknowledged
        if err is None:
            acknowledged += 1
        else:
            failures.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=value, on_delivery=on_delivery)
        producer.poll(0)
    left = producer.flush(30)
    if left or failures:
        raise RuntimeError(f"{left} records unsent, {len(failures)} failed: {failures[:3]}")
    return acknowledged


def consume(
    bootstrap: str, topic: str, group: str, partitions: int, expected: int,
    login: dict[str, str] | None = None, timeout: float = 60.0,
) -> tuple[list[bytes], int]:
    """Consume up to `expected` records in `group`, committing after each batch (`login`:
    librdkafka's SASL settings, if any).

    Returns the values received and the sum of the group's committed offsets.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **(login or {}),
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # Tansu holds a JoinGroup for session.timeout.ms / 2: keep the join quick.
            "session.timeout.ms": 6000,
        }
    )
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(values) < expected and time.monotonic() < deadline:
            batch = consumer.consume(num_messages=500, timeout=1.0)
            for message in batch:
                if message.error() is not None:
                    raise RuntimeError(f"consume error: {message.error()}")
                values.append(message.value() or b"")
            if batch:
                consumer.commit(asynchronous=False)
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        committed = sum(max(tp.offset, 0) for tp in consumer.committed(wanted, timeout=10))
    finally:
        consumer.close()
    return values, committed


def run(work_dir: Path, records: int = 1000, partitions: int = 3, brokers: int = 1) -> DemoResult:
    """Start the components under `work_dir`, run the traffic, stop everything, run the
    audit report; return the result.

    `brokers` 1 puts one sidecar in front of Tansu; more runs librdkafka's mock cluster of
    that many brokers with a sidecar in front of each (the deployed shape: leaders spread,
    groups placed over the fleet).
    """
    if brokers < 1:
        raise ValueError(f"--brokers must be at least 1, not {brokers}")
    began = time.monotonic()
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"demo-{suffix}", f"demo-group-{suffix}"
    idle_topic = f"demo-idle-{suffix}"
    values = [f"record-{i:06d}".encode() for i in range(records)]
    audit_dir = work_dir / "audit"
    with ExitStack() as stack:
        mock: MockCluster | None = None
        if brokers == 1:
            broker: TansuServer | MockCluster = stack.enter_context(start_broker(work_dir))
            upstreams = {-1: broker.bootstrap}
            kind = "Tansu"
        else:
            broker = mock = stack.enter_context(start_mock_cluster(brokers, log_dir=work_dir))
            upstreams = {n: f"{h}:{p}" for n, (h, p) in mock.brokers.items()}
            kind = f"librdkafka's mock cluster, {brokers} brokers"
        zookeeper = stack.enter_context(start_zookeeper(work_dir))
        zk_version = prepare_zookeeper(zookeeper)
        password = add_reader(zookeeper)
        clients = choose_bootstrap(upstreams, work_dir, zookeeper, stack, audit_dir)
        audit_format = finalize_audit_format(clients.first)
        print(f"ksidecar demo: ksidecar features upgrade --feature {AUDIT_FORMAT}=1 --feature {SHARE_VERSION}=1: "
              f"{audit_format} (the audit now writes schema version 3, with client software; share groups on)",
              flush=True)

        led: dict[int, tuple[int, ...]] = {}
        if mock is None:
            create_topic(clients.plaintext, topic, partitions)
            create_topic(clients.plaintext, idle_topic, 1)  # never produced to nor fetched from
        else:  # the mock serves no CreateTopics: its control API, leaders spread
            mock.create_topic(topic, partitions)
            mock.create_topic(idle_topic, 1)
            await_topics(clients.plaintext, {topic: partitions, idle_topic: 1})
            leaders = mock.leaders(topic)
            led = {n: tuple(p for p, leader in sorted(leaders.items()) if leader == n) for n in mock.brokers}
        produced = produce(clients.plaintext, topic, values)
        login = {
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": READER, "sasl.password": password,
        }
        received, committed = consume(clients.sasl, topic, group, partitions, records, login)
        quota = demo_ip_quota(clients.first, zookeeper)
        client_quota = demo_client_quota(clients.first, zookeeper)
        policy = (demo_policy(clients.first, f"scratch-{suffix}") if mock is None else
                  "not shown: librdkafka's mock cluster serves no CreateTopics (the one-broker demo shows it)")
        queue = demo_queue(clients.plaintext, topic, f"demo-queue-{suffix}", records)
        print(f"ksidecar demo: {queue}", flush=True)
        reload = demo_reload(list(clients.sidecars.values()), clients.first,
                             f"scratch-{suffix}" if mock is None else None)
        stored = group_offsets(zookeeper, group, topic)
        forwarded = {n: forwarded_by_api(s) for n, s in clients.sidecars.items()}
        workers = {n: worker_counts(s) for n, s in clients.sidecars.items()}
        result = DemoResult(
            broker=broker.bootstrap,
            broker_startup=broker.process.startup_seconds or 0.0,
            zookeeper=zookeeper.connect_string(CHROOT),
            zookeeper_startup=zookeeper.process.startup_seconds or 0.0,
            zookeeper_version=zk_version,
            bootstrap=clients.plaintext,
            sasl_bootstrap=clients.sasl,
            via=clients.via,
            topic=topic,
            partitions=partitions,
            group=group,
            produced=produced,
            consumed=len(received),
            committed=committed,
            missing=len(set(values) - set(received)),
            quota=quota,
            client_quota=client_quota,
            policy=policy,
            reload=reload,
            queue=queue,
            elapsed=0.0,
            reader=f"User:{READER}",
            audit_dir=str(audit_dir),
            idle_topic=idle_topic,
            zookeeper_offsets=stored,
            audit_format=audit_format,
            brokers=brokers,
            broker_kind=kind,
            forwarded=forwarded if mock is not None else {},
            owned_groups=owned_groups(zookeeper) if mock is not None else {},
            led=led,
            workers=workers,
        )
    # The sidecars have stopped: their audit files are complete. Now the Spark report.
    print("ksidecar demo: traffic done; running the audit report's Spark jobs", flush=True)
    return audit_report(result, work_dir / "report", began)


def await_topics(bootstrap: str, topics: dict[str, int], timeout: float = 15.0) -> None:
    """Wait until Metadata through the sidecars lists each topic with its partitions (an
    operator's check that topics made outside the sidecars are visible through them)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        listed = admin.list_topics(timeout=10).topics
        seen = {name: len(listed[name].partitions) for name in topics if name in listed}
        if seen == topics:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topics not listed through the sidecars within {timeout:g} s: {seen} of {topics}")
        time.sleep(0.1)


def forwarded_by_api(sidecar: SidecarServer) -> dict[str, int]:
    """Requests the sidecar forwarded to its broker, by API (from its /metrics)."""
    return {api: n for (api, outcome), n in sorted(request_counts(sidecar).items()) if outcome == "forwarded"}


def owned_groups(zookeeper: ZooKeeperServer) -> dict[int, tuple[str, ...]]:
    """Which sidecar owns which group: the claims under ``/coordinators/groups`` (each
    group's ephemeral ``owner`` node names its sidecar's broker id)."""
    import json

    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    from coordinator.claims import CLAIMS_ROOT
    from coordinator.paths import unescape

    client = KazooClient(hosts=zookeeper.connect_string(CHROOT), timeout=10.0)
    client.start(timeout=10.0)
    owned: dict[int, list[str]] = {}
    try:
        for child in client.get_children(CLAIMS_ROOT) if client.exists(CLAIMS_ROOT) else []:
            try:
                raw, _ = client.get(f"{CLAIMS_ROOT}/{child}/owner")
            except NoNodeError:
                continue
            owned.setdefault(int(json.loads(raw)["broker_id"]), []).append(unescape(child))
    finally:
        client.stop()
        client.close()
    return {n: tuple(sorted(groups)) for n, groups in sorted(owned.items())}


def audit_report(result: DemoResult, out: Path, began: float) -> DemoResult:
    """Run every Spark job over the demo's audit and read back the demo topic's traffic."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from proxy.tools.rig.spark import start_spark, stop_spark
    from spark_jobs.report import run_all

    audit_rows = ds.dataset(result.audit_dir, format="parquet", partitioning="hive").count_rows()
    versions, software = audit_versions(Path(result.audit_dir))
    # The rig's session (as the tests' is) rather than the report's own: a JVM tuned to start
    # quickly, for an audit of a few hundred rows; its output goes to spark.log beside the rest.
    # A process that already runs Spark (the demo called from a test) lends its session: a
    # process has one SparkContext at most.
    running = SparkContext._active_spark_context is not None
    spark = (SparkSession.builder.getOrCreate() if running
             else start_spark(out.parent, app_name="ksidecar-demo-report"))
    try:
        page = run_all(result.audit_dir, out, spark=spark)
    finally:
        if not running:
            stop_spark(spark)
    traffic = pq.read_table(out / "data" / "traffic" / "topics")
    mine = traffic.filter(pc.equal(traffic["topic"], result.topic))
    audited_in: dict[str, int] = {}
    audited_out: dict[str, int] = {}
    for row in mine.to_pylist():
        for totals, column in ((audited_in, "records_in"), (audited_out, "records_out")):
            if row[column]:
                totals[row["principal"]] = totals.get(row["principal"], 0) + int(row[column])
    topics = pq.read_table(out / "data" / "unused_topics" / "topics").to_pylist()
    latency = pq.read_table(out / "data" / "latency_slo" / "latency")
    breaches = latency.filter(pc.greater(latency["over_slo"], 0))
    polls = pq.read_table(out / "data" / "latency_slo" / "long_polls")
    return replace(
        result, report=str(page), audit_rows=audit_rows, audited_in=audited_in,
        audited_out=audited_out, elapsed=time.monotonic() - began,
        inventory={r["topic"]: r["partitions"] for r in topics},
        unused=tuple(r["topic"] for r in topics if r["unused"]),
        slo_breaches=tuple(sorted(set(breaches["api_name"].to_pylist()))),
        long_polls=tuple(sorted(set(polls["api_name"].to_pylist()))),
        audit_versions=versions, client_software=software,
    )


def audit_versions(audit_dir: Path) -> tuple[dict[str, int], tuple[str, ...]]:
    """The audit's rows per schema version (from each file's metadata), and the client
    software names in them."""
    import pyarrow.parquet as pq

    from observers.audit_schema import VERSION_KEY

    versions: dict[str, int] = {}
    names: set[str] = set()
    for path in audit_dir.glob("dt=*/hour=*/part-*.parquet"):
        file = pq.ParquetFile(path)
        schema = file.schema_arrow
        version = (schema.metadata or {}).get(VERSION_KEY.encode(), b"?").decode()
        versions[version] = versions.get(version, 0) + file.metadata.num_rows
        if "client_software_name" in schema.names:
            column = pq.read_table(path, columns=["client_software_name"]).column(0)
            names.update(name for name in column.to_pylist() if name)
    return dict(sorted(versions.items())), tuple(sorted(names))


def summary(result: DemoResult) -> str:
    """The summary printed at the end of a run."""
    rows = [
        ("broker", f"{result.broker} ({result.broker_kind}, ready in {result.broker_startup:.2f} s)"),
        (
            "zookeeper",
            f"{result.zookeeper} (ZooKeeper {result.zookeeper_version}, "
            f"ready in {result.zookeeper_startup:.2f} s)",
        ),
        ("bootstrap", f"{result.bootstrap} (PLAINTEXT), {result.sasl_bootstrap} (SASL): {result.via}"),
        ("topic", f"{result.topic} ({result.partitions} partitions)"),
        ("produced", f"{result.produced} records"),
        (
            "consumed",
            f"{result.consumed} records in group {result.group}, {result.missing} missing",
        ),
        ("committed", f"{result.committed} (sum of the group's committed offsets)"),
        ("groups", f"coordinated by {_coordinator(result)} (sidecar.coordinator=embedded); offsets in "
                   f"ZooKeeper /consumers/{result.group}/offsets/{result.topic}: "
                   + ", ".join(f"{p}={o}" for p, o in sorted(result.zookeeper_offsets.items()))),
        *_fleet_rows(result),
        ("workers", _workers_line(result)),
        ("quota", result.quota),
        ("client quota", result.client_quota),
        ("policy", result.policy + " (filter.class.names=policy)"),
        ("reload", result.reload),
        ("queue", result.queue),
        ("features", f"{AUDIT_FORMAT} and {SHARE_VERSION} finalized at 1 before any traffic "
                     f"({result.audit_format or 'not done'})"),
        ("audit", f"{result.audit_rows} rows in {result.audit_dir} ("
                  + ", ".join(f"schema v{v}: {n}" for v, n in result.audit_versions.items())
                  + f"); client software: {', '.join(result.client_software) or 'none recorded'}"),
        ("traffic", _traffic_line(result)),
        ("inventory", ", ".join(f"{t} ({n} partitions)" for t, n in sorted(result.inventory.items()))
         + " (from the audit's Metadata rows; no list supplied)"),
        ("unused", ", ".join(result.unused) or "none"),
        ("SLO", ("over the SLO: " + ", ".join(result.slo_breaches) if result.slo_breaches
                 else "no API over the SLO")
         + f"; long polls held by design, not judged: {', '.join(result.long_polls) or 'none'}"),
        ("report", result.report or "not written"),
        ("elapsed", f"{result.elapsed:.1f} s"),
        ("result", "OK" if result.ok else "FAILED"),
    ]
    return "\n".join(f"  {name:<10} {text}" for name, text in rows)


def _workers_line(result: DemoResult) -> str:
    """How many processes each sidecar ran (sidecar.workers=0: as many as the CPUs it is
    given, one when it shares the host's with the broker)."""
    counts = sorted({of for _, of in result.workers.values()})
    ready = all(r == of for r, of in result.workers.values())
    each = " or ".join(str(n) for n in counts) or "?"
    return (f"{each} worker process(es) per sidecar, {'all' if ready else 'NOT all'} ready (sidecar.workers=0: as "
            "many as the CPUs a sidecar is given by a CPU limit or cpuset, else one; with more than one, a "
            "supervisor admits connections and owns the coordinator)")


def _coordinator(result: DemoResult) -> str:
    """Which sidecar coordinated the demo's group."""
    owners = [n for n, groups in result.owned_groups.items() if result.group in groups]
    if result.brokers == 1 or not owners:
        return "the sidecar"
    return f"sidecar {owners[0]} (its owner by placement over the fleet)"


def _fleet_rows(result: DemoResult) -> list[tuple[str, str]]:
    """In the deployed shape, one row per sidecar: what it forwarded to its broker, the
    partitions its broker led and the groups it owned."""
    rows = []
    for node in sorted(result.forwarded):
        apis = ", ".join(f"{api} {n}" for api, n in result.forwarded[node].items()) or "nothing"
        led = ", ".join(str(p) for p in result.led.get(node, ())) or "none"
        owned = ", ".join(result.owned_groups.get(node, ())) or "none"
        rows.append((f"sidecar {node}", f"broker {node} led partitions {led}; forwarded {apis}; owns groups: {owned}"))
    return rows


def _traffic_line(result: DemoResult) -> str:
    """What the report's traffic job says of the demo topic, per principal."""
    parts = [f"{p} produced {n}" for p, n in sorted(result.audited_in.items())]
    parts += [f"{p} consumed {n}" for p, n in sorted(result.audited_out.items())]
    return f"{result.topic}: " + ("; ".join(parts) or "nothing audited") + " (records, from the report)"


class _Signalled(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so the same cleanup runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    raise _Signalled(signum)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options (``python -m proxy.tools.demo`` and ``ksidecar demo``)."""
    parser.add_argument("--records", type=int, default=1000, help="records to produce (1000)")
    parser.add_argument("--partitions", type=int, default=3, help="topic partitions (3)")
    parser.add_argument("--brokers", type=int, default=1,
                        help="brokers, each with a sidecar in front (1: Tansu; more: librdkafka's mock cluster)")
    parser.add_argument(
        "--work-dir", type=Path, help="where logs, the audit and the report go (default: a new temp dir)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m proxy.tools.demo", description=__doc__.split("\n")[0]
    )
    add_arguments(parser)
    return main_from_args(parser.parse_args(argv))


def main_from_args(args: argparse.Namespace) -> int:
    """Run the demo with parsed options; returns the process exit code."""
    if args.brokers < 1:
        print(f"demo: --brokers must be at least 1, not {args.brokers}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGHUP, _raise_interrupt)
    work_dir: Path = args.work_dir or Path(tempfile.mkdtemp(prefix="ksidecar-demo-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    brokers = "Tansu" if args.brokers == 1 else f"librdkafka's mock cluster ({args.brokers} brokers)"
    print(f"ksidecar demo: starting {brokers} and ZooKeeper (logs in {work_dir})", flush=True)
    try:
        result = run(work_dir, records=args.records, partitions=args.partitions, brokers=args.brokers)
    except KeyboardInterrupt as exc:
        print(f"interrupted: components stopped (logs in {work_dir})", file=sys.stderr)
        return 128 + (exc.signum if isinstance(exc, _Signalled) else signal.SIGINT)
    except Exception as exc:
        print(f"demo failed: {exc}\n(logs in {work_dir})", file=sys.stderr)
        return 1
    print(summary(result))
    print(f"  {'logs':<10} {work_dir}")
    if result.report:
        print(f"\nOpen the audit report: file://{result.report}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
