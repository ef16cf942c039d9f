"""The user/client-id quota store against a real ZooKeeper, each test under its own chroot."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from kazoo.client import KazooClient

from quotas.client_store import ClientQuotaStore, StoreConflict
from quotas.clients import DEFAULT, ClientQuotas, Entity

if TYPE_CHECKING:
    from proxy.tools.rig.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.integration

P, C, R, M = "producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"


def _client(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=10.0)
    return client


@pytest.fixture
def chroot(zookeeper: ZooKeeperServer, zk_path: str) -> str:
    setup = _client(zookeeper.connect)
    try:
        setup.ensure_path(zk_path)
    finally:
        setup.stop()
        setup.close()
    return zookeeper.connect_string(zk_path)


@pytest.fixture
def zk(chroot: str) -> Iterator[KazooClient]:
    """The store's client, chrooted at this test's own path."""
    client = _client(chroot)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture
def other(chroot: str) -> Iterator[KazooClient]:
    """A second client on the same chroot: somebody else changing ZooKeeper."""
    client = _client(chroot)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def body(config: dict[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": config}).encode()


def config_at(client: KazooClient, path: str) -> dict[str, str]:
    data, _ = client.get(path)
    parsed = json.loads(data)
    assert parsed["version"] == 1
    return dict(parsed["config"])


class Seen:
    """The snapshots a store's listener was handed, waited on with a deadline."""

    def __init__(self) -> None:
        self.snapshots: queue.Queue[ClientQuotas] = queue.Queue()
        self.last = ClientQuotas()

    def __call__(self, quotas: ClientQuotas) -> None:
        self.snapshots.put(quotas)

    def wait_for(self, expected: dict[Entity, dict[str, float]], within: float = 1.0) -> float:
        """Seconds until the listener is handed ``expected``; fails past ``within``."""
        want = ClientQuotas(expected)
        start = time.monotonic()
        deadline = start + within
        while self.last != want:
            left = deadline - time.monotonic()
            try:
                self.last = self.snapshots.get(timeout=max(left, 0.0))
            except queue.Empty:
                pytest.fail(f"not seen within {within} s: {want!r}; last {self.last!r}")
        return time.monotonic() - start


def test_listener_sees_another_clients_changes_within_a_second(zk: KazooClient, other: KazooClient) -> None:
    seen = Seen()
    store = ClientQuotaStore(zk, seen)
    store.start()
    alice, alice_p1 = Entity(user="alice"), Entity(user="alice", client_id="p1")
    bob_default = Entity(user="bob", client_id=DEFAULT)
    any_client = Entity(client_id=DEFAULT)

    other.create("/config/users/alice", body({P: "1024", "SCRAM-SHA-256": "salt=x"}))
    seen.wait_for({alice: {P: 1024.0}})
    other.create("/config/users/alice/clients/p1", body({C: "2048"}), makepath=True)
    seen.wait_for({alice: {P: 1024.0}, alice_p1: {C: 2048.0}})
    # bob exists only as the parent of his clients: an empty user znode
    other.create("/config/users/bob/clients/<default>", body({R: "12.5"}), makepath=True)
    other.create("/config/clients/<default>", body({M: "0.5"}))
    both = {alice: {P: 1024.0}, alice_p1: {C: 2048.0}, bob_default: {R: 12.5}, any_client: {M: 0.5}}
    seen.wait_for(both)
    other.set("/config/users/alice/clients/p1", body({C: "4096"}))
    seen.wait_for({**both, alice_p1: {C: 4096.0}})
    assert store.read() == store.snapshot() == ClientQuotas({**both, alice_p1: {C: 4096.0}})

    # a user's whole clients node goes, then comes back: its new children are watched
    other.delete("/config/users/alice/clients", recursive=True)
    without = {alice: {P: 1024.0}, bob_default: {R: 12.5}, any_client: {M: 0.5}}
    seen.wait_for(without)
    other.create("/config/users/alice/clients/p2", body({C: "1"}), makepath=True)
    seen.wait_for({**without, Entity(user="alice", client_id="p2"): {C: 1.0}})
    # a user goes and comes back with clients
    other.delete("/config/users/bob", recursive=True)
    seen.wait_for({alice: {P: 1024.0}, any_client: {M: 0.5}, Entity(user="alice", client_id="p2"): {C: 1.0}})
    other.create("/config/users/bob/clients/x%20y", body({P: "7"}), makepath=True)
    seen.wait_for({alice: {P: 1024.0}, any_client: {M: 0.5}, Entity(user="alice", client_id="p2"): {C: 1.0},
                   Entity(user="bob", client_id="x y"): {P: 7.0}})


