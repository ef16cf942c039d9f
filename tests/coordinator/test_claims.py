"""Group claims and fencing against a real ZooKeeper (coordinator/claims.py, store guards).

Two kazoo clients are two sidecars: each has its own session, as separate processes do.
Every test runs under its own chroot path.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from kazoo.client import KazooClient

from coordinator.claims import GroupClaims
from coordinator.outcome import GroupWrite, OffsetValue, OffsetWrite
from coordinator.store import GroupStore, StoreError

if TYPE_CHECKING:
    from proxy.tools.rig.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.integration

Connect = Callable[[], KazooClient]


@pytest.fixture
def connect(zookeeper: ZooKeeperServer, zk_path: str) -> Iterator[Connect]:
    """Opens clients chrooted at this test's path; closes them all afterwards."""
    setup = KazooClient(hosts=zookeeper.connect, timeout=10.0)
    setup.start(timeout=10.0)
    setup.ensure_path(zk_path)
    setup.stop()
    setup.close()
    opened: list[KazooClient] = []

    def open_one() -> KazooClient:
        client = KazooClient(hosts=zookeeper.connect_string(zk_path), timeout=10.0)
        client.start(timeout=10.0)
        opened.append(client)
        return client

    yield open_one
    for client in opened:
        client.stop()
        client.close()


def put(group: str, offset: int) -> OffsetWrite:
    return OffsetWrite(group_id=group, topic="t", partition=0,
                       value=OffsetValue(offset=offset, commit_timestamp=1))


def committed(client: KazooClient, group: str) -> int | None:
    (loaded,) = [g for g in GroupStore(client).load() if g.group_id == group]
    return loaded.offsets[("t", 0)].offset


def close(client: KazooClient) -> None:
    client.stop()  # ends the session: its ephemeral nodes go at once


def test_one_claim_at_a_time_and_each_claim_bumps_the_epoch(connect: Connect) -> None:
    a, b = GroupClaims(connect(), 1), GroupClaims(connect(), 2)
    assert a.claim("g") == 1  # the epoch node starts at version 0; the claim sets it
    assert b.claim("g") is None
    assert a.holder("g") == 1
    raw, _ = b.client.get("/coordinators/groups/g/owner")
    assert json.loads(raw) == {"broker_id": 1}
    assert b.release("g") is False  # not b's to give up
    assert a.holder("g") == 1
    assert a.release("g") is True
    assert a.holder("g") is None
    assert b.claim("g") == 2
    assert b.holder("g") == 2


def test_a_claim_goes_with_its_session(connect: Connect) -> None:
    first = connect()
    a, b = GroupClaims(first, 1), GroupClaims(connect(), 2)
    assert a.claim("a/b") == 1
    assert b.client.exists("/coordinators/groups/a%2Fb/owner") is not None
    close(first)
    assert b.claim("a/b") == 2


def test_writes_of_an_earlier_owner_are_fenced(connect: Connect) -> None:
    """Sidecar 1 claims g and commits; its session ends (the claim goes); sidecar 2 claims
    g. Sidecar 1, back with a new session and still believing in its old claim version,
    cannot write: ZooKeeper itself rejects the transaction. Sidecar 2 can."""
    first = connect()
    a = GroupClaims(first, 1)
    version_a = a.claim("g")
    assert version_a == 1
    store_a = GroupStore(first, guards=lambda g: a.guard(g, version_a))
    store_a.apply([put("g", 10)])
    close(first)

    second = connect()
    b = GroupClaims(second, 2)
    version_b = b.claim("g")
    assert version_b == 2
    store_b = GroupStore(second, guards=lambda g: b.guard(g, version_b))

    stale_client = connect()  # sidecar 1 again, a new session, the old token
    stale = GroupStore(stale_client, guards=lambda g: ("/coordinators/groups/g", 1))
    with pytest.raises(StoreError, match="rolled back"):
        stale.apply([put("g", 99), GroupWrite(group_id="g", record={"version": 1, "type": "classic"})])
    assert committed(second, "g") == 10
    assert second.exists("/consumers/g/registry") is None

    store_b.apply([put("g", 11)])
    assert committed(second, "g") == 11


def test_a_group_not_claimed_here_is_not_written(connect: Connect) -> None:
    client = connect()
    claims = GroupClaims(client, 1)
    version = claims.claim("mine")
    assert version is not None
    held = {"mine": version}

    def guards(group: str) -> tuple[str, int] | None:
        return claims.guard(group, held[group]) if group in held else None

    store = GroupStore(client, guards=guards)
    with pytest.raises(StoreError, match="not claimed"):
        store.apply([put("mine", 1), put("theirs", 1)])
    assert client.exists("/consumers/mine") is None and client.exists("/consumers/theirs") is None
    store.apply([put("mine", 2)])
    assert committed(client, "mine") == 2


def test_deleting_a_group_leaves_its_claim(connect: Connect) -> None:
    client = connect()
    claims = GroupClaims(client, 1)
    version = claims.claim("g")
    assert version is not None
    store = GroupStore(client, guards=lambda g: claims.guard(g, version))
    store.apply([put("g", 1)])
    store.apply([GroupWrite(group_id="g", record=None)])
    assert client.exists("/consumers/g") is None
    assert claims.holder("g") == 1
