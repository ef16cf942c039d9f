"""Request filters operators add (``filter.class.names``): what they see, what they may say.

Theory of operation. An operator's filter is a plain class, constructed with no arguments
and configured once with every ``filter.*`` and ``policy.*`` key (``configure(config)``, if
it has one). It says which requests it wants in ``api_keys`` (a collection of API keys;
absent or ``None``: every request), and for each it is given
``on_request(request, context)``:

* ``request`` (:class:`FilterRequest`): the API key, version and name, the client id, the
  body's bytes, and the body decoded (:attr:`FilterRequest.body`, decoded on first use, a
  fresh ``dict`` the filter may change);
* ``context`` (:class:`FilterContext`): the principal, the listener, the client's address
  and client id, a clock and a logger of the filter's own.

It returns ``None`` (pass it on), :class:`Change` (forward this body instead: the broker
sees the change), :class:`Refuse` (answer with a Kafka error code, shaped as Kafka's own
answer to the whole request refused; a Produce with acks=0 gets no answer, so its connection
is closed), or :class:`Disconnect`. A filter that raises, or returns something else, refuses
that request with UNKNOWN_SERVER_ERROR and a message naming the filter; it is counted in
``ksidecar_filter_errors_total`` and logged, and the connection and its neighbours go on.

Each refusal names what it refused for the audit (:attr:`Refuse.resources`: resource type
and name pairs, ``operation`` the filter's rule) the way ACL denials are, and counts in
``ksidecar_filter_refusals_total``. :class:`Refuse` with ``shadow=True`` refuses nothing:
the request goes on, and the would-be refusal is logged, counted and audited (mode
``shadow``), as the authorizer's shadow mode does.

A filter runs on the event loop: it must not block (no I/O, no sleeping).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from protocol.apis import Api, ApiRegistry
from protocol.errors import EncodeError, ErrorCode, ProtocolError
from protocol.leniency import QUIET, Leniency
from protocol.schema import encode
from proxy.auth.acl.enforce import Enforcer
from proxy.config.keys import ConfigError
from proxy.datapath.dispatch import Answer, Close, Decision, Request
from proxy.local.api import Respond

__all__ = [
    "BUILTIN",
    "Change",
    "Disconnect",
    "FilterContext",
    "FilterMetrics",
    "FilterRequest",
    "LoadedFilter",
    "Refuse",
    "load_filters",
    "refusal",
]

log = logging.getLogger(__name__)

#: Filters built in, by the short name ``filter.class.names`` may use.
BUILTIN = {"policy": "proxy.datapath.policy.PolicyFilter"}
#: The top-level packages of the sidecar itself: never imported again by a reload.
_OWN_PACKAGES = frozenset({"proxy", "protocol", "coordinator", "quotas", "observers", "spark_jobs"})


@dataclass(frozen=True, slots=True)
class FilterContext:
    """Who sent a request and where: what a filter may know of the connection."""

    #: ``User:<name>`` once SASL authenticated the client, else ``User:ANONYMOUS``.
    principal: str
    listener: str
    #: The client's ``(host, port)``.
    client_address: tuple[str, int]
    client_id: str | None
    #: Seconds since the epoch (``time.time``; tests may give another clock).
    clock: Callable[[], float]
    #: The filter's own logger (``ksidecar.filter.<name>``).
    log: logging.Logger


class FilterRequest:
    """One request as a filter sees it (see the module docstring)."""

    __slots__ = ("_body", "_leniency", "api", "api_key", "api_version", "client_id", "correlation_id", "raw")

    def __init__(self, api: Api, request: Request, leniency: Leniency = QUIET) -> None:
        header = request.header
        self.api = api
        self.api_key = header.api_key
        self.api_version = header.api_version
        self.client_id = header.client_id
        self.correlation_id = header.correlation_id
        #: The body's bytes, after the header.
        self.raw = bytes(request.body)
        self._leniency = leniency
        self._body: dict[str, Any] | None = None

    @property
    def api_name(self) -> str:
        """Kafka's name of the API (``Produce``, ``CreateTopics``, ...)."""
        return self.api.name

    @property
    def body(self) -> dict[str, Any]:
        """The body decoded with the API's request schema (field names as in Kafka's JSON
        specs); the same ``dict`` on every use, the filter's to change."""
        if self._body is None:
            self._body = dict(self._leniency.request(self.api, self.api_version, self.raw))
        return self._body


