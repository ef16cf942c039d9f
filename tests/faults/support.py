"""What the fault tests share: real processes on loopback, raw clients, process facts.

Each fault test starts its own broker (and ZooKeeper where it needs one) when it kills,
stops or restarts it, so the session's shared components are never disturbed.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from tests.bench.kafka import produce_request, record_batch, request, response_body

__all__ = ["produce_request", "record_batch", "request", "response_body"]


def readyz(sidecar: SidecarServer) -> int:
    """The HTTP status of ``/readyz`` (0 when nothing answers)."""
    url = f"http://{sidecar.host}:{sidecar.metrics_port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=1) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (``/proc/<pid>/status``)."""
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    assert match, text
    return int(match.group(1)) * 1024


def established_to(port: int) -> int:
    """TCP connections in state ESTABLISHED whose remote port is ``port`` (IPv4 loopback)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state = fields[2], fields[3]
        if state == "01" and int(remote.split(":")[1], 16) == port:
            count += 1
    return count


def connect(port: int, timeout: float = 30.0) -> socket.socket:
    """A blocking TCP connection to the sidecar on 127.0.0.1."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def call(sock: socket.socket, api_key: int, version: int, body: Mapping[str, object] | bytes,
         correlation_id: int = 1) -> object:
    """One request on a blocking socket, its response decoded with our schema."""
    sock.sendall(request(api_key, version, correlation_id, body))
    return response_body(api_key, version, read_frame(sock))


def read_frame(sock: socket.socket) -> bytes:
    """One response frame (size prefix excluded)."""
    size = struct.unpack(">i", read_exactly(sock, 4))[0]
    return read_exactly(sock, size)


def read_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


@dataclass
class PipelinedClient:
    """One connection that pipelines every frame at once and counts the answers until EOF.

    A sender thread writes (it may block when the sidecar stops reading); a reader thread
    counts whole response frames until end of stream, noting when the last one came and
    whether the stream ended with a reset.
    """

    port: int
    frames: list[bytes]
    answers: int = 0
    last_answer_at: float = 0.0
    ended: str = ""
    sock: socket.socket | None = None
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self.sock = connect(self.port)
        self.threads = [
            threading.Thread(target=self._send, daemon=True),
            threading.Thread(target=self._read, daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _send(self) -> None:
        assert self.sock is not None
        # The sidecar stops reading and closes during a drain: a failed send is expected.
        with contextlib.suppress(OSError):
            self.sock.sendall(b"".join(self.frames))

    def _read(self) -> None:
        assert self.sock is not None
        buffer = bytearray()
        try:
            while True:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    self.ended = "eof"
                    break
                buffer += chunk
                while len(buffer) >= 4:
                    size = struct.unpack_from(">i", buffer)[0]
                    if len(buffer) < 4 + size:
                        break
                    del buffer[: 4 + size]
                    self.answers += 1
                    self.last_answer_at = time.monotonic()
        except ConnectionResetError:
            self.ended = "reset"
        except OSError as exc:
            self.ended = f"error: {exc}"
        finally:
            self.sock.close()

    def join(self, timeout: float) -> None:
        for thread in self.threads:
            thread.join(timeout)


@contextmanager
def sidecar_process(log_dir: Path, upstream: str, name: str, **keys: str) -> Iterator[SidecarServer]:
    """A real ``ksidecar run`` for the block (stopped at the end if still running)."""
    server = start_sidecar(log_dir, upstream, name=name, keys=keys)
    try:
        yield server
    finally:
        server.stop()


def latest_offset(broker_port: int, topic: str, partition: int = 0) -> int:
    """The broker's log end offset of one partition, asked of the broker directly."""
    with connect(broker_port) as sock:
        answer = call(sock, 2, 1, {"ReplicaId": -1, "Topics": [
            {"Name": topic, "Partitions": [{"PartitionIndex": partition, "Timestamp": -1}]}]})
    offset: int = answer.Topics[0].Partitions[0].Offset  # type: ignore[attr-defined]
    return offset


def create_topic(port: int, topic: str, partitions: int = 1) -> None:
    """CreateTopics v4 through ``port``; waits until the broker says it exists."""
    with connect(port) as sock:
        call(sock, 19, 4, {"Topics": [{"Name": topic, "NumPartitions": partitions,
                                        "ReplicationFactor": 1, "Assignments": [],
                                        "Configs": []}], "TimeoutMs": 10000,
                           "ValidateOnly": False})


def pid_of(server: SidecarServer) -> int:
    pid = server.process.pid
    assert pid is not None
    return pid


def signal_process(server: SidecarServer, signum: int) -> None:
    os.kill(pid_of(server), signum)
