"""The hub (sans-IO with fake observers): pairing, threads, isolation, overflow, loading."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from observers.api import ObserverConfig
from observers.errors import ObserverError
from observers.exchange import Exchange
from observers.hub import ObserverHub, Tap
from observers.loader import construct, settings_for
from observers.worker import WAKE_BATCH, Settings
from protocol.apis import DEFAULT_REGISTRY
from protocol.errors import ProtocolError
from protocol.headers import decode_request_header, encode_response_header
from protocol.schema import encode
from tests.observers import fakes
from tests.proxy.wire import request_frame


def metadata_exchange(correlation_id: int = 7) -> tuple[Any, bytes, bytes]:
    """A real Metadata v12 request frame, its header, and a response frame."""
    frame = request_frame(3, 12, correlation_id, {"Topics": [{"Name": "t"}]})
    header = decode_request_header(frame[4:])
    api = DEFAULT_REGISTRY.api(3)
    body = encode_response_header(correlation_id, 1) + encode(api.response, 12, {
        "Topics": [{"Name": "t", "ErrorCode": 3, "Partitions": []}]})
    return header, frame, len(body).to_bytes(4, "big") + body


def hub_of(*observers: tuple[Any, str, Settings]) -> tuple[ObserverHub, CollectorRegistry]:
    registry = CollectorRegistry()
    return ObserverHub(list(observers), DEFAULT_REGISTRY, registry), registry


def complete(tap: Tap, correlation_id: int = 7, *, sent: bool = True) -> None:
    header, frame, response = metadata_exchange(correlation_id)
    tap.completed(header=header, response_header_version=1, principal="User:ANONYMOUS",
                  frame=frame, request_size=len(frame), received_at=time.time(),
                  expects_response=True, local=False, response=response if sent else None,
                  elapsed=0.002, upstream_elapsed=0.001)


def value(registry: CollectorRegistry, name: str, observer: str) -> float:
    return registry.get_sample_value(name, {"observer": observer}) or 0.0


def test_pairs_arrive_decoded_on_the_observers_own_thread() -> None:
    observer = fakes.CountingObserver()
    hub, registry = hub_of((observer, "counting", Settings()))
    hub.start()
    tap = hub.tap("PLAINTEXT", "127.0.0.1", 5555, 3)
    complete(tap, 7)
    complete(tap, 8, sent=False)
    time.sleep(0.25)  # a couple of tick periods (real threads: no virtual clock here)
    hub.close(5)
    kinds = [kind for kind, _ in observer.calls]
    assert kinds == ["request", "response"] * 2
    request, client, principal, key, version, correlation, info = observer.calls[0][1]
    assert request.topics[0].name == "t" and (key, version) == (3, 12)
    assert client == ("127.0.0.1", 5555) and principal == "User:ANONYMOUS"
    assert correlation.correlation_id == 7 and info.broker_id == 3 and info.listener == "PLAINTEXT"
    response, version, correlation, answer = observer.calls[1][1]
    assert response.topics[0].error_code == 3 and answer.sent and answer.size is not None
    unanswered = observer.calls[3][1]
    assert unanswered[0] is None and not unanswered[3].sent and unanswered[3].latency is None
    assert observer.threads == {"observer-counting"}
    assert observer.ticks >= 1 and observer.closed_with is not None
    assert value(registry, "ksidecar_observer_records_total", "counting") == 2


def test_a_raising_observer_is_counted_and_the_others_still_see_everything() -> None:
    good = fakes.CountingObserver()
    hub, registry = hub_of((fakes.RaisingObserver(), "raising", Settings()),
                           (good, "counting", Settings()))
    hub.start()
    tap = hub.tap("PLAINTEXT", "127.0.0.1", 1, 0)
    for i in range(50):
        complete(tap, i)
    hub.close(5)
    assert value(registry, "ksidecar_observer_errors_total", "raising") == 100
    assert value(registry, "ksidecar_observer_records_total", "raising") == 50
    assert len(good.calls) == 100


def test_a_stalled_observer_drops_and_counts_without_blocking() -> None:
    fakes.RELEASE.clear()
    stalled = fakes.StallingObserver()
    stalled.configure(ObserverConfig({}))
    hub, registry = hub_of((stalled, "stalling", Settings(capacity=4)))
    hub.start()
    tap = hub.tap("PLAINTEXT", "127.0.0.1", 1, 0)
    began = time.monotonic()
    for i in range(100):
        complete(tap, i)
    assert time.monotonic() - began < 1.0  # the data path never waited
    dropped = value(registry, "ksidecar_observer_dropped_total", "stalling")
    assert 100 - 4 - 1 <= dropped <= 100 - 4
    assert registry.get_sample_value("ksidecar_observer_queue_depth", {"observer": "stalling"}) == 4
    assert not tap.blocked
    fakes.RELEASE.set()
    hub.close(5)
    assert value(registry, "ksidecar_observer_records_total", "stalling") == 100 - dropped


def stalled_and_blocking(block_max: float) -> tuple[ObserverHub, CollectorRegistry, Tap]:
    """A stalled observer with a queue of 1 and overflow=block, offered four exchanges."""
    fakes.RELEASE.clear()
    stalled = fakes.StallingObserver()
    stalled.configure(ObserverConfig({}))
    hub, registry = hub_of((stalled, "stalling", Settings(capacity=1, overflow="block",
                                                          block_max=block_max)))
    hub.start()
    tap = hub.tap("PLAINTEXT", "127.0.0.1", 1, 0)
    for i in range(4):
        complete(tap, i)
    return hub, registry, tap


def test_block_overflow_holds_exchanges_until_there_is_room_or_the_wait_ends() -> None:
    hub, registry, tap = stalled_and_blocking(0.3)
    assert tap.blocked and not tap.retry()
    fakes.RELEASE.set()  # room appears: everything is placed, nothing dropped
    deadline = time.monotonic() + 5
    while not tap.retry() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not tap.blocked
    assert value(registry, "ksidecar_observer_dropped_total", "stalling") == 0
    hub.close(5)
    assert value(registry, "ksidecar_observer_records_total", "stalling") == 4

    hub, registry, tap = stalled_and_blocking(0.05)
    time.sleep(0.1)
    assert tap.retry()  # waited past block.max.ms: dropped, counted
    assert value(registry, "ksidecar_observer_dropped_total", "stalling") >= 2
    fakes.RELEASE.set()
    hub.close(5)


def test_close_of_a_never_started_hub_closes_its_observers_here() -> None:
    observer = fakes.CountingObserver()
    hub, _ = hub_of((observer, "counting", Settings()))
    hub.close(1)
    assert observer.closed_with is not None and 0.5 < observer.closed_with <= 1
    assert observer.threads == {threading.current_thread().name}
    hub.offer(object())  # type: ignore[arg-type]  # after close: ignored


def test_loading_by_builtin_name_import_path_and_errors(tmp_path: Any) -> None:
    config = ObserverConfig({"observer.audit.dir": str(tmp_path)}, registry=CollectorRegistry())
    hub = ObserverHub.load("audit, tests.observers.fakes:CountingObserver,"
                           "tests.observers.fakes.CountingObserver", config, DEFAULT_REGISTRY)
    assert [w.name for w in hub.workers] == ["audit", "counting", "counting-2"]
    hub.close(1)
    with pytest.raises(ObserverError, match=re.escape("observer.class.names: 'nosuch' is neither")):
        construct("nosuch")
    with pytest.raises(ObserverError, match=re.escape("cannot import 'no.such.Thing'")):
        construct("no.such.Thing")
    with pytest.raises(ObserverError, match="lacks configure, wants"):
        construct("builtins.object")
    with pytest.raises(ObserverError, match=re.escape("observer.audit.dir is required")):
        ObserverHub.load("audit", ObserverConfig({}), DEFAULT_REGISTRY)


@pytest.mark.parametrize(("entries", "message"), [
    ({"observer.queue.capacity": "0"}, "observer.queue.capacity='0': expected a whole number >= 1"),
    ({"observer.x.queue.capacity": "many"}, "observer.x.queue.capacity='many'"),
    ({"observer.x.overflow": "wait"}, "observer.x.overflow='wait': must be one of drop, block"),
    ({"observer.block.max.ms": "-1"}, "observer.block.max.ms='-1': expected a whole number >= 0"),
])
def test_queue_settings_are_validated_naming_the_key(entries: dict[str, str], message: str) -> None:
    with pytest.raises(ObserverError, match=re.escape(message)):
        settings_for("x", entries)


def test_per_observer_settings_override_the_defaults() -> None:
    entries = {"observer.queue.capacity": "5", "observer.x.overflow": "block",
               "observer.block.max.ms": "7"}
    assert settings_for("x", entries) == Settings(capacity=5, overflow="block", block_max=0.007)
    assert settings_for("y", entries) == Settings(capacity=5, overflow="drop", block_max=0.007)


def test_raw_observers_get_the_exchange_and_its_bodies_never_views() -> None:
    observer = fakes.RawObserver()
    hub, registry = hub_of((observer, "raw", Settings()))
    hub.start()
    tap = hub.tap("PLAINTEXT", "127.0.0.1", 1, 0)
    complete(tap, 12)
    complete(tap, 13)  # raises: counted, the next one still arrives
    complete(tap, 14, sent=False)
    time.sleep(0.25)  # fewer than WAKE_BATCH: delivered on the worker's tick
    hub.close(5)
    header, frame, response = metadata_exchange(12)
    request_body = frame[4 + header.size :]
    response_body = response[4 + 5 :]  # size, correlation id, empty tag section (header v1)
    assert observer.seen == [(3, 12, request_body, response_body, "observer-raw"),
                             (3, 14, metadata_exchange(14)[1][4 + header.size :], None, "observer-raw")]
    assert value(registry, "ksidecar_observer_errors_total", "raw") == 1
    assert value(registry, "ksidecar_observer_records_total", "raw") == 3


def test_response_bodies_behind_tagged_or_v0_headers() -> None:
    hub, _ = hub_of((fakes.RawObserver(), "raw", Settings()))
    tap = hub.tap("PLAINTEXT", "127.0.0.1", 1, 0)
    header, frame, _ = metadata_exchange(1)

    def body_of(response: bytes, header_version: int) -> bytes | None:
        tap.completed(header=header, response_header_version=header_version,
                      principal="User:ANONYMOUS", frame=frame, request_size=len(frame),
                      received_at=0.0, expects_response=True, local=False, response=response,
                      elapsed=0.1, upstream_elapsed=0.1)
        exchange = hub.workers[0].items.pop()
        assert isinstance(exchange, Exchange)
        found = exchange.response_body()
        return None if found is None else bytes(found)

    sized = lambda data: len(data).to_bytes(4, "big") + data  # noqa: E731
    # correlation id 1; a tag section holding tag 0 = b"ab"; then the body "BODY"
    assert body_of(sized(bytes.fromhex("00000001") + b"\x01\x00\x02ab" + b"BODY"), 1) == b"BODY"
    assert body_of(sized(bytes.fromhex("00000001") + b"BODY"), 0) == b"BODY"
    with pytest.raises(ProtocolError):
        body_of(sized(b"\x00\x00"), 0)


def test_an_idle_worker_is_woken_by_a_batch_not_by_each_exchange() -> None:
    hub, _ = hub_of((fakes.CountingObserver(), "counting", Settings(capacity=10)))
    worker = hub.workers[0]
    assert worker.wake_at == 5  # half the queue, when that is below WAKE_BATCH
    assert hub_of((fakes.CountingObserver(), "c", Settings()))[0].workers[0].wake_at == WAKE_BATCH
    assert hub_of((fakes.CountingObserver(), "c", Settings(capacity=1)))[0].workers[0].wake_at == 1
    worker._idle = True
    tap = hub.tap("PLAINTEXT", "127.0.0.1", 1, 0)
    for i in range(4):
        complete(tap, i)
    assert not worker._wake.is_set()
    complete(tap, 4)
    assert worker._wake.is_set()


class TickTimes(fakes.CountingObserver):
    """Remembers the ``now`` of each tick."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def tick(self, now: float) -> None:
        self.times.append(now)


