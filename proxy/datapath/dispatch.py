"""What becomes of each request and response: decided here, carried out by the connection (sans-IO).

Theory of operation. A :class:`~proxy.datapath.connection.Connection` moves bytes: it reads
frames, keeps the response order, writes. What to *do* with a request is a chain of
**request filters**, each a plain object that sees a :class:`Request` (its header, its frame,
who sent it, where the router would send it) and returns one of:

* ``None``: nothing to say, the next filter decides;
* a changed :class:`Request` (its frame rewritten, a patch for its answer, refusals noted
  for the audit), which the next filter sees;
* a **decision**, which ends the chain: :class:`Forward` (the frame to the broker, as it came
  or changed), :class:`Answer` (a local answer: now, later, or a last answer before closing),
  :class:`Unsupported` (KIP-35), :class:`Close`, or :class:`Refresh` (wait for something,
  then decide again).

Each filter declares the API keys it wants (:attr:`RequestFilter.api_keys`); the chain for a
key is built once, so a filter is never called, and nothing is decoded for it, for a request
it does not want. The built-in chain, in order:

1. the unparsed-request policy (:class:`UnparsedPolicy`): requests the broker serves and the
   sidecar cannot parse are forwarded opaque, answered or closed
   (``sidecar.unparsed.request.policy``);
2. Kafka ACLs (:class:`AclFilter`, with ``sidecar.authorizer=acls``): pass, answer the
   refusal, forward a narrowed request and patch its answer, or close;
3. the operators' filters (``filter.class.names``, :mod:`proxy.datapath.filters`);
4. the route itself (:meth:`Dispatch.decide`'s last step): a local API's handler is called
   (its body decoded once, by the leniency rule), a forwarded request goes as it is.

Before the chain, a SASL listener's **gate** sees every frame (:meth:`Dispatch.admit`): a
frame before authentication closes the connection, a raw token after a v0 handshake goes to
the SASL local API. After it, **response filters** (:meth:`Dispatch.response`): the gate
reads a login's outcome where the broker authenticates, broker addresses are rewritten, the
ACL patch is applied (a large answer in slices, :meth:`Dispatch.patch_in_slices`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from protocol.apis import Api, ApiRegistry
from protocol.correlation import InFlight
from protocol.errors import ProtocolError
from protocol.framing import size_prefix
from protocol.headers import RequestHeader, encode_response_header
from protocol.leniency import QUIET, Leniency
from protocol.scan import response_header_size
from protocol.schema import encode
from proxy.auth.acl.enforce import Answer as Refused
from proxy.auth.acl.enforce import Forward as Narrowed
from proxy.auth.acl.enforce import Refuse
from proxy.auth.gate import RAW_TOKEN, Refusal, Verdict
from proxy.datapath.authorize import REFRESH, Authorization, Denials, Patch
from proxy.datapath.metrics import SidecarMetrics
from proxy.datapath.rewrite import SITES
from proxy.datapath.routing import Route, Router, Streaming
from proxy.datapath.throttle import Throttle, ThrottlePatch, streams
from proxy.local.api import Answer as LocalAnswer
from proxy.local.api import Close as LocalClose
from proxy.local.api import Context, Later, LocalApi, LocalRequest, Respond

__all__ = [
    "PATCH_LATER_MIN",
    "AclFilter",
    "AclPatch",
    "AddressRewrite",
    "Answer",
    "Close",
    "Decision",
    "Dispatch",
    "Forward",
    "Gate",
    "PatchLater",
    "Refresh",
    "Request",
    "RequestFilter",
    "Response",
    "ResponseFilter",
    "UnparsedPolicy",
    "Unsupported",
]


class Body:
    """A request's body decoded once, on first use, by the leniency rule (a local API's
    ``takes`` and its handler share it)."""

    __slots__ = ("_api", "_error", "_leniency", "_raw", "_value", "_version")

    def __init__(self, api: Api | None, version: int, raw: memoryview, leniency: Leniency) -> None:
        self._api, self._version, self._raw, self._leniency = api, version, raw, leniency
        self._value: Mapping[str, Any] | None = None
        self._error: ProtocolError | None = None

    def value(self) -> Mapping[str, Any] | None:
        """The body decoded, or ``None`` when it cannot be (:meth:`decoded` says why)."""
        if self._value is None and self._error is None:
            api = self._api
            if api is None or self._version not in api.versions:
                self._error = ProtocolError(f"no schema for v{self._version}")
            else:
                try:
                    self._value = self._leniency.request(api, self._version, self._raw)
                except ProtocolError as exc:
                    self._error = exc
        return self._value

    def decoded(self) -> Mapping[str, Any]:
        """The body decoded; raises the :class:`~protocol.errors.ProtocolError` it read."""
        value = self.value()
        if value is None:
            assert self._error is not None
            raise self._error
        return value


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the filters see it."""

    header: RequestHeader
    #: The whole frame, size prefix included (a filter that changes the body makes a new one).
    frame: memoryview
    context: Context
    #: Where the router sends it: a local API, or a :class:`~proxy.datapath.routing.Route`.
    route: LocalApi | Route
    #: False for a Produce with acks=0 (no answer may be sent).
    expects_response: bool
    #: Asked again after a :class:`Refresh`.
    refreshed: bool = False
    #: Applied to the answer before the client gets it (ACL narrowing).
    patch: Patch | None = None
    #: What was refused (or in shadow mode would have been), for the audit.
    denials: Denials = ()
    #: The body decoded once, for the local API that answers it (``None``: decoded there).
    decoded: Body | None = None
    #: The client-quota throttle of a forwarded request (:mod:`proxy.datapath.throttle`).
    throttle: Throttle | None = None

    @property
    def body(self) -> memoryview:
        """The request's body, after its header."""
        return self.frame[4 + self.header.size :]

    def with_body(self, body: bytes) -> Request:
        """This request with another body (the header's bytes kept as the client sent them)."""
        head = self.frame[4 : 4 + self.header.size]
        frame = memoryview(size_prefix(len(head) + len(body)) + bytes(head) + body)
        return dataclasses.replace(self, frame=frame, decoded=None)


