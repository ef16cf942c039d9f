"""quotas.mutations and ClientRates.mutate: Kafka's token bucket and the strict and permissive
decisions of KIP-599, every value computed by hand.

Throughout: ``quota.window.num=2`` of 1 s and ``controller_mutation_rate=2``, so the burst is
2 × 1 s × 2 = 4 tokens and the bucket refills 2 tokens a second (one per 500 ms); a throttle
is the time back to zero tokens, ``-tokens / 2 × 1000`` ms.
"""

from __future__ import annotations

import pytest

from quotas.client_rates import ClientRates
from quotas.clients import CONTROLLER_MUTATION_RATE, DEFAULT, ClientQuotas, Entity
from quotas.mutations import TokenBucket, admit, is_strict, java_round, validate_only
from quotas.rate import RateConfig

CONFIG = RateConfig(samples=2, window_ms=1000)


def test_the_bucket_starts_full_refills_at_the_quota_and_holds_one_burst() -> None:
    bucket = TokenBucket(CONFIG, 2.0, 1000)
    assert bucket.burst == 4.0 and bucket.measure(1000) == 4.0
    bucket.record(7, 1000)
    assert bucket.measure(1000) == -3.0 and bucket.throttle_ms(1000) == 1500
    assert bucket.measure(1250) == -2.5 and bucket.throttle_ms(1250) == 1250  # 0.5 token back
    assert bucket.measure(2750) == 0.5 and bucket.throttle_ms(2750) == 0
    assert bucket.measure(60_000) == 4.0 and bucket.full(60_000)  # never more than the burst
    bucket.record(-10, 60_000)  # tokens given back: still at most the burst
    assert bucket.measure(60_000) == 4.0


def test_a_changed_quota_changes_the_refill_and_the_burst_in_place() -> None:
    bucket = TokenBucket(CONFIG, 2.0, 0)
    bucket.record(6, 0)  # -2
    bucket.quota = 4.0  # burst 8, 4 a second
    assert bucket.measure(250) == -1.0 and bucket.throttle_ms(250) == 250


def test_throttle_rounds_halves_up_as_java_does() -> None:
    assert java_round(0.5) == 1 and java_round(2.5) == 3 and java_round(2.4999) == 2
    bucket = TokenBucket(CONFIG, 2.0, 0)
    bucket.record(4.001, 0)  # -0.001 tokens: 0.5 ms (Python's round would say 0)
    assert bucket.throttle_ms(0) == 1


def test_strict_takes_topics_until_the_quota_is_exceeded_then_refuses_the_rest() -> None:
    bucket = TokenBucket(CONFIG, 2.0, 0)
    # 4 → 3 → 2 → 1 → 0; the fifth is taken too (0 is not below zero) → -1; the sixth is refused.
    verdict = admit(bucket, [1, 1, 1, 1, 1, 1], strict=True, now_ms=0)
    assert verdict.refused == {5} and verdict.throttle_ms == 500
    assert dict(verdict.taken) == {0: 1, 1: 1, 2: 1, 3: 1, 4: 1}
    # 250 ms later: -0.5, still exceeded: everything refused, 250 ms to wait.
    verdict = admit(bucket, [1, 2], strict=True, now_ms=250)
    assert verdict.refused == {0, 1} and verdict.throttle_ms == 250 and not verdict.taken
    # At 500 ms: 0 tokens, not exceeded: a topic of 3 partitions is taken whole (-3) and,
    # strict, nothing is throttled; the next request is refused for 1.5 s.
    verdict = admit(bucket, [3, 1], strict=True, now_ms=500)
    assert verdict.refused == {1} and dict(verdict.taken) == {0: 3} and verdict.throttle_ms == 1500
    verdict = admit(bucket, [3], strict=True, now_ms=2000)
    assert verdict.refused == frozenset() and verdict.throttle_ms == 0 and bucket.measure(2000) == -3.0


def test_permissive_takes_everything_and_throttles_while_below_zero() -> None:
    bucket = TokenBucket(CONFIG, 2.0, 0)
    assert admit(bucket, [1, 2], strict=False, now_ms=0).throttle_ms == 0  # 1 left
    verdict = admit(bucket, [2, 2], strict=False, now_ms=0)  # -3
    assert verdict.refused == frozenset() and dict(verdict.taken) == {0: 2, 1: 2} and verdict.throttle_ms == 1500
    assert admit(bucket, [1], strict=False, now_ms=1000).throttle_ms == 1000  # -3 + 2 - 1 = -2


