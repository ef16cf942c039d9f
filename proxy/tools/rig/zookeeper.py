"""A real standalone ZooKeeper, run from the jars in the pyspark wheel.

pyspark ships ZooKeeper 3.9 and everything it needs (netty, log4j2, slf4j) under
`pyspark/jars/`; `java -cp "<jars>/*" org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg`
starts a server. We write a zoo.cfg bound to loopback with a temporary data dir, the AdminServer
off and every four-letter word allowed (kazoo's `server_version()` uses `envi`), plus a log4j2
config that sends INFO to stdout, which goes to the log file.

Ready means `ruok` answers `imok` *and* `srvr` reports a mode: right after start-up `ruok`
already answers while `srvr` still says "not currently serving requests".
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
from pathlib import Path

from proxy.tools.rig.errors import ComponentNotFoundError
from proxy.tools.rig.ports import LOOPBACK
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

    def __init__(self, process: ManagedProcess, host: str, port: int, data_dir: Path) -> None:
        super().__init__(process, host, port)
        self.data_dir = data_dir

    @property
    def connect(self) -> str:
        """The connect string without chroot, `host:port`."""
        return self.address

    def connect_string(self, chroot: str | None = None) -> str:
        """The connect string, with `chroot` ("/ksidecar") appended when given.

        ZooKeeper clients do not create the chroot node: create it before using the string.
        """
        if chroot is None or chroot == "/":
            return self.address
        if not chroot.startswith("/") or chroot.endswith("/"):
            raise ValueError(f"chroot must start with '/' and not end with one: {chroot!r}")
        return f"{self.address}{chroot}"

    def four_letter_word(self, word: str) -> str:
        """Send a four-letter command to this server and return its answer."""
        return four_letter_word(self.host, self.port, word)


def start_zookeeper(
    work_dir: Path,
    *,
    host: str = LOOPBACK,
    port: int | None = None,
    name: str = "zookeeper",
    start_timeout: float = 60.0,
) -> ZooKeeperServer:
    """Start ZooKeeper with its config, data and `<name>.log` under `work_dir`.

    With `port=None` a free port is picked. Returns once the server is serving requests.
    """
    java = find_java()
    jars = find_zookeeper_jars()
    data_dir = work_dir / f"{name}-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    log4j = work_dir / f"{name}-log4j2.properties"
    log4j.write_text(_LOG4J2)

    def build(chosen: int) -> ManagedProcess:
        config = work_dir / f"{name}.cfg"
        config.write_text(_ZOO_CFG.format(port=chosen, host=host, data_dir=data_dir))
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
    return ZooKeeperServer(process, host, chosen, data_dir)
