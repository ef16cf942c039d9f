"""Kafka's sampled Rate and throttle formula, against values worked out by hand."""

from __future__ import annotations

import bisect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.gate import AcceptGate, GateConfig
from quotas.rate import Average, QuotaSensor, Rate, RateConfig, throttle_time_ms

CFG = RateConfig(samples=11, window_ms=1000)


def test_config_rejects_empty_windows() -> None:
    with pytest.raises(ValueError):
        RateConfig(samples=0)


def test_fresh_sensor_pads_the_window_to_samples_minus_one() -> None:
    rate = Rate(CFG)
    rate.record(1, 0)
    # W = max(0 + (11 - 1 - 0) * 1000, 1) = 10,000 ms, so 1 event is 0.1/s.
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(0.1)


def test_window_grows_with_time_once_past_the_padding() -> None:
    rate = Rate(CFG)
    for t in range(0, 10_500, 500):  # one event every 500 ms, 21 events
        rate.record(1, t)
    # oldest sample started at 0; elapsed 10,500 ms = 10 full windows -> no padding.
    assert rate.window_size_ms(10_500) == 10_500
    assert rate.measure(10_500) == pytest.approx(21 / 10.5)


def test_samples_older_than_the_span_are_purged() -> None:
    rate = Rate(CFG)
    rate.record(5, 0)
    assert rate.measure(10_999) == pytest.approx(5 / 10.999)
    assert rate.measure(11_000) == 0.0  # the sample at 0 is 11 windows old: reset


def test_recording_advances_and_recycles_samples() -> None:
    rate = Rate(RateConfig(samples=2, window_ms=100))
    rate.record(1, 0)
    rate.record(1, 100)  # second sample
    rate.record(1, 200)  # recycles the first
    assert rate.measure(200) == pytest.approx(2 / 0.1)  # samples at 100 and 200; W padded to 100 ms
    assert rate.last_activity_ms() == 200


def test_burst_then_throttle_exactly_as_kafka_computes_it() -> None:
    # Quota 10/s on a fresh sensor: W = 10 s, so 100 events at t=0 are exactly 10/s.
    sensor = QuotaSensor(CFG, 10.0, max_throttle_ms=1000)
    assert [sensor.record(0) for _ in range(100)] == [0] * 100
    # The 101st: O = 101/10 = 10.1; (10.1 - 10)/10 * 10,000 = 100 ms.
    assert sensor.record(0) == 100
    # The 102nd: O = 10.2 -> 200 ms; the 111th would be 1,100 ms, bounded to 1,000.
    assert sensor.record(0) == 200
    delays = [sensor.record(0) for _ in range(9)]
    assert delays[-1] == 1000
    assert throttle_time_ms(sensor.rate, 10.0, 0) == 1100


def test_unlimited_and_zero_quotas() -> None:
    assert QuotaSensor(CFG, None, 1000).record(0) == 0
    assert QuotaSensor(CFG, 0.0, 1000).record(0) == 1000


def test_unrecord_takes_an_event_back() -> None:
    sensor = QuotaSensor(CFG, 10.0, 1000)
    for _ in range(100):
        sensor.record(0)
    assert sensor.record(0) == 100
    sensor.unrecord(0)
    assert sensor.rate.measure(0) == pytest.approx(10.0)


def test_average_is_the_mean_of_retained_observations() -> None:
    avg = Average(CFG)
    assert avg.measure(0) == 0.0
    avg.record(100, 0)
    avg.record(300, 500)
    assert avg.measure(500) == pytest.approx(200)
    assert avg.measure(20_000) == 0.0


def accept_times(limit: float, arrivals: list[int], smoothing: bool = False) -> list[int]:
    """A serial acceptor (as Kafka's) applying the gate's delays to arrival times."""
    gate = AcceptGate(GateConfig(rate=CFG, sidecar_rate=limit, smoothing=smoothing))
    free = 0
    accepted = []
    for arrival in sorted(arrivals):
        t = max(arrival, free)
        while (delay := gate.connection_delay("L", t)) > 0:
            t += delay
        gate.record_connection("L", t)
        accepted.append(t)
        free = t
    return accepted


def worst_span(accepted: list[int], span: int, first_end: int) -> int:
    """Most accepts in any trailing ``span`` ending at an accept at or after ``first_end``."""
    worst = 0
    for i, t in enumerate(accepted):
        if t < first_end:
            continue
        j = bisect.bisect_right(accepted, t - span)
        worst = max(worst, i - j + 1)
    return worst


@settings(max_examples=40, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=50),
    gaps=st.lists(st.integers(min_value=0, max_value=200), min_size=50, max_size=1500),
)
def test_model_rate_holds_over_every_steady_state_span(limit: int, gaps: list[int]) -> None:
    """However clients arrive, accepted connections respect the quota span by span.

    Spans ending after the first two sensor lengths are in steady state: they hold at most
    1.1 × span × limit (the slack is the events of a sample that expires while still
    inside a trailing span). Earlier spans may also carry the fresh sensor's burst of
    (samples - 1) × limit (PROTOCOL_NOTES.md).
    """
    arrivals, t = [], 0
    for gap in gaps:
        t += gap
        arrivals.append(t)
    accepted = accept_times(limit, arrivals)
    span = CFG.span_ms
    steady = worst_span(accepted, span, 2 * span)
    assert steady <= 1.1 * CFG.samples * limit + 1
    anywhere = worst_span(accepted, span, 0)
    assert anywhere <= 1.1 * CFG.samples * limit + (CFG.samples - 1) * limit + 1


@settings(max_examples=40, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=50),
    gaps=st.lists(st.integers(min_value=0, max_value=200), min_size=50, max_size=1500),
    jitter=st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=50),
)
def test_smoothed_rate_holds_over_every_span(limit: int, gaps: list[int], jitter: list[int]) -> None:
    """With smoothing, no trailing span at all exceeds 1.1 × span × limit (plus rounding),
    even when accepts are observed up to 30 ms late (real accepts are not instantaneous)."""
    arrivals, t = [], 0
    for gap in gaps:
        t += gap
        arrivals.append(t)
    accepted = accept_times(limit, arrivals, smoothing=True)
    observed = sorted(a + jitter[i % len(jitter)] for i, a in enumerate(accepted))
    assert worst_span(observed, CFG.span_ms, 0) <= 1.1 * CFG.samples * limit + 1
