"""`ManagedProcess`: start a real process, wait until it answers, stop it by PID.

Theory of operation:

- The command starts in its own session (and so its own process group), with stdin closed and
  stdout and stderr appended to one log file. A terminal's Ctrl-C therefore reaches only the
  Python process, which stops its children in `finally` blocks and fixture finalizers.
- Readiness is a caller-supplied probe (a TCP round trip, a ZooKeeper `ruok`, ...) polled until
  it returns True or the deadline passes. A probe that raises counts as "not ready yet"; its last
  error is quoted if the deadline passes. If the process exits while we wait, or misses the
  deadline, it is stopped and `ComponentStartError` is raised with the log tail. Never a skip.
- Stopping sends SIGTERM to the process group, waits a grace period, then SIGKILLs the group.
- Every started process is also registered for an `atexit` sweep, so an interpreter that exits
  without running its cleanup (an unhandled exception at module level, say) still stops them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import NoReturn, Self

from proxy.tools.rig.errors import ComponentStartError
from proxy.tools.rig.ports import LOOPBACK, free_port

Probe = Callable[[], bool]
"""A readiness check: True when the component answers. Exceptions mean "not yet"."""

_TAIL_CHUNK = 64 * 1024

_live: set[ManagedProcess] = set()


class ManagedProcess:
    """One real process with a log file, a readiness probe and a stop-by-PID life cycle.

    Use `start()` (which returns self) or the context manager; both wait for readiness::

        with ManagedProcess("sleeper", ["sleep", "60"], log_path=p, probe=lambda: True) as proc:
            ...
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        probe: Probe,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        start_timeout: float = 30.0,
        stop_grace: float = 5.0,
        poll_interval: float = 0.05,
    ) -> None:
        self.name = name
        self.argv: tuple[str, ...] = tuple(argv)
        self.log_path = log_path
        self.probe = probe
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self.poll_interval = poll_interval
        self.startup_seconds: float | None = None
        """Seconds from spawn until the probe first succeeded; None until ready."""
        self._popen: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<ManagedProcess {self.name} pid={self.pid} returncode={self.returncode}>"

    @property
    def pid(self) -> int | None:
        """The process ID, or None before `start()`."""
        return self._popen.pid if self._popen is not None else None

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has exited (negative: killed by that signal)."""
        return self._popen.poll() if self._popen is not None else None

    @property
    def running(self) -> bool:
        """Whether the process has been started and has not exited."""
        return self._popen is not None and self._popen.poll() is None

    def start(self) -> Self:
        """Spawn the command and wait until the probe succeeds.

        Raises `ComponentStartError` if the process exits first or the deadline passes; the
        process is stopped before the error propagates, as it is on any other exception
        (KeyboardInterrupt included).
        """
        if self._popen is not None:
            raise RuntimeError(f"{self.name} was already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            command = shlex.join(self.argv).replace("\n", "\\n")
            log.write(f"# rig: starting {self.name}: {command}\n".encode())
            log.flush()
            try:
                self._popen = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    cwd=self.cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ComponentStartError(
                    self.name, f"could not execute {self.argv[0]!r}: {exc}"
                ) from exc
        _live.add(self)
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        """Poll the probe until it succeeds; raise `ComponentStartError` otherwise.

        `timeout` defaults to `start_timeout`, counted from this call.
        """
        popen = self._require_started()
        budget = self.start_timeout if timeout is None else timeout
        began = time.monotonic()
        deadline = began + budget
        last_error = "probe returned False"
        while True:
            if popen.poll() is not None:
                self._raise_start_error("exited before it was ready", exited=True)
            try:
                ready = self.probe()
            except Exception as exc:  # a probe failing is "not ready yet", whatever it raised
                ready = False
                last_error = f"{type(exc).__name__}: {exc}"
            # Checked again after the probe: a foreign listener on a reused port must not pass
            # for our process if ours has died meanwhile.
            if ready and popen.poll() is None:
                if self.startup_seconds is None:
                    self.startup_seconds = time.monotonic() - began
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._raise_start_error(
                    f"not ready after {budget:.1f}s (last probe: {last_error})", exited=False
                )
            time.sleep(min(self.poll_interval, remaining))

    def stop(self) -> int | None:
        """Stop the process group: SIGTERM, then SIGKILL after `stop_grace` seconds.

        Idempotent; returns the exit code (None if never started).
        """
        popen = self._popen
        if popen is None:
            return None
        _live.discard(self)
        if popen.poll() is not None:
            return popen.returncode
        pgid = popen.pid  # start_new_session makes the child its group's leader
        _signal_group(pgid, signal.SIGTERM)
        try:
            popen.wait(self.stop_grace)
        except subprocess.TimeoutExpired:
            _signal_group(pgid, signal.SIGKILL)
            popen.wait()
        # The leader is gone; sweep children it left in the group. Its PID was reaped an
        # instant ago, so the group ID cannot have been reused yet.
        _signal_group(pgid, signal.SIGKILL)
        return popen.returncode

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of the log file (empty if there is none yet)."""
        return read_tail(self.log_path, lines)

    def __enter__(self) -> Self:
        if self._popen is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _require_started(self) -> subprocess.Popen[bytes]:
        if self._popen is None:
            raise RuntimeError(f"{self.name} has not been started")
        return self._popen

    def _raise_start_error(self, reason: str, *, exited: bool) -> NoReturn:
        returncode = self.stop()
        raise ComponentStartError(
            self.name,
            reason,
            log_tail=self.log_tail(),
            log_path=str(self.log_path),
            returncode=returncode if exited else None,
        )


def start_on_port(
    build: Callable[[int], ManagedProcess],
    port: int | None,
    *,
    host: str = LOOPBACK,
    attempts: int = 3,
) -> tuple[int, ManagedProcess]:
    """Start `build(port)` and return the port and the ready process.

    With `port=None` a free port is picked; if the process exits before it is ready (most likely
    because something else took the port in between), a fresh port is tried, up to `attempts`
    times. A fixed port, or a missed deadline, is not retried.
    """
    tries = attempts if port is None else 1
    for attempt in range(1, tries + 1):
        chosen = free_port(host) if port is None else port
        try:
            return chosen, build(chosen).start()
        except ComponentStartError as exc:
            if attempt == tries or not exc.exited:
                raise
    raise AssertionError("unreachable")


def read_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of the file at `path`, decoded leniently ("" if missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _TAIL_CHUNK))
            data = f.read()
    except FileNotFoundError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@atexit.register
def _stop_all() -> None:
    for proc in list(_live):
        proc.stop()


class Service:
    """A started component that listens on `host:port`, backed by one `ManagedProcess`.

    The launchers return subclasses of this; as a context manager it stops the process on exit.
    """

    def __init__(self, process: ManagedProcess, host: str, port: int) -> None:
        self.process = process
        self.host = host
        self.port = port

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address} pid={self.process.pid}>"

    @property
    def name(self) -> str:
        """The component's name, as used in its log file and error messages."""
        return self.process.name

    @property
    def address(self) -> str:
        """`host:port`."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        """Where the component's stdout and stderr go."""
        return self.process.log_path

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of the component's log."""
        return self.process.log_tail(lines)

    def stop(self) -> int | None:
        """Stop the component (idempotent); returns its exit code."""
        return self.process.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
