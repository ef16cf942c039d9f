"""librdkafka's mock cluster: N Kafka brokers in one process of their own, for tests and the demo.

What it is: the test broker built into librdkafka (`rdkafka_mock.c`), loaded from the
confluent-kafka wheel (librdkafka 2.16.0 at the time of writing) by the launcher
`proxy.tools.rig.mockcluster_main`. It is not Apache Kafka: records live in memory, and every
answer is librdkafka's idea of what a broker says. A test that relies on it should say so. It
is here for what Tansu cannot give: several brokers with distinct ids and ports, leaders spread
over them and moved on demand, one broker down while the others serve. `MockCluster` drives it
through the launcher's control API (JSON lines on a loopback port).

Checked against the running mock; tests/rig/test_mockcluster.py pins the API table, what is
not served, the two malformed answers, the controller, the leaders, down/up and the delay:

- ApiVersions (v0-v2) lists 24 APIs: Produce 0-10, Fetch 0-16, ListOffsets 0-7,
  Metadata 0-13, OffsetCommit 0-9, OffsetFetch 0-6, FindCoordinator 0-3, JoinGroup 0-6,
  Heartbeat 0-5 (Kafka stops at 4), LeaveGroup 0-4, SyncGroup 0-4, ApiVersions 0-2,
  InitProducerId 0-4, OffsetForLeaderEpoch 2, AddPartitionsToTxn 0-1, AddOffsetsToTxn 0-1,
  EndTxn 0-1, TxnOffsetCommit 0-3, ConsumerGroupHeartbeat 1 (KIP-848; it answers),
  GetTelemetrySubscriptions 0, PushTelemetry 0, ShareGroupHeartbeat 1, ShareFetch 1,
  ShareAcknowledge 1.
- Not served: CreateTopics, DeleteTopics, DescribeConfigs, DescribeCluster, DescribeGroups,
  ListGroups, SaslHandshake and SaslAuthenticate: no SASL (and no TLS listener: a TLS
  handshake is reset). A request for an API it does not list gets no answer: the broker
  closes the connection.
- ApiVersions v3 or later is refused with UNSUPPORTED_VERSION (35) in a body that is neither
  v0 nor v3 (Kafka answers in v0, KIP-511): the key count is one plain byte (01), then one
  entry (ApiVersions 0-2) and a throttle time, no tag section; a v3 decoder reads an empty
  array and stops 5 bytes short. kafka-python 3.0 asks with v4, cannot decode the answer and
  retries forever: it bootstraps only with ``api_version=(2, 3)`` (which also keeps it below
  Metadata v9).
- Metadata v9-v13 (every flexible version) carries one byte more than its body: a 00 after
  the body's own tag section (the handler writes the top-level tags and the response writer
  adds them again, rdkafka_mock_handlers.c). librdkafka's clients read past it; our
  strict `protocol.schema.decode` raises `TrailingBytes` (use `decode_prefix` or
  ``allow_trailing``). The other flexible responses tried (FindCoordinator v3, Heartbeat v4,
  InitProducerId v2, ListOffsets v6, ConsumerGroupHeartbeat v1) are exact. OffsetFetch v6
  asked for every partition (null Topics) answers with a null Topics array, which the spec
  does not allow.
- Controller: the launcher makes broker 1 the controller. Without that, Metadata names
  controller 0, which no broker has, and AdminClient calls that go to the controller
  (describe_cluster, describe_configs) time out.
- Topics: `create_topic` (the mock's CreateTopics is missing) spreads leaders round-robin,
  partition p on broker p % N + 1; librdkafka alone picks each leader at random among the
  partition's replicas. A Metadata request with AllowAutoTopicCreation creates an unknown
  topic (4 partitions, replicas on all of 3 brokers, random leaders). `set_leader` bumps the
  partition's leader epoch. librdkafka would create a topic `set_leader` names and it does
  not have; the launcher refuses instead (it asks the cluster's Metadata first, so with every
  broker down this takes 2 s and fails).
- Down: `broker_down` closes every connection to the broker (the client reads EOF at once)
  and stops listening while keeping the port bound: a new connection is refused
  (ECONNREFUSED), and no other process can bind the port (EADDRINUSE). `broker_up` listens on
  the same port again. Meanwhile the other brokers' Metadata leaves the down broker out of the
  broker list, yet partitions it leads keep it as leader (no election): a client sees a
  leader it has no address for.
- `set_rtt` delays each of the broker's responses by that many milliseconds.
- The brokers bind ports the kernel picks in its ephemeral range (32768 and up), so they never
  collide with the workers' `KSIDECAR_PORT_RANGE` slices; the control port comes from
  `free_port`. A cluster of three starts in about 0.2 s.
"""

