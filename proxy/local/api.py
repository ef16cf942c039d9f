"""The local-API contract: how an API the sidecar answers itself is declared and served.

Theory of operation. Every API the sidecar answers is one :class:`LocalApi` entry of a
:class:`LocalApiTable`: its key, the versions it serves, whether it takes a given request
(:attr:`LocalApi.takes`; the quota APIs take only requests that name the ``ip`` entity),
and a handler of ``(request, context)``. The connection decodes the request body with the
API's schema, calls the handler, and acts on the :data:`Answer`:

* :class:`Respond` — the answer is ready now; it takes its place in the response order;
* :class:`Later` — the answer comes from an awaitable the connection runs in its own
  nursery while the client pump reads on (a JoinGroup held for its rebalance, a write to
  ZooKeeper). Its place in the response order was taken when the request arrived, so the
  answers still leave in request order; it counts against the in-flight bound, and a
  closed connection cancels it. ``hold=True`` makes the pump wait for it before reading
  the next request, for requests that change what the next one may do (a SASL login);
* :class:`Close` — the connection ends, after an optional last answer and a linger.

A handler sees a :class:`Context`: who the client is, where it came from, and the narrow
:class:`Ports` of what the sidecar shares (what the upstream broker supports, the brokers
to advertise, per-IP quotas, SCRAM users). Never the server or the connection: that keeps
handlers testable with plain objects and keeps the import graph one-way
(``docs/architecture.md``). Adding a local API is one module with its handler plus one
entry in :func:`proxy.local.table.build_table`; ApiVersions derives what it advertises from
the table (:meth:`LocalApiTable.served`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from protocol.headers import RequestHeader
from proxy.auth.sasl.session import Session
from proxy.local.ports import Ports

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class LocalRequest:
    """A request the sidecar answers: its header and its body, decoded and raw."""

    header: RequestHeader
    #: The body decoded with the API's request schema (``None`` when the entry asked for
    #: raw bytes only, :attr:`LocalApi.decode`).
    body: Mapping[str, Any] | None
    #: The body's bytes (after the header).
    raw: bytes

    @property
    def version(self) -> int:
        """The request's API version."""
        return self.header.api_version

    @property
    def api_key(self) -> int:
        """The request's API key."""
        return self.header.api_key


@dataclass(frozen=True, kw_only=True, slots=True)
class Respond:
    """An answer ready now.

    ``body`` is a response to encode with the API's response schema, or bytes already
    encoded. ``version`` is the response version (``None``: the request's; ApiVersions
    answers an unsupported version at v0). ``raw`` frames are SASL tokens after a v0
    handshake: no Kafka response header, just the size and the bytes.
    """

    body: Mapping[str, Any] | bytes
    version: int | None = None
    raw: bool = False


#: ``when_ready(callback)``: call ``callback`` with the answer once it comes; returns a
#: function that gives up waiting (see :attr:`Later.when_ready`).
WhenReady = Callable[[Callable[["Respond | Close"], None]], Callable[[], None]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Later:
    """An answer that comes later: the connection awaits ``answer()`` in its nursery."""

    answer: Callable[[], Awaitable[Respond | Close]]
    #: Read no further request until this one is answered (see the module docstring).
    hold: bool = False
    #: An answer another process gives (:mod:`proxy.local.remote`) may be taken this way
    #: instead: the connection hands it a callback for the answer, called when it comes (no
    #: task waits for it); the function it returns gives up on the answer (the connection
    #: closed first).
    when_ready: WhenReady | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Close:
    """End the connection: send ``answer`` (if any) in its place, wait ``linger``, close.

    ``reason`` is the ``ksidecar_connections_closed`` label, ``detail`` the log line.
    """

    reason: str
    detail: str
    answer: Respond | None = None
    linger: float = 0.0


#: What a handler returns.
Answer = Respond | Later | Close


@dataclass(kw_only=True, slots=True)
class Context:
    """What a local API may know of the connection it answers, and reach of the sidecar."""

    listener: str
    peer: tuple[str, int]
    ports: Ports
    #: ``User:<name>`` once SASL authenticated the client, else ``User:ANONYMOUS``.
    principal: str = "User:ANONYMOUS"
    #: The connection's SASL session on a listener the sidecar terminates SASL on.
    sasl: Session | None = None
    #: The client's ApiVersions v3+ software name and version, once it sent them.
    client_software: tuple[str, str] | None = None
    #: Facts a local API keeps per connection (bounded by the APIs that use it).
    extra: dict[str, Any] = field(default_factory=dict)
    #: Called once when the client connection ends (a share session ends with it). With
    #: ``sidecar.workers``, the owner process keeps one list per client connection of a
    #: worker, called when the worker says the connection ended (:mod:`proxy.control.owner`).
    closing: list[Callable[[], None]] = field(default_factory=list)

    def end(self) -> None:
        """The connection ended: each :attr:`closing` callback is called, once."""
        callbacks, self.closing = self.closing, []
        connection_ended(callbacks)


def connection_ended(closing: Iterable[Callable[[], None]]) -> None:
    """Call a connection's ``closing`` callbacks; one that fails costs its own log line,
    never the others."""
    for closed in closing:
        try:
            closed()
        except Exception:
            log.exception("a local API's connection-closed callback failed")


class Handler(Protocol):
    """A local API's handler: answer one request."""

    def __call__(self, request: LocalRequest, context: Context) -> Answer:
        """Answer ``request`` (see :data:`Answer`)."""
        ...


#: ``takes(header, body, context)``: whether this entry answers the request; ``body`` is
#: decoded with the API's schema, or ``None`` when it cannot be (a version the table does not
#: know, or bytes that do not read). The same decoding serves the handler: a body is decoded
#: once.
Takes = Callable[[RequestHeader, "Mapping[str, Any] | None", Context], bool]


@dataclass(frozen=True, kw_only=True)
class LocalApi:
    """One API the sidecar answers itself."""

    key: int
    name: str
    #: The versions served, inclusive. A request of the key at another version is answered
    #: "unsupported" (KIP-35), unless :attr:`any_version`.
    versions: tuple[int, int]
    handler: Handler
    #: ``None``: every request of the key (within :attr:`versions`).
    takes: Takes | None = None
    #: Called for every version (ApiVersions answers UNSUPPORTED_VERSION itself).
    any_version: bool = False
    #: Decode the body with the request schema before calling the handler (bytes after
    #: the body are ignored, as Kafka's broker ignores them: :mod:`protocol.leniency`).
    decode: bool = True


#: Answers one raw SASL token (after a v0 SaslHandshake; not a Kafka request).
RawTokenHandler = Callable[[bytes, Context], Answer]


class LocalApiTable:
    """The local APIs of one listener, by key, and its raw SASL token handler."""

    def __init__(self, apis: Iterable[LocalApi], raw_token: RawTokenHandler | None = None) -> None:
        self.raw_token = raw_token
        self._by_key: dict[int, LocalApi] = {}
        for api in apis:
            if api.key in self._by_key:
                raise ValueError(f"two local APIs for key {api.key}: {self._by_key[api.key].name}, {api.name}")
            self._by_key[api.key] = api

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __iter__(self) -> Any:
        return iter(self._by_key.values())

    def get(self, key: int) -> LocalApi | None:
        """The entry for ``key``, if any."""
        return self._by_key.get(key)

    def served(self) -> dict[int, tuple[int, int]]:
        """``{key: (min, max)}`` of every local API: what ApiVersions advertises as ours."""
        return {key: api.versions for key, api in self._by_key.items()}
