"""deploy/k8s: every manifest validates offline, strictly, and the addresses line up.

Validation uses the Kubernetes JSON schemas bundled with ``kubernetes-validate`` in
strict mode (an unknown field is an error). The line-up tests read the sidecar's
``sidecar.properties`` from the ConfigMap through the sidecar's own configuration loader,
with the environment the StatefulSet gives the container, and check it against the
broker container, the Services, the probes and the scrape annotations.

The per-pod tests go one step further: for each ordinal they build the pod metadata the
StatefulSet controller would (name ``kafka-<i>``, the ``apps.kubernetes.io/pod-index``
label), resolve both containers' ``env`` from it as the kubelet does (downward-API field
references, ConfigMap references, ``$(VAR)`` expansion), and load the sidecar's
configuration from that: so a changed field reference, Service name or ConfigMap
variable shows up as a wrong broker id or address, not only as a changed string.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from typing import Any

import kubernetes_validate
import pytest
import yaml

from proxy.config.keys import (
    KEYS,
    LISTENER_KEYS,
    ConfigError,
    SidecarConfig,
    build_config,
    env_overrides,
    is_live,
    load_config,
    parse_endpoints,
)
from proxy.config.properties import PropertiesError, parse_properties
from tests.deploy.support import (
    DEPLOY,
    K8S,
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


class _Verbatim(Mapping[str, str]):
    """An environment where every variable is set to its own reference, ``${NAME}``."""

    def __contains__(self, name: object) -> bool:
        return True

    def __getitem__(self, name: str) -> str:
        return "${" + name + "}"

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def template_properties() -> dict[str, str]:
    """sidecar.properties as written, ``${NAME}`` references left in place."""
    return parse_properties(sidecar_properties(), environ=_Verbatim())


def set_arguments() -> dict[str, str]:
    """The ``--set key=value`` arguments of the sidecar container."""
    args: list[str] = container("ksidecar").get("args", [])
    return dict(args[i + 1].split("=", 1) for i, arg in enumerate(args) if arg in ("--set", "-s"))


def env_keys() -> dict[str, str]:
    """Keys the sidecar container sets through ``KSIDECAR_<KEY>`` variables: key -> variable."""
    return {key: name for name in env_of("ksidecar") for key in env_overrides({name: ""})}


def pod_metadata(ordinal: int, namespace: str = "streaming") -> dict[str, Any]:
    """The metadata the StatefulSet controller gives pod ``ordinal``: what the downward
    API reads (template labels plus the two per-pod labels the controller adds)."""
    statefulset = k8s_object("StatefulSet", "kafka")
    template = statefulset["spec"]["template"]["metadata"]
    name = f"{statefulset['metadata']['name']}-{ordinal}"
    labels = {**template["labels"], "apps.kubernetes.io/pod-index": str(ordinal),
              "statefulset.kubernetes.io/pod-name": name}
    return {"name": name, "namespace": namespace, "labels": labels,
            "annotations": dict(template.get("annotations", {}))}


_FIELD_PATH = re.compile(r"metadata\.(?:(name|namespace)|(labels|annotations)\['([^']+)'\])")
_DEPENDENT = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def container_environment(name: str, metadata: Mapping[str, Any]) -> dict[str, str]:
    """The environment the kubelet gives container ``name`` of the pod with ``metadata``:
    field and ConfigMap references resolved, ``$(VAR)`` of earlier variables expanded."""
    env: dict[str, str] = {}
    for entry in container(name)["env"]:
        if "value" in entry:
            value = _DEPENDENT.sub(lambda m: env.get(m[1], m[0]), entry["value"])
        elif "fieldRef" in entry["valueFrom"]:
            path = entry["valueFrom"]["fieldRef"]["fieldPath"]
            match = _FIELD_PATH.fullmatch(path)
            assert match, f"{name} {entry['name']}: fieldPath {path} is not simulated here"
            # A missing label or annotation is the empty string, as in the kubelet.
            value = metadata[match[1]] if match[1] else metadata[match[2]].get(match[3], "")
        else:
            ref = entry["valueFrom"]["configMapKeyRef"]
            value = k8s_object("ConfigMap", ref["name"])["data"][ref["key"]]
        env[entry["name"]] = value
    return env


def sidecar_config_in(metadata: Mapping[str, Any]) -> SidecarConfig:
    """The configuration the sidecar of that pod runs with: the ConfigMap's file, then
    ``KSIDECAR_*`` variables, then ``--set`` arguments (the CLI's order)."""
    env = container_environment("ksidecar", metadata)
    raw = parse_properties(sidecar_properties(), environ=env, source="ksidecar-config")
    raw.update(env_overrides(env))
    raw.update(set_arguments())
    return build_config(raw)


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


def test_broker_id_comes_from_one_field_in_both_containers() -> None:
    """The sidecar's broker.id is one variable fed by the same downward-API field as the
    broker's KAFKA_BROKER_ID: the pod-index label, which the StatefulSet controller sets
    (Kubernetes 1.28+, so the schemas checked must be at least that)."""
    reference = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", template_properties()["broker.id"])
    assert reference, "broker.id must be one ${VARIABLE} that the StatefulSet sets"
    sidecar_field = env_of("ksidecar")[reference[1]]["valueFrom"]["fieldRef"]["fieldPath"]
    broker_field = env_of("kafka")["KAFKA_BROKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert sidecar_field == broker_field == POD_INDEX
    assert tuple(int(part) for part in KUBERNETES_VERSION.split(".")[:2]) >= (1, 28)
    # Nothing overrides it on the way: no KSIDECAR_BROKER_ID, no --set broker.id.
    assert "broker.id" not in env_keys() and "broker.id" not in set_arguments()


def test_a_missing_broker_id_stops_the_sidecar() -> None:
    """No default: an unset variable, or the empty value the kubelet gives for a missing
    label (a cluster older than 1.28), refuses to start instead of running as -1."""
    environ = {k: v for k, v in POD_ENV.items() if k != "BROKER_ID"}
    with pytest.raises(PropertiesError, match="BROKER_ID"):
        parse_properties(sidecar_properties(), environ=environ)
    metadata = pod_metadata(2)
    del metadata["labels"]["apps.kubernetes.io/pod-index"]
    with pytest.raises(ConfigError, match=r"broker\.id"):
        sidecar_config_in(metadata)


def test_each_pod_is_one_broker_behind_its_own_sidecar() -> None:
    """Pod kafka-<i>, resolved as the kubelet would: its sidecar has broker.id i, as its
    broker does, and advertises kafka-<i> under the headless Service of services.yaml."""
    statefulset = k8s_object("StatefulSet", "kafka")
    headless = k8s_object("Service", statefulset["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert "sidecar" in {p["targetPort"] for p in headless["spec"]["ports"]}
    replicas = statefulset["spec"]["replicas"]
    assert replicas >= 3  # a multi-broker cluster (replication factor 3 in the broker env)
    addresses = set()
    for ordinal in range(replicas):
        metadata = pod_metadata(ordinal)
        broker = container_environment("kafka", metadata)
        config = sidecar_config_in(metadata)
        # Explicit, never -1: a sidecar left to learn its id looks for the broker that
        # advertises sidecar.upstream (127.0.0.1:9093), and these brokers advertise their
        # pod names, so with several brokers it would never find its own.
        assert int(broker["KAFKA_BROKER_ID"]) == config["broker.id"] == ordinal
        stable = f"{metadata['name']}.{headless['metadata']['name']}.{metadata['namespace']}.svc.cluster.local"
        for listener in config.listeners:
            advertised = config.advertised(listener.name)
            assert (advertised.host, advertised.port) == (stable, port_of("ksidecar", "sidecar"))
            addresses.add(str(advertised))
        # The broker advertises the same name, on its own ports (brokers replicate by it).
        for endpoint in parse_endpoints("KAFKA_ADVERTISED_LISTENERS", broker["KAFKA_ADVERTISED_LISTENERS"]):
            assert endpoint.host == stable
        assert config.tags["pod"] == metadata["name"]
    assert len(addresses) == replicas


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


def material_mounts_with_subpath(spec: Mapping[str, Any]) -> list[str]:
    """The sidecar container's mounts that bring configuration or TLS material in with
    ``subPath``: a ConfigMap, Secret or projected volume, or the mount holding the
    ``--config`` file. The kubelet never updates a subPath mount, so a change to what it
    holds would reach the sidecar only at a restart (no reload)."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    sidecar = next(c for c in spec["containers"] if c["name"] == "ksidecar")
    config_file = sidecar["args"][sidecar["args"].index("--config") + 1]
    found: list[str] = []
    for mount in sidecar["volumeMounts"]:
        volume = volumes.get(mount["name"], {})  # absent: a volumeClaimTemplate
        holds_config = config_file.startswith(mount["mountPath"].rstrip("/") + "/")
        if ({"configMap", "secret", "projected"} & set(volume) or holds_config) and (
                {"subPath", "subPathExpr"} & set(mount)):
            found.append(mount["name"])
    return found


def test_config_and_tls_reach_the_sidecar_as_directories() -> None:
    """The ConfigMap (and any Secret) is mounted whole, so a change reaches the running
    sidecar, which reloads it (docs/operations.md, "Reloading")."""
    spec = pod_spec()
    assert material_mounts_with_subpath(spec) == []
    # The check saw the config mount as material: it is the ConfigMap's volume.
    assert {v["name"]: v for v in spec["volumes"]}["config"]["configMap"]["name"] == "ksidecar-config"


@pytest.mark.parametrize("volume", ["config", "tls"])
def test_the_subpath_check_catches_a_file_mounted_alone(volume: str) -> None:
    """What the check above exists for: one file of a ConfigMap or Secret, with subPath."""
    spec = pod_spec()
    sidecar = next(c for c in spec["containers"] if c["name"] == "ksidecar")
    if volume == "tls":
        spec["volumes"].append({"name": "tls", "secret": {"secretName": "kafka-tls"}})
        sidecar["volumeMounts"].append({"name": "tls", "mountPath": "/etc/ksidecar-tls/tls.pem",
                                        "subPath": "tls-combined.pem"})
    else:
        [mount] = [m for m in sidecar["volumeMounts"] if m["name"] == "config"]
        mount.update(mountPath="/etc/ksidecar/sidecar.properties", subPath="sidecar.properties")
    assert material_mounts_with_subpath(spec) == [volume]


def statefulset_with_the_tls_example() -> dict[str, Any]:
    """statefulset.yaml with its commented cert-manager example turned on: every block
    ``# - name: tls`` and the ``#   ...`` lines under it, uncommented in place."""
    lines: list[str] = []
    blocks = 0
    indent: str | None = None
    for line in (K8S / "statefulset.yaml").read_text().splitlines():
        start = re.fullmatch(r"(\s*)# - name: tls", line)
        if start:
            indent, blocks = start[1], blocks + 1
        elif indent is None or not line.startswith(indent + "#   "):
            indent = None
        lines.append(line if indent is None else indent + line[len(indent) + 2:])
    assert blocks == 2, "the example is a volumeMount and a volume, each starting '# - name: tls'"
    doc: dict[str, Any] = yaml.safe_load("\n".join(lines))
    return doc


def test_the_commented_tls_example_is_a_valid_directory_mount() -> None:
    """Uncommented, the cert-manager example validates strictly, mounts the Secret whole
    (no subPath) outside the ConfigMap's directory, where deploy/README.md points
    ssl.keystore.location, with the private key not readable by everyone."""
    doc = statefulset_with_the_tls_example()
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    spec = doc["spec"]["template"]["spec"]
    assert material_mounts_with_subpath(spec) == []
    mounts = {m["name"]: m for c in spec["containers"] if c["name"] == "ksidecar" for m in c["volumeMounts"]}
    tls, config = mounts["tls"]["mountPath"], mounts["config"]["mountPath"]
    assert mounts["tls"]["readOnly"] is True
    assert not tls.startswith(config.rstrip("/") + "/")  # a read-only ConfigMap volume holds no mount point
    secret = {v["name"]: v for v in spec["volumes"]}["tls"]["secret"]
    assert secret["defaultMode"] & 0o007 == 0
    readme = (DEPLOY / "README.md").read_text()
    assert f"ssl.keystore.location={tls}/tls-combined.pem" in readme
    assert f"secretName: {secret['secretName']}" in readme  # the Certificate writes that Secret


def test_the_readme_roll_out_applies_everything_with_every_pod_held() -> None:
    """deploy/README.md's broker-by-broker roll-out: step 2 applies every manifest, and the
    StatefulSet with its partition at the replica count (the file's partition: 0, applied as
    it is, would let every pod through at once)."""
    readme = (DEPLOY / "README.md").read_text()
    section = readme.split("## Rolling out sidecars broker by broker", 1)[1].split("\n## ", 1)[0]
    step = section.split("# 2.", 1)[1].split("# 3.", 1)[0]
    applied = set(re.findall(r"-f deploy/k8s/([\w.-]+\.yaml)", step))
    edit = re.search(r"sed '(s/(.+?)/(.+?)/)' deploy/k8s/(\w+\.yaml) \| kubectl -n kafka apply -f -", step)
    assert edit, step
    assert edit[4] not in applied and not re.search(r"-f deploy/k8s/?(\s|$)", step)  # not as it is
    assert applied | {edit[4]} == {path.name for path in K8S.glob("*.yaml")}
    text = (K8S / edit[4]).read_text()
    assert len(re.findall(edit[2], text, flags=re.MULTILINE)) == 1
    held = yaml.safe_load(re.sub(edit[2], edit[3], text, flags=re.MULTILINE))
    assert held["spec"]["updateStrategy"]["rollingUpdate"]["partition"] == held["spec"]["replicas"]
    assert "kubectl -n kafka rollout restart statefulset/kafka" in step


def test_configmap_says_which_of_its_keys_change_live() -> None:
    """configmap.yaml's header names the keys of its sidecar.properties that a reload
    changes in running pods (the rest wait for the roll-out); a key added or made live
    must be named there too."""
    live = {key for key in template_properties() if is_live(key)}
    assert live == {"sidecar.shutdown.drain.ms", "max.connection.creation.rate", "max.connections.per.ip"}
    header = (K8S / "configmap.yaml").read_text().split("\napiVersion:", 1)[0]
    assert all(key in header for key in live)


def test_clients_bootstrap_through_every_ready_sidecar() -> None:
    """The one address clients configure: a ClusterIP Service over the sidecar port of
    every pod (no per-pod label in its selector), ready pods only, on the port each
    sidecar also advertises."""
    spec = k8s_object("Service", "kafka")["spec"]
    assert spec["type"] == "ClusterIP" and spec.get("clusterIP") != "None"
    assert not spec.get("publishNotReadyAddresses")  # /readyz: the broker behind it answers
    statefulset = k8s_object("StatefulSet", "kafka")
    for ordinal in range(statefulset["spec"]["replicas"]):
        assert spec["selector"].items() <= pod_metadata(ordinal)["labels"].items()
    assert not set(spec["selector"]) & {"apps.kubernetes.io/pod-index", "statefulset.kubernetes.io/pod-name"}
    [port] = spec["ports"]
    assert port["targetPort"] in {p["name"] for p in container("ksidecar")["ports"]}
    assert port["targetPort"] not in {p["name"] for p in container("kafka")["ports"]}
    sidecar_port = port_of("ksidecar", port["targetPort"])
    config = deployed_config()
    assert sidecar_port == config.listeners[0].port == config.advertised("PLAINTEXT").port == port["port"]
    readme = (DEPLOY / "README.md").read_text()
    assert f"bootstrap to `kafka.kafka.svc.cluster.local:{port['port']}`" in readme


def container_port(value: int | str) -> int:
    """A NetworkPolicy or Service port: a number, or the name of a container port."""
    if isinstance(value, int):
        return value
    return next(int(p["containerPort"]) for c in pod_spec()["containers"] for p in c.get("ports", [])
                if p["name"] == value)


def test_no_broker_listener_is_open_to_clients() -> None:
    """Clients reach brokers only through sidecars. The broker's client listener is on
    loopback; its replication listener is a full Kafka listener on the pod IP, so the
    NetworkPolicy must open it to the brokers only, and open nothing but the sidecar's
    ports to anyone else."""
    policy = k8s_object("NetworkPolicy", "kafka")["spec"]
    pod_labels = pod_metadata(0)["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert "Ingress" in policy["policyTypes"]
    anyone: set[int] = set()
    brokers_only: set[int] = set()
    for rule in policy["ingress"]:
        assert rule.get("ports"), "an ingress rule without ports opens every port"
        ports = {container_port(p["port"]) for p in rule["ports"]}
        if not rule.get("from"):
            anyone |= ports
            continue
        for peer in rule["from"]:
            assert set(peer) == {"podSelector"}, peer  # no namespace or IP block
            assert peer["podSelector"]["matchLabels"].items() <= pod_labels.items()
        brokers_only |= ports
    assert anyone == {port_of("ksidecar", "sidecar"), port_of("ksidecar", "metrics")}
    for endpoint in parse_endpoints("KAFKA_LISTENERS", env_of("kafka")["KAFKA_LISTENERS"]["value"]):
        if endpoint.host == "127.0.0.1":
            assert endpoint.port not in anyone | brokers_only, endpoint
        else:
            assert endpoint.port in brokers_only and endpoint.port not in anyone, endpoint
    # Loopback is the pod's own only without the node's network namespace.
    assert not pod_spec().get("hostNetwork")


def sidecar_key(name: str) -> bool:
    """True for a key proxy/config/keys.py defines: a fixed key, ``tag.<name>``, or
    ``listener.name.<listener>.<key>`` of a per-listener key. (The sidecar only warns about
    other keys, and hands other ``observer.*`` keys to observers unchecked.)"""
    if name in {key.name for key in KEYS}:
        return True
    if name.startswith("tag."):
        return len(name) > len("tag.")
    if name.startswith("listener.name."):
        listener, _, key = name[len("listener.name."):].partition(".")
        return bool(listener) and key in LISTENER_KEYS
    return False


def test_every_key_the_manifests_set_is_a_sidecar_key() -> None:
    found = {key: "ksidecar-config sidecar.properties" for key in template_properties()}
    found.update({key: f"env {name}" for key, name in env_keys().items()})
    found.update({key: "args --set" for key in set_arguments()})
    assert {"broker.id", "advertised.listeners", "sidecar.upstream"} <= set(found)
    unknown = {key: where for key, where in found.items() if not sidecar_key(key)}
    assert not unknown, f"not keys of proxy/config/keys.py: {unknown}"


@pytest.mark.parametrize("key", [
    "zookeeper.conect", "observer.audit.dirr", "listener.name.PLAINTEXT.max.conections", "tag.",
    "advertised.listener",
])
def test_the_key_check_rejects_a_misspelt_key(key: str) -> None:
    assert not sidecar_key(key)
