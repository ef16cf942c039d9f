"""Managing users: AlterUserScramCredentials from confluent-kafka's AdminClient, the
``ksidecar users`` command, and what ZooKeeper and the PLAIN file hold (never a password)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from typing import Any

import pytest
import trio
from kazoo.client import KazooClient

from tests.auth.conftest import USERS, SaslRig, StartSasl
from tests.proxy.wire import Wire, our_decode

pytestmark = pytest.mark.integration


def znode(connect: str, path: str) -> bytes | None:
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=10)
    try:
        return zk.get(path)[0] if zk.exists(path) else None
    finally:
        zk.stop()
        zk.close()


async def can_log_in(rig: SaslRig, mechanism: str, user: str, password: str) -> bool:
    """One real SASL exchange on the wire, with kafka-python's SCRAM client / a PLAIN token."""
    from kafka.net.sasl.scram import ScramClient

    wire = await Wire.connect("127.0.0.1", rig.port)
    try:
        _, shake = our_decode(await wire.call(17, 1, 1, {"Mechanism": mechanism}), 17, 1)
        assert shake.ErrorCode == 0
        if mechanism == "PLAIN":
            tokens = [b"\0" + user.encode() + b"\0" + password.encode()]
            client = None
        else:
            client = ScramClient(user, password, mechanism)
            tokens = [client.first_message()]
        for round_ in range(2 if client else 1):
            _, body = our_decode(await wire.call(36, 1, 2 + round_, {"AuthBytes": tokens[-1]}), 36, 1)
            if body.ErrorCode:
                return False
            if client is not None and round_ == 0:
                client.process_server_first_message(body.AuthBytes)
                tokens.append(client.final_message())
        return True
    finally:
        await wire.aclose()


def check_scram_entry(text: str, mechanism: str, password: str) -> None:
    """Kafka's format, and keys that match ``password`` by an independent computation."""
    match = re.fullmatch(r"salt=([A-Za-z0-9+/=]+),stored_key=([A-Za-z0-9+/=]+),"
                         r"server_key=([A-Za-z0-9+/=]+),iterations=(\d+)", text)
    assert match, text
    salt, stored, server = (base64.b64decode(match[i]) for i in (1, 2, 3))
    digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, int(match[4]))
    assert stored == hashlib.new(digest, hmac.new(salted, b"Client Key", digest).digest()).digest()
    assert server == hmac.new(salted, b"Server Key", digest).digest()


def admin(rig: SaslRig, user: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({
        "bootstrap.servers": rig.bootstrap, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": USERS[user],
    })


async def test_confluent_admin_alters_and_describes_scram_users(sasl_sidecar: StartSasl) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    rig = await sasl_sidecar(super_users="User:alice")

    def alter_as(user: str, *changes: Any) -> dict[str, Any]:
        client = admin(rig, user)  # kept alive until the answers are in
        futures = client.alter_user_scram_credentials(list(changes), request_timeout=15)
        outcome: dict[str, Any] = {}
        for name, future in futures.items():
            try:
                outcome[name] = future.result()
            except KafkaException as exc:
                outcome[name] = exc.args[0]
        return outcome

    def describe_as(user: str, names: list[str]) -> dict[str, Any]:
        client = admin(rig, user)
        futures = client.describe_user_scram_credentials(names, request_timeout=15)
        return {name: future.result() for name, future in futures.items()}

    carol_256 = UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"carol-pw")
    with trio.fail_after(60):
        first = await trio.to_thread.run_sync(alter_as, "alice", carol_256)
        assert first["carol"] is None, str(first["carol"])
        described = await trio.to_thread.run_sync(describe_as, "alice", ["carol"])
    infos = described["carol"].scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_256, 8192)]

    raw = await trio.to_thread.run_sync(znode, rig.zookeeper, "/config/users/carol")
    assert raw is not None and b"carol-pw" not in raw
    body = json.loads(raw)
    assert body["version"] == 1 and list(body["config"]) == ["SCRAM-SHA-256"]
    check_scram_entry(body["config"]["SCRAM-SHA-256"], "SCRAM-SHA-256", "carol-pw")

    with trio.fail_after(20):
        assert await can_log_in(rig, "SCRAM-SHA-256", "carol", "carol-pw")
        assert not await can_log_in(rig, "SCRAM-SHA-512", "carol", "carol-pw")
        # bob is not in super.users: refused, nothing written.
        dave = UserScramCredentialUpsertion(
            "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"dave-pw")
        refused = await trio.to_thread.run_sync(alter_as, "bob", dave)
        assert refused["dave"].code() == 31  # CLUSTER_AUTHORIZATION_FAILED
        # Kafka's refusals: too few iterations; deleting what is not there.
        weak = UserScramCredentialUpsertion(
            "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 1024), b"dave-pw")
        outcome = await trio.to_thread.run_sync(alter_as, "alice", weak)
        assert outcome["dave"].code() == 93 and "Too few iterations" in outcome["dave"].str()
        missing = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)
        outcome = await trio.to_thread.run_sync(alter_as, "alice", missing)
        assert outcome["carol"].code() == 91
        # A deletion takes effect at once.
        gone = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)
        assert await trio.to_thread.run_sync(alter_as, "alice", gone) == {"carol": None}
        assert not await can_log_in(rig, "SCRAM-SHA-256", "carol", "carol-pw")
    assert await trio.to_thread.run_sync(znode, rig.zookeeper, "/config/users/dave") is None


