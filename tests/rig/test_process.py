"""`ManagedProcess` and the port picker, against small real commands (no broker needed)."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from proxy.tools.rig import ComponentStartError, ManagedProcess, free_port
from proxy.tools.rig.process import read_tail


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its parent to reap it does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_command_that_exits_at_once_raises_with_its_output(tmp_path: Path) -> None:
    script = "import sys; print('boom: no config file'); sys.exit(3)"
    proc = ManagedProcess(
        "early-exit",
        [sys.executable, "-c", script],
        log_path=tmp_path / "early.log",
        probe=lambda: False,
        start_timeout=10,
    )
    with pytest.raises(ComponentStartError) as info:
        proc.start()
    message = str(info.value)
    assert "early-exit did not start: exited before it was ready" in message
    assert "boom: no config file" in message
    assert "exit code: 3" in message
    assert info.value.returncode == 3
    assert info.value.exited


def test_a_missed_deadline_raises_with_the_last_probe_error_and_stops_the_process(
    tmp_path: Path,
) -> None:
    def probe() -> bool:
        raise ConnectionRefusedError("nobody listening")

    proc = ManagedProcess(
        "sleeper",
        [sys.executable, "-c", "print('started', flush=True); import time; time.sleep(60)"],
        log_path=tmp_path / "sleeper.log",
        probe=probe,
        start_timeout=0.5,
        stop_grace=5.0,
    )
    with pytest.raises(ComponentStartError) as info:
        proc.start()
    assert "not ready after 0.5s" in str(info.value)
    assert "ConnectionRefusedError: nobody listening" in str(info.value)
    assert not info.value.exited
    assert proc.pid is not None and not _alive(proc.pid)


def test_stop_escalates_to_sigkill_for_the_whole_group(tmp_path: Path) -> None:
    # Parent and child both ignore SIGTERM (an ignored signal stays ignored across exec).
    log = tmp_path / "stubborn.log"
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = ManagedProcess(
        "stubborn",
        [sys.executable, "-c", script],
        log_path=log,
        probe=lambda: read_tail(log, 1).startswith("child "),
        stop_grace=0.3,
    )
    began = time.monotonic()
    with proc:
        assert proc.running
        child_pid = int(read_tail(log, 1).split()[1])
    assert proc.returncode == -9
    assert time.monotonic() - began < 10
    deadline = time.monotonic() + 5
    while _alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # the child is not ours to reap: it was reparented
    assert not _alive(child_pid)


def test_log_tail_returns_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "counter.log"
    script = "for i in range(100): print(f'line {i}')\nimport time; time.sleep(60)"
    with ManagedProcess(
        "counter",
        [sys.executable, "-u", "-c", script],
        log_path=log,
        probe=lambda: "line 99" in read_tail(log),
    ) as proc:
        assert proc.log_tail(3).splitlines() == ["line 97", "line 98", "line 99"]
        assert proc.startup_seconds is not None


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = {free_port() for _ in range(20)}
    assert len(ports) == 20
    for port in list(ports)[:3]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_range_of_its_own_is_used_in_turn_and_skips_ports_in_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from proxy.tools.rig import ports

    monkeypatch.setattr(ports, "_cursor", {})
    base = next(b for b in range(20_000, 32_000, 4)
                if all(ports._bind_probe("127.0.0.1", b + i) for i in range(4)))
    with socket.socket() as held:
        held.bind(("127.0.0.1", base + 1))
        held.listen()
        monkeypatch.setenv(ports.PORT_RANGE_ENV, f"{base}-{base + 3}")
        # base + 1 is taken: skipped; after base + 3 the range starts again.
        assert [free_port() for _ in range(4)] == [base, base + 2, base + 3, base]


@pytest.mark.parametrize("value", ["10000", "10000-", "a-b", "20000-10000", "80-90", "60000-70000"])
def test_a_bad_port_range_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from proxy.tools.rig import ports

    monkeypatch.setenv(ports.PORT_RANGE_ENV, value)
    with pytest.raises(ValueError, match=rf"KSIDECAR_PORT_RANGE='{value}': expected LOW-HIGH"):
        free_port()