# -- decisions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Forward:
    """Send ``frame`` to the broker (the client's, or a filter's change of it)."""

    frame: memoryview
    #: ``ksidecar_requests_total``'s outcome: forwarded, or opaque (not parsed here).
    route: Route = Route.FORWARD
    patch: Patch | None = None
    denials: Denials = ()
    throttle: Throttle | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """The sidecar answers: a local API's answer, or a refusal shaped as Kafka's."""

    answer: LocalAnswer
    #: ``ksidecar_requests_total``'s outcome: ``local``, or ``refused`` (ACLs, policy).
    outcome: str = "local"
    denials: Denials = ()
    #: A raw SASL token's answer (no Kafka header on either side).
    raw_token: bool = False
    #: A client-quota throttle: the connection is not read for its time after this answer.
    throttle: Throttle | None = None


@dataclass(frozen=True, slots=True)
class Unsupported:
    """Nobody serves it: the KIP-35 answer, the correlation id alone (a whole frame)."""

    answer: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """End the connection with no answer (``reason``: the ``ksidecar_connections_closed``
    label); ``denials``: what was refused, for the audit of the request that closed it."""

    reason: str
    detail: str
    denials: Denials = ()
    #: ``ksidecar_requests_total``'s outcome for the request that closed it, if counted.
    outcome: str | None = None


@dataclass(frozen=True, slots=True)
class Refresh:
    """Await ``wait()``, then decide again (``Request.refreshed`` set): topic IDs nobody has
    named yet are learned from the broker once. What the connection gathered for the
    broker goes first."""

    wait: Callable[[], Awaitable[None]]


Decision = Forward | Answer | Unsupported | Close | Refresh


#: An answer the ACLs patch at least this large is patched in slices by a task of its own
#: (:meth:`Dispatch.patch_in_slices`), the event loop serving other connections in between.
PATCH_LATER_MIN = 262144


