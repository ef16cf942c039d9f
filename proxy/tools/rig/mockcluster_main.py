"""The mock cluster's launcher: librdkafka's mock brokers in this process, driven over a socket.

Run as ``python -m proxy.tools.rig.mockcluster_main --brokers N --control-port P``; the test side
is `proxy.tools.rig.mockcluster`, which also says what the mock is and what it lacks.

librdkafka is loaded from the confluent-kafka wheel (or ``$KSIDECAR_LIBRDKAFKA``) with ctypes.
Every function used gets its argument and result types declared first: ctypes would otherwise
pass and return C ``int``, and truncate the 64-bit handles. The mock cluster needs an
``rd_kafka_t`` for its bookkeeping; a producer is created for that, and is also the client this
launcher asks for Metadata when it must know whether a topic exists.

The control API is one JSON object a line over a loopback TCP connection, each request answered
by one line, in order; any number of connections, each served by its own thread (the mock's
functions post an operation to the mock's own thread and wait for it, so they may be called
from several threads). ``{"op": "broker_down", "broker_id": 2}`` is answered by
``{"ok": true, "result": null}`` or
``{"ok": false, "error": {"call": "rd_kafka_mock_broker_set_down", "code": 8,
"name": "BROKER_NOT_AVAILABLE", "message": "..."}}`` (``call`` is null when the launcher itself
refused the request). SIGTERM stops the server, destroys the cluster and exits 0.

One librdkafka bug is worked around here: the mock's thread sometimes sleeps through an
operation posted right after another, for a second (`MockClusterRuntime._nudged`). The
workaround opens and at once closes a connection to a broker that is up while a call waits, so
a test that counts a broker's connections may see one come and go.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import importlib.util
import json
import os
import signal
import socket
import socketserver
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

LIBRARY_ENV = "KSIDECAR_LIBRDKAFKA"
"""Environment variable naming an explicit librdkafka shared library to load."""

RD_KAFKA_PRODUCER = 0
_ERRSTR_SIZE = 512
_METADATA_TIMEOUT_MS = 2000
_NUDGE_INTERVAL = 0.01

_p = ctypes.c_void_p
_s = ctypes.c_char_p
_i32 = ctypes.c_int32
_int = ctypes.c_int

# name: (restype, argtypes). rd_kafka_resp_err_t is a C enum: int.
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "rd_kafka_version_str": (_s, []),
    "rd_kafka_err2name": (_s, [_int]),
    "rd_kafka_err2str": (_s, [_int]),
    "rd_kafka_conf_new": (_p, []),
    "rd_kafka_conf_set": (_int, [_p, _s, _s, _s, ctypes.c_size_t]),
    "rd_kafka_new": (_p, [_int, _p, _s, ctypes.c_size_t]),
    "rd_kafka_brokers_add": (_int, [_p, _s]),
    "rd_kafka_destroy": (None, [_p]),
    "rd_kafka_metadata": (_int, [_p, _int, _p, ctypes.POINTER(_p), _int]),
    "rd_kafka_metadata_destroy": (None, [_p]),
    "rd_kafka_mock_cluster_new": (_p, [_p, _int]),
    "rd_kafka_mock_cluster_destroy": (None, [_p]),
    "rd_kafka_mock_cluster_bootstraps": (_s, [_p]),
    # void in librdkafka 2.16 (it stores the id under the cluster's lock, checks nothing).
    "rd_kafka_mock_set_controller_id": (None, [_p, _i32]),
    "rd_kafka_mock_topic_create": (_int, [_p, _s, _int, _int]),
    "rd_kafka_mock_partition_set_leader": (_int, [_p, _s, _i32, _i32]),
    "rd_kafka_mock_broker_set_down": (_int, [_p, _i32]),
    "rd_kafka_mock_broker_set_up": (_int, [_p, _i32]),
    "rd_kafka_mock_broker_set_rtt": (_int, [_p, _i32, _int]),
}


# struct rd_kafka_metadata and its parts, as rdkafka.h declares them.
class _MetadataBroker(ctypes.Structure):
    _fields_ = [("id", _i32), ("host", _s), ("port", _int)]


class _MetadataPartition(ctypes.Structure):
    _fields_ = [
        ("id", _i32),
        ("err", _int),
        ("leader", _i32),
        ("replica_cnt", _int),
        ("replicas", ctypes.POINTER(_i32)),
        ("isr_cnt", _int),
        ("isrs", ctypes.POINTER(_i32)),
    ]


class _MetadataTopic(ctypes.Structure):
    _fields_ = [
        ("topic", _s),
        ("partition_cnt", _int),
        ("partitions", ctypes.POINTER(_MetadataPartition)),
        ("err", _int),
    ]


class _Metadata(ctypes.Structure):
    _fields_ = [
        ("broker_cnt", _int),
        ("brokers", ctypes.POINTER(_MetadataBroker)),
        ("topic_cnt", _int),
        ("topics", ctypes.POINTER(_MetadataTopic)),
        ("orig_broker_id", _i32),
        ("orig_broker_name", _s),
    ]


class ControlError(Exception):
    """A control request failed; `as_json()` is the error object sent back."""

    def __init__(self, message: str, *, call: str | None = None, code: int | None = None,
                 name: str | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.message = message
        self.call = call
        self.code = code
        self.name = name

    def as_json(self) -> dict[str, Any]:
        """The reply's ``error`` object."""
        return {"call": self.call, "code": self.code, "name": self.name, "message": self.message}


