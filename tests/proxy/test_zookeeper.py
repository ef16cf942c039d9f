"""Sidecars registered in a real ZooKeeper, mapping addresses for one another.

The test broker (Tansu, memory storage) is a one-node cluster whose node id is always
111, so two sidecars here front the same broker: one learns id 111 from it, the other is
configured as broker 112. Through either, Metadata must name node 111 at the address of
the sidecar registered for 111 (found in ZooKeeper, not by port arithmetic), and
BrokerMetadata must list both sidecars with their tags.
"""

from __future__ import annotations

import json

import pytest
import trio
from kazoo.client import KazooClient

from proxy.control.server import Sidecar
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.proxy.conftest import StartSidecar, sidecar_keys
from tests.proxy.wire import Wire, our_decode

pytestmark = pytest.mark.integration


async def test_two_sidecars_map_through_zookeeper(
    start_sidecar: StartSidecar, zookeeper: ZooKeeperServer, zk_path: str, tansu: object
) -> None:
    connect = zookeeper.connect_string(zk_path)
    upstream = tansu.bootstrap  # type: ignore[attr-defined]
    a: Sidecar = await start_sidecar(sidecar_keys(upstream, zookeeper_connect=connect, tag_rack="r1"))
    b: Sidecar = await start_sidecar(
        sidecar_keys(upstream, zookeeper_connect=connect, broker_id="112", tag_rack="r2")
    )
    port_a, port_b = a.bound["PLAINTEXT"].port, b.bound["PLAINTEXT"].port
    assert a.broker_id == 111

    # Both registrations are in ZooKeeper, in Kafka's shape, with the sidecars' endpoints.
    def read_registrations() -> dict[str, dict[str, object]]:
        zk = KazooClient(hosts=connect, timeout=10)
        zk.start(timeout=10)
        try:
            return {c: json.loads(zk.get(f"/brokers/ids/{c}")[0]) for c in zk.get_children("/brokers/ids")}
        finally:
            zk.stop()
            zk.close()

    regs = await trio.to_thread.run_sync(read_registrations)
    assert set(regs) == {"111", "112"}
    assert regs["111"]["endpoints"] == [f"PLAINTEXT://127.0.0.1:{port_a}"]
    assert regs["112"]["endpoints"] == [f"PLAINTEXT://127.0.0.1:{port_b}"]
    assert regs["112"]["tags"]["rack"] == "r2"  # type: ignore[index]

    with trio.fail_after(10):
        while set(b.registered.table) != {111, 112} or set(a.registered.table) != {111, 112}:
            await trio.sleep(0.05)

    for port in (port_a, port_b):
        wire = await Wire.connect("127.0.0.1", port)
        try:
            _, metadata = our_decode(await wire.call(3, 12, 1, {"Topics": []}), 3, 12)
            assert [(x.NodeId, x.Host, x.Port) for x in metadata.Brokers] == [(111, "127.0.0.1", port_a)]
            _, brokers = our_decode(await wire.call(10035, 0, 2, {"NodeIds": []}), 10035, 0)
            seen = {x.NodeId: (x.Port, {t.Key: t.Value for t in x.Tags}) for x in brokers.Brokers}
            assert seen[111][0] == port_a and seen[112][0] == port_b
            assert seen[111][1]["rack"] == "r1" and seen[112][1]["rack"] == "r2"
            assert seen[112][1]["broker.id"] == "112"
        finally:
            await wire.aclose()
