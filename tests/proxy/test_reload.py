"""Issue 45 with a real ``ksidecar run`` of two workers in front of Tansu: a certificate
rotated by a Kubernetes-style symlink swap while a confluent-kafka producer holds its
connection and produces all along; a ``policy.*`` change applied by SIGHUP on every worker's
open connections; a broken certificate and a configuration that does not validate changing
nothing; a listener port change applied as far as it can be and named as needing a restart.

Expected values come from the certificates themselves (their serials, read with
``cryptography``) and from kafka-python's decoding of the answers."""

from __future__ import annotations

import logging
import os
import re
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trustme
from confluent_kafka import KafkaError, Producer
from cryptography import x509
from kafka.protocol.producer import ProduceResponse

from proxy.config import build_config
from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.bench.kafka import record_batch
from tests.proxy.conftest import StartSidecar, sidecar_keys
from tests.proxy.wire import Wire, create_topic, response_body

pytestmark = pytest.mark.integration

API_VERSIONS, API_VERSIONS_V3 = 18, 3
POLICY_VIOLATION = 44


class Secret:
    """A mounted Secret as the kubelet updates it: ``sidecar.pem`` → ``..data/sidecar.pem``,
    ``..data`` → a timestamped directory, swapped by one atomic rename."""

    def __init__(self, root: Path, ca: trustme.CA) -> None:
        self.root, self.ca, self.generation = root, ca, 0
        root.mkdir()
        self.path = root / "sidecar.pem"

    def publish(self, pem: bytes) -> None:
        """Write ``pem`` into a new directory and swap ``..data`` to it."""
        self.generation += 1
        directory = self.root / f"..2026_11_29_{self.generation}"
        directory.mkdir()
        (directory / "sidecar.pem").write_bytes(pem)
        link = self.root / "..data_tmp"
        link.symlink_to(directory.name)
        os.replace(link, self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to("..data/sidecar.pem")

    def issue(self) -> int:
        """A new certificate for 127.0.0.1 from the same CA, published; its serial."""
        leaf = self.ca.issue_cert("127.0.0.1", "localhost", common_name="sidecar", organization_name="ksidecar",
                                  organization_unit_name="tests")
        self.publish(leaf.private_key_and_cert_chain_pem.bytes())
        return x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes()).serial_number


def served_serial(port: int, ca_path: Path) -> int:
    """The serial of the certificate a new TLS connection to ``port`` is shown."""
    context = ssl.create_default_context(cafile=str(ca_path))
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5),
                             server_hostname="127.0.0.1") as conn:
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def wait_for(check: object, timeout: float, what: str) -> float:
    """Poll ``check()`` until true; the seconds it took."""
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - started


def ksidecar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy.tools.cli", *args], capture_output=True, text=True,
                          timeout=90, check=False)


def worker_pids(server: SidecarServer) -> list[tuple[str, str]]:
    return re.findall(r"worker (\d+) started \(pid (\d+)\)", server.log_path.read_text())


def edit_properties(path: Path, **changes: str) -> None:
    """Set keys in the properties file, atomically (a new file renamed over it)."""
    lines = [line for line in path.read_text().splitlines() if line.split("=", 1)[0] not in changes]
    lines += [f"{key}={value}" for key, value in changes.items()]
    scratch = path.with_suffix(".new")
    scratch.write_text("\n".join(lines) + "\n")
    os.replace(scratch, path)


@pytest.fixture
def pki(tmp_path: Path) -> Iterator[tuple[Secret, Path, int]]:
    ca = trustme.CA()
    ca_path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    secret = Secret(tmp_path / "secret", ca)
    yield secret, ca_path, secret.issue()


def start(tmp_path: Path, tansu: TansuServer, **keys: str) -> SidecarServer:
    """Two workers, the policy filter, and an SSL listener when given a keystore."""
    tls = ("SSL",) if "ssl.keystore.location" in keys else ()
    return start_sidecar(tmp_path, tansu.bootstrap, name="reload", extra_listeners=tls, keys={
        "sidecar.workers": "2", "filter.class.names": "policy", **keys})  # keys may set the workers


def start_watched_tls(tmp_path: Path, tansu: TansuServer, secret: Secret) -> SidecarServer:
    """An SSL listener whose keystore is ``secret``'s, its files looked at every 200 ms."""
    return start(tmp_path, tansu, **{"ssl.keystore.location": str(secret.path), "sidecar.config.watch.ms": "200"})


