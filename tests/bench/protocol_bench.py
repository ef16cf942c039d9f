"""Protocol benchmarks: header decode, a 100-partition Produce, a 10,000-partition Metadata.

Run from the repository root::

    python -m tests.bench.protocol_bench            # measure, print, update RESULTS.md
    python -m tests.bench.protocol_bench --no-write # measure and print only

Each case is timed with :func:`timeit.Timer.repeat`: ``repeats`` rounds of ``number`` calls;
a round gives one per-call time, and the table reports the median round with the spread
(fastest and slowest round, and the interquartile range). The machine is shared, so the
median, not the mean, is the figure to read. Results replace the ``## Protocol`` section of
``tests/bench/RESULTS.md`` (other sections are left alone).

Target (issue 3): request-header decode median <= 5 µs.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import timeit
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.apis import DEFAULT_REGISTRY, PRODUCE
from protocol.headers import decode_request_header, encode_request_header
from protocol.records import summarize
from protocol.schema import decode, decode_interpreted, decode_prefix, encode

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
COMMAND = "python -m tests.bench.protocol_bench"
HEADER_TARGET_US = 5.0
METADATA = 3


@dataclass(frozen=True)
class Result:
    """Per-call times (seconds) of one case, one per round."""

    name: str
    detail: str
    rounds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.rounds)

    def row(self) -> str:
        q1, _, q3 = statistics.quantiles(self.rounds, n=4)
        cells = [self.median, min(self.rounds), max(self.rounds), q3 - q1]
        return f"| {self.name} | {self.detail} | " + " | ".join(_fmt(v) for v in cells) + " |"


def _fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} µs"
    return f"{seconds * 1e3:.2f} ms"


def measure(
    name: str, detail: str, func: Callable[[], Any], *, repeats: int, budget: float
) -> Result:
    """Time ``func``: calibrate ``number`` so a round takes about ``budget`` seconds."""
    timer = timeit.Timer(func)
    number, _ = timer.autorange()
    single = timer.timeit(number) / number
    number = max(1, int(budget / single))
    rounds = [t / number for t in timer.repeat(repeat=repeats, number=number)]
    return Result(name, detail, rounds)


# --------------------------------------------------------------------------- inputs


def header_frame() -> bytes:
    """Metadata v12 (flexible): request header v2 with client id "rdkafka", then a body."""
    return encode_request_header(METADATA, 12, 7, "rdkafka", 2) + b"\x01\x01\x00"


def produce_body(partitions: int = 100, records_per_batch: int = 10) -> tuple[int, bytes]:
    """A Produce v9 body: 10 topics x ``partitions / 10``, one v2 batch per partition."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(2, 0, 1 << 20, offset=0)
    for i in range(records_per_batch):
        builder.append(1_700_000_000_000 + i, b"key-%d" % i, b"v" * 100)
    builder.close()
    batch = bytes(builder.buffer())
    topics = [
        {
            "Name": f"topic-{t}",
            "PartitionData": [{"Index": p, "Records": batch} for p in range(partitions // 10)],
        }
        for t in range(10)
    ]
    version = 9
    spec = DEFAULT_REGISTRY.api(PRODUCE).request
    return version, encode(spec, version, {"Acks": -1, "TimeoutMs": 30000, "TopicData": topics})


def metadata_value(topics: int = 1000, partitions: int = 10) -> dict[str, Any]:
    """A Metadata v12 response: 3 brokers, ``topics`` x ``partitions`` with 3 replicas."""
    brokers = [
        {"NodeId": n, "Host": f"broker-{n}.example", "Port": 9092, "Rack": None} for n in range(3)
    ]
    return {
        "Brokers": brokers,
        "ClusterId": "cluster",
        "ControllerId": 0,
        "Topics": [
            {
                "Name": f"topic-{t:04d}",
                "TopicId": uuid.UUID(int=t + 1),
                "Partitions": [
                    {
                        "PartitionIndex": p,
                        "LeaderId": p % 3,
                        "LeaderEpoch": 5,
                        "ReplicaNodes": [0, 1, 2],
                        "IsrNodes": [0, 1, 2],
                    }
                    for p in range(partitions)
                ],
            }
            for t in range(topics)
        ],
    }


def decode_produce_to_batches(version: int, body: bytes) -> int:
    """Decode a Produce body and summarize every partition's records (batch headers only)."""
    spec = DEFAULT_REGISTRY.api(PRODUCE).request
    request = decode(spec, version, body)
    count = 0
    for topic in request["TopicData"]:
        for partition in topic["PartitionData"]:
            count += summarize(partition["Records"]).record_count
    return count


# --------------------------------------------------------------------------- main


def run(quick: bool = False) -> list[Result]:
    """Measure every case (``quick``: fewer, shorter rounds, for a smoke run)."""
    repeats, budget = (5, 0.05) if quick else (21, 0.2)
    frame = header_frame()
    produce_version, produce = produce_body()
    assert decode_produce_to_batches(produce_version, produce) == 1000
    metadata_spec = DEFAULT_REGISTRY.api(METADATA).response
    metadata = metadata_value()
    metadata_body = encode(metadata_spec, 12, metadata)
    header_spec_v2 = _request_header_spec()
    results = [
        measure(
            "request header decode",
            "v2, client id `rdkafka` (`decode_request_header`)",
            lambda: decode_request_header(frame),
            repeats=repeats,
            budget=budget,
        ),
        measure(
            "RequestHeader v2 schema, compiled",
            "same bytes, the schema alone (`decode_prefix`)",
            lambda: decode_prefix(header_spec_v2, 2, frame),
            repeats=repeats,
            budget=budget,
        ),
        measure(
            "RequestHeader v2 schema, interpreted",
            "same bytes, the schema alone (`decode_interpreted`, reference)",
            lambda: decode_interpreted(header_spec_v2, 2, frame),
            repeats=repeats,
            budget=budget,
        ),
        measure(
            "Produce v9 decode to batch headers",
            f"100 partitions x 1 v2 batch of 10 records, {len(produce):,} bytes",
            lambda: decode_produce_to_batches(produce_version, produce),
            repeats=repeats,
            budget=budget,
        ),
        measure(
            "Metadata v12 response decode",
            f"1,000 topics x 10 partitions, {len(metadata_body):,} bytes",
            lambda: decode(metadata_spec, 12, metadata_body),
            repeats=repeats,
            budget=budget,
        ),
        measure(
            "Metadata v12 response decode, interpreted",
            "same bytes (reference)",
            lambda: decode_interpreted(metadata_spec, 12, metadata_body),
            repeats=max(5, repeats // 3),
            budget=budget,
        ),
        measure(
            "Metadata v12 response encode",
            "same message",
            lambda: encode(metadata_spec, 12, metadata),
            repeats=repeats,
            budget=budget,
        ),
    ]
    return results


def _request_header_spec() -> Any:
    from protocol.headers import REQUEST_HEADER

    return REQUEST_HEADER


def machine() -> list[str]:
    """nproc, CPU model and Python of this machine."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        load = "unknown"
    return [
        f"- nproc: {os.cpu_count()} (shared with other jobs; 1-minute load {load} at the end)",
        f"- CPU: {model}",
        f"- Python: {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.machine()}",
    ]


def section(results: list[Result]) -> str:
    """The ``## Protocol`` section of RESULTS.md."""
    header = results[0]
    verdict = "meets" if header.median <= HEADER_TARGET_US * 1e-6 else "MISSES"
    lines = [
        "## Protocol",
        "",
        "Sans-IO decoding in `protocol/`, measured by `tests/bench/protocol_bench.py`.",
        "",
        "Machine:",
        "",
        *machine(),
        "",
        "Command (from the repository root, with the venv active):",
        "",
        "```",
        COMMAND,
        "```",
        "",
        "Each row: 21 rounds (7 for the interpreted Metadata reference) of calls totalling about",
        "0.2 s each; the per-call time of the median round, the fastest and slowest round, and",
        "the interquartile range of the rounds.",
        "",
        "| Case | Input | Median | Min | Max | IQR |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
        *(r.row() for r in results),
        "",
        f"Request-header decode median {_fmt(header.median)}: {verdict} the <= "
        f"{HEADER_TARGET_US:g} µs target.",
        "",
    ]
    return "\n".join(lines)


def write_section(text: str, path: Path = RESULTS) -> None:
    """Replace (or add) the ``## Protocol`` section of ``path``, keeping every other section."""
    old = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n\n"
    pattern = re.compile(r"^## Protocol\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(old):
        new = pattern.sub(lambda _: text + "\n", old, count=1)
    else:
        new = old.rstrip("\n") + "\n\n" + text
    path.write_text(new.rstrip("\n") + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Measure, print the section, and (unless ``--no-write``) update RESULTS.md."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    parser.add_argument("--quick", action="store_true", help="short smoke run (not for RESULTS)")
    args = parser.parse_args(argv)
    text = section(run(quick=args.quick))
    sys.stdout.write(text)
    if not args.no_write and not args.quick:
        write_section(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