@dataclass(frozen=True, slots=True)
class PatchLater:
    """A response too large to patch in one piece: :meth:`Dispatch.patch_in_slices` it."""

    data: bytes


# -- filters --------------------------------------------------------------------------------


class Gate(Protocol):
    """A SASL listener's admission rule for one connection (``proxy.auth.gate``: the
    sidecar authenticates, or reads along while the broker does)."""

    #: Whether :meth:`on_response` needs each broker answer whole (no cut-through).
    reads_responses: bool

    def admit(self, body: memoryview, now: float, in_sasl_exchange: bool) -> Verdict:
        """Pass (``None``), a raw token, or a refusal for one client frame."""
        ...

    def on_response(self, record: InFlight, body: memoryview) -> None:
        """See the broker's answer to a request this gate let pass."""
        ...



class RequestFilter(Protocol):
    """One link of the request chain (see the module docstring)."""

    #: The API keys the filter sees (``None``: every request).
    @property
    def api_keys(self) -> frozenset[int] | None:
        """The API keys the filter sees (``None``: every request)."""
        ...

    def on_request(self, request: Request) -> Request | Decision | None:
        """``None`` to pass, a changed request, or a decision."""
        ...


class UnparsedPolicy:
    """``sidecar.unparsed.request.policy`` for a request the broker serves and the sidecar
    cannot parse: counted per key and version; closed (``close``), or forwarded as it is
    (``forward``), except where ACLs are enforced and the principal is not a super user:
    what cannot be read cannot be authorized, so it is answered as unsupported."""

    api_keys = None

    def __init__(self, metrics: SidecarMetrics, authorization: Authorization | None) -> None:
        self._metrics = metrics
        self._authorization = authorization

    def on_request(self, request: Request) -> Request | Decision | None:
        """See the class docstring."""
        route = request.route
        if route is not Route.OPAQUE and route is not Route.UNPARSED:
            return None
        header = request.header
        authorization = self._authorization
        if route is Route.OPAQUE and authorization is not None \
                and request.context.principal not in authorization.acls.authorizer.super_users:
            route = Route.UNSUPPORTED
        outcome = {Route.OPAQUE: "forwarded", Route.UNPARSED: "closed"}.get(route, "answered")
        self._metrics.unparsed.labels(str(header.api_key), str(header.api_version), outcome).inc()
        if route is Route.UNPARSED:
            return Close("unparsed_request",
                         f"api key {header.api_key} v{header.api_version} is served by the broker but not parsed "
                         "here (sidecar.unparsed.request.policy=close)")
        return dataclasses.replace(request, route=route) if route is not request.route else None


class AclFilter:
    """Kafka ACLs (``sidecar.authorizer=acls``): the thin link between the chain and
    :class:`~proxy.datapath.authorize.Authorization`."""

    api_keys = None

    def __init__(self, authorization: Authorization) -> None:
        self._authorization = authorization

    def on_request(self, request: Request) -> Request | Decision | None:
        """Pass, answer the refusal, forward a narrowed request with its answer's patch,
        ask for a refresh of topic IDs, or close."""
        route = request.route
        if route is Route.UNSUPPORTED or route is Route.OPAQUE:
            return None
        header = request.header
        authorization = self._authorization
        try:
            action, denials = authorization.check(header, request.body, request.context, request.expects_response,
                                                  local=isinstance(route, LocalApi), refreshed=request.refreshed)
        except ProtocolError as exc:  # a body that cannot be read cannot be authorized
            return Close("bad_request", f"api key {header.api_key} v{header.api_version}: {exc}")
        if action is REFRESH:
            return Refresh(authorization.refresh)
        if isinstance(action, Refuse):
            return Close("authorization_failed", action.reason)
        if isinstance(action, Refused):
            return Answer(Respond(body=action.body), outcome="refused", denials=denials)
        changed = dataclasses.replace(request, denials=request.denials + denials)
        if isinstance(action, Narrowed):
            changed = dataclasses.replace(changed, patch=action.patch)
            if action.body is not None:
                changed = changed.with_body(action.body)
        return changed if changed != request else None


