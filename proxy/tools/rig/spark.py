"""Spark for tests and the demo: a local session bound to loopback, or a standalone cluster.

**A local session.** pyspark starts its driver JVM through `spark-submit` and lets it inherit our
stdout and stderr. We launch that gateway ourselves with `launch_gateway(popen_kwargs=...)`
(pyspark's hook for capturing the JVM's output) so the output lands in `<log_dir>/spark.log` and
the JVM runs in its own process group, which `stop_spark` stops by closing its stdin (the JVM
exits on EOF), then by PID. If the launch itself is interrupted (Ctrl-C while the JVM boots),
pyspark never hands us its Popen: the JVM is then found by a one-off token we put on its command
line and killed.

**A standalone cluster.** `start_cluster` runs a master and workers from the scripts in the
pyspark wheel (`pyspark/bin/spark-class org.apache.spark.deploy.master.Master`, then
`...deploy.worker.Worker spark://...`), every one on loopback (`SPARK_LOCAL_IP`, `--host`) with
its own port, web UI port, log file and process group (`ManagedProcess`; a worker's executors
run in its group and go with it). The cluster is ready when the master's status page
(`http://127.0.0.1:<ui>/json/`) lists every worker as alive. `SparkCluster.submit` runs
`spark-submit --master spark://...` in client mode (the driver runs here, with this interpreter,
the executors on the workers), its output in a log file of its own. No `conf/` of the wheel or
the environment applies: `SPARK_CONF_DIR` is an empty directory of the cluster's.

pyspark is imported lazily (and not at all for the cluster): it is an optional extra.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from proxy.tools.rig.errors import ComponentNotFoundError, ComponentStartError, RigError
from proxy.tools.rig.ports import LOOPBACK, free_port
from proxy.tools.rig.process import ManagedProcess, read_tail, start_on_port

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Start-up time matters more than peak speed for the small inputs of tests and the demo: the
# JIT's first tier only, which does not compete with the work for a shared machine's cores.
_QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

SPARK_CONF: dict[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    # Otherwise a partition directory `hour=05` is read back as the integer 5.
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": _QUICK_JVM,
}
"""Settings for every test and demo session, on top of `local[2]`."""


def spark_log_path(log_dir: Path) -> Path:
    """Where `start_spark` sends the driver JVM's output."""
    return log_dir / "spark.log"


def start_spark(
    log_dir: Path, *, app_name: str = "ksidecar", extra_conf: dict[str, str] | None = None
) -> SparkSession:
    """Start a `local[2]` SparkSession with `SPARK_CONF` (plus `extra_conf`).

    Python workers run with this interpreter. Raises `ComponentStartError` with the log tail if
    the JVM does not come up. Stop it with `stop_spark`.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    conf = SparkConf().setMaster("local[2]").setAppName(app_name)
    settings = {
        **SPARK_CONF,
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        **(extra_conf or {}),
    }
    for key, value in settings.items():
        conf.set(key, value)
    # Marks our JVM's command line, so it can be found if launch_gateway is interrupted.
    token = uuid.uuid4().hex
    conf.set("spark.ksidecar.rig.token", token)
    # Spark warns and picks a non-loopback address unless told; launch_gateway copies os.environ.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log_path = spark_log_path(log_dir)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            gateway = launch_gateway(  # type: ignore[no-untyped-call]
                conf,
                popen_kwargs={
                    "stdout": log,
                    "stderr": subprocess.STDOUT,
                    "start_new_session": True,
                },
            )
        except BaseException as exc:
            # launch_gateway keeps its Popen to itself when it fails or is interrupted (Ctrl-C
            # while the JVM boots), and a JVM that has not finished booting ignores its stdin.
            _kill_groups_marked(token)
            if isinstance(exc, Exception):
                raise ComponentStartError(
                    "spark", str(exc), log_tail=read_tail(log_path), log_path=str(log_path)
                ) from exc
            raise
    try:
        context = SparkContext(conf=conf, gateway=gateway)
        return SparkSession(context)
    except BaseException:
        _stop_gateway(gateway)
        raise


def stop_spark(spark: SparkSession, grace: float = 10.0) -> None:
    """Stop the session and its driver JVM (closing its stdin, then SIGKILL after `grace`)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    try:
        spark.stop()
    finally:
        _stop_gateway(gateway, grace)