from __future__ import annotations

import json
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from proxy.tools.rig.errors import RigError
from proxy.tools.rig.mockcluster_main import round_robin_leaders
from proxy.tools.rig.ports import LOOPBACK
from proxy.tools.rig.process import ManagedProcess, Service, start_on_port

LAUNCHER = "proxy.tools.rig.mockcluster_main"
"""The module `start_mock_cluster` runs with ``python -m``."""

_CALL_TIMEOUT = 10.0
_EXIT_WAIT = 1.0


class MockClusterError(RigError):
    """A control call failed, or the launcher is gone.

    `call` names the librdkafka function that returned an error (None when the launcher refused
    the request itself or could not be reached), `code` and `error_name` its
    ``rd_kafka_resp_err_t``.
    """

    def __init__(self, message: str, *, call: str | None = None, code: int | None = None,
                 error_name: str | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.call = call
        self.code = code
        self.error_name = error_name


class MockCluster(Service):
    """A running mock cluster: its brokers' addresses and the calls that change it.

    `host`/`port` (and `address`) are the launcher's control API; `bootstrap` is for clients.
    Each call opens its own control connection, so several threads may call at once.
    """

    def __init__(self, process: ManagedProcess, host: str, port: int, info: dict[str, Any]) -> None:
        super().__init__(process, host, port)
        self.info = info
        """The launcher's ``info`` reply: bootstraps, brokers, librdkafka version, pid."""

    @property
    def bootstrap(self) -> str:
        """Every broker's ``host:port``, comma-separated, for a client's ``bootstrap.servers``."""
        bootstraps: str = self.info["bootstraps"]
        return bootstraps

    @property
    def brokers(self) -> dict[int, tuple[str, int]]:
        """Broker id (1..N) -> (host, port)."""
        return {int(k): (str(v[0]), int(v[1])) for k, v in self.info["brokers"].items()}

    @property
    def librdkafka_version(self) -> str:
        """The librdkafka version that runs the brokers."""
        version: str = self.info["librdkafka"]
        return version

    def create_topic(self, name: str, partitions: int, replication: int = 1, *,
                     spread: bool = True) -> None:  # fmt: skip
        """Create a topic (the mock answers no CreateTopics).

        With `spread` (the default) partition p is led by broker ``p % N + 1``; without it,
        librdkafka picks each leader at random among the partition's replicas.
        """
        self.call("create_topic", topic=name, partitions=partitions, replication=replication,
                  spread=spread)  # fmt: skip

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Make `broker_id` lead `topic`'s `partition` (-1: leaderless). The topic must exist."""
        self.call("set_leader", topic=topic, partition=partition, broker_id=broker_id)

    def spread_leaders(self, topic: str, partitions: int) -> dict[int, int]:
        """Lead partition p of `topic` by broker ``p % N + 1``; return the leaders set."""
        leaders = round_robin_leaders(partitions, len(self.brokers))
        for partition, broker_id in leaders.items():
            self.set_leader(topic, partition, broker_id)
        return leaders

    def leaders(self, topic: str) -> dict[int, int]:
        """Partition -> leader, as librdkafka's client reads it from the mock's Metadata."""
        result: dict[str, int] = self.call("leaders", topic=topic)
        return {int(partition): leader for partition, leader in result.items()}

    def broker_down(self, broker_id: int) -> None:
        """Close the broker's connections and refuse new ones on its port, which stays bound.

        No leader moves (see the module's notes); `broker_up` undoes it.
        """
        self.call("broker_down", broker_id=broker_id)

    def broker_up(self, broker_id: int) -> None:
        """Bring a broker back: it accepts connections on the same port again."""
        self.call("broker_up", broker_id=broker_id)

    def set_rtt(self, broker_id: int, ms: int) -> None:
        """Delay each of the broker's responses by `ms` milliseconds (0: no delay)."""
        self.call("set_rtt", broker_id=broker_id, ms=ms)

    def call(self, op: str, **args: Any) -> Any:
        """One control request; its result, or `MockClusterError`."""
        request = json.dumps({"op": op, **args}).encode() + b"\n"
        try:
            with socket.create_connection((self.host, self.port), timeout=_CALL_TIMEOUT) as sock:
                sock.sendall(request)
                with sock.makefile("rb") as reader:
                    line = reader.readline()
        except OSError as exc:
            raise self._gone(op, f"{type(exc).__name__}: {exc}") from exc
        if not line.endswith(b"\n"):
            raise self._gone(op, "the control connection closed without an answer")
        reply = json.loads(line)
        if reply.get("ok"):
            return reply.get("result")
        error = reply.get("error") or {}
        raise MockClusterError(
            f"mock cluster {op}: {error.get('message', reply)}",
            call=error.get("call"),
            code=error.get("code"),
            error_name=error.get("name"),
        )

    def _gone(self, op: str, reason: str) -> MockClusterError:
        # A launcher that refuses its control port is gone or going: give it a moment to exit,
        # so the report can say how it ended.
        deadline = time.monotonic() + _EXIT_WAIT
        while self.process.returncode is None and time.monotonic() < deadline:
            time.sleep(0.02)
        returncode = self.process.returncode
        pid = self.process.pid
        lines = [f"mock cluster {op}: no answer from the launcher (pid {pid}): {reason}"]
        if returncode is not None:
            lines.append(f"the launcher exited, exit code: {returncode}")
        lines.append(f"log: {self.log_path}")
        tail = self.log_tail()
        if tail:
            lines += ["--- log tail ---", tail.rstrip("\n")]
        return MockClusterError("\n".join(lines))


def start_mock_cluster(
    brokers: int = 3,
    *,
    log_dir: Path | None = None,
    name: str = "mockcluster",
    host: str = LOOPBACK,
    start_timeout: float = 15.0,
) -> MockCluster:
    """Start a mock cluster of `brokers` brokers (ids 1..N) in its own process.

    Returns once the launcher's control API answers; its output goes to ``log_dir/<name>.log``
    (a new temporary directory, kept, if `log_dir` is None). Use it as a context manager, or
    call `stop()`.
    """
    if brokers < 1:
        raise ValueError(f"a mock cluster needs at least one broker, not {brokers}")
    if log_dir is None:
        log_dir = Path(tempfile.mkdtemp(prefix="ksidecar-mockcluster-"))
    info: dict[str, Any] = {}

    def build(port: int) -> ManagedProcess:
        def probe() -> bool:
            request = b'{"op": "info"}\n'
            with socket.create_connection((host, port), timeout=1.0) as sock:
                sock.sendall(request)
                with sock.makefile("rb") as reader:
                    reply = json.loads(reader.readline())
            info.clear()
            info.update(reply["result"])
            return True

        argv = [
            sys.executable, "-m", LAUNCHER,
            "--brokers", str(brokers),
            "--control-port", str(port),
            "--host", host,
        ]  # fmt: skip
        return ManagedProcess(
            name,
            argv,
            log_path=log_dir / f"{name}.log",
            probe=probe,
            env=None,
            start_timeout=start_timeout,
        )

    port, process = start_on_port(build, None, host=host)
    return MockCluster(process, host, port, dict(info))