async def test_a_trio_task_drives_the_workers_on_the_virtual_clock(autojump_clock: Any) -> None:
    """The hub's clock is injected: under MockClock, ticks come at 0.1 s of virtual time and
    no thread runs (the test's task is the worker's loop)."""
    import trio

    observer = TickTimes()
    hub = ObserverHub([(observer, "ticks", Settings())], DEFAULT_REGISTRY, CollectorRegistry(),
                      clock=trio.current_time)
    began = trio.current_time()
    complete(hub.tap("PLAINTEXT", "127.0.0.1", 1, 0), 7)
    for _ in range(5):
        due = hub.run_due()
        assert due is not None
        await trio.sleep_until(due)
    assert [kind for kind, _ in observer.calls] == ["request", "response"]  # on the first run
    assert [round(t - began, 6) for t in observer.times] == [0.1, 0.2, 0.3, 0.4]
    assert trio.current_time() - began == pytest.approx(0.5)
    hub.close(2.0)
    assert observer.closed_with == 2.0  # no time passes on the virtual clock while closing
    assert observer.threads == {threading.current_thread().name}
    assert hub.run_due() is None


async def test_blocked_exchanges_wait_block_max_on_the_virtual_clock(autojump_clock: Any) -> None:
    import trio

    registry = CollectorRegistry()
    hub = ObserverHub([(fakes.CountingObserver(), "slow", Settings(capacity=1, overflow="block",
                                                                    block_max=0.3))],
                      DEFAULT_REGISTRY, registry, clock=trio.current_time)
    tap = hub.tap("PLAINTEXT", "127.0.0.1", 1, 0)
    complete(tap, 1)
    complete(tap, 2)  # no room: kept for retry
    assert len(tap.blocked) == 1
    await trio.sleep(0.2)
    assert not tap.retry()  # still within block.max.ms
    await trio.sleep(0.2)
    assert tap.retry()  # 0.4 s > 0.3 s: dropped and counted
    assert value(registry, "ksidecar_observer_dropped_total", "slow") == 1
    hub.close(1)


def test_a_reload_changes_the_queue_bound_and_overflow_from_the_next_exchange() -> None:
    # A hub whose threads never start: nothing is taken off the queue, so the bound shows.
    counting = fakes.CountingObserver()
    hub, registry = hub_of((counting, "counting", Settings(capacity=4)))
    tap = hub.tap("PLAINTEXT", "127.0.0.1", 1, 0)
    for i in range(6):
        complete(tap, i)
    assert value(registry, "ksidecar_observer_dropped_total", "counting") == 2
    with pytest.raises(ObserverError, match=r"observer\.counting\.overflow='sometimes'"):
        hub.queue_settings({"observer.counting.overflow": "sometimes"})
    hub.use_queue_settings(hub.queue_settings({"observer.queue.capacity": "6"}))
    for i in range(4):
        complete(tap, 10 + i)
    assert value(registry, "ksidecar_observer_dropped_total", "counting") == 4  # 4 queued + 2 of 4 more
    assert hub.workers[0].settings == Settings(capacity=6)
