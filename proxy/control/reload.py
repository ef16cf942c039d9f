"""Reloading a running sidecar: SIGHUP, ``ksidecar reload`` (``POST /-/reload``), or a
changed file.

A reload reads the configuration again from where it came (the properties file, the
``KSIDECAR_*`` environment and the ``--set`` flags of the start), decides which keys changed
(:mod:`proxy.config.changes`), and hands the configuration then in force to the process
that serves (:class:`Reloading`: one sidecar, or a supervisor that has every worker
prepare, then commit). Either every live change takes effect or none does: a file that does
not validate, a certificate that does not load or breaks Kafka's rules, a filter that does
not import or configure leaves the old configuration serving, and the outcome says why.
Keys that need a restart keep their old values and are named.

:func:`watch` polls the files the configuration names (the properties file, every
listener's keystore and truststore, ZooKeeper's TLS stores) every
``sidecar.config.watch.ms`` and reloads when one's content changes; it follows a mounted
Secret's symlink swap since it reads through the link.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.config import ConfigError, SidecarConfig, load_config
from proxy.config.changes import changed_keys, config_hash, in_force
from proxy.config.properties import PropertiesError

log = logging.getLogger(__name__)


class Reloading(Protocol):
    """What serves: it puts a validated configuration in force, or changes nothing."""

    async def apply_reload(self, config: SidecarConfig) -> None:
        """Put ``config`` in force everywhere it serves; raise
        :class:`~proxy.config.ConfigError` (and change nothing) when a part of it cannot be
        built."""
        ...


@dataclass(frozen=True)
class ConfigSource:
    """Where the configuration came from: read again at each reload."""

    #: The properties file (``None``: none, only the environment and the flags).
    path: str | None
    #: The ``--set`` flags.
    overrides: Mapping[str, str] = field(default_factory=dict)

    def load(self) -> SidecarConfig:
        """The configuration as the files say now."""
        return load_config(self.path, self.overrides)

    def watched(self, config: SidecarConfig) -> tuple[str, ...]:
        """The files whose change reloads: the properties file, each listener's keystore
        and truststore, ZooKeeper's TLS stores (when TLS to ZooKeeper is on). The PLAIN
        users file is not among them: it is read again at the first login after it changes."""
        paths = [self.path] if self.path else []
        for endpoint in config.listeners:
            if config.security_protocol(endpoint.name) in ("SSL", "SASL_SSL"):
                paths.append(config.listener_value(endpoint.name, "ssl.keystore.location"))
                paths.append(config.listener_value(endpoint.name, "ssl.truststore.location"))
        if config["zookeeper.ssl.client.enable"]:
            paths += [config["zookeeper.ssl.keystore.location"], config["zookeeper.ssl.truststore.location"]]
        return tuple(dict.fromkeys(p for p in paths if p))


@dataclass(frozen=True, kw_only=True)
class ReloadOutcome:
    """What one reload did."""

    #: True when the configuration read is in force (but for ``restart`` keys).
    applied: bool
    #: What asked for it: ``SIGHUP``, ``ksidecar reload``, ``file <path>``.
    trigger: str
    #: Changed keys now in force.
    live: tuple[str, ...] = ()
    #: Changed keys that wait for a restart.
    restart: tuple[str, ...] = ()
    #: Why nothing changed (``applied`` false).
    error: str | None = None
    #: :func:`~proxy.config.changes.config_hash` of the configuration in force afterwards.
    config_hash: str = ""

    def message(self) -> str:
        """One line for the log and for ``ksidecar reload``."""
        if not self.applied:
            return f"reload ({self.trigger}) failed, the configuration in force is unchanged: {self.error}"
        changed = ", ".join(self.live) if self.live else "no key changed; TLS files and filters loaded again"
        text = f"reloaded ({self.trigger}): {changed}"
        if self.restart:
            text += f"; these keys need a restart to take effect: {', '.join(self.restart)}"
        return text

    def to_json(self) -> bytes:
        """The outcome as ``POST /-/reload`` answers it."""
        return json.dumps({"applied": self.applied, "trigger": self.trigger, "live": list(self.live),
                           "restart": list(self.restart), "error": self.error, "config_hash": self.config_hash,
                           "message": self.message()}).encode()


class Reloader:
    """One sidecar's reloads, one at a time, and their metrics."""

    def __init__(self, source: ConfigSource, config: SidecarConfig, serving: Reloading) -> None:
        self.source = source
        #: The configuration in force.
        self.config = config
        self.serving = serving
        self._lock = trio.Lock()
        self.successes = 0
        self.failures = 0
        self.last_ok = True
        self.last_success_time = time.time()
        #: Keys changed in the files that wait for a restart (as of the last reload).
        self.restart_pending: tuple[str, ...] = ()
        #: Set when the sidecar begins to drain: no reload from then on.
        self.stopped = False

    def stop(self) -> None:
        """No more reloads (the sidecar drains: its workers no longer take one)."""
        self.stopped = True

    async def reload(self, trigger: str) -> ReloadOutcome:
        """Read the configuration again and put it in force, or change nothing; logged."""
        async with self._lock:
            outcome = await self._reload(trigger)
        if outcome.applied:
            self.successes += 1
            self.last_success_time = time.time()
            self.restart_pending = outcome.restart
            (log.warning if outcome.restart else log.info)("%s (configuration %s)", outcome.message(),
                                                           outcome.config_hash)
        else:
            self.failures += 1
            log.error("%s", outcome.message())
        self.last_ok = outcome.applied
        return outcome

    async def _reload(self, trigger: str) -> ReloadOutcome:
        if self.stopped:
            return ReloadOutcome(applied=False, trigger=trigger, error="the sidecar is draining",
                                 config_hash=config_hash(self.config))
        try:
            new = self.source.load()  # small files: read on the loop, as the TLS files are
            changes = changed_keys(self.config, new)
            config = in_force(self.config, new, changes)
            await self.serving.apply_reload(config)
        except (ConfigError, PropertiesError, OSError) as exc:
            return ReloadOutcome(applied=False, trigger=trigger, error=str(exc),
                                 config_hash=config_hash(self.config))
        except Exception as exc:  # a defect must not stop a sidecar that serves: logged whole
            log.exception("reload (%s) met an unexpected error", trigger)
            return ReloadOutcome(applied=False, trigger=trigger, error=f"unexpected error: {exc!r}",
                                 config_hash=config_hash(self.config))
        self.config = config
        return ReloadOutcome(applied=True, trigger=trigger, live=changes.live, restart=changes.restart,
                             config_hash=config_hash(config))