def _stop_gateway(gateway: Any, grace: float = 10.0) -> None:
    from pyspark import SparkContext

    # pyspark keeps the gateway on the class and reuses it; a later session must launch anew.
    if SparkContext._gateway is gateway:
        SparkContext._gateway = None
        SparkContext._jvm = None
    if gateway is None:
        return
    proc: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    # The JVM may already be gone; what matters is the process below.
    with contextlib.suppress(Exception):
        gateway.shutdown()
    if proc is None:
        return
    # The gateway JVM exits when its stdin closes (that is how pyspark tears it down).
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _kill_groups_marked(token: str) -> None:
    """SIGKILL the process group of every process whose command line contains `token`."""
    marker = token.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker not in (entry / "cmdline").read_bytes():
                continue
            pid = int(entry.name)
            pgid = os.getpgid(pid)
            if pgid == os.getpgrp():
                os.kill(pid, signal.SIGKILL)
            else:
                os.killpg(pgid, signal.SIGKILL)
        except (OSError, ValueError):
            continue  # gone meanwhile, or not ours to read


# ---------------------------------------------------------------------------------------------
# A standalone cluster

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

# Variables of a calling Spark driver (or of the caller's shell) that must not leak into the
# daemons or into a submission, which would then talk to the wrong JVM or take other arguments.
_INHERITED_SPARK_ENV = (
    "PYSPARK_GATEWAY_PORT",
    "PYSPARK_GATEWAY_SECRET",
    "PYSPARK_SUBMIT_ARGS",
    "_PYSPARK_DRIVER_CONN_INFO_PATH",
    "SPARK_CONF_DIR",
    "SPARK_MASTER_OPTS",
    "SPARK_WORKER_OPTS",
    "SPARK_DAEMON_JAVA_OPTS",
    "SPARK_REMOTE",
)

SUBMIT_CONF: dict[str, str] = {
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": _QUICK_JVM,
    "spark.executor.extraJavaOptions": _QUICK_JVM,
}
"""Settings of every `SparkCluster.submit` (the driver on loopback, no UI, JVMs quick to
start), before the caller's."""


def find_spark_home() -> Path:
    """The pyspark package directory, which holds `bin/spark-class` and `jars/` (without
    importing pyspark); `ComponentNotFoundError` when pyspark is not installed."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ComponentNotFoundError("spark", "pyspark is not installed (`pip install -e '.[spark]'`)")
    home = Path(spec.origin).parent
    if not os.access(home / "bin" / "spark-class", os.X_OK):
        raise ComponentNotFoundError("spark", f"no executable bin/spark-class in {home}")
    return home


def master_status(host: str, ui_port: int, timeout: float = 2.0) -> dict[str, Any]:
    """The master's status page as JSON (`url`, `status`, `aliveworkers`, `workers`,
    `activeapps`, `completedapps`, ...)."""
    with urllib.request.urlopen(f"http://{host}:{ui_port}/json/", timeout=timeout) as reply:
        status: dict[str, Any] = json.load(reply)
    return status


@dataclass(frozen=True, kw_only=True)
class Submission:
    """A finished `spark-submit`: its exit code, log file and duration."""

    app: str
    returncode: int
    log_path: Path
    seconds: float

    def log_tail(self, lines: int = 60) -> str:
        """The last `lines` lines of the submission's output."""
        return read_tail(self.log_path, lines)

    def check(self) -> Self:
        """Self if `spark-submit` exited 0, else `RigError` with the log's tail."""
        if self.returncode != 0:
            raise RigError(
                f"spark-submit {self.app} exited with {self.returncode} after {self.seconds:.1f}s"
                f" (log: {self.log_path})\n--- log tail ---\n{self.log_tail()}"
            )
        return self


