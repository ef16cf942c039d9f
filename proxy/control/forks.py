"""Worker processes forked from a copy of the sidecar made before it began to serve.

Theory of operation. ``ksidecar run`` with several workers imports the sidecar, reads its
configuration and forks this **fork server** before trio starts, while no thread, socket or
ZooKeeper session exists yet. Each time the supervisor needs a worker (at start, and to
replace one that exited) the fork server forks again, so a worker begins with every module
imported and the configuration read, for the price of a ``fork``. (Python's own
``forkserver`` start method imports the sidecar once more in a new interpreter and runs a
resource tracker beside it: about 0.9 s more CPU for every sidecar start, measured in
tests/bench/RESULTS.md, "Workers (issue 32)".)

The supervisor and the fork server share one ``AF_UNIX``/``SOCK_SEQPACKET`` pair, one small
JSON object per datagram:

* supervisor → fork server: ``start`` (the worker's index, the listeners' bound addresses),
  with the worker's two channel sockets attached (``SCM_RIGHTS``);
* fork server → supervisor: ``started`` (the pid), ``exited`` (pid and exit code: the fork
  server is the workers' parent, so only it can read their status).

The supervisor also watches each worker through a pidfd, so it learns of an exit from the
kernel and never signals a reused pid. The fork server exits when the supervisor's end
closes (the supervisor exited, however); its workers then see their own channels close and
exit too. A fork server that exits first leaves the supervisor unable to replace a worker:
:class:`ForkServerGone` ends the sidecar (exit code 1), and its orchestrator restarts it.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import selectors
import signal
import socket
import sys
from collections.abc import Mapping
from typing import Any

import trio

from proxy.config import SidecarConfig
from proxy.control.handoff import descriptors

log = logging.getLogger(__name__)

#: What ``ps -o comm`` and ``top`` show (Linux keeps 15 bytes).
FORK_SERVER_NAME = "ksidecar-forks"
#: Larger than any message here (a few hundred bytes).
MAX_DATAGRAM = 65536
#: How long an exited worker's status may take to arrive after the kernel reported the exit.
STATUS_WAIT = 1.0
_TWO_FDS = socket.CMSG_SPACE(2 * array.array("i").itemsize)
_PR_SET_NAME = 15


class ForkServerGone(RuntimeError):
    """The fork server exited before the supervisor: no worker can be started again."""


def set_process_name(name: str) -> None:
    """Name this process for ``ps -o comm``, ``top`` and ``/proc/<pid>/comm`` (best effort)."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


