"""A share-group member in a process of its own, for tests that kill it (or kill its sidecar).

``python -m tests.proxy.share_member BOOTSTRAP GROUP TOPIC COUNT MODE`` polls with
confluent-kafka's ShareConsumer in explicit mode until it holds ``COUNT`` records, then:

* ``MODE=hold``: prints ``{"held": [values]}`` and waits to be killed, acknowledging nothing;
* ``MODE=accept``: accepts them, commits, prints ``{"accepted": [values that the commit
  answered with success], "held": [the rest]}`` and waits to be killed.

One JSON line on stdout, flushed; nothing else is printed there.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    """Run the member (see the module docstring)."""
    from confluent_kafka import AcknowledgeType, ShareConsumer

    bootstrap, group, topic, count, mode = argv[0], argv[1], argv[2], int(argv[3]), argv[4]
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    got: list[tuple[int, int, int]] = []  # (value, partition, offset)
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        for message in consumer.poll(0.5):
            if message.error():
                continue
            got.append((int(message.value()), message.partition(), message.offset()))
            if mode == "accept":
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        if mode == "hold" and got:
            break  # explicit mode: no further poll before these are acknowledged
    if mode == "accept":
        results = consumer.commit_sync(30)
        failed = {(tp.topic, tp.partition) for tp, error in results.items() if error is not None}
        accepted = [v for v, p, _ in got if (topic, p) not in failed]
        print(json.dumps({"accepted": accepted, "held": []}), flush=True)
    else:
        print(json.dumps({"held": [v for v, _, _ in got]}), flush=True)
    while True:  # until killed
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
