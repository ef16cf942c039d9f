"""Client-quota throttles (issue 33, KIP-219): the answer carries the larger of the broker's
and the sidecar's ``ThrottleTimeMs``, and the connection is not read for the sidecar's time.

Answers are written by our encoder and read back by kafka-python (an independent reader);
the connection runs on memory streams under trio's virtual clock.
"""

from __future__ import annotations

import struct
import uuid

import pytest
import trio
import trio.testing
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse

from protocol.apis import DEFAULT_REGISTRY, ApiRegistry
from protocol.headers import RequestHeader
from protocol.schema import encode
from proxy.config.settings import ConnectionSettings
from proxy.datapath.addressing import StaticAddressBook
from proxy.datapath.client_quota import ClientQuotaFilter, quota_user
from proxy.datapath.connection import Connection, Parts
from proxy.datapath.dispatch import Dispatch
from proxy.datapath.metrics import SidecarMetrics
from proxy.datapath.rewrite import Rewriter
from proxy.datapath.routing import Router
from proxy.datapath.throttle import Throttle, ThrottlePatch
from proxy.local.api import Context, LocalApiTable
from proxy.local.ports import Ports
from quotas.client_rates import ClientRates
from quotas.clients import CONSUMER_BYTE_RATE, ClientQuotas, Entity
from quotas.rate import RateConfig
from tests.proxy.test_connection_seam import NoBrokers, NoUpstreamInfo, request_ids
from tests.proxy.wire import read_one_frame

PRODUCE, FETCH = 0, 1


def answer(api_key: int, version: int, correlation_id: int, body: dict[str, object]) -> bytes:
    """A response frame with header v0 (both APIs at these versions)."""
    encoded = encode(DEFAULT_REGISTRY.api(api_key).response, version, body)
    return struct.pack(">ii", 4 + len(encoded), correlation_id) + encoded


PRODUCED = {"Responses": [{"Name": "t", "PartitionResponses": [
    {"Index": 0, "ErrorCode": 0, "BaseOffset": 41, "LogAppendTimeMs": -1, "LogStartOffset": 0}]}]}


def test_a_produce_answer_gets_the_larger_throttle_and_keeps_everything_else() -> None:
    patch = ThrottlePatch(DEFAULT_REGISTRY)
    frame = answer(PRODUCE, 7, 5, {**PRODUCED, "ThrottleTimeMs": 100})
    patched = patch.patched(PRODUCE, 7, 0, frame, 5000)
    assert patched is not None
    assert struct.unpack(">i", patched[:4])[0] == len(patched) - 4 and patched[4:8] == frame[4:8]
    read = ProduceResponse[7].decode(patched[8:]).to_dict()
    original = ProduceResponse[7].decode(frame[8:]).to_dict()
    assert read["throttle_time_ms"] == 5000
    assert {**read, "throttle_time_ms": 100} == original
    # The broker's own, longer throttle stands; so does an answer with no such field (v0).
    assert patch.patched(PRODUCE, 7, 0, answer(PRODUCE, 7, 5, {**PRODUCED, "ThrottleTimeMs": 8000}), 5000) is None
    assert patch.patched(PRODUCE, 0, 0, answer(PRODUCE, 0, 5, PRODUCED), 5000) is None


def fetch_answer(correlation_id: int, throttle: int, records: bytes) -> bytes:
    return answer(FETCH, 4, correlation_id, {"ThrottleTimeMs": throttle, "Responses": [{"Topic": "t", "Partitions": [
        {"PartitionIndex": 0, "ErrorCode": 0, "HighWatermark": 9, "LastStableOffset": 9,
         "AbortedTransactions": [], "Records": records}]}]})


def test_a_fetch_answer_is_patched_in_place() -> None:
    frame = fetch_answer(3, 20, b"r" * 1000)
    patched = ThrottlePatch(DEFAULT_REGISTRY).patched(FETCH, 4, 0, frame, 750)
    assert patched is not None and len(patched) == len(frame) and patched[12:] == frame[12:]
    assert FetchResponse[4].decode(patched[8:]).throttle_time_ms == 750


