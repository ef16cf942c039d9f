"""The sidecar's own Python per forwarded request, with no I/O and no event loop wake-up.

    python -m tests.bench.hop_micro [--rounds 3000] [--per-pass 16]

A :class:`~proxy.datapath.connection.Connection` is built as the shell tests build one
(the router with no broker versions learned, so every known version is forwarded), and
one-record Produce v10 requests and their answers go through its own methods: the client
side's ``_on_request`` for ``--per-pass`` requests (one read's worth), the broker side's
``_on_response`` for their answers, then one ``deliver`` to a client wire that takes
everything. CPU time (``time.process_time``) divided by the requests: what the sidecar
spends on a request beyond reading and writing sockets and waiting for them (issue 43:
RESULTS.md, "The hop"). Single process, bounded by ``--rounds``.
"""

from __future__ import annotations

import argparse
import time

import trio
import trio.testing

from protocol.apis import ApiRegistry
from protocol.framing import size_prefix
from protocol.headers import encode_response_header
from protocol.schema import encode
from proxy.config.settings import ConnectionSettings
from proxy.datapath.addressing import StaticAddressBook
from proxy.datapath.connection import Connection, Parts
from proxy.datapath.metrics import SidecarMetrics
from proxy.datapath.rewrite import Rewriter
from proxy.datapath.routing import Router
from proxy.local.api import Context, LocalApiTable
from proxy.local.ports import Ports
from tests.bench.kafka import produce_request, record_batch
from tests.proxy.test_connection_seam import NoBrokers, NoUpstreamInfo


class _TakesAll:
    """A client wire whose kernel takes every write whole."""

    writes_at_once = True
    interruptible = True

    def try_send(self, data: bytes | memoryview) -> int:
        return len(data)


async def _never() -> trio.abc.Stream:
    raise AssertionError("the broker is never dialled here")


def measure(rounds: int, per_pass: int) -> float:
    """µs of CPU per request (see the module docstring)."""
    registry = ApiRegistry()
    router = Router(registry, LocalApiTable([]), NoUpstreamInfo(), Rewriter(StaticAddressBook({}), "PLAINTEXT"))
    metrics = SidecarMetrics(registry)
    parts = Parts(settings=ConnectionSettings(), registry=registry, router=router, metrics=metrics,
                  open_upstream=_never)
    batch = record_batch(1)
    requests = [memoryview(produce_request(i, "bench-workers", batch, 1, partition=2)) for i in range(per_pass)]
    answer = {"Responses": [{"Name": "bench-workers", "PartitionResponses": [
        {"Index": 2, "ErrorCode": 0, "BaseOffset": 5, "LogAppendTimeMs": -1, "LogStartOffset": 0,
         "RecordErrors": [], "ErrorMessage": None}]}], "ThrottleTimeMs": 0}
    answers = []
    for i in range(per_pass):
        body = encode_response_header(i, 1) + encode(registry.api(0).response, 10, answer)
        answers.append(memoryview(size_prefix(len(body)) + body))
    spent: list[float] = []

    async def run() -> None:
        _, server = trio.testing.memory_stream_pair()
        context = Context(listener="PLAINTEXT", peer=("127.0.0.1", 5),
                          ports=Ports(upstream=NoUpstreamInfo(), brokers=NoBrokers()))
        connection = Connection(parts, server, context)
        connection.writer.wire = _TakesAll()  # type: ignore[assignment]
        start = time.process_time()
        for _ in range(rounds):
            gathered: list[bytes | memoryview] = []
            now = trio.current_time()
            for frame in requests:
                now = await connection._on_request(frame, gathered, now)
            now = trio.current_time()
            for frame in answers:
                connection.link._on_response(frame, now)
            connection.writer.deliver()
        spent.append(time.process_time() - start)
        assert connection.stats.forwarded == rounds * per_pass and not connection.responses.slots
        metrics.flush()

    trio.run(run)
    return spent[0] / (rounds * per_pass) * 1e6


def main(argv: list[str] | None = None) -> int:
    """Print the µs per request."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench.hop_micro", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--per-pass", type=int, default=16)
    args = parser.parse_args(argv)
    if not (1 <= args.rounds <= 100_000 and 1 <= args.per_pass <= 256):
        parser.error("--rounds 1-100000, --per-pass 1-256")
    print(f"{measure(args.rounds, args.per_pass):.2f} µs of CPU per forwarded one-record Produce "
          f"({args.per_pass} a pass, {args.rounds} passes; no I/O)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
