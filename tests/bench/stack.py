"""The three things a benchmark compares, as real processes: broker, sidecar, peer.

* **direct**: a Tansu broker (in-memory storage);
* **sidecar**: a real ``ksidecar run`` subprocess in front of it (its own process and
  GIL, as in production);
* **peer**: Tansu's own Kafka proxy (Rust) in front of the same broker;
* **relay**: a minimal TCP relay (:mod:`tests.bench.relay`): the floor of what an extra
  userspace hop costs here. It fronts a broker of its own that advertises the relay's
  port, so a client library that follows Metadata (confluent-kafka) keeps every request
  on the relay instead of bypassing it after bootstrap.

Tansu keeps every record in memory, so heavy workloads get a fresh stack
(:meth:`Stack.restart`). Every process is stopped by its PID (``ManagedProcess``).
"""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from proxy.tools.rig.ports import LOOPBACK, free_port
from proxy.tools.rig.process import ManagedProcess, Service, start_on_port
from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from proxy.tools.rig.tansu import (
    TansuServer,
    _tansu_process,  # the broker's environment and readiness probe, reused as they are
    find_tansu,
    start_broker,
    start_proxy,
)
from proxy.tools.rig.zookeeper import ZooKeeperServer, start_zookeeper
from tests.bench import procfs

TARGETS = ("direct", "sidecar", "peer")
"""Where a workload sends its traffic: the broker, through the sidecar, through the peer."""
#: The latency workloads (and the one-in-flight produce) also measure the minimal relay.
LATENCY_TARGETS = ("direct", "relay", "sidecar", "peer")

#: Sidecar settings for benchmarking: idle connections must stay open for the RSS test.
SIDECAR_KEYS = {"connections.max.idle.ms": "3600000"}
#: ``sidecar.workers`` of every benchmarked sidecar unless ``--workers`` says otherwise: one
#: process, so that a ``--baseline`` commit from before the key (which ignores it, with a
#: warning) is compared like with like.
DEFAULT_WORKERS = 1