@dataclass(frozen=True, slots=True)
class Change:
    """Forward the request with this body instead (encoded with the API's schema)."""

    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Refuse:
    """Answer the whole request with ``error`` (a Kafka error code) and ``message`` where
    the response has a place for one; ``resources`` (``(resource type, name)`` pairs) and
    ``rule`` name what was refused in the audit and the log."""

    error: int
    message: str | None = None
    resources: tuple[tuple[str, str], ...] = ()
    rule: str = ""
    #: Refuse nothing: log, count and audit the would-be refusal, and pass the request on.
    shadow: bool = False


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Close the client's connection without an answer."""

    reason: str


class FilterMetrics:
    """``ksidecar_filter_refusals_total`` and ``ksidecar_filter_errors_total``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.refusals = Counter(
            "ksidecar_filter_refusals", "Requests a request filter refused (mode shadow: would have), by "
            "filter, rule and mode.", ["filter", "rule", "mode"], registry=registry)
        self.errors = Counter(
            "ksidecar_filter_errors", "Requests refused because a request filter failed on them (raised, "
            "or returned what a filter may not), by filter.", ["filter"], registry=registry)


def refusal(api: Api, version: int, body: Mapping[str, Any] | None, error: int, message: str | None) -> dict[str, Any]:
    """Kafka's answer to a whole request refused with ``error``: every resource the request
    names gets the error (and ``message``) where the response has a place for it, and so
    does a top-level ``ErrorCode``."""
    answer = Enforcer(api, version).error_response(body, error)
    if message is not None:
        _with_message(answer, error, message)
    return answer


def _error_name(error: int) -> str:
    try:
        return ErrorCode(error).name
    except ValueError:
        return f"error {error}"


def _with_message(value: Any, error: int, message: str) -> None:
    if isinstance(value, dict):
        if value.get("ErrorCode") == error and "ErrorMessage" in value:
            value["ErrorMessage"] = message
        for inner in value.values():
            _with_message(inner, error, message)
    elif isinstance(value, list):
        for inner in value:
            _with_message(inner, error, message)


class LoadedFilter:
    """An operator's filter as a link of the request chain
    (:class:`~proxy.datapath.dispatch.RequestFilter`), its failures contained."""

    def __init__(self, instance: Any, name: str, registry: ApiRegistry, metrics: FilterMetrics, *,
                 leniency: Leniency = QUIET, clock: Callable[[], float] = time.time) -> None:
        self.instance = instance
        self.name = name
        keys: Collection[int] | None = getattr(instance, "api_keys", None)
        #: The API keys the filter sees (``None``: every request).
        self.api_keys = None if keys is None else frozenset(keys)
        self._registry = registry
        self._metrics = metrics
        self._leniency = leniency
        self._clock = clock
        self._log = logging.getLogger(f"ksidecar.filter.{name}")

    def close(self) -> None:
        """Call the filter's ``close()``, if it has one (the chain it was in was replaced by
        a reload); a failure is logged, never raised."""
        close = getattr(self.instance, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                self._log.exception("filter %s: close() failed", self.name)

    def on_request(self, request: Request) -> Request | Decision | None:
        """Ask the filter; carry its verdict over into the chain's terms."""
        header = request.header
        api = self._registry.get(header.api_key)
        if api is None:  # not parsed here: nothing a filter could read
            return None
        context = request.context
        seen = FilterRequest(api, request, self._leniency)
        facts = FilterContext(principal=context.principal, listener=context.listener, client_address=context.peer,
                              client_id=header.client_id, clock=self._clock, log=self._log)
        try:
            verdict = self.instance.on_request(seen, facts)
            if verdict is None:
                return None
            if isinstance(verdict, Change):
                return request.with_body(encode(api.request, header.api_version, verdict.body))
            if isinstance(verdict, Disconnect):
                return Close("filter_closed", f"filter {self.name}: {verdict.reason}")
            if isinstance(verdict, Refuse):
                return self._refused(verdict, seen, request)
            raise TypeError(f"returned {type(verdict).__name__}, not None, Change, Refuse or Disconnect")
        except ProtocolError as exc:  # the client's body cannot be read: Kafka closes too
            if isinstance(exc, EncodeError):
                return self._failed(request, seen, exc)
            return Close("bad_request", f"{api.name} v{header.api_version}: {exc}")
        except Exception as exc:  # the filter's fault: costs this request only
            return self._failed(request, seen, exc)

    def _refused(self, verdict: Refuse, seen: FilterRequest, request: Request) -> Request | Decision:
        mode = "shadow" if verdict.shadow else "enforce"
        rule = verdict.rule or self.name
        self._metrics.refusals.labels(self.name, rule, mode).inc()
        denials = tuple((kind, name, f"{self.name}:{rule}", mode) for kind, name in verdict.resources) \
            or (("Cluster", "kafka-cluster", f"{self.name}:{rule}", mode),)
        said = verdict.message or _error_name(verdict.error)
        self._log.warning("%s %s from %s: %s v%d: %s%s", "would refuse" if verdict.shadow else "refused",
                          request.context.principal, request.context.peer[0], seen.api_name, seen.api_version,
                          said, " (shadow mode: served anyway)" if verdict.shadow else "")
        if verdict.shadow:
            return dataclasses.replace(request, denials=request.denials + denials)
        if not request.expects_response:  # acks=0: no answer can say it
            return Close("policy_violation", f"filter {self.name}: {seen.api_name} with acks=0 refused: "
                                             f"{said}", denials=denials)
        body = seen._body if seen._body is not None else self._decoded_or_none(seen)
        answer = refusal(seen.api, seen.api_version, body, verdict.error, verdict.message)
        return Answer(Respond(body=answer), outcome="refused", denials=request.denials + denials)

    @staticmethod
    def _decoded_or_none(seen: FilterRequest) -> dict[str, Any] | None:
        try:
            return seen.body
        except ProtocolError:
            return None

    def _failed(self, request: Request, seen: FilterRequest, exc: Exception) -> Decision:
        self._metrics.errors.labels(self.name).inc()
        self._log.error("filter %s failed on %s v%d from %s: %s", self.name, seen.api_name, seen.api_version,
                        request.context.peer[0], exc, exc_info=exc)
        message = f"request filter {self.name} failed: {type(exc).__name__}"
        if not request.expects_response:
            return Close("filter_failed", message)
        body = self._decoded_or_none(seen)
        answer = refusal(seen.api, seen.api_version, body, ErrorCode.UNKNOWN_SERVER_ERROR, message)
        return Answer(Respond(body=answer), outcome="refused", denials=request.denials)


