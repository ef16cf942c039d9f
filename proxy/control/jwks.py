"""The identity provider's signing keys for OAUTHBEARER: fetched, cached and refreshed (trio).

:class:`JwksFetcher` is the shell around the sans-IO token check
(:mod:`proxy.auth.sasl.jwt_token`), with Kafka's keys:

* ``sasl.oauthbearer.jwks.endpoint.url`` is fetched when the sidecar starts, then every
  ``sasl.oauthbearer.jwks.endpoint.refresh.ms``; a failed fetch is retried after
  ``...retry.backoff.ms``, doubled per attempt up to ``...retry.backoff.max.ms``, while the
  keys last fetched stay in use;
* a token naming a ``kid`` the set lacks (the provider rotated its key) makes the login wait
  for one fetch, at most one every :data:`ON_DEMAND_INTERVAL` seconds (or the refresh interval,
  if shorter) whatever kids clients name, so made-up kids cannot make the sidecar hammer the
  provider. Kafka fails that login and refreshes in the background (``RefreshingHttpsJwks``,
  once per kid per minute); here the login that met the new key succeeds.

The HTTP GET (urllib, ``http``, ``https`` or ``file:``) runs in a worker thread: the event
loop never blocks on the provider. Logins run in worker threads too (:mod:`proxy.local.sasl`)
and reach :meth:`JwksFetcher.refreshed` there; it hands the wait to the event loop.
"""

from __future__ import annotations

import logging
import math
import time
import urllib.request
from dataclasses import dataclass

import trio

from proxy.auth.sasl.jwt_token import MAX_JWKS, JwksError, KeySet, TokenRules
from proxy.auth.sasl.oauthbearer import OAuthBearerServer
from proxy.auth.sasl.session import MechanismFactory
from proxy.config.keys import SidecarConfig

log = logging.getLogger(__name__)

#: Shortest time between two fetches made for unknown key ids, in seconds.
ON_DEMAND_INTERVAL = 10.0
#: Longest a login waits for an on-demand fetch, in seconds.
ON_DEMAND_TIMEOUT = 5.0
#: Timeout of one HTTP GET of the JWKS, in seconds.
FETCH_TIMEOUT = 10.0


@dataclass(frozen=True, kw_only=True, slots=True)
class JwksSettings:
    """Kafka's ``sasl.oauthbearer.jwks.endpoint.*`` keys, in seconds."""

    url: str
    refresh_s: float = 3600.0
    retry_backoff_s: float = 0.1
    retry_backoff_max_s: float = 10.0

    @classmethod
    def from_config(cls, config: SidecarConfig) -> JwksSettings:
        """The settings of this sidecar."""
        return cls(
            url=config["sasl.oauthbearer.jwks.endpoint.url"],
            refresh_s=config["sasl.oauthbearer.jwks.endpoint.refresh.ms"] / 1000,
            retry_backoff_s=config["sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"] / 1000,
            retry_backoff_max_s=config["sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"] / 1000,
        )


def token_rules(config: SidecarConfig) -> TokenRules:
    """What every token must satisfy (``sasl.oauthbearer.*``)."""
    return TokenRules(
        expected_issuer=config["sasl.oauthbearer.expected.issuer"],
        expected_audience=tuple(config["sasl.oauthbearer.expected.audience"]),
        clock_skew_s=config["sasl.oauthbearer.clock.skew.seconds"],
        sub_claim=config["sasl.oauthbearer.sub.claim.name"],
        scope_claim=config["sasl.oauthbearer.scope.claim.name"],
    )


def fetch_jwks(url: str, timeout: float = FETCH_TIMEOUT) -> KeySet:
    """GET ``url`` and parse it (blocking: run it in a worker thread)."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return KeySet.from_json(response.read(MAX_JWKS + 1))


class JwksFetcher:
    """The JWKS of one provider, kept fresh; a :class:`~proxy.auth.sasl.oauthbearer.KeySource`."""

    def __init__(self, settings: JwksSettings, rules: TokenRules) -> None:
        self.settings = settings
        self.rules = rules
        self._keys = KeySet.empty()
        self._wake = trio.Event()
        self._lock = trio.Lock()
        self._fetches = 0
        self._last_on_demand = -math.inf
        self._token: trio.lowlevel.TrioToken | None = None

    def mechanism(self) -> MechanismFactory:
        """A factory of OAUTHBEARER servers checking tokens with these keys."""
        return lambda: OAuthBearerServer(self, self.rules, time.time)

    # -- KeySource (called from login worker threads) --------------------------------------

    def current(self) -> KeySet:
        """The keys as last fetched (empty before the first fetch succeeded)."""
        return self._keys

    def refreshed(self, kid: str | None) -> KeySet:
        """Fetch again for an unknown ``kid`` (rate-limited) and return the keys then."""
        if self._token is None:
            return self._keys
        try:
            return trio.from_thread.run(self._on_demand, kid, trio_token=self._token)
        except trio.RunFinishedError:
            return self._keys

    # -- the event loop's side ---------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fetch now, then every refresh interval, until cancelled (started at once)."""
        self._token = trio.lowlevel.current_trio_token()
        task_status.started()
        while True:
            await self._fetch_with_retries()
            with trio.move_on_after(self.settings.refresh_s):
                await self._wake.wait()
            self._wake = trio.Event()

    async def _fetch_with_retries(self) -> None:
        backoff = self.settings.retry_backoff_s
        while not await self._fetch_once():
            await trio.sleep(backoff)
            backoff = min(max(backoff * 2, 0.001), self.settings.retry_backoff_max_s)

    async def _fetch_once(self) -> bool:
        async with self._lock:
            try:
                keys = await trio.to_thread.run_sync(fetch_jwks, self.settings.url,
                                                     abandon_on_cancel=True)
            except (OSError, JwksError, ValueError) as exc:
                log.warning("JWKS fetch from %s failed: %s", self.settings.url, exc)
                return False
            self._keys = keys
            self._fetches += 1
            log.info("JWKS from %s: %d key(s) (%s)", self.settings.url, len(keys),
                     ", ".join(str(k) for k in keys.keys))
            return True

    async def _on_demand(self, kid: str | None) -> KeySet:
        now = trio.current_time()
        interval = min(ON_DEMAND_INTERVAL, self.settings.refresh_s)
        if kid in self._keys.keys:
            return self._keys  # another login's fetch brought it meanwhile
        if now - self._last_on_demand < interval:
            return self._keys
        self._last_on_demand = now
        log.info("token names key id %r, not in the JWKS: fetching %s again", kid, self.settings.url)
        with trio.move_on_after(ON_DEMAND_TIMEOUT):
            await self._fetch_once()
        return self._keys

    def statistics(self) -> dict[str, int]:
        """Keys held and fetches done (for tests and logs)."""
        return {"keys": len(self._keys), "fetches": self._fetches}