class WorkerProcess:
    """One worker as the supervisor sees it: its pid, its pidfd, its exit code once known."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.exitcode: int | None = None
        self.status_known = trio.Event()
        self._pidfd = os.pidfd_open(pid)

    async def wait(self) -> int | None:
        """Wait for the process to exit; its exit code (negative: the signal that killed it),
        or ``None`` if the fork server did not report it within :data:`STATUS_WAIT`."""
        await trio.lowlevel.wait_readable(self._pidfd)
        with trio.move_on_after(STATUS_WAIT):
            await self.status_known.wait()
        return self.exitcode

    def kill(self) -> None:
        """SIGKILL the process, if it still runs (never another process that took its pid)."""
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def close(self) -> None:
        """Release the pidfd (after :meth:`wait` returned)."""
        os.close(self._pidfd)


class ForkServer:
    """The supervisor's end of the fork server."""

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self.pid = pid
        self._socket = trio.socket.from_stdlib_socket(sock)
        self._starting = trio.Lock()
        self._started: trio.MemorySendChannel[WorkerProcess]
        self._started, self._started_processes = trio.open_memory_channel[WorkerProcess](1)
        self._processes: dict[int, WorkerProcess] = {}
        self._closing = False

    @classmethod
    def fork(cls, config: SidecarConfig) -> ForkServer:
        """Fork the fork server off this process: call before trio starts (no thread may run:
        only the forking thread goes on in the child)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the fork server; its work is seen through the supervisor)
            ours.close()
            code = 1
            try:
                _serve_forks(theirs, config)
                code = 0
            except BaseException:
                log.exception("the worker fork server failed")
            finally:
                _exit(code)
        theirs.close()
        log.info("worker fork server started (pid %d)", pid)
        return cls(ours, pid)

    async def run(self) -> None:
        """Read what the fork server says, until it is gone (:class:`ForkServerGone`) or cancelled."""
        while True:
            try:
                data = await self._socket.recv(MAX_DATAGRAM)
            except trio.ClosedResourceError:
                data = b""
            if not data and self._closing:
                return
            if not data:
                break
            message = json.loads(data)
            if message["op"] == "started":  # known before its "exited" is read, however soon
                process = self._processes[int(message["pid"])] = WorkerProcess(int(message["pid"]))
                await self._started.send(process)
            elif message["op"] == "exited":
                exited = self._processes.pop(int(message["pid"]), None)
                if exited is not None:
                    exited.exitcode = int(message["code"])
                    exited.status_known.set()
        status = await trio.to_thread.run_sync(_collect, self.pid)
        raise ForkServerGone(f"the worker fork server (pid {self.pid}) exited ({status}): no worker can be "
                             "started again, so the sidecar stops; restart it")

    async def start(self, index: int, workers: int, bound: Mapping[str, tuple[str, int]],
                    channel: socket.socket, calls: socket.socket) -> WorkerProcess:
        """Have a worker forked that serves with these two channel sockets (the caller closes
        its copies); the running process."""
        request = json.dumps({"op": "start", "index": index, "workers": workers, "bound": dict(bound)}).encode()
        fds = array.array("i", [channel.fileno(), calls.fileno()])
        async with self._starting:  # one start at a time: the answers come in order
            await self._socket.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            return await self._started_processes.receive()

    async def close(self) -> None:
        """Close the supervisor's end (the fork server exits) and collect its status."""
        self._closing = True
        self._socket.close()
        with trio.move_on_after(STATUS_WAIT):
            await trio.to_thread.run_sync(_collect, self.pid)


def _collect(pid: int) -> str:
    """Wait for the child ``pid``; how it ended, in words."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "already collected"
    code = os.waitstatus_to_exitcode(status)
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


def _exit(code: int) -> None:  # pragma: no cover (runs in forked processes)
    """Leave a forked process without running the supervisor's ``atexit`` handlers (they
    would remove its metrics directory) but with every log line written."""
    logging.shutdown()
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _serve_forks(sock: socket.socket, config: SidecarConfig) -> None:  # pragma: no cover (a forked process)
    """The fork server's loop: fork a worker per ``start``; report each one's exit."""
    set_process_name(FORK_SERVER_NAME)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when its workers stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a reload is the supervisor's
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ, None)
        while True:
            for key, _ in selector.select():
                if key.data is None:
                    data, ancillary, _, _ = sock.recvmsg(MAX_DATAGRAM, _TWO_FDS)
                    fds = descriptors(ancillary)
                    if not data:
                        return  # the supervisor is gone
                    message: dict[str, Any] = json.loads(data)
                    pid = os.fork()
                    if pid == 0:
                        selector.close()
                        sock.close()
                        _exit(_worker(config, message, fds))
                    for fd in fds:
                        os.close(fd)
                    selector.register(os.pidfd_open(pid), selectors.EVENT_READ, pid)
                    sock.send(json.dumps({"op": "started", "pid": pid}).encode())
                else:
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    _, status = os.waitpid(key.data, 0)
                    code = os.waitstatus_to_exitcode(status)
                    sock.send(json.dumps({"op": "exited", "pid": key.data, "code": code}).encode())


def _worker(config: SidecarConfig, message: dict[str, Any], fds: list[int]) -> int:  # pragma: no cover
    """Run one worker in this freshly forked process; its exit code."""
    from proxy.control.worker import worker_main  # imported before the fork server was forked

    index = int(message["index"])
    set_process_name(f"ksidecar-w{index}")
    try:
        channel, calls = (socket.socket(fileno=fd) for fd in fds)
        worker_main(index, int(message["workers"]), config,
                    {name: (host, int(port)) for name, (host, port) in message["bound"].items()}, channel, calls)
    except BaseException:
        log.exception("worker %d failed", index)
        return 1
    return 0
