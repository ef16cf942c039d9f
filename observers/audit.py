"""The audit observer: one Parquet row per request/response pair, per topic-partition for
Produce and Fetch, plus the topic inventory Metadata responses report (schema:
:mod:`observers.audit_schema`; what each row says: :mod:`observers.audit_rows`).

Turn it on with ``observer.class.names=audit`` (or ``observers.audit.AuditObserver``) and
``observer.audit.dir=/var/lib/ksidecar/audit``.

The audit takes raw exchanges (:mod:`observers.api`) and picks from the frames only the
fields its rows need (:mod:`observers.traffic`): on a busy sidecar it shares the GIL with
the data path, so it must not decode whole messages.

Two audits, one per ``observer.audit.isolation``:

* :class:`ThreadAudit` (``thread``, the default) does all the work on the audit's worker
  thread in the sidecar process;
* :class:`~observers.audit_process.ProcessAudit` (``process``) only packs each exchange on
  that thread and records it in a child process, on its own GIL
  (:mod:`observers.audit_process`).

:class:`AuditObserver`, the built-in ``audit``, is constructed with no arguments (KIP-388)
and becomes one or the other when configured. The files are the same either way.

Either writes the schema version the fleet finalized (the sidecar feature
``ksidecar.audit.format``, read through ``ObserverConfig.feature_level``): it checks the
level on its first exchange and on every tick, and a change (an operator finalizing level
1) starts new files in the new version (:meth:`~observers.audit_rows.AuditRecorder.use_version`).
"""

from __future__ import annotations

from typing import Any

from observers.api import Observer, ObserverConfig
from observers.audit_process import ProcessAudit
from observers.audit_rows import (
    AuditRecorder,
    FeatureLevel,
    audit_settings,
    facts_of,
    format_version,
    isolation_of,
)
from observers.exchange import Exchange
from protocol.apis import ApiRegistry


class ThreadAudit(Observer):
    """The audit's work on its worker thread in the sidecar (module docstring)."""

    name = "audit"

    def __init__(self) -> None:
        self.recorder: AuditRecorder | None = None
        self.feature_level: FeatureLevel | None = None
        #: False until the format was checked after the sidecar started (first exchange).
        self._checked = False

    def configure(self, config: ObserverConfig) -> None:
        """Read ``observer.audit.*``, recover journals a killed sidecar left, open the sink."""
        settings = audit_settings(config)
        key = config.context.get("sidecar.broker.metadata.api.key")
        apis = ApiRegistry(int(key)) if key else ApiRegistry()
        from observers.parquet_sink import SinkMetrics

        self.feature_level = config.feature_level
        self.recorder = AuditRecorder.open(
            settings, broker_id=config.broker_id, apis=apis, metrics=SinkMetrics(config.registry),
            version=format_version(self.feature_level), worker=config.worker,
        )
        self.recorder.names.resolve = config.topic_name

    def record_exchange(self, x: Exchange) -> None:
        """Build the exchange's rows from its frames and buffer them (raw exchanges)."""
        recorder = self.recorder
        assert recorder is not None
        if not self._checked:  # configured before the sidecar read /feature
            self._checked = True
            recorder.use_version(format_version(self.feature_level))
        recorder.record(facts_of(x))

    def tick(self, now: float) -> None:
        """Follow the finalized format; flush and roll on time."""
        if self.recorder is not None:
            self._checked = True
            self.recorder.use_version(format_version(self.feature_level))
            self.recorder.tick(now)

    def close(self, timeout: float) -> None:
        """Flush everything into visible files."""
        if self.recorder is not None:
            self.recorder.close()


class AuditObserver(Observer):
    """The built-in ``audit``: a :class:`ThreadAudit` or a
    :class:`~observers.audit_process.ProcessAudit`, as ``observer.audit.isolation`` says.

    Once configured, its ``record_exchange``, ``tick`` and ``close`` are the chosen audit's
    own (bound on the instance, so the hub calls them with no extra layer).
    """

    name = "audit"

    def __init__(self) -> None:
        #: The audit this observer became (``None`` until configured).
        self.audit: ThreadAudit | ProcessAudit | None = None
        self._hub_errors: Any = None

    @property
    def hub_errors(self) -> Any:
        """Set by the hub to this observer's ``ksidecar_observer_errors_total`` (api.py):
        the process audit counts the failures of its child there."""
        return self._hub_errors

    @hub_errors.setter
    def hub_errors(self, counter: Any) -> None:
        self._hub_errors = counter
        if isinstance(self.audit, ProcessAudit):
            self.audit.hub_errors = counter

    def configure(self, config: ObserverConfig) -> None:
        """Become the audit ``observer.audit.isolation`` names and configure it."""
        audit: ThreadAudit | ProcessAudit = (
            ProcessAudit() if isolation_of(config) == "process" else ThreadAudit()
        )
        audit.configure(config)
        if isinstance(audit, ProcessAudit):
            audit.hub_errors = self._hub_errors
        self.audit = audit
        self.record_exchange = audit.record_exchange  # type: ignore[method-assign]
        self.tick = audit.tick  # type: ignore[method-assign]
        self.close = audit.close  # type: ignore[method-assign]

    def record_exchange(self, x: Exchange) -> None:
        """Replaced by the chosen audit's own when configured."""
        raise RuntimeError("the audit observer is not configured")

    def tick(self, now: float) -> None:
        """Replaced by the chosen audit's own when configured."""

    def close(self, timeout: float) -> None:
        """Replaced by the chosen audit's own when configured."""


__all__ = ["AuditObserver", "ThreadAudit"]
