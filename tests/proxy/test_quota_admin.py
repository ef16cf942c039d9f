"""Per-IP quotas managed over the wire (KIP-612), stored in a real ZooKeeper.

No client library here has a client-quota admin API, so requests are built and responses
read with kafka-python's protocol classes (an implementation independent of ours).
"""

from __future__ import annotations

import json
import math
import time

import pytest
import trio
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kazoo.client import KazooClient

from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.proxy.conftest import StartSidecar, sidecar_keys
from tests.proxy.wire import Wire, call_kp, kp_request, our_decode

pytestmark = pytest.mark.integration

Alter = AlterClientQuotasRequest
Describe = DescribeClientQuotasRequest


def alter_entry(ip: str | None, rate: float | None, *, remove: bool = False, extra: tuple[str, str] | None = None) -> object:
    entity = [Alter.EntryData.EntityData(entity_type="ip", entity_name=ip)]
    if extra:
        entity.append(Alter.EntryData.EntityData(entity_type=extra[0], entity_name=extra[1]))
    op = Alter.EntryData.OpData(key="connection_creation_rate", value=rate or 0.0, remove=remove)
    return Alter.EntryData(entity=entity, ops=[op])


def read_znode(connect: str, path: str) -> dict[str, object] | None:
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=10)
    try:
        if not zk.exists(path):
            return None
        return json.loads(zk.get(path)[0])  # type: ignore[no-any-return]
    finally:
        zk.stop()
        zk.close()


async def attempt(port: int, source_ip: str) -> bool:
    """Connect from ``source_ip``; True if the sidecar answered ApiVersions, False if it closed."""
    stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=source_ip)
    wire = Wire(stream)
    try:
        await wire.send(bytes.fromhex("0000000e001200000000000100046b736964"))  # ApiVersions v0, client "ksid"
        with trio.fail_after(5):
            return await wire.read_frame() is not None
    finally:
        await wire.aclose()