def test_alter_writes_kafkas_layout(zk: KazooClient, other: KazooClient) -> None:
    seen = Seen()
    store = ClientQuotaStore(zk, seen)
    store.start()
    other.create("/config/users/a%20b", body({"SCRAM-SHA-256": "salt=x"}), makepath=True)

    store.alter(Entity(user="a b"), [(P, 1048576.0)])
    store.alter(Entity(user="a b", client_id=DEFAULT), [(R, 12.5), (C, 10.0)])
    store.alter(Entity(client_id="p*1"), [(M, 3.0)])
    assert config_at(other, "/config/users/a%20b") == {"SCRAM-SHA-256": "salt=x", P: "1048576"}
    assert config_at(other, "/config/users/a%20b/clients/<default>") == {R: "12.5", C: "10"}
    assert config_at(other, "/config/clients/p%2A1") == {M: "3.0"}
    seen.wait_for({Entity(user="a b"): {P: 1048576.0},
                   Entity(user="a b", client_id=DEFAULT): {R: 12.5, C: 10.0},
                   Entity(client_id="p*1"): {M: 3.0}})

    # the last quota of a client-id entity goes: its znode and the emptied clients node go too
    store.alter(Entity(user="a b", client_id=DEFAULT), [(R, None), (C, None)])
    assert other.exists("/config/users/a%20b/clients") is None
    store.alter(Entity(client_id="p*1"), [(M, None)])
    assert other.exists("/config/clients/p%2A1") is None
    # a user znode stays, with its other keys (SCRAM credentials) or an empty config
    store.alter(Entity(user="a b"), [(P, None)])
    assert config_at(other, "/config/users/a%20b") == {"SCRAM-SHA-256": "salt=x"}
    store.alter(Entity(user=DEFAULT, client_id="c"), [(P, 5.0)])
    store.alter(Entity(user=DEFAULT, client_id="c"), [(P, None)])
    assert other.get("/config/users/<default>")[0] == b""  # made as a parent, never written
    seen.wait_for({})
    # removing what is not there writes nothing
    store.alter(Entity(client_id="nobody"), [(P, None)])
    assert other.exists("/config/clients/nobody") is None
    assert other.exists("/config/changes") is None  # no notifications unless asked


def test_change_notifications_when_asked(zk: KazooClient, other: KazooClient) -> None:
    store = ClientQuotaStore(zk, notify=True)
    store.alter(Entity(user="alice", client_id="p1"), [(P, 1.0)])
    store.alter(Entity(client_id=DEFAULT), [(P, 2.0)])
    changes = sorted(other.get_children("/config/changes"))
    assert changes == ["config_change_0000000000", "config_change_0000000001"]
    bodies = [json.loads(other.get(f"/config/changes/{c}")[0]) for c in changes]
    assert bodies == [{"version": 2, "entity_path": "users/alice/clients/p1"},
                      {"version": 2, "entity_path": "clients/<default>"}]


class Interfering:
    """A kazoo client whose ``set`` lets another client write first, ``times`` times."""

    def __init__(self, client: KazooClient, other: KazooClient, times: int) -> None:
        self._client = client
        self._other = other
        self.left = times

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def set(self, path: str, value: bytes, version: int = -1) -> Any:
        if self.left > 0:
            self.left -= 1
            current = config_at(self._other, path)
            self._other.set(path, body({**current, R: str(float(self.left))}))
        return self._client.set(path, value, version=version)


def test_compare_and_set_reads_again_after_a_concurrent_write(zk: KazooClient, other: KazooClient) -> None:
    other.create("/config/clients/p1", body({C: "1"}), makepath=True)
    store = ClientQuotaStore(Interfering(zk, other, times=3))  # type: ignore[arg-type]
    store.alter(Entity(client_id="p1"), [(P, 10.0)])
    # the other client's last write survived: the store re-read the znode each time
    assert config_at(other, "/config/clients/p1") == {C: "1", R: "0.0", P: "10"}


def test_compare_and_set_gives_up(zk: KazooClient, other: KazooClient) -> None:
    other.create("/config/clients/p1", body({C: "1"}), makepath=True)
    store = ClientQuotaStore(Interfering(zk, other, times=1000))  # type: ignore[arg-type]
    with pytest.raises(StoreConflict):
        store.alter(Entity(client_id="p1"), [(P, 10.0)])


def test_concurrent_writers_lose_no_update(zk: KazooClient, other: KazooClient) -> None:
    stores = [ClientQuotaStore(zk), ClientQuotaStore(other)]
    keys = [P, C, R, M]
    failures: list[BaseException] = []

    def write(index: int) -> None:
        try:
            # 12 writes in all: a writer loses a race only to another's success, so never
            # more than 9 times, under the store's 10 attempts
            for round_ in range(3):
                stores[index % 2].alter(Entity(user="alice", client_id="p1"), [(keys[index], float(round_ + 1))])
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert failures == []
    assert config_at(other, "/config/users/alice/clients/p1") == {P: "3", C: "3", R: "3.0", M: "3.0"}