def test_the_quota_user_is_the_principal_name() -> None:
    assert quota_user("User:alice") == "alice"
    assert quota_user("User:ANONYMOUS") == "ANONYMOUS"
    assert quota_user("User:") == "ANONYMOUS"


def fetch_request(correlation_id: int) -> bytes:
    """Fetch v4, header v1 (client id ``t``): the body is never read on this path."""
    payload = struct.pack(">hhih", FETCH, 4, correlation_id, 1) + b"t" + b"\x00" * 8
    return struct.pack(">i", len(payload)) + payload


class Broker:
    """Answers each Fetch with ``records`` bytes of records: the first ``first`` bytes of the
    answer, ``pause`` seconds later the rest (``first=None``: all at once)."""

    def __init__(self, records: int, first: int | None = None, pause: float = 1.0) -> None:
        self.records, self.first, self.pause = records, first, pause
        self.received: list[float] = []
        self.frames: list[bytes] = []

    async def serve(self, stream: trio.abc.Stream) -> None:
        async for correlation_id in request_ids(stream):
            self.received.append(trio.current_time())
            answer = fetch_answer(correlation_id, 0, b"r" * self.records)
            self.frames.append(answer)
            if self.first is not None:
                await stream.send_all(answer[: self.first])
                await trio.sleep(self.pause)
                answer = answer[self.first :]
            await stream.send_all(answer)


def connect(nursery: trio.Nursery, broker: Broker, consumer_byte_rate: int) -> tuple[trio.abc.Stream, SidecarMetrics]:
    """A connection with ``consumer_byte_rate`` for client id ``t`` in front of ``broker``:
    the client's end of it, and its metrics."""
    registry = ApiRegistry()
    rates = ClientRates(RateConfig(11, 1000))
    rates.install(ClientQuotas({Entity(None, "t"): {CONSUMER_BYTE_RATE: consumer_byte_rate}}))
    router = Router(registry, LocalApiTable([]), NoUpstreamInfo(), Rewriter(StaticAddressBook({}), "PLAINTEXT"))
    metrics = SidecarMetrics(registry)

    async def open_upstream() -> trio.abc.Stream:
        ours, theirs = trio.testing.memory_stream_pair()
        nursery.start_soon(broker.serve, theirs)
        return ours

    parts = Parts(settings=ConnectionSettings(), registry=registry, router=router, metrics=metrics,
                  open_upstream=open_upstream,
                  dispatch=Dispatch(registry, router, metrics, (ClientQuotaFilter(rates),), throttles=True))
    client, server_side = trio.testing.memory_stream_pair()
    context = Context(listener="PLAINTEXT", peer=("127.0.0.1", 5),
                      ports=Ports(upstream=NoUpstreamInfo(), brokers=NoBrokers()))
    nursery.start_soon(Connection(parts, server_side, context).run)
    return client, metrics


async def test_a_throttled_fetch_is_answered_at_once_then_the_client_is_not_read(
        autojump_clock: trio.testing.MockClock) -> None:
    """consumer_byte_rate 1,000 B/s for client id ``t``: the first answer (about 14.1 kB over
    the padded 10 s window: 1,41x B/s) asks about 4.1 s; the answer says so at once, and the
    next request reaches the broker only then."""
    broker = Broker(14_000)
    async with trio.open_nursery() as nursery:
        client, _ = connect(nursery, broker, 1000)
        start = trio.current_time()
        await client.send_all(fetch_request(1))
        first = await read_one_frame(client)
        size = len(first) - 4  # what the sensor recorded
        expected = round((size / 10 - 1000) / 1000 * 10_000)  # Kafka's throttle formula, by hand
        assert FetchResponse[4].decode(first[8:]).throttle_time_ms == expected > 4000
        assert trio.current_time() - start < 0.001  # answered at once
        await client.send_all(fetch_request(2))
        second = await read_one_frame(client)
        assert broker.received[1] - start == pytest.approx(expected / 1000, abs=0.002)  # not read before
        assert FetchResponse[4].decode(second[8:]).throttle_time_ms > 0  # still over: throttled again
        await client.aclose()


