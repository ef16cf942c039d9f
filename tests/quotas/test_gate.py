"""The accept gate's decisions (Kafka's ConnectionQuotas), computed by hand."""

from __future__ import annotations

import pytest

from quotas.gate import IP_SENSOR_EXPIRY_MS, AcceptGate, Admission, GateConfig, Verdict, limit
from quotas.rate import RateConfig

CFG = RateConfig(samples=11, window_ms=1000)


def burst(gate: AcceptGate, listener: str, n: int, now: int = 0) -> list[int]:
    """Offer ``n`` connections at ``now``; record those that need no wait; return the delays."""
    delays = []
    for _ in range(n):
        delay = gate.connection_delay(listener, now)
        if delay == 0:
            gate.record_connection(listener, now)
        delays.append(delay)
    return delays


def test_limit_maps_kafkas_int_max_to_none() -> None:
    assert limit(None) is None
    assert limit(2**31 - 1) is None
    assert limit(5) == 5.0


def test_sidecar_limit_delays_every_listener_but_the_protected_one() -> None:
    gate = AcceptGate(GateConfig(rate=CFG, smoothing=False, sidecar_rate=10.0, protected_listener="INTERNAL"))
    # Fresh sensor, quota 10/s: 100 connections fit W = 10 s; the 101st measures 10.1/s
    # and waits (10.1 - 10) / 10 * 10,000 = 100 ms.
    assert burst(gate, "CLIENT", 100) == [0] * 100
    assert gate.connection_delay("CLIENT", 0) == 100
    # The protected listener honours only its own (absent) limit.
    assert burst(gate, "INTERNAL", 50) == [0] * 50


def test_listener_limit_applies_in_addition_and_the_larger_delay_wins() -> None:
    gate = AcceptGate(GateConfig(rate=CFG, smoothing=False, sidecar_rate=100.0, listener_rates={"A": 1.0}))
    # Listener quota 1/s: 10 fit; the 11th measures 1.1/s -> 1,000 ms (the bound).
    assert burst(gate, "A", 10) == [0] * 10
    assert gate.connection_delay("A", 0) == 1000
    assert burst(gate, "B", 10) == [0] * 10  # B only shares the sidecar-wide budget


def test_protected_listener_own_limit_still_applies() -> None:
    gate = AcceptGate(GateConfig(rate=CFG, smoothing=False, listener_rates={"INTERNAL": 10.0}, protected_listener="INTERNAL"))
    assert burst(gate, "INTERNAL", 100) == [0] * 100
    assert gate.connection_delay("INTERNAL", 0) == 100


def test_throttle_time_metric_records_delays() -> None:
    gate = AcceptGate(GateConfig(rate=CFG, smoothing=False, sidecar_rate=10.0))
    gate.record_connection("A", 0, waited_ms=100)
    gate.record_connection("A", 0, waited_ms=200)
    gate.record_connection("A", 0)
    # the mean over connections that waited
    assert gate.accept_throttle_ms("A", 0) == pytest.approx(150)


def test_smoothing_spreads_a_fresh_burst_over_windows() -> None:
    gate = AcceptGate(GateConfig(rate=CFG, sidecar_rate=10.0))  # smoothing is the default
    # Kafka's formula alone would admit 100 at t=0; smoothing takes 10 per 1 s window.
    assert burst(gate, "A", 11) == [0] * 10 + [1000]
    assert gate.connection_delay("A", 400) == 600  # until the window that began at 0 ends
    assert gate.connection_delay("A", 1000) == 0


def test_waiting_the_delay_makes_room() -> None:
    gate = AcceptGate(GateConfig(rate=CFG, smoothing=False, sidecar_rate=10.0))
    burst(gate, "A", 100)
    delay = gate.connection_delay("A", 0)
    assert delay == 100
    # 99 ms later: W = 99 + 10 * 1,000 = 10,099 ms; 101 / 10.099 s > 10/s: 1 ms more.
    assert gate.connection_delay("A", delay - 1) == 1
    # After exactly the delay: W = 100 + 10 * 1,000 = 10,100 ms; 101 / 10.1 s = 10/s: fits.
    assert gate.connection_delay("A", delay) == 0


def accept(gate: AcceptGate, listener: str, ip: str, now: int = 0) -> Verdict:
    """The acceptor's sequence: IP rate, sidecar/listener record, IP count."""
    first = gate.check_ip_rate(listener, ip, now)
    if first.verdict is not Verdict.ACCEPT:
        return first.verdict
    gate.record_connection(listener, now)
    return gate.admit_ip(listener, ip).verdict