@dataclass
class Stack:
    """A running broker, sidecar and peer; ``address(target)`` says where to connect."""

    log_dir: Path
    broker: TansuServer | None = None
    sidecar: SidecarServer | None = None
    peer: TansuServer | None = None
    relay: Service | None = None
    #: With ``audit=True``: a second sidecar with the audit observer on (target "audit").
    audit: SidecarServer | None = None
    #: With ``acls_enabled``: a sidecar enforcing Kafka ACLs (target "acls") and its ZooKeeper.
    acls: SidecarServer | None = None
    zookeeper: ZooKeeperServer | None = None
    #: The broker behind the relay (advertising the relay's address).
    relayed: TansuServer | None = None
    generation: int = 0
    extra_keys: dict[str, str] = field(default_factory=dict)
    #: Also run the "audit" target: ``observer.class.names=audit``, overflow=block.
    audit_enabled: bool = False
    #: Also run the "acls" target: ``sidecar.authorizer=acls`` with :data:`BENCH_ACLS` ACLs.
    acls_enabled: bool = False
    #: Topic-name prefixes the "acls" target's ACLs deny the bench's clients (hidden from
    #: their Metadata: the cluster-size workloads narrow to half the topics).
    acl_hidden_prefixes: tuple[str, ...] = ()
    #: Also run the "baseline" target: a sidecar from this checkout of another commit.
    baseline_source: Path | None = None
    baseline: SidecarServer | None = None
    #: ``sidecar.workers`` of every sidecar of the stack (``--workers``).
    workers: int = DEFAULT_WORKERS

    @property
    def sidecar_keys(self) -> dict[str, str]:
        """The keys every sidecar of the stack gets (before its own)."""
        return {**SIDECAR_KEYS, "sidecar.workers": str(self.workers), **self.extra_keys}

    def start(self) -> Stack:
        """Start the broker, then the sidecar and the peer in front of it."""
        self.generation += 1
        logs = self.log_dir / f"stack-{self.generation}"
        logs.mkdir(parents=True, exist_ok=True)
        try:
            self.broker = start_broker(logs)
            self.sidecar = start_sidecar(
                logs, self.broker.bootstrap, keys=self.sidecar_keys
            )
            self.peer = start_proxy(logs, self.broker.bootstrap)
            self.relayed, self.relay = start_relay(logs)
            if self.audit_enabled:
                audit_keys = {"observer.class.names": "audit",
                              "observer.audit.dir": str(logs / "audit"),
                              "observer.audit.overflow": "block"}
                self.audit = start_sidecar(logs, self.broker.bootstrap, name="ksidecar-audit",
                                           keys={**self.sidecar_keys, **audit_keys})
            if self.baseline_source is not None:
                self.baseline = start_sidecar(logs, self.broker.bootstrap, name="ksidecar-baseline",
                                              keys=self.sidecar_keys,
                                              source=self.baseline_source)
            if self.acls_enabled:
                self.zookeeper = start_zookeeper(logs)
                seed_acls(self.zookeeper.connect, hidden=self.acl_hidden_prefixes)
                acl_keys = {"sidecar.authorizer": "acls", "zookeeper.connect": self.zookeeper.connect}
                self.acls = start_sidecar(logs, self.broker.bootstrap, name="ksidecar-acls",
                                          keys={**self.sidecar_keys, **acl_keys})
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop whatever runs (peer and sidecar first)."""
        for name in ("baseline", "acls", "zookeeper", "audit", "relay", "relayed", "peer", "sidecar", "broker"):
            service: Service | None = getattr(self, name)
            if service is not None:
                with contextlib.suppress(Exception):
                    service.process.stop()
                setattr(self, name, None)

    def restart(self) -> None:
        """A fresh stack (empties the broker's memory)."""
        self.stop()
        self.start()

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def service(self, target: str) -> Service:
        """The process traffic for ``target`` connects to."""
        service = {"direct": self.broker, "sidecar": self.sidecar, "peer": self.peer,
                   "relay": self.relay, "audit": self.audit, "acls": self.acls,
                   "baseline": self.baseline}[target]
        if service is None:
            raise RuntimeError("stack is not running")
        return service

    def address(self, target: str) -> str:
        """``host:port`` to connect to for ``target``."""
        return self.service(target).address

    def pid(self, target: str) -> int:
        """The PID of the process that serves ``target``."""
        pid = self.service(target).process.pid
        assert pid is not None
        return pid

    def rss(self, target: str) -> int:
        """Resident set size in bytes of the processes serving ``target`` (a sidecar with
        workers is a tree: the sum over it)."""
        return procfs.tree_rss_bytes(self.pid(target))

    def cpu_seconds(self, target: str) -> float:
        """User + system CPU seconds used so far by the processes serving ``target`` (its
        whole tree: supervisor, fork server, workers)."""
        return procfs.tree_cpu_seconds(self.pid(target))

    @property
    def broker_address(self) -> str:
        """The broker itself (for setup: topics, pre-filling)."""
        return self.address("direct")

    def broker_address_for(self, target: str) -> str:
        """The broker behind ``target`` (the relay has its own), for setup."""
        if target == "relay":
            if self.relayed is None:
                raise RuntimeError("stack is not running")
            return self.relayed.address
        return self.address("direct")

    def broker_pids(self) -> list[int]:
        """Every broker process of the stack (for the background probe)."""
        return [s.process.pid for s in (self.broker, self.relayed)
                if s is not None and s.process.pid is not None]


def _accepts(host: str, port: int) -> bool:
    with socket.create_connection((host, port), timeout=1.0):
        return True


def start_relayed_broker(log_dir: Path, advertised: str) -> TansuServer:
    """A Tansu broker (in-memory) that tells clients to come back at ``advertised``."""
    binary = find_tansu()

    def build(port: int) -> ManagedProcess:
        argv = [str(binary), "broker", "--cluster-id", "ksidecar-relayed",
                "--listener-url", f"tcp://{LOOPBACK}:{port}",
                "--advertised-listener-url", advertised,
                "--storage-engine", "memory://tansu/"]
        return _tansu_process("tansu-relayed", argv, log_dir, LOOPBACK, port, 30.0, None)

    port, process = start_on_port(build, None)
    return TansuServer(process, LOOPBACK, port)


def start_relay(log_dir: Path) -> tuple[TansuServer, Service]:
    """A broker advertising the relay's port, and ``python -m tests.bench.relay`` before it."""
    relay_port = free_port(LOOPBACK)
    broker = start_relayed_broker(log_dir, f"tcp://{LOOPBACK}:{relay_port}")

    def build(port: int) -> ManagedProcess:
        argv = [sys.executable, "-m", "tests.bench.relay", str(port), broker.host,
                str(broker.port)]
        return ManagedProcess("relay", argv, log_path=log_dir / "relay.log",
                              probe=lambda: _accepts(LOOPBACK, port),
                              cwd=Path(__file__).resolve().parents[2])

    try:
        port, process = start_on_port(build, relay_port)
    except BaseException:
        broker.process.stop()
        raise
    return broker, Service(process, LOOPBACK, port)


#: ACLs in ZooKeeper for the "acls" target.
BENCH_ACLS = 100


def seed_acls(connect: str, count: int = BENCH_ACLS, hidden: Sequence[str] = ()) -> None:
    """Write ``count`` ACLs in Kafka's format: the bench's anonymous clients may do anything
    (a wildcard topic, group and the cluster) except with the topics prefixed ``hidden``
    (denied), and the rest are other users' literal and prefixed topic and group ACLs, so
    every decision looks through a realistic index."""
    from kazoo.client import KazooClient

    from proxy.auth.acl.model import (
        CLUSTER_NAME,
        AclBinding,
        AclEntry,
        Operation,
        PatternType,
        Permission,
        ResourcePattern,
        ResourceType,
    )
    from proxy.auth.acl.store import AclStore

    def binding(rtype: ResourceType, name: str, principal: str, op: Operation,
                pattern: PatternType = PatternType.LITERAL, permission: Permission = Permission.ALLOW) -> AclBinding:
        return AclBinding(ResourcePattern(rtype, name, pattern), AclEntry(principal, "*", op, permission))

    anonymous = "User:ANONYMOUS"
    bindings = [binding(ResourceType.TOPIC, "*", anonymous, Operation.ALL),
                binding(ResourceType.GROUP, "*", anonymous, Operation.ALL),
                binding(ResourceType.CLUSTER, CLUSTER_NAME, anonymous, Operation.ALL)]
    bindings += [binding(ResourceType.TOPIC, prefix, anonymous, Operation.ALL, PatternType.PREFIXED, Permission.DENY)
                 for prefix in hidden]
    i = 0
    while len(bindings) < count:
        kind = (ResourceType.TOPIC, ResourceType.GROUP)[i % 2]
        pattern = (PatternType.LITERAL, PatternType.PREFIXED)[(i // 2) % 2]
        bindings.append(binding(kind, f"team{i}-", f"User:user{i}", Operation.READ, pattern))
        i += 1
    client = KazooClient(hosts=connect, timeout=15)
    client.start(timeout=15)
    try:
        store = AclStore(client)
        store.start()
        failures = [f for f in store.create(bindings) if f is not None]
        if failures:
            raise RuntimeError(f"seeding ACLs failed: {failures[0]}")
    finally:
        client.stop()
        client.close()