def test_an_answer_patched_in_slices_then_gets_the_throttle() -> None:
    """A large Metadata answer the ACLs patch in slices leaves the response chain and comes
    back through :meth:`Dispatch.throttled` (proxy/datapath/broker_link.py): the sidecar's
    longer throttle goes in, the rest of the answer is the patched one; without client quotas
    the answer passes unchanged."""
    registry = ApiRegistry()
    router = Router(registry, LocalApiTable([]), NoUpstreamInfo(), Rewriter(StaticAddressBook({}), "PLAINTEXT"))
    metrics = SidecarMetrics(registry)
    encoded = encode(registry.api(3).response, 12, {
        "ThrottleTimeMs": 40, "Brokers": [], "ClusterId": "c", "ControllerId": 1,
        "Topics": [{"ErrorCode": 0, "Name": f"t{i}", "TopicId": uuid.UUID(int=i + 1),
                    "IsInternal": False, "Partitions": [], "TopicAuthorizedOperations": -2147483648}
                   for i in range(3)]})
    frame = struct.pack(">ii", 5 + len(encoded), 9) + b"\x00" + encoded  # header v1: no tags
    header = RequestHeader(api_key=3, api_version=12, correlation_id=9, client_id="c", header_version=2, size=0)
    quoted = Dispatch(registry, router, metrics, (), throttles=True)
    throttled = quoted.throttled(header, 1, frame, Throttle(ms=2500))
    assert len(throttled) == len(frame) and throttled[:9] == frame[:9]
    read = MetadataResponse[12].decode(throttled[9:]).to_dict()
    assert read["throttle_time_ms"] == 2500
    assert {**read, "throttle_time_ms": 40} == MetadataResponse[12].decode(frame[9:]).to_dict()
    # The broker's longer throttle stands; a sidecar that enforces no client quota changes nothing.
    assert quoted.throttled(header, 1, frame, Throttle(ms=10)) == frame
    assert Dispatch(registry, router, metrics, ()).throttled(header, 1, frame, Throttle(ms=2500)) == frame


async def test_a_throttled_fetch_streams_with_its_throttle_set_before_the_first_byte(
        autojump_clock: trio.testing.MockClock) -> None:
    """consumer_byte_rate 10,000 B/s: a 600 kB answer goes on as it arrives (its first bytes
    reach the client while the broker still holds the rest), its ThrottleTimeMs already the
    sidecar's, measured from the size prefix; the next request waits out the throttle."""
    broker = Broker(600_000, first=65536)  # the sidecar streams an answer this large
    async with trio.open_nursery() as nursery:
        client, metrics = connect(nursery, broker, 10_000)
        start = trio.current_time()
        await client.send_all(fetch_request(1))
        first_bytes = await client.receive_some(65536)
        assert trio.current_time() - start < 0.5  # before the broker sent the rest
        frame = first_bytes + b""
        while len(frame) < 4 + struct.unpack(">i", frame[:4])[0]:
            frame += await client.receive_some(1 << 20)
        (original,) = broker.frames
        expected = round(((len(original) - 4) / 10 - 10_000) / 10_000 * 10_000)  # Kafka's formula, by hand
        assert struct.unpack(">i", first_bytes[8:12])[0] == expected > 40_000  # set in the first bytes
        assert frame[:8] == original[:8] and frame[12:] == original[12:]  # nothing else changed
        assert FetchResponse[4].decode(frame[8:]).throttle_time_ms == expected
        assert metrics.registry.get_sample_value("ksidecar_streamed_responses_total", {"api": "Fetch"}) == 1
        await client.send_all(fetch_request(2))
        with trio.fail_after(expected / 1000 + 5):
            while len(broker.received) < 2:
                await trio.sleep(0.01)
        # Not read before the throttle, which runs from when the answer had gone (1 s in).
        assert broker.received[1] - start == pytest.approx(1.0 + expected / 1000, abs=0.01)
        await client.aclose()
        nursery.cancel_scope.cancel()
