"""User and client-id byte-rate quotas on the data path: the request filter (KIP-13, KIP-55).

Theory of operation. A sidecar that enforces client quotas (``sidecar.client.quotas``,
:mod:`proxy.control.client_quota_state`) puts :class:`ClientQuotaFilter` in every listener's
chain, for Produce and Fetch only:

* **Produce** (``producer_byte_rate``): the request's size (header and body, as Kafka's
  ``request.sizeInBytes``) is recorded on the client's sensor before it is forwarded; over
  quota, the request still goes on, with the throttle time it asks;
* **Fetch** (``consumer_byte_rate``): the answer's size is recorded when it comes back (the
  response filter :class:`~proxy.datapath.throttle.ThrottlePatch` measures it). Kafka's
  broker answers an over-quota Fetch with no records; the sidecar cannot without dropping
  what the broker already read for the client, so the answer goes on whole and the client
  is muted for its throttle time: over the quota's window the rate holds all the same.

Either way the answer carries ``ThrottleTimeMs`` (the larger of the broker's and the
sidecar's) and the connection is then not read for the sidecar's time (KIP-219).

Kafka's quota user is the principal's name: ``User:alice`` is ``alice``, an unauthenticated
client ``ANONYMOUS``; a client that sent no client id has the empty one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from protocol.apis import PRODUCE
from proxy.datapath.clock import now_ms
from proxy.datapath.dispatch import Request
from proxy.datapath.throttle import FETCH, Throttle
from quotas.client_rates import ClientRates
from quotas.clients import ANONYMOUS, CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE

PRINCIPAL_TYPE = "User:"


def quota_user(principal: str) -> str:
    """The name Kafka's quotas know a principal by (``User:alice`` → ``alice``)."""
    name = principal.removeprefix(PRINCIPAL_TYPE)
    return name or ANONYMOUS


class ClientQuotaFilter:
    """``producer_byte_rate`` and ``consumer_byte_rate`` (see the module docstring)."""

    api_keys = frozenset({PRODUCE, FETCH})

    def __init__(self, rates: ClientRates, clock: Callable[[], int] = now_ms) -> None:
        self.rates = rates
        self._clock = clock

    def on_request(self, request: Request) -> Request | None:
        """The request with its throttle, or ``None`` (no quota, or within it)."""
        header = request.header
        rates = self.rates
        if not rates.quotas:
            return None
        user = quota_user(request.context.principal)
        client_id = header.client_id or ""
        if header.api_key == PRODUCE:
            ms = rates.record(PRODUCER_BYTE_RATE, user, client_id, len(request.frame) - 4, self._clock())
            return dataclasses.replace(request, throttle=Throttle(ms)) if ms > 0 else None
        if not rates.limited(CONSUMER_BYTE_RATE, user, client_id):
            return None
        clock = self._clock

        def measure(size: int) -> int:
            return rates.record(CONSUMER_BYTE_RATE, user, client_id, size, clock())

        return dataclasses.replace(request, throttle=Throttle(0, measure))
