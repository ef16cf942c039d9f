"""A local Spark session bound to loopback, with the driver JVM's output in a log file.

pyspark starts its driver JVM through `spark-submit` and lets it inherit our stdout and stderr.
We launch that gateway ourselves with `launch_gateway(popen_kwargs=...)` (pyspark's hook for
capturing the JVM's output) so the output lands in `<log_dir>/spark.log` and the JVM runs in its
own process group, which `stop_spark` stops by closing its stdin (the JVM exits on EOF), then
by PID. If the launch itself is interrupted (Ctrl-C while the JVM boots), pyspark never hands us
its Popen: the JVM is then found by a one-off token we put on its command line and killed.
pyspark is imported lazily: it is an optional extra.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proxy.tools.rig.errors import ComponentStartError
from proxy.tools.rig.process import read_tail

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
