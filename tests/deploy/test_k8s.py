"""deploy/k8s: every manifest validates offline, strictly, and the addresses line up.

Validation uses the Kubernetes JSON schemas bundled with ``kubernetes-validate`` in
strict mode (an unknown field is an error). The line-up tests read the sidecar's
``sidecar.properties`` from the ConfigMap through the sidecar's own configuration loader,
with the environment the StatefulSet gives the container, and check it against the
broker container, the Services, the probes and the scrape annotations.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import kubernetes_validate
import pytest

from proxy.config.keys import load_config, parse_endpoints
from proxy.config.properties import parse_properties
from tests.deploy.support import (
    DEPLOY,
    KUBERNETES_VERSION,
    PROMETHEUS,
    k8s_documents,
    k8s_object,
)

DOCUMENTS = k8s_documents()
POD_INDEX = "metadata.labels['apps.kubernetes.io/pod-index']"


@pytest.mark.parametrize("doc", [d for _, d in DOCUMENTS], ids=[i for i, _ in DOCUMENTS])
def test_manifest_validates_strictly(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_strict_validation_rejects_a_misspelt_field() -> None:
    """The validation above would catch a typo: the schemas forbid unknown fields."""
    doc = copy.deepcopy(k8s_object("StatefulSet", "kafka"))
    sidecar = doc["spec"]["template"]["spec"]["containers"][1]
    sidecar["readinesProbe"] = sidecar.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_every_file_holds_manifests() -> None:
    kinds = sorted({doc["kind"] for _, doc in DOCUMENTS})
    assert kinds == ["ConfigMap", "NetworkPolicy", "PodDisruptionBudget", "Service", "StatefulSet"]


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = k8s_object("StatefulSet", "kafka")["spec"]["template"]["spec"]
    return spec


def container(name: str) -> dict[str, Any]:
    return next(c for c in pod_spec()["containers"] if c["name"] == name)


def env_of(name: str) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(name)["env"]}


def port_of(container_name: str, port_name: str) -> int:
    return next(
        int(p["containerPort"]) for p in container(container_name)["ports"] if p["name"] == port_name
    )


def sidecar_properties() -> str:
    text: str = k8s_object("ConfigMap", "ksidecar-config")["data"]["sidecar.properties"]
    return text


POD_ENV = {
    "POD_NAME": "kafka-2",
    "POD_NAMESPACE": "streaming",
    "BROKER_ID": "2",
    "ZOOKEEPER_CONNECT": "zk-0.zk:2181,zk-1.zk:2181",
}


def deployed_config() -> Any:
    path = DEPLOY / "k8s" / "configmap.yaml"  # only for messages; the text is parsed below
    raw = parse_properties(sidecar_properties(), environ=POD_ENV, source=str(path))
    return load_config(None, raw, environ={})


def test_properties_use_only_variables_the_pod_sets() -> None:
    used = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", sidecar_properties()))
    assert used == set(POD_ENV)
    assert used <= set(env_of("ksidecar"))


def test_sidecar_fronts_the_broker_on_loopback() -> None:
    config = deployed_config()
    upstream = config["sidecar.upstream"]
    broker = {e.name: e for e in parse_endpoints(
        "KAFKA_LISTENERS", env_of("kafka")["KAFKA_LISTENERS"]["value"])}
    assert (upstream.host, upstream.port) == (broker["CLIENT"].host, broker["CLIENT"].port)
    assert upstream.host == "127.0.0.1"
    # Replication is the broker's only listener reachable from outside the pod.
    assert env_of("kafka")["KAFKA_INTER_BROKER_LISTENER_NAME"]["value"] == "REPLICATION"
    assert broker["REPLICATION"].port == port_of("kafka", "replication")


def test_sidecar_advertises_the_pods_stable_name() -> None:
    config = deployed_config()
    statefulset = k8s_object("StatefulSet", "kafka")
    headless = k8s_object("Service", statefulset["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    advertised = config.advertised("PLAINTEXT")
    assert advertised.host == f"kafka-2.{headless['metadata']['name']}.streaming.svc.cluster.local"
    assert advertised.port == config.listeners[0].port == port_of("ksidecar", "sidecar")
    assert config.listeners[0].host == "0.0.0.0"
    assert config["broker.id"] == 2


def test_broker_id_is_the_pod_ordinal_in_both_containers() -> None:
    assert env_of("kafka")["KAFKA_BROKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == POD_INDEX
    assert env_of("ksidecar")["BROKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == POD_INDEX


def test_broker_and_sidecars_use_separate_zookeeper_chroots() -> None:
    """Both register /brokers/ids/<id>: one chroot each, from the same parameter."""
    assert deployed_config()["zookeeper.connect"] == POD_ENV["ZOOKEEPER_CONNECT"] + "/ksidecar"
    assert env_of("kafka")["KAFKA_ZOOKEEPER_CONNECT"]["value"] == "$(ZOOKEEPER_CONNECT)/kafka"
    for name in ("kafka", "ksidecar"):
        ref = env_of(name)["ZOOKEEPER_CONNECT"]["valueFrom"]["configMapKeyRef"]
        params = k8s_object("ConfigMap", ref["name"])
        assert ref["key"] in params["data"]


@pytest.mark.parametrize("name", ["kafka", "ksidecar"])
def test_dependent_variables_are_defined_first(name: str) -> None:
    """Kubernetes expands ``$(VAR)`` only for variables listed earlier; else it stays literal."""
    seen: set[str] = set()
    for entry in container(name)["env"]:
        for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", entry.get("value", "")):
            assert ref in seen, f"{entry['name']} uses $({ref}) before it is defined"
        seen.add(entry["name"])


def test_probes_and_scraping_use_the_metrics_listener() -> None:
    config = deployed_config()
    metrics = port_of("ksidecar", "metrics")
    assert config["sidecar.metrics.listener"].port == metrics
    sidecar = container("ksidecar")
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    annotations = k8s_object("StatefulSet", "kafka")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == metrics
    assert annotations["prometheus.io/path"] == "/metrics"
    # Prometheus in the cluster discovers pods by the SRV records of the headless port.
    headless = k8s_object("Service", "kafka-headless")
    assert {"name": "metrics", "port": metrics, "targetPort": "metrics"} in headless["spec"]["ports"]
    assert "_metrics._tcp.kafka-headless." in (PROMETHEUS / "prometheus.yml").read_text()


def test_drain_fits_in_the_grace_period() -> None:
    drain_seconds = deployed_config()["sidecar.shutdown.drain.ms"] / 1000
    assert drain_seconds < pod_spec()["terminationGracePeriodSeconds"]


def test_every_container_has_probes_and_resources() -> None:
    for c in pod_spec()["containers"]:
        assert {"readinessProbe", "livenessProbe"} <= set(c), c["name"]
        assert {"cpu", "memory"} <= set(c["resources"]["requests"]), c["name"]
        assert "memory" in c["resources"]["limits"], c["name"]
        assert c["securityContext"]["runAsNonRoot"] is True, c["name"]


def test_services_and_budget_select_the_pods() -> None:
    labels = k8s_object("StatefulSet", "kafka")["spec"]["template"]["metadata"]["labels"]
    selectors = [
        k8s_object("Service", "kafka")["spec"]["selector"],
        k8s_object("Service", "kafka-headless")["spec"]["selector"],
        k8s_object("PodDisruptionBudget", "kafka")["spec"]["selector"]["matchLabels"],
        k8s_object("StatefulSet", "kafka")["spec"]["selector"]["matchLabels"],
    ]
    for selector in selectors:
        assert selector.items() <= labels.items()
    client = k8s_object("Service", "kafka")["spec"]["ports"]
    assert client == [{"name": "sidecar", "port": 9092, "targetPort": "sidecar"}]
    assert k8s_object("PodDisruptionBudget", "kafka")["spec"]["maxUnavailable"] == 1


def test_volumes_are_mounted_where_they_are_used() -> None:
    sidecar = container("ksidecar")
    mounts = {m["name"]: m["mountPath"] for m in sidecar["volumeMounts"]}
    path = f"{mounts['config']}/sidecar.properties"
    assert sidecar["args"] == ["run", "--config", path]
    dockerfile = (DEPLOY / "docker" / "Dockerfile").read_text()
    assert f'CMD ["run", "--config", "{path}"]' in dockerfile
    assert deployed_config().raw["observer.audit.dir"] == mounts["audit"]
    claims = {t["metadata"]["name"] for t in k8s_object("StatefulSet", "kafka")["spec"]["volumeClaimTemplates"]}
    assert {"audit", "data"} <= claims
