"""A ZooKeeper only the sidecars can write (``zookeeper.set.acl=true``), on a real ZooKeeper.

A sidecar with ACLs, the embedded coordinator and the features store creates its tree; the
CLIs (``users`` over ZooKeeper with ``--zk-config-file``, ``acls`` and ``groups`` over the
wire) write through it. Then an unauthenticated kazoo client tries to read the SCRAM
credentials and the ACLs and to write under each top-level node: each attempt must fail
with NoAuth, while it still reads what Kafka leaves world-readable. Each node's ACL is
compared with what is written by hand here (the owner: ``digest:sidecar:<sha1>``). The
migration verb does the same to a tree created open, and opens it again.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id

from proxy.tools.cli import main
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.proxy.conftest import StartSidecar, sidecar_keys

pytestmark = pytest.mark.integration

USER, PASSWORD = "sidecar", "zk-s3cret"
OWNER = ACL(31, Id("digest", f"{USER}:" + base64.b64encode(hashlib.sha1(f"{USER}:{PASSWORD}".encode()).digest()).decode()))
READERS = ACL(1, Id("world", "anyone"))


def client(connect: str, *, authenticated: bool) -> KazooClient:
    zk = KazooClient(hosts=connect, timeout=10, auth_data=[("digest", f"{USER}:{PASSWORD}")] if authenticated else None)
    zk.start(timeout=10)
    return zk


def close(zk: KazooClient) -> None:
    zk.stop()
    zk.close()


@pytest.fixture
def chroot(zookeeper: ZooKeeperServer, zk_path: str) -> Iterator[str]:
    """``zk_path`` as a chroot, removed afterwards by the owner (anonymous cannot)."""
    # The shared parent stays open for the other tests: a sidecar creating it would own it.
    parent = client(zookeeper.connect, authenticated=False)
    parent.ensure_path(zk_path.rsplit("/", 1)[0])
    close(parent)
    yield zk_path
    owner = client(zookeeper.connect, authenticated=True)
    try:
        if owner.exists(zk_path):
            owner.delete(zk_path, recursive=True)
    finally:
        close(owner)


@pytest.fixture
def zk_config(tmp_path: Path) -> str:
    path = tmp_path / "zk.properties"
    path.write_text(f"zookeeper.set.acl=true\nzookeeper.digest.username={USER}\nzookeeper.digest.password={PASSWORD}\n")
    return str(path)


def refusals(zk: KazooClient, nodes: dict[str, str]) -> dict[str, str]:
    """Each attempt an unauthenticated client makes, and how it ended (``NoAuth`` or ``ALLOWED``)."""
    attempts: dict[str, Callable[[], Any]] = {
        f"read {nodes['user']}": lambda: zk.get(nodes["user"]),
        "list /config/users": lambda: zk.get_children("/config/users"),
        f"read {nodes['acl']}": lambda: zk.get(nodes["acl"]),
        "list /kafka-acl/Topic": lambda: zk.get_children("/kafka-acl/Topic"),
        "write under /kafka-acl/Topic": lambda: zk.create("/kafka-acl/Topic/evil", b"{}"),
        "write under /kafka-acl-changes": lambda: zk.create("/kafka-acl-changes/acl_changes_", b"Topic:x", sequence=True),
        "write under /kafka-acl-extended": lambda: zk.create("/kafka-acl-extended/evil", b""),
        "write under /kafka-acl-extended-changes": lambda: zk.create("/kafka-acl-extended-changes/evil", b""),
        f"overwrite {nodes['acl']}": lambda: zk.set(nodes["acl"], b"{}"),
        "write under /config/users": lambda: zk.create("/config/users/mallory", b"{}"),
        "write under /config": lambda: zk.create("/config/evil", b""),
        "write under /brokers/ids": lambda: zk.create("/brokers/ids/999", b"{}", ephemeral=True),
        f"delete {nodes['broker']}": lambda: zk.delete(nodes["broker"]),
        "overwrite /feature": lambda: zk.set("/feature", b"{}"),
        "write under /feature": lambda: zk.create("/feature/evil", b""),
        "write under /consumers": lambda: zk.create("/consumers/evil", b""),
        f"overwrite {nodes['offset']}": lambda: zk.set(nodes["offset"], b"0"),
        "write under /coordinators": lambda: zk.create("/coordinators/evil", b""),
        f"delete {nodes['claim']}": lambda: zk.delete(nodes["claim"], recursive=True),
        "write a new top-level node": lambda: zk.create("/kafka-acl-new", b""),
    }
    outcome: dict[str, str] = {}
    for name, attempt in attempts.items():
        try:
            attempt()
            outcome[name] = "ALLOWED"
        except NoAuthError:
            outcome[name] = "NoAuth"
    return outcome


def acl_of(zk: KazooClient, path: str) -> list[ACL]:
    return list(zk.get_acls(path)[0])


def check_locked(connect: str, nodes: dict[str, str]) -> None:
    anonymous = client(connect, authenticated=False)
    owner = client(connect, authenticated=True)
    try:
        outcome = refusals(anonymous, nodes)
        assert outcome == dict.fromkeys(outcome, "NoAuth")
        # World-readable where Kafka leaves it readable.
        assert anonymous.get(nodes["broker"])[0].startswith(b"{")
        assert anonymous.get_children("/config") != []
        expected = {path: [OWNER] for path in ("/config/users", nodes["user"], "/kafka-acl", "/kafka-acl/Topic",
                                               nodes["acl"], "/kafka-acl-changes", "/kafka-acl-extended")}
        expected.update({path: [OWNER, READERS] for path in (
            "/", "/config", "/brokers", "/brokers/ids", nodes["broker"], "/feature", "/consumers",
            nodes["offset"], "/coordinators", nodes["claim"])})
        assert {path: acl_of(owner, path) for path in expected} == expected
        # And every node of the tree, the transactions' and the ephemeral ones too.
        private = ("/config/users", "/kafka-acl", "/kafka-acl-changes", "/kafka-acl-extended",
                   "/kafka-acl-extended-changes")
        everything = {path: acl_of(owner, path) for path in walk(owner)}
        assert len(everything) >= 20
        assert everything == {
            path: [OWNER] if any(path == p or path.startswith(p + "/") for p in private) else [OWNER, READERS]
            for path in everything
        }
    finally:
        close(anonymous)
        close(owner)


def walk(zk: KazooClient, path: str = "/") -> Iterator[str]:
    yield path
    for child in zk.get_children(path):
        yield from walk(zk, f"{path.rstrip('/')}/{child}")


def find(zk: KazooClient, path: str, depth: int) -> str:
    """The first node ``depth`` levels under ``path``."""
    for _ in range(depth):
        path = f"{path.rstrip('/')}/{sorted(zk.get_children(path))[0]}"
    return path


async def test_sidecar_and_clis_on_a_tree_only_they_can_write(
    start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer, chroot: str,
    zk_config: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    connect = zookeeper.connect_string(chroot)
    sidecar = await start_sidecar(sidecar_keys(
        tansu.bootstrap, zookeeper_connect=connect, zookeeper_set_acl="true",
        zookeeper_digest_username=USER, zookeeper_digest_password=PASSWORD,
        sidecar_coordinator="embedded", sidecar_authorizer="acls", super_users="User:ANONYMOUS",
    ))
    bootstrap = f"127.0.0.1:{sidecar.bound['PLAINTEXT'].port}"
    topic, group = f"zkacl-{uuid.uuid4().hex[:8]}", f"zkacl-{uuid.uuid4().hex[:8]}"
    password = tmp_path / "alice.pw"
    password.write_text("alice-pw\n")

    def cli(*args: str) -> int:
        return main(list(args))

    def create_topic() -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)

    await trio.to_thread.run_sync(create_topic)
    # The CLIs work as before: SCRAM users over ZooKeeper (with the identity), ACLs and group
    # offsets over the wire (written to ZooKeeper by the sidecar).
    assert await trio.to_thread.run_sync(cli, "users", "--zookeeper", connect, "--zk-config-file", zk_config,
                                         "add", "alice", "--password-file", str(password)) == 0
    assert await trio.to_thread.run_sync(cli, "acls", "--bootstrap-server", bootstrap, "--add",
                                         "--allow-principal", "User:alice", "--operation", "Read",
                                         "--topic", topic) == 0
    assert await trio.to_thread.run_sync(cli, "groups", "--bootstrap-server", bootstrap, "reset-offsets",
                                         "--group", group, "--topic", f"{topic}:0", "--to-offset", "0",
                                         "--execute") == 0
    assert await trio.to_thread.run_sync(cli, "users", "--zookeeper", connect, "--zk-config-file", zk_config,
                                         "list") == 0
    assert "alice: SCRAM-SHA-256" in capsys.readouterr().out
    with trio.fail_after(10):  # the sidecar's watch saw the user the CLI wrote
        while sidecar.users.credential("alice", "SCRAM-SHA-256") is None:
            await trio.sleep(0.05)
    # Without the identity the CLI is refused, and says why.
    assert await trio.to_thread.run_sync(cli, "users", "--zookeeper", connect, "add", "mallory",
                                         "--password-file", str(password)) == 1
    assert "NoAuth" in capsys.readouterr().err

    owner = client(connect, authenticated=True)
    try:
        nodes = {"user": "/config/users/alice", "acl": f"/kafka-acl/Topic/{topic}",
                 "broker": f"/brokers/ids/{sidecar.broker_id}",
                 "offset": find(owner, f"/consumers/{group}/offsets", 2),
                 "claim": f"/coordinators/groups/{group}"}
        assert owner.exists(nodes["claim"]) and owner.exists(nodes["acl"])
    finally:
        close(owner)
    await trio.to_thread.run_sync(check_locked, connect, nodes)


def test_migration_secures_a_tree_created_open(zookeeper: ZooKeeperServer, chroot: str, zk_config: str,
                                               capsys: pytest.CaptureFixture[str],
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="kazoo")  # kazoo logs each request it sends at DEBUG
    connect = zookeeper.connect_string(chroot)
    nodes = {"user": "/config/users/alice", "acl": "/kafka-acl/Topic/orders", "broker": "/brokers/ids/1",
             "offset": "/consumers/g/offsets/orders/0", "claim": "/coordinators/groups/g"}
    setup = client(zookeeper.connect, authenticated=False)
    setup.ensure_path(chroot)
    close(setup)
    anonymous = client(connect, authenticated=False)
    try:
        for path in nodes.values():
            anonymous.create(path, b"{}", makepath=True)
        for path in ("/kafka-acl-changes", "/kafka-acl-extended", "/kafka-acl-extended-changes", "/feature"):
            anonymous.create(path, b"")
    finally:
        close(anonymous)

    def zookeeper_cli(verb: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["zookeeper", "--zookeeper", connect, "--zk-config-file", zk_config, verb])
        return code, capsys.readouterr().out

    assert zookeeper_cli("secure") == (0, f"22 znode(s) secured, 0 already so, under {connect}.\n")
    check_locked(connect, nodes)
    assert zookeeper_cli("secure") == (0, f"0 znode(s) secured, 22 already so, under {connect}.\n")
    assert zookeeper_cli("unsecure") == (0, f"22 znode(s) opened, 0 already so, under {connect}.\n")
    assert "Auth(scheme='digest', auth=<hidden>)" in caplog.text
    assert PASSWORD not in caplog.text + capsys.readouterr().err
    anonymous = client(connect, authenticated=False)
    try:
        assert anonymous.get(nodes["user"])[0] == b"{}"
        anonymous.create("/kafka-acl/Topic/now-open", b"{}")
    finally:
        close(anonymous)
