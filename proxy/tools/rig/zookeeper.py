"""A real standalone ZooKeeper, run from the jars in the pyspark wheel.

pyspark ships ZooKeeper 3.9 and everything it needs (netty, log4j2, slf4j) under
`pyspark/jars/`; `java -cp "<jars>/*" org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg`
starts a server. We write a zoo.cfg bound to loopback with a temporary data dir, the AdminServer
off and every four-letter word allowed (kazoo's `server_version()` uses `envi`), plus a log4j2
config that sends INFO to stdout, which goes to the log file.

Ready means `ruok` answers `imok` *and* `srvr` reports a mode: right after start-up `ruok`
already answers while `srvr` still says "not currently serving requests".

`start_ensemble` runs three servers (`QuorumPeerMain`, each with its own data dir, `myid`
and peer/election ports) as one quorum, the way production runs ZooKeeper; a server can be
killed and brought back while clients carry on.

With ``tls=True`` (both) each server also serves TLS on a ``secureClientPort`` of loopback
(Netty's ``NettyServerCnxnFactory``, whose jars the wheel ships), with certificates made on
the fly by trustme (:class:`ZkTls`: a throwaway CA, a server certificate for 127.0.0.1 and
``localhost``, a client certificate), read by ZooKeeper as PEM key and trust stores
(``ssl.keyStore.type=PEM``). The plain port stays open for the readiness probes (four-letter
words) and for set-up clients. Without ``tls`` nothing of this is made.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from proxy.tools.rig.errors import ComponentNotFoundError, ComponentStartError
from proxy.tools.rig.ports import LOOPBACK, free_port
from proxy.tools.rig.process import ManagedProcess, Service, start_on_port

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"

# A short tick keeps session expiry quick in tests: sessions may be 1 s (2 ticks) to 60 s.
_ZOO_CFG = """\
tickTime=500
clientPort={port}
clientPortAddress={host}
dataDir={data_dir}
admin.enableServer=false
4lw.commands.whitelist=*
maxClientCnxns=0
maxSessionTimeout=60000
"""

_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_OUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
"""

_JVM_OPTS = (
    "-Xms32m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",  # start-up time matters more than peak speed here
    "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.jmx.log4j.disable=true",
)


# Appended to zoo.cfg with ``tls``: TLS clients on ``secureClientPort`` (Netty), which asks
# for a client certificate (``want``: a client without one still connects, as the digest
# identity suffices) and verifies it against the CA.
_TLS_CFG = """\
secureClientPort={secure_port}
secureClientPortAddress={host}
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location={keystore}
ssl.keyStore.type=PEM
ssl.trustStore.location={truststore}
ssl.trustStore.type=PEM
ssl.clientAuth=want
"""


