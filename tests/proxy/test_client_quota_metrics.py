"""Client-quota metrics: Kafka's sensor tags as labels, bounded series (no network)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from proxy.control.client_quota_metrics import OTHER, RateCollector, ThrottleCounters
from quotas.client_rates import ClientRates
from quotas.clients import CONTROLLER_MUTATION_RATE, PRODUCER_BYTE_RATE, ClientQuotas, Entity
from quotas.rate import RateConfig


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_throttles_are_counted_by_sensor_and_fold_into_other_past_the_bound() -> None:
    registry = CollectorRegistry()
    counters = ThrottleCounters(registry, max_series=2)
    counters((PRODUCER_BYTE_RATE, "alice", "p1"), 300)
    counters((PRODUCER_BYTE_RATE, "alice", "p1"), 200)
    counters((PRODUCER_BYTE_RATE, "bob", ""), 100)
    counters((PRODUCER_BYTE_RATE, "carol", ""), 50)  # a third sensor: past the bound
    counters((PRODUCER_BYTE_RATE, "dan", ""), 25)
    counters((PRODUCER_BYTE_RATE, "bob", ""), 10)  # one already counted keeps its series
    produce = {"quota_type": "Produce"}
    assert value(registry, "ksidecar_client_quota_throttled_total", **produce, user="alice", client_id="p1") == 2
    assert value(registry, "ksidecar_client_quota_throttle_ms_total", **produce, user="alice", client_id="p1") == 500
    assert value(registry, "ksidecar_client_quota_throttle_ms_total", **produce, user="bob", client_id="") == 110
    assert value(registry, "ksidecar_client_quota_throttled_total", **produce, user=OTHER, client_id=OTHER) == 2
    assert value(registry, "ksidecar_client_quota_throttle_ms_total", **produce, user=OTHER, client_id=OTHER) == 75


def test_the_gauges_show_the_fastest_sensors_and_their_quota() -> None:
    """At t=0 a fresh sensor's window is padded to 10 s: 5,000 bytes are 500 B/s (the
    collector reads at the same instant: its clock is given)."""
    rates = ClientRates(RateConfig(11, 1000))
    rates.install(ClientQuotas({Entity(None, "a"): {PRODUCER_BYTE_RATE: 1000},
                                Entity(None, "b"): {PRODUCER_BYTE_RATE: 2000},
                                Entity(None, "c"): {PRODUCER_BYTE_RATE: 3000}}))
    now = 1_000_000
    for client_id, amount in (("a", 5000), ("b", 3000), ("c", 9000)):
        rates.record(PRODUCER_BYTE_RATE, "u", client_id, amount, now)
    registry = CollectorRegistry()
    registry.register(RateCollector(rates, max_series=2, clock=lambda: now))
    produce = {"quota_type": "Produce", "user": ""}
    assert value(registry, "ksidecar_client_quota_byte_rate", **produce, client_id="c") == 900
    assert value(registry, "ksidecar_client_quota_byte_rate", **produce, client_id="a") == 500
    assert value(registry, "ksidecar_client_quota_byte_rate", **produce, client_id="b") is None  # the slowest
    assert value(registry, "ksidecar_client_quota_limit", **produce, client_id="c") == 3000


def test_the_emptiest_mutation_buckets_show_their_tokens() -> None:
    """controller_mutation_rate 2 with 2 samples of 1 s: buckets of 4 tokens."""
    rates = ClientRates(RateConfig(2, 1000))
    rates.install(ClientQuotas({Entity(None, c): {CONTROLLER_MUTATION_RATE: 2} for c in "abc"}))
    for client_id, partitions in (("a", 7), ("b", 1), ("c", 3)):
        rates.mutate("u", client_id, [partitions], strict=False, now_ms=0)
    registry = CollectorRegistry()
    registry.register(RateCollector(rates, max_series=2, clock=lambda: 0))
    mutation = {"quota_type": "ControllerMutation", "user": ""}
    assert value(registry, "ksidecar_client_quota_tokens", **mutation, client_id="a") == -3
    assert value(registry, "ksidecar_client_quota_tokens", **mutation, client_id="c") == 1
    assert value(registry, "ksidecar_client_quota_tokens", **mutation, client_id="b") is None  # the fullest
