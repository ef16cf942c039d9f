"""System calls per forwarded one-in-flight Produce, side by side (issue 43).

    python -m tests.bench.hop_syscalls

Tansu, a one-process sidecar (``w1``), the trio relay on the sidecar's ``SocketWire``
(``tests/bench/floor_relays.py trio``) and the two-thread relay (``tests/bench/relay.py``);
each in turn carries ``produce-1-1x1`` (one connection, one request in flight) for 3 s with
``strace -c -f`` attached to it, and the calls are divided by the requests answered. strace
is attached a moment before the load starts and detached after it ends, so every figure is
inflated by the same small factor: read them side by side, not as absolutes.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import time
from pathlib import Path

from proxy.tools.rig.tansu import start_broker
from tests.bench import workers_bench as wb
from tests.bench.pipeline import run_spread

CALL = re.compile(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(\d+)?\s*(\w+)$")


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
