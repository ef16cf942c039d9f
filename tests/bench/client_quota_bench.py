"""Client quotas (issue 33): what a throttled neighbour costs a client with no quota.

    python -m tests.bench.client_quota_bench [--seconds 8] [--repeats 3] [--workers 2]

A real ``ksidecar run`` (``sidecar.workers`` as given) in front of Tansu, with a real
ZooKeeper holding ``producer_byte_rate`` = 1 MiB/s for client id ``noisy``. Two phases,
interleaved ``--repeats`` times in one run:

* **alone**: client id ``quiet`` (no quota) produces 1 kB records as fast as it can for
  ``--seconds``; its acknowledged records per second;
* **beside**: the same, while ``noisy`` keeps its queue full at ten times its quota (it is
  throttled the whole time).

The ratio beside / alone is the figure (target >= 0.95). Both producers are
confluent-kafka (librdkafka): the load generator runs in its own threads outside the
sidecar's processes. Loopback only; every loop is bounded in time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from kazoo.client import KazooClient

from proxy.tools.admin_client import AdminClient
from proxy.tools.rig.sidecar import start_sidecar
from proxy.tools.rig.tansu import start_broker
from proxy.tools.rig.zookeeper import start_zookeeper
from quotas.client_store import ClientQuotaStore
from quotas.clients import PRODUCER_BYTE_RATE, Entity

MIB = 1 << 20


def produce(bootstrap: str, topic: str, client_id: str, seconds: float, size: int,
            stop: threading.Event | None = None) -> float:
    """Records per second acknowledged while ``client_id`` keeps its queue full."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "queue.buffering.max.kbytes": 4096})
    acked = [0]

    def delivered(err: object, _message: object) -> None:
        if err is None:
            acked[0] += 1

    payload = b"q" * size
    began = time.monotonic()
    end = began + seconds
    while time.monotonic() < end and not (stop is not None and stop.is_set()):
        try:
            producer.produce(topic, payload, on_delivery=delivered)
        except BufferError:
            producer.poll(0.001)
    counted = acked[0]
    elapsed = time.monotonic() - began
    producer.flush(30)
    return counted / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", default="2")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="client-quota-bench-"))
    with start_broker(work) as broker, start_zookeeper(work) as zk:
        connect = f"{zk.connect}/bench-{uuid.uuid4().hex[:6]}"
        with start_sidecar(work, broker.bootstrap, name="bench", keys={
                "sidecar.workers": args.workers, "zookeeper.connect": connect}) as sidecar:
            client = KazooClient(hosts=connect)
            client.start()
            try:
                ClientQuotaStore(client).alter(Entity(None, "noisy"), [(PRODUCER_BYTE_RATE, float(MIB))])
            finally:
                client.stop()
                client.close()
            topics = {}
            with AdminClient(sidecar.bootstrap) as admin:
                for name in ("quiet", "noisy"):
                    topics[name] = f"{name}-{uuid.uuid4().hex[:6]}"
                    admin.call(19, 4, {"Topics": [{"Name": topics[name], "NumPartitions": 1, "ReplicationFactor": 1,
                                                   "Assignments": [], "Configs": []}],
                                       "TimeoutMs": 10000, "ValidateOnly": False})
            alone: list[float] = []
            beside: list[float] = []
            for _ in range(args.repeats):
                alone.append(produce(sidecar.bootstrap, topics["quiet"], "quiet", args.seconds, 1000))
                stop = threading.Event()
                noisy = threading.Thread(target=produce, args=(sidecar.bootstrap, topics["noisy"], "noisy",
                                                                args.seconds + 30, 10_000, stop))
                noisy.start()
                time.sleep(2.0)  # the neighbour past its first burst, throttled
                beside.append(produce(sidecar.bootstrap, topics["quiet"], "quiet", args.seconds, 1000))
                stop.set()
                noisy.join(60)
    ratios = [b / a for a, b in zip(alone, beside, strict=True)]
    print(f"## Client quotas: a throttled neighbour (workers={args.workers})\n")
    print("Command: `python -m tests.bench.client_quota_bench "
          f"--seconds {args.seconds:g} --repeats {args.repeats} --workers {args.workers}`\n")
    print("| phase | records/s (runs) |\n|---|---|")
    print(f"| quiet alone | {statistics.median(alone):,.0f} ({', '.join(f'{x:,.0f}' for x in alone)}) |")
    print(f"| quiet beside noisy (throttled) | {statistics.median(beside):,.0f} "
          f"({', '.join(f'{x:,.0f}' for x in beside)}) |")
    print(f"\nRatio beside / alone: median {statistics.median(ratios):.2f} "
          f"(runs {', '.join(f'{r:.2f}' for r in ratios)}); target >= 0.95.")


if __name__ == "__main__":
    main()