def find_librdkafka() -> Path:
    """The librdkafka shared library: ``$KSIDECAR_LIBRDKAFKA``, else the confluent-kafka wheel's.

    Raises `FileNotFoundError` saying what to install.
    """
    override = os.environ.get(LIBRARY_ENV)
    if override:
        if not Path(override).is_file():
            raise FileNotFoundError(f"${LIBRARY_ENV}={override!r} is not a file")
        return Path(override)
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is not None and spec.origin is not None:
        # auditwheel puts the bundled libraries next to the package, in <package>.libs.
        libs = Path(spec.origin).parent.parent / "confluent_kafka.libs"
        found = sorted(glob.glob(str(libs / "librdkafka*.so*")))
        if found:
            return Path(found[0])
    raise FileNotFoundError(
        "no librdkafka: install confluent-kafka (`pip install confluent-kafka`, whose wheel "
        f"bundles it) or set ${LIBRARY_ENV} to a librdkafka.so"
    )


def load_librdkafka(path: Path) -> ctypes.CDLL:
    """Load the library and declare the types of every function this module calls."""
    lib = ctypes.CDLL(str(path))
    for name, (restype, argtypes) in _SIGNATURES.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


class MockClusterRuntime:
    """One librdkafka mock cluster in this process, and the calls the control API offers.

    Broker ids are 1..N, as librdkafka numbers them. Not thread-bound: the mock's functions may
    be called from any thread.
    """

    def __init__(self, lib: ctypes.CDLL, broker_count: int) -> None:
        if broker_count < 1:
            raise ValueError(f"a mock cluster needs at least one broker, not {broker_count}")
        self.lib = lib
        self.broker_count = broker_count
        errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
        conf = lib.rd_kafka_conf_new()
        settings = (
            ("client.id", "ksidecar-mockcluster"),
            # Not the notice that this client has no bootstrap.servers (they are added once
            # the cluster exists), nor every connection a broker set down closes.
            ("log_level", "4"),
            ("log.connection.close", "false"),
        )
        for key, value in settings:
            if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, _ERRSTR_SIZE):
                raise RuntimeError(f"rd_kafka_conf_set({key}): {errstr.value.decode()}")
        # rd_kafka_new takes the conf over, also when it fails.
        self._rk = lib.rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, _ERRSTR_SIZE)
        if not self._rk:
            raise RuntimeError(f"rd_kafka_new: {errstr.value.decode()}")
        self._mc = lib.rd_kafka_mock_cluster_new(self._rk, broker_count)
        if not self._mc:
            lib.rd_kafka_destroy(self._rk)
            raise RuntimeError("rd_kafka_mock_cluster_new returned NULL (see the log above)")
        # Without it Metadata names controller 0, a broker that does not exist, and AdminClient
        # calls that go to the controller wait for it until they time out.
        lib.rd_kafka_mock_set_controller_id(self._mc, 1)
        self.bootstraps: str = lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()
        lib.rd_kafka_brokers_add(self._rk, self.bootstraps.encode())
        self._brokers = parse_bootstraps(self.bootstraps)
        self._known_topics: set[str] = set()
        self._down: set[int] = set()
        self._lock = threading.Lock()

    def close(self) -> None:
        """Destroy the cluster (closing its listeners and connections), then the client."""
        if self._mc:
            self._nudged(self.lib.rd_kafka_mock_cluster_destroy, self._mc)
            self._mc = None
        if self._rk:
            self.lib.rd_kafka_destroy(self._rk)
            self._rk = None

    # ---------------------------------------------------------------- control API

    def info(self) -> dict[str, Any]:
        """What the test side needs to know: addresses, ids and versions."""
        return {
            "bootstraps": self.bootstraps,
            "brokers": {str(broker_id): list(address)
                        for broker_id, address in self._brokers.items()},
            "librdkafka": self.lib.rd_kafka_version_str().decode(),
            "pid": os.getpid(),
        }  # fmt: skip

    def create_topic(self, topic: str, partitions: int, replication: int = 1,
                     spread: bool = True) -> None:  # fmt: skip
        """Create `topic`; with `spread`, partition p's leader is broker p % N + 1."""
        _check_positive("partitions", partitions)
        _check_positive("replication", replication)
        self._mock_call("rd_kafka_mock_topic_create", topic.encode(), partitions, replication)
        with self._lock:
            self._known_topics.add(topic)
        if spread:
            for partition, leader in round_robin_leaders(partitions, self.broker_count).items():
                self.set_leader(topic, partition, leader)

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Make `broker_id` the leader of `topic`'s `partition` (-1: no leader)."""
        # librdkafka creates a topic it does not know here, with partition + 1 partitions: a
        # typo would pass silently. Only topics the cluster already has are accepted.
        if not self._topic_exists(topic):
            raise ControlError(f"unknown topic {topic!r}: create it first (create_topic)")
        self._mock_call("rd_kafka_mock_partition_set_leader", topic.encode(), partition, broker_id)

    def broker_down(self, broker_id: int) -> None:
        """Close the broker's connections and refuse new ones (its port stays bound)."""
        self._check_broker(broker_id)
        self._mock_call("rd_kafka_mock_broker_set_down", broker_id)
        with self._lock:
            self._down.add(broker_id)

    def broker_up(self, broker_id: int) -> None:
        """Accept connections on the broker's port again."""
        self._check_broker(broker_id)
        self._mock_call("rd_kafka_mock_broker_set_up", broker_id)
        with self._lock:
            self._down.discard(broker_id)

    def set_rtt(self, broker_id: int, ms: int) -> None:
        """Delay every response of the broker by `ms` milliseconds."""
        self._check_broker(broker_id)
        if ms < 0:
            raise ControlError(f"rtt must be >= 0 ms, not {ms}")
        self._mock_call("rd_kafka_mock_broker_set_rtt", broker_id, ms)

    def leaders(self, topic: str) -> dict[str, int]:
        """`topic`'s partition leaders as librdkafka's client reads them from Metadata."""
        topics = self._metadata_topics()
        if topic not in topics:
            raise ControlError(f"unknown topic {topic!r}")
        return {str(partition): leader for partition, leader in topics[topic].items()}

    # ---------------------------------------------------------------- helpers

    def _mock_call(self, name: str, *args: Any) -> None:
        """Call ``name(cluster, *args)``, which returns an ``rd_kafka_resp_err_t``."""
        self._check(name, self._nudged(getattr(self.lib, name), self._mc, *args))

    def _nudged(self, function: Callable[..., Any], *args: Any) -> Any:
        """Call a function that waits for the mock's thread, waking that thread if it sleeps.

        The mock's thread can miss the wake-up for an operation posted while it finishes the
        one before (it serves its queue, then drains its wake-up pipe, the new byte
        included), and then serves it only when its 1 s poll times out. Measured with
        librdkafka 2.16.0: of 65 calls made back to back from one thread, 8 took a second.
        While a call has not returned, every `_NUDGE_INTERVAL` a connection opened to a broker
        that is up and closed again wakes the poll, and the queue is served: of 3,166 such
        calls none took more than 25 ms. With every broker down nothing can wake it.
        """
        done = threading.Event()

        def nudge() -> None:
            while not done.wait(_NUDGE_INTERVAL):
                self._wake_mock_thread()

        nudger = threading.Thread(target=nudge, name="mockcluster-nudge", daemon=True)
        nudger.start()
        try:
            return function(*args)
        finally:
            done.set()
            nudger.join()

    def _wake_mock_thread(self) -> None:
        with self._lock:
            up = [address for broker_id, address in self._brokers.items()
                  if broker_id not in self._down]  # fmt: skip
        for address in up:
            try:
                socket.create_connection(address, timeout=_NUDGE_INTERVAL).close()
                return
            except OSError:
                continue

    def _check(self, call: str, err: int) -> None:
        if err:
            raise ControlError(
                f"{call}: {self.lib.rd_kafka_err2str(err).decode()}",
                call=call,
                code=err,
                name=self.lib.rd_kafka_err2name(err).decode(),
            )

    def _check_broker(self, broker_id: int) -> None:
        # -1 means "every broker" to librdkafka; the control API names one broker at a time.
        if not 1 <= broker_id <= self.broker_count:
            raise ControlError(f"no broker {broker_id}: the brokers are 1..{self.broker_count}")

    def _topic_exists(self, topic: str) -> bool:
        with self._lock:
            if topic in self._known_topics:
                return True
        if topic not in self._metadata_topics():
            return False
        with self._lock:
            self._known_topics.add(topic)
        return True

    def _metadata_topics(self) -> dict[str, dict[int, int]]:
        """Every topic's partition leaders, from one Metadata round trip by our client."""
        with self._metadata() as metadata:
            topics: dict[str, dict[int, int]] = {}
            for i in range(metadata.topic_cnt):
                entry = metadata.topics[i]
                if entry.err:
                    continue
                partitions = entry.partitions
                topics[entry.topic.decode()] = {
                    partitions[j].id: partitions[j].leader for j in range(entry.partition_cnt)
                }
            return topics

    @contextmanager
    def _metadata(self) -> Iterator[_Metadata]:
        pointer = _p()
        err = self.lib.rd_kafka_metadata(self._rk, 1, None, ctypes.byref(pointer),
                                         _METADATA_TIMEOUT_MS)  # fmt: skip
        self._check("rd_kafka_metadata", err)
        try:
            yield ctypes.cast(pointer, ctypes.POINTER(_Metadata)).contents
        finally:
            self.lib.rd_kafka_metadata_destroy(pointer)


