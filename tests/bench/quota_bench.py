"""KIP-612 benchmarks: the accept gate's cost per connection, and a storm's accuracy.

    python -m tests.bench.quota_bench [--storm-seconds 23] [--limit 50]

1. Gate cost: the sans-IO decisions one connection goes through (per-IP rate check,
   sidecar/listener delay, record, per-IP count, release), timed over many connections
   with quotas set and with none; reported as a median of repeats, in microseconds.
2. Accept cost: connections per second a real sidecar accepts and closes with no quota
   (each connection opened from a loopback client and closed at once), with and without
   a generous quota configured, side by side.
3. Storm accuracy: a sidecar with ``max.connection.creation.rate=LIMIT`` under 5× LIMIT
   of attempts from three loopback addresses for two sensor lengths; accepted rate and
   worst trailing sensor-length span, as ratios of the limit.

Prints a Markdown section for ``tests/bench/RESULTS.md`` and writes JSON under
``tests/bench/out/``. Loopback only; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import bisect
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from proxy.config.keys import build_config
from proxy.control.server import Sidecar
from proxy.tools.rig.tansu import start_broker
from quotas.gate import AcceptGate, GateConfig, Verdict

OUT = Path(__file__).parent / "out"


def gate_cost(quotas: bool, connections: int = 20000, repeats: int = 5) -> float:
    """Median microseconds per connection through the gate's decisions."""
    results = []
    for _ in range(repeats):
        config = GateConfig(sidecar_rate=1e9, listener_rates={"L": 1e9}) if quotas else GateConfig()
        gate = AcceptGate(config, (lambda ip: 1e9) if quotas else (lambda ip: None))
        ips = [f"10.0.{i // 250}.{i % 250}" for i in range(1000)]
        start = time.perf_counter()
        for i in range(connections):
            now = i  # one per millisecond
            ip = ips[i % len(ips)]
            assert gate.check_ip_rate("L", ip, now).verdict is Verdict.ACCEPT
            assert gate.connection_delay("L", now) == 0
            gate.record_connection("L", now)
            gate.admit_ip("L", ip)
            gate.release("L", ip)
        results.append((time.perf_counter() - start) / connections * 1e6)
    return statistics.median(results)


async def accept_rate(upstream: str, keys: dict[str, str], seconds: float = 3.0) -> float:
    """Connections per second a sidecar accepts (and sees closed), one client at a time x 8."""
    config = build_config({"listeners": "PLAINTEXT://127.0.0.1:0", "sidecar.upstream": upstream,
                           "sidecar.metrics.listener": "", **keys})
    async with trio.open_nursery() as nursery:
        sidecar: Sidecar = await nursery.start(Sidecar(config).serve)
        port = sidecar.bound["PLAINTEXT"].port
        counter = sidecar.metrics.connections.labels("PLAINTEXT")
        end = trio.current_time() + seconds

        async def client() -> None:
            while trio.current_time() < end:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                await trio.aclose_forcefully(stream)

        before = counter._value.get()
        began = trio.current_time()
        async with trio.open_nursery() as clients:
            for _ in range(8):
                clients.start_soon(client)
        await trio.sleep(0.2)
        rate = (counter._value.get() - before) / (trio.current_time() - began - 0.2)
        nursery.cancel_scope.cancel()
    return rate


async def storm(upstream: str, limit: float, seconds: float) -> dict[str, float]:
    """Accepted rate and worst trailing span under 5x the limit."""
    config = build_config({"listeners": "PLAINTEXT://127.0.0.1:0", "sidecar.upstream": upstream,
                           "sidecar.metrics.listener": "", "max.connection.creation.rate": str(int(limit))})
    async with trio.open_nursery() as nursery:
        sidecar: Sidecar = await nursery.start(Sidecar(config).serve)
        port = sidecar.bound["PLAINTEXT"].port
        counter = sidecar.metrics.connections.labels("PLAINTEXT")
        start = trio.current_time()
        samples: list[tuple[float, float]] = []

        async def sample() -> None:
            while True:
                samples.append((trio.current_time() - start, counter._value.get()))
                await trio.sleep(0.05)

        async def attempt(ip: str) -> None:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=ip)
            except OSError:
                return
            with trio.move_on_after(seconds + 10):
                await stream.send_all(bytes.fromhex("0000000e001200000000000100046b736964"))
                await stream.receive_some(64)
            await trio.aclose_forcefully(stream)

        async def client(ip: str, rate: float, spawn: trio.Nursery) -> None:
            n = 0
            while n / rate < seconds:
                await trio.sleep_until(start + n / rate)
                spawn.start_soon(attempt, ip)
                n += 1

        async with trio.open_nursery() as outer:
            outer.start_soon(sample)
            async with trio.open_nursery() as spawn:
                for ip in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
                    spawn.start_soon(client, ip, 5 * limit / 3, spawn)
            outer.cancel_scope.cancel()
        nursery.cancel_scope.cancel()
    times: list[float] = []
    previous = samples[0][1]
    for t, value in samples[1:]:
        if t <= seconds:
            times.extend([t] * int(value - previous))
        previous = value
    span = 11.0
    worst = max((i - bisect.bisect_right(times, t - span) + 1 for i, t in enumerate(times)), default=0)
    return {"accepted_per_limit": len(times) / seconds / limit, "worst_span_per_limit": worst / (span * limit)}


def main() -> None:
    """Run the benchmarks and print the RESULTS.md section."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--storm-seconds", type=float, default=23.0)
    parser.add_argument("--limit", type=float, default=50.0)
    args = parser.parse_args()
    results: dict[str, Any] = {
        "gate_us_no_quota": gate_cost(False),
        "gate_us_quotas": gate_cost(True),
    }
    with tempfile.TemporaryDirectory() as tmp, start_broker(Path(tmp)) as broker:
        results["accepts_per_s_no_quota"] = trio.run(accept_rate, broker.bootstrap, {})
        results["accepts_per_s_quota"] = trio.run(
            accept_rate, broker.bootstrap,
            {"max.connection.creation.rate": "100000", "sidecar.ip.connection.creation.rate": "100000"},
        )
        results["storm"] = trio.run(storm, broker.bootstrap, args.limit, args.storm_seconds)
    OUT.mkdir(exist_ok=True)
    (OUT / "quota.json").write_text(json.dumps(results, indent=2))
    storm_result = results["storm"]
    print(f"""## Quotas (KIP-612)

Command: `python -m tests.bench.quota_bench --storm-seconds {args.storm_seconds:g} --limit {args.limit:g}`
({platform.python_implementation()} {platform.python_version()}, Tansu broker on loopback, sidecar in-process)

| measure | value |
|---|---|
| gate decisions per connection, no quota configured | {results['gate_us_no_quota']:.1f} µs |
| gate decisions per connection, sidecar + listener + per-IP quotas | {results['gate_us_quotas']:.1f} µs |
| connections accepted and closed per second, no quota | {results['accepts_per_s_no_quota']:.0f}/s |
| same, with (non-binding) quotas configured | {results['accepts_per_s_quota']:.0f}/s (ratio {results['accepts_per_s_quota'] / results['accepts_per_s_no_quota']:.2f}) |
| storm at 5 × {args.limit:g}/s for {args.storm_seconds:g} s: accepted rate / limit | {storm_result['accepted_per_limit']:.3f} |
| storm: worst trailing 11 s span / (11 s × limit) | {storm_result['worst_span_per_limit']:.3f} |
""")


if __name__ == "__main__":
    main()