def digest(path: str) -> str | None:
    """The content's SHA-256 (through symlinks), ``None`` when it cannot be read."""
    try:
        with open(path, "rb") as file:
            return hashlib.sha256(file.read()).hexdigest()
    except OSError:
        return None


async def watch(reloader: Reloader) -> None:
    """Reload whenever a watched file's content changes (:meth:`ConfigSource.watched`),
    looking every ``sidecar.config.watch.ms`` (0: not at all, until a reload sets it)."""
    seen = _digests(reloader)
    while not reloader.stopped:
        interval = reloader.config["sidecar.config.watch.ms"] / 1000
        await trio.sleep(interval if interval > 0 else 1.0)
        if interval <= 0:  # off: nothing read; turned on again, the first look is the baseline
            seen = {}
            continue
        now = _digests(reloader)
        changed = [path for path, content in now.items() if path in seen and seen[path] != content]
        seen = now
        if changed:
            more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
            await reloader.reload(f"file {changed[0]}{more}")
            # What the reload read is what it saw: a failed one is not tried again until
            # a file changes again.
            seen = _digests(reloader)


def _digests(reloader: Reloader) -> dict[str, str | None]:
    # A few small files (properties, PEM): read on the loop, in microseconds.
    return {path: digest(path) for path in reloader.source.watched(reloader.config)}


class ReloadMetrics(Collector):
    """``ksidecar_config_*``: read live from the reloader."""

    def __init__(self, reloader: Reloader) -> None:
        self.reloader = reloader

    def collect(self) -> Iterator[Metric]:
        """The reload counters, the last outcome, and the configuration in force."""
        reloader = self.reloader
        reloads = CounterMetricFamily("ksidecar_config_reloads", "Reloads (SIGHUP, ksidecar reload, a changed "
                                      "file) by result: success, or failure (nothing changed).", labels=["result"])
        reloads.add_metric(["success"], reloader.successes)
        reloads.add_metric(["failure"], reloader.failures)
        yield reloads
        yield GaugeMetricFamily("ksidecar_config_last_reload_successful",
                                "1 when the last reload succeeded (or none was tried), 0 when it failed.",
                                value=1 if reloader.last_ok else 0)
        yield GaugeMetricFamily("ksidecar_config_last_reload_success_timestamp_seconds",
                                "When the configuration in force was put in force (the start, or the "
                                "last successful reload), in seconds since the epoch.",
                                value=reloader.last_success_time)
        info = GaugeMetricFamily("ksidecar_config_info", "The configuration in force: a hash of its keys "
                                 "and values (1 for the one in force).", labels=["hash"])
        info.add_metric([config_hash(reloader.config)], 1)
        yield info
        yield GaugeMetricFamily("ksidecar_config_restart_pending_keys",
                                "Keys changed in the configuration files that wait for a restart.",
                                value=len(reloader.restart_pending))