def test_versions_and_validate_only() -> None:
    assert [is_strict(19, v) for v in (5, 6, 7)] == [False, True, True]
    assert [is_strict(20, v) for v in (4, 5, 6)] == [False, True, True]
    assert [is_strict(37, v) for v in (2, 3)] == [False, True]
    assert validate_only(19, {"validateOnly": True}) and not validate_only(19, {"validateOnly": False})
    assert validate_only(37, {"ValidateOnly": True}) and not validate_only(20, {"TopicNames": []})


def rates(entries: dict[Entity, dict[str, float]]) -> ClientRates:
    made = ClientRates(CONFIG)
    made.install(ClientQuotas(entries))
    return made


def test_client_rates_mutate_on_the_sensor_the_quota_resolves_to() -> None:
    r = rates({Entity("alice", None): {CONTROLLER_MUTATION_RATE: 2}})
    assert r.mutate("bob", "c1", [10], strict=True, now_ms=0) is None  # no quota: not measured
    first = r.mutate("alice", "c1", [3, 2], strict=True, now_ms=0)  # 4 → 1 → -1
    assert first is not None and first.refused == frozenset() and first.throttle_ms == 0
    second = r.mutate("alice", "c2", [1], strict=True, now_ms=0)  # the user's one bucket: refused
    assert second is not None and second.refused == {0} and second.throttle_ms == 500
    assert list(r.tokens(0)) == [((CONTROLLER_MUTATION_RATE, "alice", ""), -1.0)]
    assert r.take_usage() == {(CONTROLLER_MUTATION_RATE, "alice", "c1"): 5.0}
    r.settle("alice", "c1", -2, 0)  # the broker refused a topic of 2: its tokens come back
    assert list(r.tokens(0)) == [((CONTROLLER_MUTATION_RATE, "alice", ""), 1.0)]
    assert r.take_usage() == {(CONTROLLER_MUTATION_RATE, "alice", "c1"): -2.0}


def test_throttles_are_reported_on_their_sensor() -> None:
    r = rates({Entity(None, DEFAULT): {CONTROLLER_MUTATION_RATE: 2}})
    seen: list[tuple[tuple[str, str, str], int]] = []
    r.on_throttle = lambda sensor, ms: seen.append((sensor, ms))
    r.mutate("alice", "c1", [6], strict=False, now_ms=0)
    assert seen == [((CONTROLLER_MUTATION_RATE, "", "c1"), 1000)]


def test_another_process_takes_the_tokens_this_one_recorded() -> None:
    quotas = {Entity("alice", "c1"): {CONTROLLER_MUTATION_RATE: 2.0}}
    one, two = rates(quotas), rates(quotas)
    one.mutate("alice", "c1", [4], strict=True, now_ms=0)  # 0 left, here
    two.add_usage(one.take_usage().items(), 0)  # and there
    verdict = two.mutate("alice", "c1", [1, 1], strict=True, now_ms=0)  # 0 → -1, then refused
    assert verdict is not None and verdict.refused == {1} and verdict.throttle_ms == 500
    one.add_usage_entries([[k, u, c, amount] for (k, u, c), amount in two.take_usage().items()], 0)
    assert list(one.tokens(0)) == [((CONTROLLER_MUTATION_RATE, "alice", "c1"), -1.0)]


def test_a_bucket_full_again_is_dropped() -> None:
    r = rates({Entity("alice", "c1"): {CONTROLLER_MUTATION_RATE: 2.0}})
    r.mutate("alice", "c1", [5], strict=True, now_ms=0)  # -1: full again after 2.5 s
    assert [t for _, t in r.tokens(2000)] == [pytest.approx(3.0)]
    assert list(r.tokens(2500)) == []


def test_a_topic_without_a_cost_is_neither_refused_nor_taken() -> None:
    """``None``: a topic the broker refuses before any quota (unknown to it)."""
    bucket = TokenBucket(CONFIG, 2.0, 0)
    verdict = admit(bucket, [5, None, 1], strict=True, now_ms=0)  # -1, skipped, refused
    assert verdict.refused == {2} and dict(verdict.taken) == {0: 5}
    assert admit(bucket, [None], strict=False, now_ms=0).throttle_ms == 500 and bucket.measure(0) == -1.0