def parse_bootstraps(bootstraps: str) -> dict[int, tuple[str, int]]:
    """``"h:p1,h:p2,..."`` as ``{1: (h, p1), 2: (h, p2), ...}``.

    librdkafka lists the mock's brokers in the order it created them, ids 1..N
    (tests/rig/test_mockcluster.py checks this against Metadata).
    """
    brokers: dict[int, tuple[str, int]] = {}
    for broker_id, item in enumerate(filter(None, bootstraps.split(",")), start=1):
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"not host:port: {item!r} in {bootstraps!r}")
        brokers[broker_id] = (host, int(port))
    return brokers


def round_robin_leaders(partitions: int, brokers: int) -> dict[int, int]:
    """Partition p's leader is broker ``p % brokers + 1``: every broker leads its share."""
    return {partition: partition % brokers + 1 for partition in range(partitions)}


def _check_positive(name: str, value: int) -> None:
    # librdkafka accepts 0 partitions (a topic nobody can use) and would calloc a negative count.
    if value < 1:
        raise ControlError(f"{name} must be >= 1, not {value}")


# ---------------------------------------------------------------- the control server

_Handler = Callable[..., Any]


def operations(runtime: MockClusterRuntime) -> dict[str, _Handler]:
    """The control API: op name -> function taking the request's other fields as keywords."""
    return {
        "info": runtime.info,
        "create_topic": runtime.create_topic,
        "set_leader": runtime.set_leader,
        "broker_down": runtime.broker_down,
        "broker_up": runtime.broker_up,
        "set_rtt": runtime.set_rtt,
        "leaders": runtime.leaders,
    }


