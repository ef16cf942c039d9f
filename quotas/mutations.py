"""Controller mutation quotas (KIP-599): Kafka's token bucket and its strict and permissive
decisions, sans-IO (every call takes ``now``).

Theory of operation. ``controller_mutation_rate`` limits the partitions a client creates or
deletes per second (CreateTopics, CreatePartitions, DeleteTopics). Kafka measures it with a
**token bucket** (``org.apache.kafka.common.metrics.stats.TokenBucket``), not the sampled rate
of the byte quotas:

* the bucket refills at ``quota`` tokens a second, up to a **burst** of
  ``quota × quota.window.num × quota.window.size.seconds`` tokens;
* a mutation of ``n`` partitions takes ``n`` tokens, even those the bucket does not have:
  the tokens may go below zero;
* the quota is exceeded while the tokens are below zero, and the time to get back to zero,
  ``round(-tokens / quota × 1000)`` ms, is the throttle (``ControllerMutationQuotaManager
  .throttleTimeMs``).

Kafka's bucket starts empty at time 0 (1970), so it is full by the time a client is first
seen; :class:`TokenBucket` starts full, which is the same.

Two ways to decide a request (``ControllerMutationQuotaManager.newQuotaFor``):

* **strict** (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+, the versions whose
  clients know THROTTLING_QUOTA_EXCEEDED): topic by topic in request order, a topic is
  refused with THROTTLING_QUOTA_EXCEEDED (89) when the quota is already exceeded, else its
  partitions are taken (which may exceed it). The answer's throttle is the refusal's, and is
  zero when nothing was refused ("it does not throttle for any number of mutations if quota
  is not already exhausted");
* **permissive** (older versions): every topic is taken and none refused; the answer is
  throttled for as long as the tokens stay below zero after it.

:func:`admit` is both, on one bucket; :mod:`quotas.client_rates` keeps a bucket per sensor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from protocol.apis import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS
from quotas.rate import RateConfig

#: Kafka's ``Errors.THROTTLING_QUOTA_EXCEEDED`` and its message.
THROTTLING_QUOTA_EXCEEDED = 89
THROTTLING_MESSAGE = "The throttling quota has been exceeded."

#: The first version of each API a mutation quota counts that is decided strictly (Kafka's
#: ``strictSinceVersion`` in ``KafkaApis``/``ControllerApis``).
STRICT_SINCE: Mapping[int, int] = {CREATE_TOPICS: 6, DELETE_TOPICS: 5, CREATE_PARTITIONS: 3}

#: The partitions of a topic created with ``NumPartitions = -1`` and no assignments, until
#: the broker's answer says how many it made (Kafka's ``num.partitions`` default).
DEFAULT_PARTITIONS = 1


def java_round(value: float) -> int:
    """Java's ``Math.round`` (halves up; Python's ``round`` rounds halves to even)."""
    return math.floor(value + 0.5)


class TokenBucket:
    """Kafka's ``TokenBucket`` with its quota (see the module docstring)."""

    __slots__ = ("config", "last_ms", "quota", "tokens")

    def __init__(self, config: RateConfig, quota: float, now_ms: int) -> None:
        self.config = config
        #: Tokens (partitions) per second; may change in place (a new quota in ZooKeeper).
        self.quota = quota
        self.tokens = self.burst
        self.last_ms = now_ms

    @property
    def burst(self) -> float:
        """The most tokens the bucket holds: ``quota × samples × window``."""
        return self.config.samples * (self.config.window_ms / 1000.0) * self.quota

    def measure(self, now_ms: int) -> float:
        """The tokens at ``now_ms`` (refilled first; below zero: the quota is exceeded)."""
        self._refill(now_ms)
        return self.tokens

    def record(self, amount: float, now_ms: int) -> None:
        """Take ``amount`` tokens (a negative amount gives them back), with no check."""
        self._refill(now_ms)
        self.tokens = min(self.burst, self.tokens - amount)

    def throttle_ms(self, now_ms: int) -> int:
        """How long until the tokens are back at zero (0 while they are not below it)."""
        tokens = self.measure(now_ms)
        return java_round(-tokens / self.quota * 1000) if tokens < 0 else 0

    def full(self, now_ms: int) -> bool:
        """Whether the bucket is full again (as a new one would be)."""
        return self.measure(now_ms) >= self.burst

    def _refill(self, now_ms: int) -> None:
        elapsed = max(0, now_ms - self.last_ms)
        self.tokens = min(self.burst, self.tokens + self.quota * elapsed / 1000.0)
        self.last_ms = max(self.last_ms, now_ms)


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """What a mutation quota decided for one request."""

    #: The request's topics refused (their indexes among ``costs``; strict mode only).
    refused: frozenset[int] = frozenset()
    #: The answer's throttle (ms), and the connection's mute.
    throttle_ms: int = 0
    #: The tokens taken, by index among ``costs`` (the topics not refused).
    taken: Mapping[int, float] = field(default_factory=dict)


def admit(bucket: TokenBucket, costs: Sequence[float | None], *, strict: bool, now_ms: int) -> Verdict:
    """Decide one request's topics (``costs``: the partitions each mutates, in request
    order) on ``bucket``: strictly or permissively (see the module docstring). A cost of
    ``None`` is a topic the broker will refuse before any quota (one it does not know):
    neither refused nor taken, as in Kafka, which checks the quota after validation."""
    taken: dict[int, float] = {}
    if not strict:
        for index, cost in enumerate(costs):
            if cost is None:
                continue
            bucket.record(cost, now_ms)
            taken[index] = cost
        return Verdict(throttle_ms=bucket.throttle_ms(now_ms), taken=taken)
    refused: set[int] = set()
    throttle = 0
    for index, cost in enumerate(costs):
        if cost is None:
            continue
        if bucket.measure(now_ms) < 0:  # Sensor.checkQuotas: a TokenBucket below zero
            refused.add(index)
            throttle = bucket.throttle_ms(now_ms)
            continue
        bucket.record(cost, now_ms)
        taken[index] = cost
    return Verdict(refused=frozenset(refused), throttle_ms=throttle, taken=taken)


def is_strict(api_key: int, version: int) -> bool:
    """Whether ``api_key`` at ``version`` is decided strictly (its clients know error 89)."""
    return version >= STRICT_SINCE[api_key]


def validate_only(api_key: int, body: Mapping[str, Any]) -> bool:
    """Whether the request only validates (Kafka counts nothing for it)."""
    if api_key == CREATE_TOPICS:
        return bool(body.get("validateOnly"))
    if api_key == CREATE_PARTITIONS:
        return bool(body.get("ValidateOnly"))
    return False
