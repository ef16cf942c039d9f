"""Fixtures for the deploy/ tests: a live sidecar run from the Kubernetes ConfigMap.

``deployed_sidecar`` runs a real ``ksidecar run`` on the ``sidecar.properties`` of
deploy/k8s/configmap.yaml, unchanged, in front of the session's Tansu broker and
ZooKeeper. The pod-specific values come from the environment, as in the pod: the
variables the StatefulSet sets (``POD_NAME``, ``BROKER_ID``, ``ZOOKEEPER_CONNECT``, ...)
plus ``KSIDECAR_<KEY>`` overrides that move the listeners, the upstream and the audit
directory onto loopback and temporary paths. The audit observer is configured, so its
metrics are exported as they are in the cluster; the embedded group coordinator is turned
on (``KSIDECAR_SIDECAR_COORDINATOR=embedded``, the ConfigMap's ``zookeeper.connect`` holds
its groups), so the group metrics the dashboard and the alerts query are exported too.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.tools.rig.ports import LOOPBACK, free_port
from proxy.tools.rig.process import ManagedProcess
from proxy.tools.rig.sidecar import SidecarServer
from proxy.tools.rig.sidecar import _ready as readyz_answers  # the rig's own /readyz probe
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.deploy.support import k8s_object

TANSU_NODE_ID = "111"
"""The node id the rig's Tansu broker reports: the pod's BROKER_ID in this test."""


def deployed_environment(
    upstream: str, zookeeper_connect: str, port: int, metrics_port: int, audit_dir: Path
) -> dict[str, str]:
    """The environment of the sidecar container, moved onto loopback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KSIDECAR_")}
    env.update({
        # What the StatefulSet's downward API and ConfigMap references provide.
        "POD_NAME": "kafka-0",
        "POD_NAMESPACE": "kafka",
        "BROKER_ID": TANSU_NODE_ID,
        "ZOOKEEPER_CONNECT": zookeeper_connect,
        # Loopback instead of the pod network.
        "KSIDECAR_LISTENERS": f"PLAINTEXT://{LOOPBACK}:{port}",
        "KSIDECAR_ADVERTISED_LISTENERS": f"PLAINTEXT://{LOOPBACK}:{port}",
        "KSIDECAR_SIDECAR_UPSTREAM": upstream,
        "KSIDECAR_SIDECAR_METRICS_LISTENER": f"{LOOPBACK}:{metrics_port}",
        "KSIDECAR_OBSERVER_AUDIT_DIR": str(audit_dir),
        # The embedded consumer-group coordinator, for its metrics (docs/coordinator.md).
        "KSIDECAR_SIDECAR_COORDINATOR": "embedded",
    })
    return env


@pytest.fixture(scope="session")
def deployed_sidecar(
    rig_dir: Path, tansu: TansuServer, zookeeper: ZooKeeperServer
) -> Iterator[SidecarServer]:
    """A real ``ksidecar run`` on the ConfigMap's sidecar.properties (see the module doc)."""
    config = rig_dir / "deploy-sidecar.properties"
    config.write_text(k8s_object("ConfigMap", "ksidecar-config")["data"]["sidecar.properties"])
    port, metrics_port = free_port(), free_port()
    chroot = f"/ksidecar-deploy-{uuid.uuid4().hex[:8]}"
    env = deployed_environment(
        tansu.bootstrap, zookeeper.connect + chroot, port, metrics_port, rig_dir / "deploy-audit"
    )
    process = ManagedProcess(
        "deploy-sidecar",
        [sys.executable, "-m", "proxy.tools.cli", "run", "--config", str(config)],
        log_path=rig_dir / "deploy-sidecar.log",
        probe=lambda: readyz_answers(f"http://{LOOPBACK}:{metrics_port}/readyz"),
        env=env,
    )
    with SidecarServer(process.start(), LOOPBACK, port, metrics_port) as sidecar:
        yield sidecar