def answer(ops: Mapping[str, _Handler], line: bytes) -> bytes:
    """One request line in, one reply line out (no I/O: the server and the tests call this)."""
    try:
        request = json.loads(line)
        if not isinstance(request, dict):
            raise ControlError("a request is a JSON object")
        op = request.pop("op", None)
        handler = ops.get(op) if isinstance(op, str) else None
        if handler is None:
            raise ControlError(f"unknown op {op!r}; known: {', '.join(sorted(ops))}")
        try:
            result = handler(**request)
        except TypeError as exc:  # missing or unexpected arguments
            raise ControlError(f"{op}: {exc}") from None
        reply: dict[str, Any] = {"ok": True, "result": result}
    except ControlError as exc:
        reply = {"ok": False, "error": exc.as_json()}
    except ValueError as exc:  # JSON that does not parse
        reply = {"ok": False, "error": ControlError(f"bad request: {exc}").as_json()}
    return json.dumps(reply).encode() + b"\n"


class _ControlHandler(socketserver.StreamRequestHandler):
    server: _ControlServer

    def handle(self) -> None:
        for line in self.rfile:
            if line.strip():
                self.wfile.write(answer(self.server.ops, line))
                self.wfile.flush()


class _ControlServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, address: tuple[str, int], ops: Mapping[str, _Handler]) -> None:
        self.ops = ops
        super().__init__(address, _ControlHandler)


