"""An UpdateFeatures naming a feature the sidecar does not know (issue 44 found it with
``share.version``, served since; ``streams.version`` is one the sidecar still does not know),
through a ``ksidecar run`` process in front of Tansu (which serves no UpdateFeatures), with a
real ZooKeeper and real clients: kafka-python's admin and the ``ksidecar features`` CLI.

Before the fix neither got an answer: the request was not the sidecar's, Tansu does not
serve the API, and the KIP-35 empty answer left kafka-python waiting out its request
timeout. Expected answers are Kafka 4.3's controller's, written out by hand
(FeatureControlManager.updateFeature, QuorumController.updateFeatures): INVALID_UPDATE_VERSION
(95) at the top level, and FeatureCommand's line for the CLI.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.integration

#: Tansu's node id: kafka-python asks "the controller" (Metadata's ControllerId), which is the
#: sidecar registered under it.
NODE = 111
FAILED = "The update failed for all features since the following feature had an error: "


def _zk(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect, timeout=10)
    client.start(timeout=10)
    return client


@pytest.fixture
def sidecar(tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str,
            tmp_path: Path) -> Iterator[tuple[SidecarServer, str]]:
    client = _zk(zookeeper.connect)
    try:
        client.ensure_path(zk_path)
    finally:
        client.stop()
        client.close()
    connect = zookeeper.connect_string(zk_path)
    server = start_sidecar(tmp_path, tansu.bootstrap, name="sidecar-unknown-feature", keys={
        "zookeeper.connect": connect, "sidecar.coordinator": "embedded", "super.users": "User:ANONYMOUS",
        "broker.id": str(NODE)})
    try:
        yield server, connect
    finally:
        server.stop()


def _feature_node_version(connect: str) -> int:
    client = _zk(connect)
    try:
        version: int = client.get("/feature")[1].version
        return version
    finally:
        client.stop()
        client.close()


def test_an_unknown_feature_is_refused_at_once_by_kafka_python_and_the_cli(
        sidecar: tuple[SidecarServer, str]) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidUpdateVersionError

    server, connect = sidecar
    before = _feature_node_version(connect)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    caught: list[Any] = []
    try:
        for updates in ({"streams.version": 1}, {"streams.version": ("SAFE_DOWNGRADE", 0)}):
            began = time.monotonic()
            with pytest.raises(InvalidUpdateVersionError) as refused:
                admin.update_features(updates)
            caught.append((time.monotonic() - began, str(refused.value)))
    finally:
        admin.close()
    (upgrade_took, upgrade), (disable_took, disable) = caught
    assert upgrade_took < 5 and disable_took < 5  # answered, not the 30 s request timeout
    assert (FAILED + "Invalid update version 1 for feature streams.version. Local controller 111 does not support "
            "this feature.") in upgrade
    assert FAILED + "Invalid update version 0 for feature streams.version. Feature streams.version not found." in disable

    cli = subprocess.run([sys.executable, "-m", "proxy.tools.cli", "features", "--bootstrap-server",
                          server.bootstrap, "upgrade", "--feature", "streams.version=1"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (cli.returncode, cli.stdout) == (1, (
        "Could not upgrade streams.version to 1. " + FAILED + "Invalid update version 1 for feature streams.version. "
        "Local controller 111 does not support this feature.\n")), cli.stderr
    assert cli.stderr.splitlines()[-1] == "1 out of 1 operation(s) failed."
    assert _feature_node_version(connect) == before  # nothing was written