async def produce_two(wire: Wire, topic: str, correlation_id: int) -> int:
    """A Produce v8 of two records; its partition's error code (kafka-python decodes it)."""
    frame = await wire.call(0, 8, correlation_id, {
        "TransactionalId": None, "Acks": 1, "TimeoutMs": 30000,
        "TopicData": [{"Name": topic, "PartitionData": [{"Index": 0, "Records": record_batch(2, 10)}]}]})
    _, body = response_body(frame, 0, 8)
    answer = ProduceResponse.decode(body, version=8)
    return int(answer.responses[0].partition_responses[0].error_code)


def test_a_rotated_certificate_is_served_within_5s_and_the_open_connection_goes_on(
        tmp_path: Path, tansu: TansuServer, pki: tuple[Secret, Path, int]) -> None:
    secret, ca_path, first = pki
    with start_watched_tls(tmp_path, tansu, secret) as server:
        port = server.extra_ports["SSL"]
        assert served_serial(port, ca_path) == first
        pids = worker_pids(server)
        topic = f"reload-{uuid.uuid4().hex[:8]}"
        delivered: list[str] = []
        errors: list[KafkaError] = []
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL",
                             "ssl.ca.location": str(ca_path), "linger.ms": 0, "acks": "all",
                             "topic.metadata.refresh.interval.ms": 600000})

        def report(error: KafkaError | None, message: object) -> None:
            if error is None:
                delivered.append(message.value().decode())  # type: ignore[attr-defined]
            else:
                errors.append(error)

        stop = threading.Event()
        sent: list[str] = []

        def produce_all_along() -> None:
            n = 0
            while not stop.is_set() and n < 2000:
                value = f"m{n}"
                producer.produce(topic, value.encode(), on_delivery=report)
                sent.append(value)
                producer.poll(0.02)
                n += 1

        producer.produce(topic, b"first", on_delivery=report)  # auto-created by Tansu
        assert producer.flush(15) == 0 and not errors, errors
        connects_before = server.sample("ksidecar_connections_total", listener="SSL")
        thread = threading.Thread(target=produce_all_along)
        thread.start()
        try:
            time.sleep(0.5)
            second = secret.issue()
            took = wait_for(lambda: served_serial(port, ca_path) == second, 5.0, "the new certificate served")
            time.sleep(0.5)
        finally:
            stop.set()
            thread.join(10)
        assert producer.flush(15) == 0
        assert not errors, errors
        assert delivered == ["first", *sent], "every record delivered, in order"
        assert len(sent) > 20
        # The producer's connections were made before the swap; the only ones made after
        # are served_serial's own (one per poll), each closed at once.
        assert server.sample("ksidecar_config_reloads_total", result="success") >= 1
        assert server.sample("ksidecar_worker_restarts_total", worker="0") == 0
        assert server.sample("ksidecar_worker_restarts_total", worker="1") == 0
        assert worker_pids(server) == pids, "no worker was replaced"
        assert 'reason="tls_handshake"' not in server.scrape(), "no handshake failed"
        assert connects_before >= 2
        print(f"new certificate served {took:.2f} s after the swap")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sighup_applies_a_policy_key_to_the_next_request_on_every_worker(
        tmp_path: Path, tansu: TansuServer, workers: str) -> None:
    pid_file = tmp_path / "ksidecar.pid"
    with start(tmp_path, tansu, **{"sidecar.config.watch.ms": "0", "sidecar.pid.file": str(pid_file),
                                   "sidecar.workers": workers}) as server:
        properties = tmp_path / "reload.properties"

        async def scenario() -> None:
            wires = [await Wire.connect(server.host, server.port) for _ in range(4)]
            topic = f"policy-{uuid.uuid4().hex[:8]}"
            await create_topic(wires[0], topic)
            if workers == "2":
                assert [server.sample("ksidecar_worker_connections", worker=w) for w in "01"] == [2.0, 2.0]
            assert [await produce_two(wire, topic, n) for n, wire in enumerate(wires)] == [0, 0, 0, 0]
            edit_properties(properties, **{"policy.produce.max.records": "1"})
            signalled = await trio.to_thread.run_sync(ksidecar, "reload", "--pid-file", str(pid_file))
            assert signalled.returncode == 0, signalled.stderr
            assert f"sent SIGHUP to pid {pid_file.read_text().strip()}" in signalled.stdout
            await trio.to_thread.run_sync(lambda: wait_for(
                lambda: server.sample("ksidecar_config_reloads_total", result="success") == 1, 10, "the reload"))
            # The same four connections, two on each worker: refused from the next request.
            assert [await produce_two(wire, topic, 10 + n) for n, wire in enumerate(wires)] == [POLICY_VIOLATION] * 4
            fresh = await Wire.connect(server.host, server.port)
            assert await produce_two(fresh, topic, 20) == POLICY_VIOLATION

        trio.run(scenario)
        assert "reloaded (SIGHUP): policy.produce.max.records" in server.log_path.read_text()