def load_filters(names: str, config: Mapping[str, str], registry: ApiRegistry, metrics: FilterMetrics, *,
                 leniency: Leniency = QUIET, reload_modules: bool = False) -> list[LoadedFilter]:
    """Import, construct and configure the filters ``names`` lists (comma-separated), in
    order; a failure raises :class:`~proxy.config.keys.ConfigError` naming the filter.

    ``reload_modules`` (a reload): an operator's filter module is imported again
    (``importlib.reload``), so a changed file takes effect; the sidecar's own modules (the
    built-in ``policy``) are not."""
    loaded: list[LoadedFilter] = []
    taken: set[str] = set()
    for spec in (n.strip() for n in names.split(",")):
        if not spec:
            continue
        path = BUILTIN.get(spec, spec)
        module_name, sep, attribute = path.partition(":")
        if not sep:
            module_name, _, attribute = path.rpartition(".")
        if not module_name:
            raise ConfigError(f"filter.class.names: {spec!r} is neither a built-in ({', '.join(BUILTIN)}) "
                              "nor an import path (pkg.mod.Class or pkg.mod:Class)")
        try:
            module = importlib.import_module(module_name)
            if reload_modules and module_name.partition(".")[0] not in _OWN_PACKAGES:
                module = importlib.reload(module)
            target = getattr(module, attribute)
            instance = target()
        except Exception as exc:
            raise ConfigError(f"filter.class.names: cannot load {spec!r}: {exc}") from None
        if not callable(getattr(instance, "on_request", None)):
            raise ConfigError(f"filter.class.names: {spec!r} has no on_request(request, context)")
        configure = getattr(instance, "configure", None)
        if callable(configure):
            try:
                configure(dict(config))
            except ConfigError:
                raise
            except Exception as exc:
                raise ConfigError(f"filter.class.names: {spec!r}: configure failed: {exc}") from None
        name = str(getattr(instance, "name", "") or (spec if spec in BUILTIN else type(instance).__name__.lower()))
        base, n = name, 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        taken.add(name)
        loaded.append(LoadedFilter(instance, name, registry, metrics, leniency=leniency))
    return loaded
