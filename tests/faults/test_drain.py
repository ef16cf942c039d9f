"""SIGTERM under pipelined load: every request the broker applied is answered, no reset.

8 connections each pipeline 1,024 one-record Produce requests (acks=1) at a real
``ksidecar run`` in front of a real Tansu; SIGTERM comes while thousands are in flight.
What must hold (issue 21): every request the broker applied was answered (the answers the
clients counted equal the partition's log end offset, asked of the broker directly), no
connection ended with a reset, the process exits 0 within 1 s of the last answer, and the
sidecar's log says the drain was complete with forwarded equal to the broker's answers.

``KSIDECAR_DRAIN_RUNS`` sets how many runs (default 2 here; ``tests/bench/RESULTS.md``
holds the 20-run result and its command).
"""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from pathlib import Path

import pytest

from proxy.tools.rig.tansu import TansuServer
from tests.faults.support import (
    PipelinedClient,
    create_topic,
    latest_offset,
    produce_request,
    record_batch,
    sidecar_process,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.serial]

CONNECTIONS = 8
PIPELINED = 1024
RUNS = int(os.environ.get("KSIDECAR_DRAIN_RUNS", "2"))


@pytest.mark.parametrize("run", range(RUNS))
def test_sigterm_under_pipelined_load_answers_everything_applied(
    tansu: TansuServer, tmp_path: Path, run: int
) -> None:
    topic = f"drain-{uuid.uuid4().hex[:10]}"
    batch = record_batch(1, 100)
    # Two workers: SIGTERM drains every one, and the supervisor's line sums them.
    with sidecar_process(tmp_path, tansu.bootstrap, f"drain{run}",
                         **{"sidecar.shutdown.drain.ms": "20000", "sidecar.workers": "2"}) as sidecar:
        create_topic(sidecar.port, topic)
        clients = [
            PipelinedClient(sidecar.port, [produce_request(i, topic, batch, acks=1, version=8)
                                           for i in range(PIPELINED)])
            for _ in range(CONNECTIONS)
        ]
        for client in clients:
            client.start()
        # SIGTERM once every connection is being served and a few hundred answers are out.
        deadline = time.monotonic() + 30
        while (min(c.answers for c in clients) == 0
               or sum(c.answers for c in clients) < CONNECTIONS * 50) and time.monotonic() < deadline:
            time.sleep(0.01)
        answered_at_signal = sum(c.answers for c in clients)
        assert answered_at_signal < CONNECTIONS * PIPELINED, "the load finished before SIGTERM"
        os.kill(sidecar.process.pid or 0, signal.SIGTERM)
        for client in clients:
            client.join(30)
        exit_deadline = time.monotonic() + 30
        while sidecar.process.returncode is None and time.monotonic() < exit_deadline:
            time.sleep(0.005)
        exited_at = time.monotonic()
        code = sidecar.process.returncode
        log = sidecar.log_path.read_text()
    applied = latest_offset(tansu.port, topic)
    answered = sum(c.answers for c in clients)
    # Every connection was served before SIGTERM, and each ends with EOF after its last
    # answer, never a reset.
    assert all(c.ended == "eof" and c.answers for c in clients), [(c.answers, c.ended) for c in clients]
    assert answered == applied, f"broker applied {applied}, clients got {answered} answers"
    assert code == 0, log[-2000:]
    last_answer = max(c.last_answer_at for c in clients)
    assert exited_at - last_answer < 1.0, f"exit {exited_at - last_answer:.2f} s after the last answer"
    match = re.search(r"drained in [\d.]+ s: every request read was answered "
                      r"\(forwarded (\d+), broker answers (\d+)", log)
    assert match, log[-2000:]
    forwarded, broker_answers = int(match.group(1)), int(match.group(2))
    assert forwarded == broker_answers
    assert forwarded == applied + 1  # + the CreateTopics request