async def test_alter_and_describe_ip_quotas_over_the_wire(
    start_sidecar: StartSidecar, zookeeper: ZooKeeperServer, zk_path: str, tansu: TansuServer
) -> None:
    connect = zookeeper.connect_string(zk_path)
    sidecar = await start_sidecar(sidecar_keys(tansu.bootstrap, zookeeper_connect=connect))
    port = sidecar.bound["PLAINTEXT"].port
    wire = await Wire.connect("127.0.0.1", port)
    try:
        # ApiVersions advertises 48 and 49 (the broker itself has neither).
        _, versions = our_decode(await wire.call(18, 3, 1, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"}), 18, 3)
        keys = {k.ApiKey: (k.MinVersion, k.MaxVersion) for k in versions.ApiKeys}
        assert keys[48] == (0, 1) and keys[49] == (0, 1)

        request = Alter[1](entries=[alter_entry("127.0.0.7", 2.0), alter_entry(None, 500.0)], validate_only=False)
        body = await call_kp(wire, request, AlterClientQuotasResponse, 49, 1, 2)
        assert [e.error_code for e in body.entries] == [0, 0]  # type: ignore[attr-defined]

        # Kafka's JSON, at Kafka's paths.
        znode = await trio.to_thread.run_sync(read_znode, connect, "/config/ips/127.0.0.7")
        assert znode == {"version": 1, "config": {"connection_creation_rate": "2"}}
        default = await trio.to_thread.run_sync(read_znode, connect, "/config/ips/<default>")
        assert default == {"version": 1, "config": {"connection_creation_rate": "500"}}

        with trio.fail_after(10):  # the watch delivers the change to the gate
            while sidecar.ip_quota("127.0.0.7") != 2.0:
                await trio.sleep(0.02)
        assert sidecar.ip_quota("127.0.0.8") == 500.0

        describe = Describe[1](components=[Describe.ComponentData(entity_type="ip", match_type=2, match=None)], strict=False)
        body = await call_kp(wire, describe, DescribeClientQuotasResponse, 48, 1, 3)
        entries = {(e.entity[0].entity_name, e.values[0].value) for e in body.entries}  # type: ignore[attr-defined]
        assert entries == {("127.0.0.7", 2.0)}
        describe = Describe[0](components=[Describe.ComponentData(entity_type="ip", match_type=1, match=None)], strict=False)
        body = await call_kp(wire, describe, DescribeClientQuotasResponse, 48, 0, 4)
        assert [(e.entity[0].entity_name, e.values[0].value) for e in body.entries] == [(None, 500.0)]  # type: ignore[attr-defined]

        # Invalid requests: ip mixed with user, a bad address, validate-only writes nothing.
        bad = Alter[1](entries=[alter_entry("127.0.0.9", 1.0, extra=("user", "bob")), alter_entry("nope", 1.0)],
                       validate_only=False)
        body = await call_kp(wire, bad, AlterClientQuotasResponse, 49, 1, 5)
        assert [e.error_code for e in body.entries] == [42, 42]  # type: ignore[attr-defined]
        assert "IP entity should not be used" in body.entries[0].error_message  # type: ignore[attr-defined]
        dry = Alter[1](entries=[alter_entry("127.0.0.10", 1.0)], validate_only=True)
        body = await call_kp(wire, dry, AlterClientQuotasResponse, 49, 1, 6)
        assert body.entries[0].error_code == 0  # type: ignore[attr-defined]
        assert await trio.to_thread.run_sync(read_znode, connect, "/config/ips/127.0.0.10") is None
        mixed = Describe[1](components=[Describe.ComponentData(entity_type="ip", match_type=2, match=None),
                                        Describe.ComponentData(entity_type="user", match_type=2, match=None)], strict=False)
        body = await call_kp(wire, mixed, DescribeClientQuotasResponse, 48, 1, 7)
        assert body.error_code == 42  # type: ignore[attr-defined]
    finally:
        await wire.aclose()

    # The new limit holds without a restart: 2/s on a fresh sensor admits 20 (W = 10 s),
    # then 127.0.0.7 is held and closed while 127.0.0.8 (default 500/s) is untouched. The
    # rate goes on earning 2 admissions a second while the attempts run (0.15 s when the
    # machine is idle; longer on a loaded one): at most 20 + 2/s x the time they took.
    began = time.monotonic()
    async with trio.open_nursery() as nursery:
        results: dict[str, list[bool]] = {"127.0.0.7": [], "127.0.0.8": []}

        async def run(ip: str) -> None:
            results[ip].append(await attempt(port, ip))

        for _ in range(30):
            nursery.start_soon(run, "127.0.0.7")
            nursery.start_soon(run, "127.0.0.8")
            await trio.sleep(0.005)
    earned = math.floor(2.0 * (time.monotonic() - began))
    admitted = results["127.0.0.7"].count(True)
    assert 20 <= admitted <= 20 + earned, (admitted, earned)
    assert results["127.0.0.7"].count(False) == 30 - admitted
    assert all(results["127.0.0.8"])

    # Removing the quota applies to the next connection, again without restart.
    wire = await Wire.connect("127.0.0.1", port)
    try:
        body = await call_kp(wire, Alter[1](entries=[alter_entry("127.0.0.7", None, remove=True)], validate_only=False),
                             AlterClientQuotasResponse, 49, 1, 8)
        assert body.entries[0].error_code == 0  # type: ignore[attr-defined]
    finally:
        await wire.aclose()
    with trio.fail_after(10):
        while sidecar.ip_quota("127.0.0.7") != 500.0:  # falls back to <default>
            await trio.sleep(0.02)
    assert await attempt(port, "127.0.0.7")


async def test_user_quotas_go_to_the_broker_and_standalone_refuses_ip_writes(
    start_sidecar: StartSidecar, tansu: TansuServer
) -> None:
    sidecar = await start_sidecar(sidecar_keys(tansu.bootstrap, sidecar_ip_connection_creation_rate="40",
                                               sidecar_ip_connection_creation_rate_overrides="127.0.0.5:3"))
    wire = await Wire.connect("127.0.0.1", sidecar.bound["PLAINTEXT"].port)
    try:
        # user-only: forwarded; Tansu has no quota API, so the KIP-35 answer comes back.
        user = Describe[0](components=[Describe.ComponentData(entity_type="user", match_type=2, match=None)], strict=False)
        await wire.send(kp_request(user, 11))
        frame = await wire.read_frame()
        assert frame == (11).to_bytes(4, "big")
        # ip describe standalone: the config's quotas.
        describe = Describe[0](components=[], strict=False)
        body = await call_kp(wire, describe, DescribeClientQuotasResponse, 48, 0, 12)
        got = {(e.entity[0].entity_name, e.values[0].value) for e in body.entries}  # type: ignore[attr-defined]
        assert got == {(None, 40.0), ("127.0.0.5", 3.0)}
        body = await call_kp(wire, Alter[0](entries=[alter_entry("127.0.0.7", 2.0)], validate_only=False),
                             AlterClientQuotasResponse, 49, 0, 13)
        assert body.entries[0].error_code == 42  # type: ignore[attr-defined]
        assert "without ZooKeeper" in body.entries[0].error_message  # type: ignore[attr-defined]
    finally:
        await wire.aclose()


async def test_quotas_command_line(
    start_sidecar: StartSidecar, zookeeper: ZooKeeperServer, zk_path: str, tansu: TansuServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from proxy.tools.cli import main

    sidecar = await start_sidecar(sidecar_keys(tansu.bootstrap, zookeeper_connect=zookeeper.connect_string(zk_path)))
    bootstrap = f"127.0.0.1:{sidecar.bound['PLAINTEXT'].port}"

    def cli(*args: str) -> int:
        return main(["quotas", "--bootstrap-server", bootstrap, *args])

    assert await trio.to_thread.run_sync(cli, "alter", "--ip", "10.1.2.3", "--add-config", "connection_creation_rate=100") == 0
    assert await trio.to_thread.run_sync(cli, "alter", "--ip-defaults", "--add-config", "connection_creation_rate=30") == 0
    capsys.readouterr()
    assert await trio.to_thread.run_sync(cli, "describe", "--ip", "10.1.2.3") == 0
    assert capsys.readouterr().out == "Quota configs for ip '10.1.2.3' are connection_creation_rate=100\n"
    assert await trio.to_thread.run_sync(cli, "describe") == 0
    assert capsys.readouterr().out == (
        "Quota configs for the default IP are connection_creation_rate=30\n"
        "Quota configs for ip '10.1.2.3' are connection_creation_rate=100\n"
    )
    assert await trio.to_thread.run_sync(cli, "alter", "--ip", "10.1.2.3", "--delete-config", "connection_creation_rate") == 0
    capsys.readouterr()
    assert await trio.to_thread.run_sync(cli, "describe", "--ip", "10.1.2.3") == 0
    assert capsys.readouterr().out == "No per-IP quotas.\n"
    assert await trio.to_thread.run_sync(cli, "alter", "--ip", "not-an-ip", "--add-config", "connection_creation_rate=1") == 1
    assert "is not a valid IP address" in capsys.readouterr().err
    assert await trio.to_thread.run_sync(cli, "alter", "--ip", "10.1.2.3", "--add-config", "bytes=1") == 2
