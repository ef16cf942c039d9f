"""Where each request goes: a local API, the broker, or an "unsupported" answer.

:meth:`Router.route` looks at the header (and, for entries with a ``takes`` predicate, at
the body): a request the listener's :class:`~proxy.local.api.LocalApiTable` takes is
answered by the sidecar; one the broker supports (as the control connection last learned
it) is forwarded with its original bytes; anything else is UNSUPPORTED, and the connection
answers it (KIP-35) or closes, by policy. Responses that name brokers are rewritten here
(:meth:`Router.rewrite_response`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from protocol.apis import Api, ApiRegistry
from protocol.errors import ProtocolError
from protocol.headers import RequestHeader
from protocol.scan import TagSectionFinder, Walker, before_tags, response_header_size
from protocol.schema import decode
from proxy.datapath.rewrite import SITES, Rewriter, rewrites_tags_only, rewrites_version
from proxy.local.api import Context, LocalApi, LocalApiTable
from proxy.local.ports import UpstreamView


class Route(enum.Enum):
    """Where a request goes when no local API takes it (:meth:`Router.route`); the value
    is the outcome label of ``ksidecar_requests_total``."""

    #: To the broker, with its original bytes.
    FORWARD = "forwarded"
    #: Nobody serves it: a KIP-35 answer, or the connection closed, by policy.
    UNSUPPORTED = "unsupported"
    #: The broker serves it but the sidecar cannot parse it: forwarded as it is
    #: (``sidecar.unparsed.request.policy=forward``).
    OPAQUE = "opaque"
    #: The same under ``sidecar.unparsed.request.policy=close``: the connection is closed.
    UNPARSED = "unparsed"


FORWARD = Route.FORWARD
UNSUPPORTED = Route.UNSUPPORTED
OPAQUE = Route.OPAQUE
UNPARSED = Route.UNPARSED


@dataclass(frozen=True, slots=True)
class Streaming:
    """How a response may go to the client while it arrives (cut-through, see
    ``Connection._stream_response``): the API and version it answers, and whether its
    top-level tag section can name a broker (then it is held back, and rewritten in its
    own length)."""

    api: Api
    version: int
    tags: bool

    def finder(self, body_size: int) -> TagSectionFinder | None:
        """The tag-section finder for a body of ``body_size`` bytes, or ``None`` (no tags)."""
        return TagSectionFinder(self.api.response, self.version, body_size) if self.tags else None


class Router:
    """Routing and response rewriting for the connections of one listener."""

    def __init__(
        self,
        registry: ApiRegistry,
        table: LocalApiTable,
        upstream: UpstreamView,
        rewriter: Rewriter,
        on_rewrite: Callable[[str], None] = lambda _api: None,
        *,
        unparsed_policy: str = "answer",
    ) -> None:
        self.registry = registry
        self.table = table
        self.upstream = upstream
        self.rewriter = rewriter
        self._on_rewrite = on_rewrite
        #: :meth:`_quick_check` by ``(api_key, api_version)``.
        self._quick: dict[tuple[int, int], Walker | bool] = {}
        #: ``sidecar.unparsed.request.policy``: ``answer``, ``forward`` or ``close``.
        self.unparsed_policy = unparsed_policy

    def route(self, header: RequestHeader, body: memoryview, context: Context,
              decoded: Callable[[], Mapping[str, Any] | None] | None = None) -> LocalApi | Route:
        """The local API that answers this request, or a :class:`Route`.

        A request the broker advertises but the sidecar cannot parse goes by
        ``sidecar.unparsed.request.policy``: answered as unsupported (``answer``), forwarded
        opaque (``forward``; never an API whose answers name brokers: it could not be
        rewritten), or the connection closed (``close``). ``body`` is the frame after its
        size (header included); ``decoded()`` gives its body decoded for an entry's ``takes``
        (``None``: it cannot be; by default decoded here).
        """
        key, version = header.api_key, header.api_version
        local = self.table.get(key)
        if local is not None and (
            local.takes is None
            or local.takes(header, decoded() if decoded is not None else self._decoded(header, body), context)
        ):
            if local.any_version or local.versions[0] <= version <= local.versions[1]:
                return local
            return UNSUPPORTED
        return self._broker_route(key, version)

    def _broker_route(self, key: int, version: int) -> Route:
        """:meth:`route` for a request no local API takes: by what the broker serves."""
        info = self.upstream.info
        if info is not None:
            span = info.api_versions.get(key)
            if span is None or not span[0] <= version <= span[1]:
                return UNSUPPORTED
            known = self.registry.get(key)
            if known is not None and version in known.versions:
                return FORWARD
            policy = self.unparsed_policy
            if policy == "forward" and key not in SITES:
                return OPAQUE
            return UNPARSED if policy == "close" else UNSUPPORTED
        known = self.registry.get(key)
        return FORWARD if known is not None and version in known.versions else UNSUPPORTED

    def forwards(self, api_key: int, api_version: int) -> bool:
        """True when every request of this key and version is forwarded (:data:`FORWARD`)
        whatever its body and sender: no local API takes the key, and :meth:`route` says so."""
        if self.table.get(api_key) is not None:
            return False
        return self._broker_route(api_key, api_version) is FORWARD

    def _decoded(self, header: RequestHeader, body: memoryview) -> Mapping[str, Any] | None:
        api = self.registry.get(header.api_key)
        if api is None or header.api_version not in api.versions:
            return None
        try:
            decoded: Mapping[str, Any] = decode(api.request, header.api_version, body[header.size :])
        except ProtocolError:
            return None
        return decoded

    def streaming(self, header: RequestHeader) -> Streaming | None:
        """How a response to ``header`` may be forwarded as it arrives, or ``None`` when
        it must be read whole first (its broker entries are rewritten by decoding it).
        Responses the sidecar does not parse (``sidecar.unparsed.request.policy=forward``)
        are never streamed: they are small, and rare."""
        api = self.registry.get(header.api_key)
        if api is None or header.api_version not in api.versions:
            return None
        if not rewrites_version(api, header.api_version):
            return Streaming(api, header.api_version, tags=False)
        if rewrites_tags_only(api, header.api_version):
            return Streaming(api, header.api_version, tags=True)
        return None

    def _quick_check(self, api_key: int, api_version: int) -> Walker | bool:
        """How :meth:`rewrite_response` looks at an answer of this key and version first:
        ``False`` (it cannot name a broker), the walker to its top-level tag section (only
        those tags can), or ``True`` (read it whole)."""
        api = self.registry.get(api_key)
        if api is None or not rewrites_version(api, api_version):
            return False
        if rewrites_tags_only(api, api_version):
            walker = before_tags(api.response, api_version)
            if walker is not None:
                return walker
        return True

    def rewrite_section(self, streaming: Streaming, section: bytes) -> bytes | None:
        """A streamed response's top-level tag section rewritten in its own length, or
        ``None`` to send the broker's (see :meth:`Rewriter.rewrite_section`)."""
        result = self.rewriter.rewrite_section(streaming.api, streaming.version, section)
        if result is None:
            return None
        if result.rewritten:
            self._on_rewrite(streaming.api.name)
        return result.body

    def rewrite_response(
        self, header: RequestHeader, response_header_version: int, body: memoryview
    ) -> bytes | None:
        """A rewritten response frame, or ``None`` to send the original bytes."""
        key = (header.api_key, header.api_version)
        quick = self._quick.get(key)
        if quick is None:
            quick = self._quick[key] = self._quick_check(*key)
        if quick is False:
            return None
        if quick is not True and response_header_version >= 1 and len(body) > 5 and body[4] == 0:
            # Names a broker only in its top-level tags (Produce, Fetch): when that section is
            # empty and ends the body, the answer goes as it came (most answers); anything
            # else is read below, the same bytes again, errors and all.
            end = len(body)
            try:
                at = quick(body, 5, end)
            except ProtocolError:
                at = -1
            if at == end - 1 and body[at] == 0:
                return None
        api = self.registry.api(header.api_key)
        head_size = response_header_size(body, response_header_version)
        result = self.rewriter.rewrite(api, header.api_version, body[head_size:])
        if result is None:
            return None
        if result.rewritten:
            self._on_rewrite(api.name)
        return result.framed(bytes(body[:head_size]))  # the broker's own header, tags and all
