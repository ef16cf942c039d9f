"""Helpers for the deploy/ tests: the files under test, metric names, tools and traffic.

Metric names are compared as Prometheus sees them: a counter ``x`` is exposed as
``x_total``, a histogram ``h`` as ``h_bucket``, ``h_sum`` and ``h_count``. A labelled
family with no children yet is exposed as ``# HELP``/``# TYPE`` lines only; those lines
count as the name existing (the sidecar declares the family; a series appears with the
first labelled event).
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shutil
import socket
import struct
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
PROMETHEUS = DEPLOY / "prometheus"
DASHBOARD = DEPLOY / "grafana" / "ksidecar.json"

KUBERNETES_VERSION = "1.30.0"
"""The Kubernetes version the manifests are validated against (pod-index label: 1.28+)."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME = re.compile(r"(?<![A-Za-z0-9_:])ksidecar_[a-z0-9_]+(?![A-Za-z0-9_:])")
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}


@functools.cache
def _k8s_parsed() -> tuple[tuple[str, dict[str, Any]], ...]:
    found: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(K8S.glob("*.yaml")):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                found.append((f"{path.name}#{index} {doc['kind']}/{doc['metadata']['name']}", doc))
    return tuple(found)


def k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    """Every YAML document under deploy/k8s as ``(file#index kind/name, document)``.

    The files are parsed once per process; each call returns its own copies."""
    return copy.deepcopy(list(_k8s_parsed()))


def k8s_object(kind: str, name: str) -> dict[str, Any]:
    """The one manifest document of ``kind`` named ``name`` (a copy of its own)."""
    for _, doc in _k8s_parsed():
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return copy.deepcopy(doc)
    raise LookupError(f"no {kind}/{name} under {K8S}")


def metric_names(expr: str) -> set[str]:
    """The ksidecar metric names a PromQL expression selects (string literals skipped)."""
    return set(_NAME.findall(_STRING.sub('""', expr)))


def dashboard_exprs(dashboard: Any) -> list[str]:
    """Every PromQL text in a Grafana dashboard: panel targets and templating queries."""
    found: list[str] = []
    if isinstance(dashboard, dict):
        for key, value in dashboard.items():
            if key in ("expr", "definition", "query") and isinstance(value, str):
                found.append(value)
            else:
                found.extend(dashboard_exprs(value))
    elif isinstance(dashboard, list):
        for item in dashboard:
            found.extend(dashboard_exprs(item))
    return found


def rule_exprs() -> list[str]:
    """Every ``expr`` of deploy/prometheus/alerts.yml."""
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def exposed_names(exposition: str) -> set[str]:
    """Series names a Prometheus server would see in this /metrics text."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            names.update(name + suffix for suffix in _SUFFIXES.get(kind.strip(), ("",)))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def tool(name: str) -> str:
    """The path of a Prometheus tool; fails with how to get it (never skips)."""
    path = shutil.which(name)
    if path is None:
        raise AssertionError(
            f"{name} is not on PATH: ./scripts/test installs Debian's prometheus package "
            "(or: apt-get install --no-install-recommends prometheus)"
        )
    return path


def http_json(url: str, timeout: float = 5.0) -> Any:
    """GET ``url`` and decode its JSON body."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def prometheus_query(base: str, query: str) -> list[dict[str, Any]]:
    """The instant-vector result of ``query`` from the Prometheus at ``base``."""
    answer = http_json(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}")
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def produce(bootstrap: str, topic: str, count: int = 20) -> None:
    """Create ``topic`` and produce ``count`` records to it with confluent-kafka."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, f"record-{i}".encode())
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} records not delivered"


def consume_and_commit(bootstrap: str, topic: str, group: str, count: int = 20) -> None:
    """Join ``group`` with one confluent-kafka consumer, read ``count`` records of ``topic``,
    commit synchronously and leave: a rebalance and an offset commit for the coordinator."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        read = 0
        deadline = time.monotonic() + 60
        while read < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                read += 1
        assert read == count, f"read {read} of {count} records of {topic}"
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def send_unsupported(host: str, port: int, api_key: int = 9999) -> bytes:
    """Send one request with an API key nobody knows; return the response body.

    The header is request header v1 (api key, version, correlation id, client id), built
    here by hand so the test does not lean on the sidecar's own codec.
    """
    client_id = b"deploy-test"
    header = struct.pack(">hhih", api_key, 0, 42, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(header)) + header)
        size = struct.unpack(">i", _read_exactly(sock, 4))[0]
        return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {count} bytes")
        data += chunk
    return data