# -- response filters -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Response:
    """One broker answer as the response filters see it."""

    #: The header of the request it answers.
    header: RequestHeader
    #: The version of the response header.
    header_version: int
    #: The whole frame, size prefix included (a filter that changes it makes a new one).
    frame: bytes | memoryview
    #: The request's ACL patch, if the ACLs narrowed it.
    patch: Patch | None = None
    #: The request's client-quota throttle, if it has one.
    throttle: Throttle | None = None

    @property
    def body(self) -> memoryview:
        """The frame after its size: the response header, then the body."""
        return memoryview(self.frame)[4:]

    def with_frame(self, frame: bytes | memoryview) -> Response:
        """This answer with another frame (a filter's change)."""
        return dataclasses.replace(self, frame=frame)


class ResponseFilter(Protocol):
    """One link of the response chain: ``None`` to pass, a changed :class:`Response`, a
    :class:`PatchLater` (finish in slices), or :class:`Close`."""

    @property
    def api_keys(self) -> frozenset[int] | None:
        """The API keys whose answers the filter sees (``None``: every answer)."""
        ...

    def on_response(self, response: Response) -> Response | PatchLater | Close | None:
        """See the class docstring."""
        ...


class AddressRewrite:
    """Broker addresses in the answers that can name brokers, rewritten to the sidecars'
    (:mod:`proxy.datapath.rewrite`: spliced where one array names them)."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self.api_keys = frozenset(SITES)

    def on_response(self, response: Response) -> Response | Close | None:
        """The answer rewritten, ``None`` when it names no broker, or :class:`Close` when it
        cannot be read (passing it on could leak a broker's address)."""
        header = response.header
        try:
            rewritten = self._router.rewrite_response(header, response.header_version, response.body)
        except ProtocolError as exc:
            return _unreadable(header, exc)
        return None if rewritten is None else dataclasses.replace(response, frame=rewritten)


class AclPatch:
    """The ACL patch of a narrowed request applied to its answer (refused entries added,
    listings filtered); an answer of :data:`PATCH_LATER_MIN` bytes or more is left to
    :meth:`Dispatch.patch_in_slices`."""

    api_keys = None

    def __init__(self, authorization: Authorization) -> None:
        self._authorization = authorization

    def on_response(self, response: Response) -> Response | PatchLater | Close | None:
        """See the class docstring."""
        patch = response.patch
        if patch is None:
            return None
        data = response.frame
        if len(data) >= PATCH_LATER_MIN:
            return PatchLater(bytes(data))
        header = response.header
        try:
            head, body = _split(data, response.header_version)
            patched = self._authorization.patched(patch, header.api_key, header.api_version, body)
        except ProtocolError as exc:
            return _unreadable(header, exc)
        framed = _framed(head, patched)
        return dataclasses.replace(response, frame=framed)


def _split(frame: bytes | memoryview, header_version: int) -> tuple[memoryview, memoryview]:
    """A response frame's header and body (raises what the header cannot be read for)."""
    view = memoryview(frame)[4:]
    head_size = response_header_size(view, header_version)
    return view[:head_size], view[head_size:]


def _framed(head: memoryview, body: bytes) -> bytes:
    """A response frame of the broker's header and a new body."""
    return size_prefix(len(head) + len(body)) + bytes(head) + body


def _unreadable(header: RequestHeader, exc: ProtocolError) -> Close:
    """An answer that cannot be read closes its connection: passing it on could leak a broker."""
    return Close("bad_response", f"api key {header.api_key} response: {exc}")


# -- the chain ------------------------------------------------------------------------------


class Dispatch:
    """The decisions for every connection of one listener (see the module docstring)."""

    def __init__(
        self,
        registry: ApiRegistry,
        router: Router,
        metrics: SidecarMetrics,
        filters: Sequence[RequestFilter] = (),
        *,
        authorization: Authorization | None = None,
        leniency: Leniency = QUIET,
        unsupported_policy: str = "answer",
        throttles: bool = False,
    ) -> None:
        self.registry = registry
        self.router = router
        self.metrics = metrics
        #: ``sidecar.unsupported.request.policy``: ``answer`` (KIP-35) or ``close``.
        self.unsupported_policy = unsupported_policy
        self.authorization = authorization
        self.leniency = leniency
        builtin: list[RequestFilter] = [UnparsedPolicy(metrics, authorization)]
        if authorization is not None:
            builtin.append(AclFilter(authorization))
        self._builtin = tuple(builtin)
        #: The whole chain, in order.
        self.filters: tuple[RequestFilter, ...] = (*builtin, *filters)
        self._by_key: dict[int, tuple[RequestFilter, ...]] = {}
        #: The response filters, in order: broker addresses first, then the ACL patch, then
        #: client-quota throttles (``throttles``: a request filter gives requests one).
        self._throttle_patch = ThrottlePatch(registry, leniency) if throttles else None
        self._address_rewrite = AddressRewrite(router)
        self.response_filters: tuple[ResponseFilter, ...] = (
            self._address_rewrite, *((AclPatch(authorization),) if authorization is not None else ()),
            *((self._throttle_patch,) if self._throttle_patch is not None else ()))
        self._responses_by_key: dict[int, tuple[ResponseFilter, ...]] = {}
        #: :meth:`plain` by ``(api_key, api_version)``, for the broker's versions as last learned.
        self._plain: dict[tuple[int, int], bool] = {}
        self._plain_for: object = None

    def chain(self, api_key: int) -> tuple[RequestFilter, ...]:
        """The filters that see requests of ``api_key``, in order (built once per key)."""
        chain = self._by_key.get(api_key)
        if chain is None:
            chain = self._by_key[api_key] = tuple(
                f for f in self.filters if f.api_keys is None or api_key in f.api_keys)
        return chain

    def replace_filters(self, filters: Sequence[RequestFilter]) -> None:
        """Put ``filters`` after the built-in ones (a reload): the next request decided
        sees them; a request already decided goes on as it was."""
        self.filters = (*self._builtin, *filters)
        self._by_key = {}
        self._plain.clear()

    def plain(self, header: RequestHeader) -> bool:
        """True when a request of ``header``'s key and version goes to the broker as it came
        with nothing to decide: the router forwards it (no local API takes its key, the
        broker serves its version, the sidecar parses it) and no request filter wants its key
        but the unparsed-request policy, which passes what is forwarded. The connection then
        forwards it without :meth:`decide` (the fast lane: no per-request objects). Known per
        key and version, again whenever the broker's versions change."""
        info = self.router.upstream.info
        if info is not self._plain_for:
            self._plain.clear()
            self._plain_for = info
        key = (header.api_key, header.api_version)
        plain = self._plain.get(key)
        if plain is None:
            plain = self._plain[key] = self.router.forwards(header.api_key, header.api_version) and all(
                type(f) is UnparsedPolicy for f in self.chain(header.api_key))
        return plain

    # -- requests ---------------------------------------------------------------------------

    def admit(self, gate: Gate, body: memoryview, now: float, in_sasl_exchange: bool,
              context: Context) -> Answer | Close | None:
        """A SASL listener's gate on one frame: ``None`` (a request: on to :meth:`decide`),
        the SASL local API's answer to a raw token, or a refusal that closes."""
        verdict = gate.admit(body, now, in_sasl_exchange)
        if verdict is None:
            return None
        if isinstance(verdict, Refusal):
            return Close(verdict.reason, verdict.detail)
        assert verdict is RAW_TOKEN
        answer_token = self.router.table.raw_token
        if answer_token is None:  # a gate marks raw tokens only where SASL is terminated
            return Close("bad_frame", "raw SASL token on a listener without SASL")
        return Answer(answer_token(bytes(body), context), raw_token=True)

    def decide(self, header: RequestHeader, frame: memoryview, context: Context, expects_response: bool,
               *, refreshed: bool = False) -> Decision:
        """What to do with one request (``frame``: size prefix, header and body)."""
        body = Body(self.registry.get(header.api_key), header.api_version, frame[4 + header.size :], self.leniency)
        request = Request(header=header, frame=frame, context=context, expects_response=expects_response,
                          route=self.router.route(header, frame[4:], context, body.value), refreshed=refreshed,
                          decoded=body)
        for link in self.chain(header.api_key):
            outcome = link.on_request(request)
            if outcome is None:
                continue
            if not isinstance(outcome, Request):
                return outcome
            request = outcome
        return self._route(request)

    def _route(self, request: Request) -> Decision:
        """The chain's last step: where the router sends what no filter decided."""
        route = request.route
        if route is Route.FORWARD or route is Route.OPAQUE:
            return Forward(request.frame, route, request.patch, request.denials, request.throttle)
        if isinstance(route, LocalApi):
            answer = self._call(route, request)
            if isinstance(answer, Close):
                return answer
            if request.patch is not None:
                answer = self._patch_local(answer, request.patch, request.header)
            return Answer(answer, denials=request.denials)
        return self._unsupported(request)

    def _unsupported(self, request: Request) -> Unsupported | Close:
        """Nobody serves it: answered (KIP-35 draft: a response holding only the correlation
        id, the connection kept), or closed by policy; always closed for acks=0, where an
        answer would desynchronise the client."""
        header = request.header
        self.metrics.unsupported.labels(self.metrics.unknown_key_label(header.api_key)).inc()
        named = f"api key {header.api_key} v{header.api_version}"
        if not request.expects_response:
            return Close("unsupported_request", f"{named} (acks=0) is not supported", outcome="unsupported")
        if self.unsupported_policy == "close":
            return Close("unsupported_request", f"{named} is not supported", outcome="unsupported")
        return Unsupported(size_prefix(4) + header.correlation_id.to_bytes(4, "big", signed=True))

    def _call(self, local: LocalApi, request: Request) -> LocalAnswer | Close:
        """Decode the request for a local API (once) and ask its handler."""
        header, raw = request.header, request.body
        decoded = None
        if local.decode:
            api = self.registry.api(header.api_key)
            body = request.decoded
            if body is None:  # changed by a filter: its new body
                body = Body(api, header.api_version, raw, self.leniency)
            try:
                decoded = body.decoded()
            except ProtocolError as exc:  # a body we cannot read: Kafka closes the connection too
                return Close("bad_request", f"{api.name} v{header.api_version}: {exc}")
        try:
            return local.handler(LocalRequest(header=header, body=decoded, raw=bytes(raw)), request.context)
        except ProtocolError as exc:  # a handler that reads the raw body found it unreadable
            return Close("bad_request", f"{local.name} v{header.api_version}: {exc}")

    def _patch_local(self, answer: LocalAnswer, patch: Patch, header: RequestHeader) -> LocalAnswer:
        """A local answer with the ACL patch applied (now, or when an answer-later comes)."""
        if isinstance(answer, Respond):
            return self._patch_respond(answer, patch, header)
        if isinstance(answer, Later):
            later = answer

            async def patched_later() -> Respond | LocalClose:
                done = await later.answer()
                return self._patch_respond(done, patch, header) if isinstance(done, Respond) else done

            when_ready = None
            if later.when_ready is not None:
                subscribe = later.when_ready

                def when_ready(callback: Callable[[Respond | LocalClose], None]) -> Callable[[], None]:
                    return subscribe(lambda done: callback(
                        self._patch_respond(done, patch, header) if isinstance(done, Respond) else done))

            return Later(answer=patched_later, hold=later.hold, when_ready=when_ready)
        return answer

    def _patch_respond(self, answer: Respond, patch: Patch, header: RequestHeader) -> Respond:
        if answer.raw:
            return answer
        if isinstance(answer.body, bytes):
            assert self.authorization is not None
            version = header.api_version if answer.version is None else answer.version
            patched = self.authorization.patched(patch, header.api_key, version, answer.body)
            return Respond(body=patched, version=answer.version)
        return Respond(body=patch(dict(answer.body)), version=answer.version)

    def encoded(self, header: RequestHeader | None, answer: Respond) -> bytes:
        """A local answer's frame: size, response header and body (a raw SASL token's:
        size and bytes); ``header`` is the request's (``None`` for a raw token)."""
        if answer.raw:
            assert isinstance(answer.body, bytes)
            return size_prefix(len(answer.body)) + answer.body
        assert header is not None
        spec = self.registry.api(header.api_key)
        version = header.api_version if answer.version is None else answer.version
        body = answer.body if isinstance(answer.body, bytes) else encode(spec.response, version, answer.body)
        head = encode_response_header(header.correlation_id, spec.response_header_version(version))
        return size_prefix(len(head) + len(body)) + head + body

    # -- responses --------------------------------------------------------------------------

    def streaming(self, header: RequestHeader, patch: Patch | None, gate: Gate | None,
                  throttle: Throttle | None = None) -> Streaming | None:
        """How the answer to ``header`` may go to the client while it arrives, or ``None``
        when a response filter needs it whole: an ACL patch, a client-quota throttle other
        than a Fetch's (:func:`~proxy.datapath.throttle.streams`), a gate reading the
        broker's answers, or broker addresses outside its tag section."""
        if patch is not None or (gate is not None and gate.reads_responses):
            return None
        if throttle is not None and not streams(header.api_key, header.api_version, throttle):
            return None
        return self.router.streaming(header)

    def response(self, header: RequestHeader, header_version: int, frame: memoryview,
                 patch: Patch | None, throttle: Throttle | None = None) -> bytes | memoryview | PatchLater | Close:
        """The answer the client gets for the broker's ``frame`` (size prefix included): the
        response filters that want ``header``'s API key, in order (broker addresses
        rewritten, then the ACL patch applied; a large patch is left to
        :meth:`patch_in_slices`)."""
        chain = self._responses_by_key.get(header.api_key)
        if chain is None:
            chain = self._responses_by_key[header.api_key] = tuple(
                f for f in self.response_filters if f.api_keys is None or header.api_key in f.api_keys)
        if not chain:
            return frame
        if patch is None and len(chain) == 1 and chain[0] is self._address_rewrite:
            try:  # the common answer: only its broker addresses to look at, no object made for it
                rewritten = self.router.rewrite_response(header, header_version, memoryview(frame)[4:])
            except ProtocolError as exc:
                return _unreadable(header, exc)
            return frame if rewritten is None else rewritten
        response = Response(header=header, header_version=header_version, frame=frame, patch=patch,
                            throttle=throttle)
        for link in chain:
            outcome = link.on_response(response)
            if outcome is None:
                continue
            if not isinstance(outcome, Response):
                return outcome
            response = outcome
        return response.frame

    def throttled(self, header: RequestHeader, header_version: int, frame: bytes, throttle: Throttle) -> bytes:
        """``frame`` with the client-quota throttle applied (after a patch in slices)."""
        if self._throttle_patch is None:
            return frame
        done = self._throttle_patch.on_response(Response(header=header, header_version=header_version, frame=frame,
                                                         throttle=throttle))
        return frame if done is None else bytes(done.frame)

    async def patch_in_slices(self, patch: Patch, header: RequestHeader, header_version: int,
                              data: bytes) -> bytes | Close:
        """:meth:`response`'s patch for a large answer, read a few elements at a time with
        scheduler passes between them, so that other connections are served meanwhile."""
        authorization = self.authorization
        assert authorization is not None
        try:
            head, body = _split(data, header_version)
            patched = await authorization.patched_in_slices(patch, header.api_key, header.api_version, body)
        except ProtocolError as exc:
            return _unreadable(header, exc)
        return _framed(head, patched)