async def test_describe_over_the_wire(sasl_sidecar: StartSasl) -> None:
    rig = await sasl_sidecar(super_users="User:ANONYMOUS;User:alice",
                             listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0")
    wire = await Wire.connect("127.0.0.1", rig.sidecar.bound["PLAINTEXT"].port)
    with trio.fail_after(10):
        frame = await wire.call(50, 0, 1, {"Users": None})
        _, body = our_decode(frame, 50, 0)
        assert body.ErrorCode == 0
        assert {(r.User, tuple((i.Mechanism, i.Iterations) for i in r.CredentialInfos)) for r in body.Results} == {
            ("alice", ((1, 4096), (2, 4096))), ("bob", ((1, 4096), (2, 4096)))}
        frame = await wire.call(50, 0, 2, {"Users": [{"Name": "zed"}, {"Name": "bob"}, {"Name": "bob"}]})
        _, body = our_decode(frame, 50, 0)
        assert [(r.User, r.ErrorCode) for r in body.Results] == [("zed", 91), ("bob", 92)]
    await wire.aclose()


async def test_users_command_and_a_running_sidecar(sasl_sidecar: StartSasl, capsys: pytest.CaptureFixture[str]) -> None:
    rig = await sasl_sidecar()
    # Added after the sidecar started: the ZooKeeper watch / the file's change bring them in.
    assert await trio.to_thread.run_sync(
        lambda: rig.users("add", "erin", "--mechanism", "SCRAM-SHA-512", "--iterations", "5000",
                          password="erin-pw")) == 0
    assert await trio.to_thread.run_sync(lambda: rig.plain_users("add", "erin", password="erin-plain")) == 0
    with trio.fail_after(20):
        while not await can_log_in(rig, "SCRAM-SHA-512", "erin", "erin-pw"):
            await trio.sleep(0.05)
        assert await can_log_in(rig, "PLAIN", "erin", "erin-plain")
        assert not await can_log_in(rig, "PLAIN", "erin", "erin-pw")
    capsys.readouterr()
    assert await trio.to_thread.run_sync(lambda: rig.users("list")) == 0
    assert await trio.to_thread.run_sync(lambda: rig.plain_users("list")) == 0
    listed = capsys.readouterr().out
    assert "erin: SCRAM-SHA-512 (iterations 5000)" in listed
    assert "alice: SCRAM-SHA-256 (iterations 4096), SCRAM-SHA-512 (iterations 4096)" in listed
    assert "erin: PLAIN (pbkdf2-sha256, iterations 4096)" in listed
    for name, password in {**USERS, "erin": "erin-pw", "erin-plain": "erin-plain"}.items():
        assert password not in listed and password not in rig.plain_file.read_text(), name

    raw = await trio.to_thread.run_sync(znode, rig.zookeeper, "/config/users/erin")
    assert raw is not None
    check_scram_entry(json.loads(raw)["config"]["SCRAM-SHA-512"], "SCRAM-SHA-512", "erin-pw")

    assert await trio.to_thread.run_sync(lambda: rig.users("delete", "erin")) == 0
    assert await trio.to_thread.run_sync(lambda: rig.plain_users("delete", "erin")) == 0
    assert await trio.to_thread.run_sync(lambda: rig.users("delete", "erin")) == 1  # nothing left
    with trio.fail_after(20):
        while await can_log_in(rig, "SCRAM-SHA-512", "erin", "erin-pw"):
            await trio.sleep(0.05)
        assert not await can_log_in(rig, "PLAIN", "erin", "erin-plain")
    # Bad usage: iterations below Kafka's floor, a mechanism for the PLAIN file.
    assert await trio.to_thread.run_sync(
        lambda: rig.users("add", "x", "--iterations", "100", password="p")) == 2
    assert await trio.to_thread.run_sync(
        lambda: rig.plain_users("add", "x", "--mechanism", "SCRAM-SHA-256", password="p")) == 2