_SHUTDOWN_POLL = 0.05
"""How often the control server looks whether it should stop, in seconds."""


def main(argv: list[str] | None = None) -> int:
    """Start the cluster, serve the control API until SIGTERM, destroy the cluster.

    SIGTERM is blocked in every thread (librdkafka's included, which inherit the mask) and
    taken by `signal.sigwait` here, so it never interrupts the server. A handler that raised
    could land while socketserver starts a request's thread, and socketserver reports and
    swallows every exception there: the launcher would then serve on and be killed.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1", help="the control API's address")
    args = parser.parse_args(argv)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        path = find_librdkafka()
        runtime = MockClusterRuntime(load_librdkafka(path), args.brokers)
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"mockcluster: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        info = runtime.info()
        print(f"mockcluster: librdkafka {info['librdkafka']} from {path}", flush=True)
        print(f"mockcluster: {args.brokers} brokers at {runtime.bootstraps}", flush=True)
        with _ControlServer((args.host, args.control_port), operations(runtime)) as server:
            serving = threading.Thread(
                target=server.serve_forever, args=(_SHUTDOWN_POLL,), name="mockcluster-control"
            )
            serving.start()
            print(f"mockcluster: control API on {args.host}:{args.control_port}", flush=True)
            signal.sigwait({signal.SIGTERM})
            print("mockcluster: SIGTERM, stopping", flush=True)
            server.shutdown()
            serving.join()
    except OSError as exc:  # the control port is taken
        print(f"mockcluster: {exc}", file=sys.stderr, flush=True)
        return 2
    finally:
        runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