def test_a_broken_certificate_or_configuration_changes_nothing(
        tmp_path: Path, tansu: TansuServer, pki: tuple[Secret, Path, int]) -> None:
    secret, ca_path, first = pki
    with start_watched_tls(tmp_path, tansu, secret) as server:
        port = server.extra_ports["SSL"]
        secret.publish(b"-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
        wait_for(lambda: server.sample("ksidecar_config_reloads_total", result="failure") == 1, 5, "a failed reload")
        assert server.sample("ksidecar_config_last_reload_successful") == 0
        assert served_serial(port, ca_path) == first, "the old certificate still serves"
        assert re.search(r"reload \(file .*sidecar\.pem\) failed, the configuration in force is unchanged: "
                         r"listener SSL: cannot load TLS material", server.log_path.read_text())
        hash_before = _config_hash(server)
        edit_properties(tmp_path / "reload.properties", **{"connections.max.idle.ms": "soon"})
        refused = ksidecar("reload", "--config", str(tmp_path / "reload.properties"))
        assert refused.returncode == 1, refused
        assert "connections.max.idle.ms='soon'" in refused.stdout
        assert server.sample("ksidecar_config_reloads_total", result="failure") >= 2
        assert _config_hash(server) == hash_before
        assert served_serial(port, ca_path) == first


def test_a_port_change_is_named_as_needing_a_restart_and_the_rest_applies(
        tmp_path: Path, tansu: TansuServer) -> None:
    with start(tmp_path, tansu, **{"sidecar.config.watch.ms": "0"}) as server:
        properties = tmp_path / "reload.properties"
        text = properties.read_text()
        listeners = re.search(r"^listeners=(.*)$", text, re.M)
        assert listeners is not None
        moved = listeners.group(1).replace(f":{server.port}", f":{server.port + 1}")
        assert moved != listeners.group(1)
        edit_properties(properties, listeners=moved, **{"policy.produce.max.records": "1"})
        applied = ksidecar("reload", "--config", str(properties))
        assert applied.returncode == 3, applied
        assert "reloaded (ksidecar reload): policy.produce.max.records; these keys need a restart to take " \
               "effect: listeners" in applied.stdout
        assert server.sample("ksidecar_config_restart_pending_keys") == 1

        async def scenario() -> None:
            wire = await Wire.connect(server.host, server.port)  # still the old port
            topic = f"port-{uuid.uuid4().hex[:8]}"
            await create_topic(wire, topic)
            assert await produce_two(wire, topic, 1) == POLICY_VIOLATION

        trio.run(scenario)


def _config_hash(server: SidecarServer) -> str:
    found = re.search(r'^ksidecar_config_info\{hash="([0-9a-f]+)"\} 1', server.scrape(), re.M)
    assert found is not None
    return found.group(1)


# -- one process, in this one (the single-process Sidecar's own commit) ---------------------------


async def handshake(wire: Wire, mechanism: str, correlation_id: int) -> tuple[int, list[str]]:
    """SaslHandshake v1: the error code and the mechanisms the listener lists."""
    frame = await wire.call(17, 1, correlation_id, {"Mechanism": mechanism})
    _, body = response_body(frame, 17, 1)
    error, count = struct.unpack_from(">hi", body)
    names, at = [], 6
    for _ in range(count):
        (size,) = struct.unpack_from(">h", body, at)
        names.append(body[at + 2:at + 2 + size].decode())
        at += 2 + size
    return error, names


async def test_a_reload_gives_new_connections_new_sasl_mechanisms_and_keeps_the_open_ones(
        start_sidecar: StartSidecar, tansu: TansuServer, tmp_path: Path) -> None:
    raw = sidecar_keys(tansu.bootstrap, listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_enabled_mechanisms="PLAIN",
                       sidecar_sasl_plain_users_file=str(tmp_path / "users"), connections_max_idle_ms="600000")
    sidecar = await start_sidecar(raw)
    port = sidecar.bound["SASL_PLAINTEXT"].port
    with trio.fail_after(10):
        before = await Wire.connect("127.0.0.1", port)
        assert await handshake(before, "SCRAM-SHA-256", 1) == (33, ["PLAIN"])  # UNSUPPORTED_SASL_MECHANISM
        opened = await Wire.connect("127.0.0.1", port)
        await opened.call(API_VERSIONS, 0, 9)  # served: its connection is built before the reload
        await sidecar.apply_reload(build_config({**raw, "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                                                 "connections.max.idle.ms": "5000", "sidecar.log.level": "debug"}))
        assert await handshake(await Wire.connect("127.0.0.1", port), "SCRAM-SHA-256", 2) == (
            0, ["PLAIN", "SCRAM-SHA-256"])
        assert await handshake(opened, "SCRAM-SHA-256", 3) == (33, ["PLAIN"])  # opened before: as it was
    assert sidecar.idle.timeout == 5.0
    assert logging.getLogger().level == logging.DEBUG
    logging.getLogger().setLevel(logging.WARNING)


FILTER_MODULE = '''
from proxy.datapath.filters import Refuse

REFUSE = {refuse}


class Gate:
    api_keys = frozenset({{0}})

    def configure(self, config):
        self.message = config.get("filter.gate.message", "no")

    def on_request(self, request, context):
        return Refuse(44, self.message) if REFUSE else None

    def close(self):
        CLOSED.append(self.message)


CLOSED = []
'''


async def test_a_reload_imports_an_operators_filter_again_for_the_next_request_of_an_open_connection(
        start_sidecar: StartSidecar, tansu: TansuServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"gate_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(FILTER_MODULE.format(refuse=False))
    monkeypatch.syspath_prepend(str(tmp_path))
    raw = sidecar_keys(tansu.bootstrap, filter_class_names=f"{module}.Gate")
    sidecar = await start_sidecar(raw)
    with trio.fail_after(10):
        wire = await Wire.connect("127.0.0.1", sidecar.bound["PLAINTEXT"].port)
        topic = f"gate-{uuid.uuid4().hex[:8]}"
        await create_topic(wire, topic)
        assert await produce_two(wire, topic, 1) == 0
        (tmp_path / f"{module}.py").write_text(FILTER_MODULE.format(refuse=True) + "# changed\n")
        await sidecar.apply_reload(build_config({**raw, "filter.gate.message": "closed for the night"}))
        assert await produce_two(wire, topic, 2) == POLICY_VIOLATION  # the same connection, the new code
    assert sys.modules[module].CLOSED == ["no"]  # the replaced instance (configured before: "no") was closed
    assert sidecar.filters[0].instance.message == "closed for the night"


async def test_a_reload_of_super_users_holds_for_the_next_request_of_an_open_connection(
        start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer) -> None:
    """``super.users`` with ``sidecar.authorizer=acls``: DescribeAcls needs Describe on the
    Cluster, which no ACL grants here; a super user is let through, and once a reload took
    the principal out of ``super.users`` the same connection's next DescribeAcls is refused."""
    raw = sidecar_keys(tansu.bootstrap, zookeeper_connect=f"{zookeeper.connect}/ksidecar-tests/reload-"
                       f"{uuid.uuid4().hex[:8]}", sidecar_authorizer="acls", super_users="User:ANONYMOUS")
    sidecar = await start_sidecar(raw)
    everything = {"ResourceTypeFilter": 1, "ResourceNameFilter": None, "PatternTypeFilter": 1,
                  "PrincipalFilter": None, "HostFilter": None, "Operation": 1, "PermissionType": 1}

    async def describe_acls(wire: Wire, correlation_id: int) -> int:
        frame = await wire.call(29, 3, correlation_id, everything)
        _, body = response_body(frame, 29, 3)
        return int(struct.unpack_from(">h", body, 4)[0])  # after ThrottleTimeMs

    with trio.fail_after(10):
        wire = await Wire.connect("127.0.0.1", sidecar.bound["PLAINTEXT"].port)
        assert await describe_acls(wire, 1) == 0
        await sidecar.apply_reload(build_config({**raw, "super.users": "User:admin"}))
        assert await describe_acls(wire, 2) == 31  # CLUSTER_AUTHORIZATION_FAILED
