"""quotas.client_rates: sensors shared as Kafka shares them, throttle times by hand.

With ``quota.window.num=11`` and 1 s windows a fresh sensor's window is padded to 10 s, so
recording B bytes at t=0 measures B / 10 per second; over a quota Q the throttle is
``(rate - Q) / Q × 10,000`` ms (Kafka's ``QuotaUtils.throttleTime``).
"""

from __future__ import annotations

from quotas.client_rates import ClientRates
from quotas.clients import CONSUMER_BYTE_RATE, DEFAULT, PRODUCER_BYTE_RATE, ClientQuotas, Entity
from quotas.rate import RateConfig

CONFIG = RateConfig(samples=11, window_ms=1000)


def rates(entries: dict[Entity, dict[str, float]]) -> ClientRates:
    made = ClientRates(CONFIG)
    made.install(ClientQuotas(entries))
    return made


def test_within_quota_no_throttle_then_over_it_the_time_to_come_back() -> None:
    r = rates({Entity("alice", "p1"): {PRODUCER_BYTE_RATE: 1000}})
    assert r.record(PRODUCER_BYTE_RATE, "alice", "p1", 5000, 0) == 0  # 500 B/s
    assert r.record(PRODUCER_BYTE_RATE, "alice", "p1", 10000, 0) == 5000  # 1,500 B/s: (1500-1000)/1000 × 10 s


def test_clients_without_a_quota_are_not_measured() -> None:
    r = rates({Entity("alice", "p1"): {PRODUCER_BYTE_RATE: 1000}})
    assert r.record(PRODUCER_BYTE_RATE, "bob", "p1", 10**9, 0) == 0
    assert r.record(CONSUMER_BYTE_RATE, "alice", "p1", 10**9, 0) == 0  # another key
    assert not r.limited(PRODUCER_BYTE_RATE, "bob", "p1")
    assert r.limited(PRODUCER_BYTE_RATE, "alice", "p1")
    assert list(r.sensors(0)) == []
    assert r.take_usage() == {}


def test_a_user_quota_is_one_rate_for_all_its_client_ids() -> None:
    r = rates({Entity("alice", None): {PRODUCER_BYTE_RATE: 1000}})
    assert r.record(PRODUCER_BYTE_RATE, "alice", "p1", 8000, 0) == 0  # 800 B/s
    assert r.record(PRODUCER_BYTE_RATE, "alice", "p2", 8000, 0) == 6000  # 1,600 B/s on the one sensor
    assert [k for k, _ in r.sensors(0)] == [(PRODUCER_BYTE_RATE, "alice", "")]


def test_a_default_client_quota_is_a_rate_per_client_id() -> None:
    r = rates({Entity(None, DEFAULT): {PRODUCER_BYTE_RATE: 1000}})
    assert r.record(PRODUCER_BYTE_RATE, "alice", "p1", 8000, 0) == 0
    assert r.record(PRODUCER_BYTE_RATE, "bob", "p2", 8000, 0) == 0  # its own 800 B/s
    assert r.record(PRODUCER_BYTE_RATE, "carol", "p1", 8000, 0) == 6000  # p1 again, whoever: 1,600 B/s
    assert sorted(k for k, _ in r.sensors(0)) == [(PRODUCER_BYTE_RATE, "", "p1"), (PRODUCER_BYTE_RATE, "", "p2")]


def test_a_changed_quota_applies_to_the_rate_already_measured() -> None:
    r = rates({Entity("alice", None): {PRODUCER_BYTE_RATE: 1000}})
    assert r.record(PRODUCER_BYTE_RATE, "alice", "p1", 8000, 0) == 0
    r.install(ClientQuotas({Entity("alice", None): {PRODUCER_BYTE_RATE: 500}}))
    assert r.record(PRODUCER_BYTE_RATE, "alice", "p1", 1000, 0) == 8000  # 900 B/s against 500: (900-500)/500 × 10 s
    r.install(ClientQuotas({}))
    assert r.record(PRODUCER_BYTE_RATE, "alice", "p1", 10**6, 0) == 0  # removed: no limit


def test_another_process_usage_counts_without_being_judged_here() -> None:
    quotas = {Entity("alice", "p1"): {PRODUCER_BYTE_RATE: 1000}}
    one, two = rates(quotas), rates(quotas)
    assert one.record(PRODUCER_BYTE_RATE, "alice", "p1", 8000, 0) == 0
    usage = one.take_usage()
    assert usage == {(PRODUCER_BYTE_RATE, "alice", "p1"): 8000}
    assert one.take_usage() == {}  # taken once
    two.add_usage(usage.items(), 0)
    assert two.take_usage() == {}  # not this process's own recording
    assert two.record(PRODUCER_BYTE_RATE, "alice", "p1", 8000, 0) == 6000  # the sidecar's 1,600 B/s
    two.add_usage([((PRODUCER_BYTE_RATE, "bob", "p1"), 10**9)], 0)  # no quota: ignored
    assert [k for k, _ in two.sensors(0)] == [(PRODUCER_BYTE_RATE, "alice", "p1")]


def test_every_throttle_is_told_with_its_sensor() -> None:
    r = rates({Entity("alice", "p1"): {PRODUCER_BYTE_RATE: 1000}})
    told: list[tuple[tuple[str, str, str], int]] = []
    r.on_throttle = lambda sensor, ms: told.append((sensor, ms))
    r.record(PRODUCER_BYTE_RATE, "alice", "p1", 15000, 0)  # 5,000 ms
    r.record(PRODUCER_BYTE_RATE, "alice", "p1", 1000, 0)  # 1,600 B/s: 6,000 ms
    assert told == [((PRODUCER_BYTE_RATE, "alice", "p1"), 5000), ((PRODUCER_BYTE_RATE, "alice", "p1"), 6000)]
    assert (len(told), sum(ms for _, ms in told)) == (2, 11000)


def test_a_sensor_idle_for_a_whole_span_is_dropped() -> None:
    r = rates({Entity("alice", "p1"): {PRODUCER_BYTE_RATE: 1000}})
    r.record(PRODUCER_BYTE_RATE, "alice", "p1", 15000, 0)
    assert len(list(r.sensors(10_999))) == 1
    assert list(r.sensors(11_000)) == []  # 11 windows of 1 s without a recording
    assert r.record(PRODUCER_BYTE_RATE, "alice", "p1", 5000, 11_000) == 0  # a fresh sensor: 500 B/s