@dataclass(frozen=True)
class ZkTls:
    """PEM files for TLS to the rig's ZooKeeper: the CA (ZooKeeper's and the clients'
    truststore), the server's keystore (key and chain in one file, as ZooKeeper's PEM
    keystore wants) and a client keystore of the same shape."""

    ca: Path
    server_keystore: Path
    client_keystore: Path

    @classmethod
    def make(cls, directory: Path) -> ZkTls:
        """A throwaway CA and its certificates (server: 127.0.0.1 and ``localhost``), in
        ``directory``."""
        import trustme  # only with tls: the default start imports and makes nothing

        directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        client = ca.issue_cert("ksidecar-client@example.org", common_name="ksidecar-client")
        tls = cls(directory / "zk-ca.pem", directory / "zk-server.pem", directory / "zk-client.pem")
        ca.cert_pem.write_to_path(str(tls.ca))
        for leaf, path in ((server, tls.server_keystore), (client, tls.client_keystore)):
            path.write_bytes(_pkcs8(leaf.private_key_pem.bytes())
                             + b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        return tls

    def config(self, secure_port: int, host: str) -> str:
        """The zoo.cfg lines serving TLS on ``secure_port``."""
        return _TLS_CFG.format(secure_port=secure_port, host=host, keystore=self.server_keystore,
                               truststore=self.ca)

    def client_keys(self) -> dict[str, str]:
        """The sidecar's (and the CLIs') ``zookeeper.ssl.*`` keys for this server."""
        return {
            "zookeeper.ssl.client.enable": "true",
            "zookeeper.ssl.truststore.location": str(self.ca),
            "zookeeper.ssl.keystore.location": str(self.client_keystore),
        }


def _pkcs8(key_pem: bytes) -> bytes:
    # ZooKeeper's PEM reader takes PKCS#8 keys only ("BEGIN PRIVATE KEY"); trustme writes
    # the traditional form.
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(key_pem, password=None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def find_java() -> Path:
    """Locate `java`: `$JAVA_HOME/bin/java`, else on PATH; `ComponentNotFoundError` if absent."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return candidate
    on_path = shutil.which("java")
    if on_path:
        return Path(on_path)
    raise ComponentNotFoundError(
        "zookeeper",
        "no `java` on PATH (nor in $JAVA_HOME): install a Java 17 runtime, "
        "e.g. `apt-get install openjdk-17-jre-headless`",
    )


def find_zookeeper_jars() -> Path:
    """The `pyspark/jars` directory holding the ZooKeeper jars, without importing pyspark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ComponentNotFoundError(
            "zookeeper", "pyspark is not installed (its wheel ships the ZooKeeper jars)"
        )
    jars = Path(spec.origin).parent / "jars"
    if not any(jars.glob("zookeeper-3*.jar")):
        raise ComponentNotFoundError("zookeeper", f"no zookeeper-3*.jar in {jars}")
    return jars


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (`ruok`, `srvr`, `mntr`, ...) and return the answer."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def is_serving(host: str, port: int) -> bool:
    """Whether the server at `host:port` answers `imok` and is serving requests."""
    if four_letter_word(host, port, "ruok") != "imok":
        return False
    return "Mode:" in four_letter_word(host, port, "srvr")


class ZooKeeperServer(Service):
    """A running standalone ZooKeeper."""

    def __init__(self, process: ManagedProcess, host: str, port: int, data_dir: Path,
                 tls: ZkTls | None = None, secure_port: int | None = None) -> None:
        super().__init__(process, host, port)
        self.data_dir = data_dir
        #: The certificates, when started with ``tls``.
        self.tls = tls
        #: The TLS client port, when started with ``tls``.
        self.secure_port = secure_port

    def secure_connect_string(self, chroot: str | None = None) -> str:
        """The TLS port's connect string (``tls`` only), with ``chroot`` appended when given."""
        if self.secure_port is None:
            raise ValueError("this ZooKeeper was started without tls")
        return _with_chroot(f"{self.host}:{self.secure_port}", chroot)

    @property
    def connect(self) -> str:
        """The connect string without chroot, `host:port`."""
        return self.address

    def connect_string(self, chroot: str | None = None) -> str:
        """The connect string, with `chroot` ("/ksidecar") appended when given.

        ZooKeeper clients do not create the chroot node: create it before using the string.
        """
        return _with_chroot(self.address, chroot)

    def four_letter_word(self, word: str) -> str:
        """Send a four-letter command to this server and return its answer."""
        return four_letter_word(self.host, self.port, word)


def _with_chroot(connect: str, chroot: str | None) -> str:
    if chroot is None or chroot == "/":
        return connect
    if not chroot.startswith("/") or chroot.endswith("/"):
        raise ValueError(f"chroot must start with '/' and not end with one: {chroot!r}")
    return f"{connect}{chroot}"


def start_zookeeper(
    work_dir: Path,
    *,
    host: str = LOOPBACK,
    port: int | None = None,
    name: str = "zookeeper",
    start_timeout: float = 60.0,
    tls: bool = False,
) -> ZooKeeperServer:
    """Start ZooKeeper with its config, data and `<name>.log` under `work_dir`.

    With `port=None` a free port is picked. With `tls`, it also serves TLS on a free port
    (:attr:`ZooKeeperServer.secure_port`, certificates in :attr:`ZooKeeperServer.tls`).
    Returns once the server is serving requests.
    """
    java = find_java()
    jars = find_zookeeper_jars()
    data_dir = work_dir / f"{name}-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    log4j = work_dir / f"{name}-log4j2.properties"
    log4j.write_text(_LOG4J2)
    certificates = ZkTls.make(work_dir / f"{name}-tls") if tls else None
    secure_port = free_port(host) if tls else None

    def build(chosen: int) -> ManagedProcess:
        config = work_dir / f"{name}.cfg"
        text = _ZOO_CFG.format(port=chosen, host=host, data_dir=data_dir)
        if certificates is not None and secure_port is not None:
            text += certificates.config(secure_port, host)
        config.write_text(text)
        argv = [
            str(java),
            *_JVM_OPTS,
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp", f"{jars}/*",
            MAIN_CLASS,
            str(config),
        ]  # fmt: skip
        return ManagedProcess(
            name,
            argv,
            log_path=work_dir / f"{name}.log",
            probe=lambda: is_serving(host, chosen),
            cwd=work_dir,
            start_timeout=start_timeout,
        )

    chosen, process = start_on_port(build, port, host=host)
    return ZooKeeperServer(process, host, chosen, data_dir, certificates, secure_port)


# -- an ensemble -----------------------------------------------------------------------------

_ENSEMBLE_EXTRA = """\
initLimit=10
syncLimit=5
{servers}
"""


def mode(host: str, port: int) -> str | None:
    """The server's ``Mode:`` from ``srvr`` (``leader``, ``follower``, ``standalone``), or
    ``None`` while it does not serve (no quorum yet, or not reachable)."""
    try:
        answer = four_letter_word(host, port, "srvr")
    except OSError:
        return None
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip()
    return None


class ZooKeeperEnsemble:
    """Three (or ``size``) ZooKeeper servers in one quorum on loopback ports.

    Clients use :attr:`connect` (every server's address); losing a minority of servers
    changes nothing for them. :meth:`stop_server` and :meth:`start_server` kill and bring
    back one server (its data dir and ``myid`` are kept, so it rejoins the quorum).
    """

    def __init__(self, work_dir: Path, host: str, size: int, start_timeout: float,
                 tls: bool = False) -> None:
        self.work_dir = work_dir
        self.host = host
        self.start_timeout = start_timeout
        self.java = find_java()
        self.jars = find_zookeeper_jars()
        self.client_ports = [free_port(host) for _ in range(size)]
        self.quorum_ports = [(free_port(host), free_port(host)) for _ in range(size)]
        self.processes: list[ManagedProcess | None] = [None] * size
        #: The certificates when started with ``tls``; each server then also serves TLS on
        #: its :attr:`secure_ports` entry.
        self.tls = ZkTls.make(work_dir / "zk-tls") if tls else None
        self.secure_ports = [free_port(host) for _ in range(size)] if tls else []
        self.log4j = work_dir / "zk-ensemble-log4j2.properties"
        self.log4j.write_text(_LOG4J2)

    @property
    def size(self) -> int:
        """How many servers the ensemble has."""
        return len(self.client_ports)

    @property
    def connect(self) -> str:
        """The connect string naming every server, ``h:p1,h:p2,h:p3`` (no chroot)."""
        return ",".join(f"{self.host}:{p}" for p in self.client_ports)

    def connect_string(self, chroot: str | None = None) -> str:
        """The connect string with ``chroot`` appended when given."""
        return _with_chroot(self.connect, chroot)

    @property
    def secure_connect(self) -> str:
        """Every server's TLS address (``tls`` only), ``h:s1,h:s2,h:s3``."""
        if self.tls is None:
            raise ValueError("this ensemble was started without tls")
        return ",".join(f"{self.host}:{p}" for p in self.secure_ports)

    def secure_connect_string(self, chroot: str | None = None) -> str:
        """The TLS connect string (``tls`` only) with ``chroot`` appended when given."""
        return _with_chroot(self.secure_connect, chroot)

    def _process(self, index: int) -> ManagedProcess:
        myid = index + 1
        name = f"zk-{myid}"
        data_dir = self.work_dir / f"{name}-data"
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "myid").write_text(f"{myid}\n")
        servers = "\n".join(f"server.{i + 1}={self.host}:{peer}:{election}"
                            for i, (peer, election) in enumerate(self.quorum_ports))
        config = self.work_dir / f"{name}.cfg"
        config.write_text(
            _ZOO_CFG.format(port=self.client_ports[index], host=self.host, data_dir=data_dir)
            + _ENSEMBLE_EXTRA.format(servers=servers)
            + (self.tls.config(self.secure_ports[index], self.host) if self.tls else ""))
        port = self.client_ports[index]
        argv = [str(self.java), *_JVM_OPTS, f"-Dlog4j2.configurationFile={self.log4j}",
                "-cp", f"{self.jars}/*", "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)]
        # Alone, a server answers ruok but does not serve: readiness of the quorum is
        # checked by wait_quorum once enough servers run.
        return ManagedProcess(name, argv, log_path=self.work_dir / f"{name}.log",
                              probe=lambda: four_letter_word(self.host, port, "ruok") == "imok",
                              cwd=self.work_dir, start_timeout=self.start_timeout)

    def start_server(self, index: int, *, wait: bool = True) -> None:
        """Start (or restart) server ``index`` (0-based) and wait until it serves (with
        ``wait=False`` only until it runs: alone, a server cannot serve without a quorum)."""
        process = self._process(index)
        self.processes[index] = process
        process.start()
        if wait:
            self.wait_serving([index])

    def stop_server(self, index: int, *, kill: bool = False) -> None:
        """Stop server ``index``: SIGTERM (or SIGKILL with ``kill``)."""
        process = self.processes[index]
        if process is None:
            return
        if kill and process.pid is not None and process.running:
            os.killpg(process.pid, signal.SIGKILL)
        process.stop()
        self.processes[index] = None

    def wait_serving(self, indexes: list[int] | None = None) -> None:
        """Wait until the servers ``indexes`` (all running ones by default) serve requests."""
        wanted = indexes if indexes is not None else [i for i, p in enumerate(self.processes) if p]
        deadline = time.monotonic() + self.start_timeout
        while True:
            if all(mode(self.host, self.client_ports[i]) in ("leader", "follower") for i in wanted):
                return
            if time.monotonic() > deadline:
                raise ComponentStartError("zookeeper-ensemble", f"servers {wanted} not serving after "
                                          f"{self.start_timeout:.0f}s")
            time.sleep(0.1)

    def leader(self) -> int | None:
        """The index of the current leader, if any server says it leads."""
        for i, port in enumerate(self.client_ports):
            if self.processes[i] is not None and mode(self.host, port) == "leader":
                return i
        return None

    def stop(self) -> None:
        """Stop every server."""
        for index in range(self.size):
            self.stop_server(index)


def start_ensemble(work_dir: Path, *, size: int = 3, host: str = LOOPBACK,
                   start_timeout: float = 60.0, tls: bool = False) -> ZooKeeperEnsemble:
    """Start a ``size``-server ZooKeeper ensemble under ``work_dir``; returns once every
    server serves (a leader is elected and the followers have synced). With ``tls`` each
    server also serves TLS (:attr:`ZooKeeperEnsemble.secure_connect`)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    ensemble = ZooKeeperEnsemble(work_dir, host, size, start_timeout, tls)
    try:
        for index in range(size):
            process = ensemble._process(index)
            ensemble.processes[index] = process
            process.start()
        ensemble.wait_serving()
    except BaseException:
        ensemble.stop()
        raise
    return ensemble