def test_per_ip_throttle_counts_nowhere_and_holds() -> None:
    quotas = {"10.0.0.1": 10.0}
    gate = AcceptGate(GateConfig(rate=CFG, smoothing=False, sidecar_rate=1000.0, listener_rates={"A": 1000.0}), quotas.get)
    assert [accept(gate, "A", "10.0.0.1") for _ in range(100)] == [Verdict.ACCEPT] * 100
    before_sidecar = gate.sidecar_accept_rate(0)
    before_listener = gate.listener_accept_rate("A", 0)
    # The 101st from that IP: 10.1/s over W = 10 s -> hold 100 ms, then close.
    assert gate.check_ip_rate("A", "10.0.0.1", 0) == Admission(Verdict.THROTTLE, 100)
    # It counts nowhere: not on the sidecar, the listener, nor (taken back) its IP.
    assert gate.sidecar_accept_rate(0) == pytest.approx(before_sidecar)
    assert gate.listener_accept_rate("A", 0) == pytest.approx(before_listener)
    assert gate.ip_accept_rates(0, 10) == {"10.0.0.1": pytest.approx(10.0)}
    assert gate.ip_throttle_ms("A", 0) == pytest.approx(100)
    assert gate.ip_count("10.0.0.1") == 100
    # Another IP without a quota is unaffected.
    assert accept(gate, "A", "10.0.0.2") is Verdict.ACCEPT


def test_ip_quota_change_applies_to_the_next_connection() -> None:
    quotas: dict[str, float] = {"10.0.0.1": 100.0}
    gate = AcceptGate(GateConfig(rate=CFG), quotas.get)
    for _ in range(20):
        assert accept(gate, "A", "10.0.0.1") is Verdict.ACCEPT
    quotas["10.0.0.1"] = 1.0  # 21 recorded over W = 10 s is 2.1/s > 1/s
    assert gate.check_ip_rate("A", "10.0.0.1", 0).verdict is Verdict.THROTTLE


def test_max_connections_per_ip_and_overrides_close_at_once() -> None:
    gate = AcceptGate(GateConfig(rate=CFG, smoothing=False, max_connections_per_ip=2, max_connections_per_ip_overrides={"10.0.0.9": 3}))
    assert [gate.admit_ip("A", "10.0.0.1").verdict for _ in range(3)] == [
        Verdict.ACCEPT, Verdict.ACCEPT, Verdict.TOO_MANY,
    ]
    assert [gate.admit_ip("A", "10.0.0.9").verdict for _ in range(4)] == [
        Verdict.ACCEPT, Verdict.ACCEPT, Verdict.ACCEPT, Verdict.TOO_MANY,
    ]
    gate.release("A", "10.0.0.1")
    assert gate.admit_ip("A", "10.0.0.1").verdict is Verdict.ACCEPT


def test_connection_slots() -> None:
    gate = AcceptGate(GateConfig(rate=CFG, smoothing=False, max_connections=2, listener_max_connections={"B": 1},
                                 protected_listener="P"))
    gate.admit_ip("A", "1.1.1.1")
    assert gate.slot_available("A")
    gate.admit_ip("B", "1.1.1.2")
    assert not gate.slot_available("B")  # B's own cap
    assert not gate.slot_available("A")  # the sidecar-wide cap
    assert gate.slot_available("P")  # protected listener ignores the sidecar-wide cap
    gate.release("A", "1.1.1.1")
    assert gate.slot_available("A")
    gate.note_blocked("A", 12.5)
    assert gate.blocked_ms("A") == 12.5
    assert gate.listeners() == ["A", "B", "P"]


def test_idle_ip_sensors_expire_after_an_hour() -> None:
    gate = AcceptGate(GateConfig(rate=CFG), lambda ip: 5.0)
    gate.check_ip_rate("A", "10.0.0.1", 0)
    gate.check_ip_rate("A", "10.0.0.2", 1000)
    assert gate.expire(IP_SENSOR_EXPIRY_MS - 1) == 0
    assert gate.expire(IP_SENSOR_EXPIRY_MS) == 1
    assert list(gate.ip_accept_rates(IP_SENSOR_EXPIRY_MS, 10)) == ["10.0.0.2"]


def test_a_reload_changes_the_limits_and_keeps_what_was_measured() -> None:
    gate = AcceptGate(GateConfig(rate=CFG, smoothing=False, sidecar_rate=10.0, listener_rates={"CLIENT": 50.0}))
    # 60 connections at t=0 (quota 10/s: 100 fit its W = 10 s window, so none waits yet).
    assert burst(gate, "CLIENT", 60) == [0] * 60
    gate.reconfigure(GateConfig(rate=CFG, smoothing=False, sidecar_rate=5.0, listener_rates={"CLIENT": 50.0}))
    # The same 60 measured against 5/s: 6.1/s over W = 10 s with the next one, so it waits
    # (6.1 - 5) / 5 * 10,000 = 2,200 ms, bounded by one window (KIP-612): 1,000 ms. The
    # listener's 50/s is not reached. Before the reload it waited nothing.
    assert gate.connection_delay("CLIENT", 0) == 1000
    gate.reconfigure(GateConfig(rate=CFG, smoothing=False, sidecar_rate=None, listener_rates={}))
    assert gate.connection_delay("CLIENT", 0) == 0  # unlimited from now on
