"""The ACL store against a real ZooKeeper: Kafka's paths and JSON, announcements, watches, CAS."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from proxy.auth.acl.evaluate import AclIndex
from proxy.auth.acl.model import (
    AclBinding,
    AclEntry,
    BindingFilter,
    EntryFilter,
    Operation,
    PatternFilter,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from proxy.auth.acl.store import AclStore
from proxy.tools.rig.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.integration

ORDERS_EU = ResourcePattern(ResourceType.TOPIC, "orders-eu")
ORDERS = ResourcePattern(ResourceType.TOPIC, "orders-", PatternType.PREFIXED)
ALICE_WRITE = AclEntry("User:alice", "*", Operation.WRITE, Permission.ALLOW)
ALICE_DENY = AclEntry("User:alice", "10.0.0.1", Operation.WRITE, Permission.DENY)
BILLING_READ = AclBinding(ResourcePattern(ResourceType.GROUP, "billing"),
                          AclEntry("User:alice", "*", Operation.READ, Permission.ALLOW))


@pytest.fixture
def chroot(zookeeper: ZooKeeperServer, zk_path: str) -> str:
    root = KazooClient(hosts=zookeeper.connect, timeout=10)
    root.start(timeout=10)
    root.ensure_path(zk_path)
    root.stop()
    root.close()
    return zookeeper.connect_string(zk_path)


@pytest.fixture
def clients(chroot: str) -> Iterator[list[KazooClient]]:
    made: list[KazooClient] = []
    yield made
    for client in made:
        client.stop()
        client.close()


def client(chroot: str, made: list[KazooClient]) -> KazooClient:
    c = KazooClient(hosts=chroot, timeout=10)
    c.start(timeout=10)
    made.append(c)
    return c


class Watcher:
    """Collects the snapshots a store publishes; waits (bounded) for one that passes a test."""

    def __init__(self) -> None:
        self.latest = AclIndex()
        self.changed = threading.Condition()

    def __call__(self, index: AclIndex) -> None:
        with self.changed:
            self.latest = index
            self.changed.notify_all()

    def wait_for(self, test: Callable[[AclIndex], bool], timeout: float = 1.0) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: test(self.latest), timeout)


def test_writes_kafkas_paths_json_and_announcements(chroot: str, clients: list[KazooClient]) -> None:
    zk = client(chroot, clients)
    store = AclStore(zk)
    store.start()
    assert store.create([AclBinding(ORDERS_EU, ALICE_DENY), AclBinding(ORDERS, ALICE_WRITE), BILLING_READ]) == \
        [None, None, None]
    literal = json.loads(zk.get("/kafka-acl/Topic/orders-eu")[0])
    assert literal == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Deny", "operation": "Write", "host": "10.0.0.1"}]}
    prefixed = json.loads(zk.get("/kafka-acl-extended/prefixed/Topic/orders-")[0])
    assert prefixed["acls"] == [{"principal": "User:alice", "permissionType": "Allow", "operation": "Write",
                                 "host": "*"}]
    assert zk.exists("/kafka-acl/Group/billing")
    literal_changes = sorted(zk.get_children("/kafka-acl-changes"))
    assert [c[:12] for c in literal_changes] == ["acl_changes_"] * 2
    assert {zk.get(f"/kafka-acl-changes/{c}")[0] for c in literal_changes} == {b"TOPIC:orders-eu", b"GROUP:billing"}
    [extended] = zk.get_children("/kafka-acl-extended-changes")
    assert json.loads(zk.get(f"/kafka-acl-extended-changes/{extended}")[0]) == {
        "version": 1, "resourceType": "TOPIC", "name": "orders-", "patternType": "PREFIXED"}
    assert len(store.index()) == 3


def test_a_second_store_sees_changes_within_a_second_and_a_restart_loads_everything(
        chroot: str, clients: list[KazooClient]) -> None:
    writer = AclStore(client(chroot, clients))
    writer.start()
    watcher = Watcher()
    reader = AclStore(client(chroot, clients), watcher)
    reader.start()
    writer.create([AclBinding(ORDERS, ALICE_WRITE)])
    assert watcher.wait_for(lambda index: AclBinding(ORDERS, ALICE_WRITE) in index.bindings())
    writer.create([BILLING_READ])
    assert watcher.wait_for(lambda index: len(index) == 2)
    removed = writer.delete([BindingFilter(PatternFilter(ResourceType.TOPIC, None, PatternType.ANY), EntryFilter())])
    assert removed == [[(AclBinding(ORDERS, ALICE_WRITE), None)]]
    assert watcher.wait_for(lambda index: index.bindings() == [BILLING_READ])
    fresh = AclStore(client(chroot, clients))
    fresh.start()
    assert fresh.bindings() == [BILLING_READ]


def test_changes_written_as_kafka_writes_them_are_picked_up(chroot: str, clients: list[KazooClient]) -> None:
    watcher = Watcher()
    store = AclStore(client(chroot, clients), watcher)
    store.start()
    kafka = client(chroot, clients)
    body = b'{"version":1,"acls":[{"principal":"User:bob","permissionType":"Allow","operation":"Read","host":"*"}]}'
    kafka.create("/kafka-acl/Topic/legacy", body, makepath=True)
    kafka.create("/kafka-acl-changes/acl_changes_", b"Topic:legacy", sequence=True)
    expected = AclBinding(ResourcePattern(ResourceType.TOPIC, "legacy"),
                          AclEntry("User:bob", "*", Operation.READ, Permission.ALLOW))
    assert watcher.wait_for(lambda index: expected in index.bindings())


def test_concurrent_writers_lose_nothing(chroot: str, clients: list[KazooClient]) -> None:
    stores = [AclStore(client(chroot, clients)) for _ in range(3)]
    for store in stores:
        store.start()
    entries = [AclEntry(f"User:u{i}", "*", Operation.WRITE, Permission.ALLOW) for i in range(12)]
    results: list[list[Exception | None]] = []
    threads = [threading.Thread(target=lambda i=i, e=e: results.append(stores[i % 3].create([AclBinding(ORDERS, e)])))
               for i, e in enumerate(entries)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert results == [[None]] * len(entries)  # no writer gave up (twelve race for one node)
    assert stores[0].read_all() == {ORDERS: set(entries)}


def test_delete_by_exact_filter_and_match_filter(chroot: str, clients: list[KazooClient]) -> None:
    zk = client(chroot, clients)
    store = AclStore(zk)
    store.start()
    store.create([AclBinding(ORDERS_EU, ALICE_DENY), AclBinding(ORDERS, ALICE_WRITE), BILLING_READ])
    # MATCH on orders-eu finds the literal and the prefixed pattern; the first filter wins.
    match = BindingFilter(PatternFilter(ResourceType.TOPIC, "orders-eu", PatternType.MATCH), EntryFilter())
    deny_only = BindingFilter(PatternFilter(ResourceType.ANY, None, PatternType.ANY),
                              EntryFilter(permission=Permission.DENY))
    removed = store.delete([deny_only, match])
    assert removed == [[(AclBinding(ORDERS_EU, ALICE_DENY), None)], [(AclBinding(ORDERS, ALICE_WRITE), None)]]
    assert not zk.exists("/kafka-acl/Topic/orders-eu")
    assert store.read_all() == {BILLING_READ.pattern: {BILLING_READ.entry}}