class SparkCluster:
    """A running standalone master and its workers; stop it with `stop()` or as a context
    manager."""

    def __init__(
        self,
        *,
        master: ManagedProcess,
        workers: Sequence[ManagedProcess],
        host: str,
        port: int,
        ui_port: int,
        work_dir: Path,
        spark_home: Path,
        env: Mapping[str, str],
    ) -> None:
        self.master = master
        self.workers = list(workers)
        self.host = host
        self.port = port
        self.ui_port = ui_port
        self.work_dir = work_dir
        self.spark_home = spark_home
        self.env: Mapping[str, str] = dict(env)
        """The environment of the daemons and of every submission."""
        self._numbers = itertools.count(1)  # next() is atomic: submit() may run in threads

    def __repr__(self) -> str:
        return f"<SparkCluster {self.master_url} workers={len(self.workers)}>"

    @property
    def master_url(self) -> str:
        """`spark://host:port`, for `--master`."""
        return f"spark://{self.host}:{self.port}"

    @property
    def ui_url(self) -> str:
        """The master's web UI."""
        return f"http://{self.host}:{self.ui_port}"

    @property
    def log_paths(self) -> list[Path]:
        """The master's log, then each worker's."""
        return [self.master.log_path, *(w.log_path for w in self.workers)]

    def status(self) -> dict[str, Any]:
        """The master's status page as JSON (`master_status`)."""
        return master_status(self.host, self.ui_port)

    def submit(
        self,
        app: str | Path,
        args: Sequence[str] = (),
        *,
        py_files: Sequence[str | Path] = (),
        conf: Mapping[str, str] | None = None,
        timeout: float = 300.0,
    ) -> Submission:
        """Run `spark-submit --master <this cluster> [--py-files ...] app args` and wait.

        Paths in `py_files` become `file://` URIs. The driver runs in this machine's
        `spark-submit` process with this interpreter (`spark.pyspark.python` and
        `spark.pyspark.driver.python`), bound to loopback, with `SUBMIT_CONF` and `conf`.
        The output goes to `submit-<n>-<app>.log` in the cluster's directory. A submission
        past `timeout` seconds is killed with its process group and reported as exit code
        -9. Call `.check()` on the result to raise on failure.
        """
        log_path = self.work_dir / f"submit-{next(self._numbers)}-{Path(str(app)).stem}.log"
        settings = {
            **SUBMIT_CONF,
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            **(conf or {}),
        }
        argv = [str(self.spark_home / "bin" / "spark-submit"), "--master", self.master_url]
        if py_files:
            argv += ["--py-files", ",".join(_file_uri(p) for p in py_files)]
        for key, value in settings.items():
            argv += ["--conf", f"{key}={value}"]
        argv += [str(app), *args]
        began = time.monotonic()
        with open(log_path, "ab") as log:
            log.write(f"# rig: {' '.join(argv)}\n".encode())
            log.flush()
            popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.env, cwd=self.work_dir, start_new_session=True,
            )
            try:
                returncode = popen.wait(timeout)
            except subprocess.TimeoutExpired:
                _kill_group(popen)
                returncode = -signal.SIGKILL
            except BaseException:  # Ctrl-C: the driver and its Python go too
                _kill_group(popen)
                raise
        return Submission(
            app=str(app), returncode=returncode, log_path=log_path,
            seconds=time.monotonic() - began,
        )

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master. Idempotent."""
        for worker in self.workers:
            worker.stop()
        self.master.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_cluster(
    work_dir: Path,
    *,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    host: str = LOOPBACK,
    daemon_memory: str = "256m",
    start_timeout: float = 120.0,
) -> SparkCluster:
    """Start a standalone master and `workers` workers (`cores` and `memory` each) on `host`,
    with logs, configuration and work directories under `work_dir`.

    Returns once the master reports every worker alive; on any failure whatever was started
    is stopped and `ComponentStartError` (with the log's tail) raised.
    """
    spark_home = find_spark_home()
    work_dir.mkdir(parents=True, exist_ok=True)
    conf_dir = work_dir / "spark-conf"  # empty: no spark-defaults.conf, no spark-env.sh
    conf_dir.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED_SPARK_ENV}
    env.update(
        SPARK_HOME=str(spark_home),
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP=host,
        SPARK_DAEMON_MEMORY=daemon_memory,
        SPARK_DAEMON_JAVA_OPTS=_QUICK_JVM,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    spark_class = str(spark_home / "bin" / "spark-class")
    ui_port = free_port(host)

    def build_master(port: int) -> ManagedProcess:
        argv = [spark_class, MASTER_CLASS, "--host", host, "--port", str(port),
                "--webui-port", str(ui_port)]
        return ManagedProcess(
            "spark-master", argv, log_path=work_dir / "spark-master.log",
            probe=lambda: master_status(host, ui_port)["status"] == "ALIVE",
            env=env, cwd=work_dir, start_timeout=start_timeout, poll_interval=0.25,
        )

    port, master = start_on_port(build_master, None, host=host)
    cluster = SparkCluster(
        master=master, workers=[], host=host, port=port, ui_port=ui_port, work_dir=work_dir,
        spark_home=spark_home, env=env,
    )
    try:
        # The workers start side by side (each JVM boots and registers on its own); every one
        # that started is kept, even when another failed or Ctrl-C came meanwhile, so that
        # the cluster's stop below stops it.
        failure: BaseException | None = None
        with ThreadPoolExecutor(max_workers=max(workers, 1)) as pool:
            starting = [
                pool.submit(_start_worker, cluster, n, cores=cores, memory=memory,
                            start_timeout=start_timeout)
                for n in range(1, workers + 1)
            ]
            for future in starting:
                try:
                    cluster.workers.append(future.result())
                except BaseException as exc:  # raised below, once the others are in
                    failure = failure or exc
        if failure is not None:
            raise failure
        alive = cluster.status()["aliveworkers"]
        if alive != workers:
            raise ComponentStartError(
                "spark-master", f"{alive} workers alive, {workers} started",
                log_tail=master.log_tail(), log_path=str(master.log_path),
            )
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _start_worker(
    cluster: SparkCluster, n: int, *, cores: int, memory: str, start_timeout: float
) -> ManagedProcess:
    """Start worker `n` and wait until the master lists it (by its RPC port) as alive."""
    host = cluster.host
    worker_dir = cluster.work_dir / f"spark-worker-{n}"
    worker_dir.mkdir(exist_ok=True)

    def registered(port: int) -> bool:
        return any(
            w.get("port") == port and w.get("state") == "ALIVE"
            for w in cluster.status().get("workers", [])
        )

    def build(port: int) -> ManagedProcess:
        argv = [
            str(cluster.spark_home / "bin" / "spark-class"), WORKER_CLASS, cluster.master_url,
            "--host", host, "--port", str(port), "--webui-port", str(free_port(host)),
            "--cores", str(cores), "--memory", memory, "--work-dir", str(worker_dir),
        ]
        return ManagedProcess(
            f"spark-worker-{n}", argv, log_path=cluster.work_dir / f"spark-worker-{n}.log",
            probe=lambda: registered(port), env=cluster.env, cwd=cluster.work_dir,
            start_timeout=start_timeout, poll_interval=0.25,
        )

    _, worker = start_on_port(build, None, host=host)
    return worker


def _kill_group(popen: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGKILL)
    popen.wait()


def _file_uri(path: str | Path) -> str:
    text = str(path)
    return text if "://" in text else Path(text).resolve().as_uri()
