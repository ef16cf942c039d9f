"""Where a forwarded one-in-flight Produce's CPU goes, side by side (issue 43): user and
system time per request, and system calls per request.

    python -m tests.bench.hop_syscalls

Tansu, a one-process sidecar (``w1``), the trio relay on the sidecar's ``SocketWire``
(``tests/bench/floor_relays.py trio``) and the two-thread relay (``tests/bench/relay.py``);
each in turn carries ``produce-1-1x1`` (one connection, one request in flight): first twice
for 4 s each, the hop's user and system CPU time read from ``/proc`` around the run and divided
by the requests answered; then for 3 s with ``strace -c -f`` attached, the calls divided the
same way. strace is attached a moment before the load starts and detached after it ends, so
the call counts are inflated by the same small factor: read them side by side.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from proxy.tools.rig.tansu import start_broker
from tests.bench import workers_bench as wb
from tests.bench.pipeline import run_spread

TICK = os.sysconf("SC_CLK_TCK")
CALL = re.compile(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(\d+)?\s*(\w+)$")


def user_system(pid: int) -> tuple[float, float]:
    """The process's user and system CPU seconds so far (``/proc/<pid>/stat``; threads included)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def main() -> int:
    """Run it and print calls per request for each hop."""
    logs = Path("/tmp/ksidecar-hop-syscalls")
    logs.mkdir(exist_ok=True)
    load = next(load for load in wb.LOADS if load.name == "produce-1-1x1")
    with start_broker(logs) as broker, contextlib.ExitStack() as stack:
        wb.create_topic(broker.bootstrap, wb.TOPIC, wb.PARTITIONS)
        side = stack.enter_context(wb.sidecar(logs, broker, 1))
        hops = {kind: stack.enter_context(wb.start_hop(logs, kind, broker)) for kind in ("trio", "relay")}
        targets = {"sidecar (w1)": (side.address, side.process.pid),
                   **{kind: (hop.address, hop.process.pid) for kind, hop in hops.items()}}
        assert broker.process.pid is not None
        for turn in range(2):
            for name, (address, pid) in targets.items():
                assert pid is not None
                before = user_system(pid)
                result = run_spread(address, load.frames(), connections=1, processes=1, duration=4.0, warmup=0.3)
                after = user_system(pid)
                user, system = ((b - a) * 1e6 / result.requests for a, b in zip(before, after, strict=True))
                print(f"turn {turn + 1}, {name}: {result.per_second:,.0f} requests/s; per request user {user:.1f} µs, "
                      f"system {system:.1f} µs", flush=True)
        for name, (address, pid) in targets.items():
            assert pid is not None
            wb.measure(address, load, [pid], broker.process.pid, 1, 1.0, 0.3)  # warm up
            out = logs / f"strace-{name.split()[0]}.txt"
            tracer = subprocess.Popen(["strace", "-c", "-f", "-o", str(out), "-p", str(pid)])
            time.sleep(0.5)
            result = run_spread(address, load.frames(), connections=1, processes=1, duration=3.0, warmup=0.0)
            tracer.send_signal(signal.SIGINT)
            tracer.wait(10)
            calls = {m.group(3): int(m.group(1)) for line in out.read_text().splitlines()
                     if (m := CALL.match(line)) and m.group(3) != "total"}
            busy = {k: v / result.requests for k, v in calls.items() if v / result.requests >= 0.01}
            print(f"{name}: {result.requests} requests; per request: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in sorted(busy.items(), key=lambda kv: -kv[1]))
                  + f"; all {sum(calls.values()) / result.requests:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
