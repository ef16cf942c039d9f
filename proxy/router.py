"""Where each request goes: forwarded, answered by the sidecar, or refused.

:meth:`Router.decide` looks only at the header. Requests the sidecar answers itself
(ApiVersions, BrokerMetadata; later issues add quota admin, groups and features) are
handled here; everything else the broker supports is forwarded with its original bytes.
A key or version that neither the sidecar nor the broker supports is UNSUPPORTED: the
connection answers it (KIP-35) or closes, by policy.
"""

from __future__ import annotations

import logging
from enum import Enum
from typing import TYPE_CHECKING

from protocol.apis import API_VERSIONS
from protocol.framing import size_prefix
from protocol.headers import RequestHeader
from protocol.scan import response_header_size
from proxy.handlers import client_quotas, scram_credentials
from proxy.handlers.api_versions import advertised_ranges, handle_api_versions
from proxy.handlers.broker_metadata import handle_broker_metadata
from proxy.rewrite import Rewriter, rewrites_version

if TYPE_CHECKING:
    from proxy.connection import Connection
    from proxy.handlers.sasl import ListenerAuth, SaslGate
    from proxy.server import Sidecar

log = logging.getLogger(__name__)


#: ApiVersions answers kept per router (one per client software name/version and version).
MAX_CACHED_ANSWERS = 64

#: Quota admin APIs: answered here when they name the ip entity (KIP-612), else forwarded.
QUOTA_KEYS = frozenset({client_quotas.DESCRIBE_CLIENT_QUOTAS, client_quotas.ALTER_CLIENT_QUOTAS})


class Decision(Enum):
    """What happens to a request."""

    FORWARD = "forwarded"
    LOCAL = "local"
    UNSUPPORTED = "unsupported"


class Router:
    """Routing and response rewriting for the connections of one listener."""

    def __init__(self, sidecar: Sidecar, listener: str) -> None:
        self.sidecar = sidecar
        self.listener = listener
        self.registry = sidecar.registry
        self.local_keys = {API_VERSIONS, sidecar.registry.broker_metadata_key}
        if scram_credentials.answered_locally(sidecar):
            self.local_keys |= scram_credentials.KEYS
        #: SASL on this listener (``None`` on PLAINTEXT/SSL), and the SASL keys the sidecar
        #: answers itself there (terminate mode), advertised in ApiVersions.
        self.auth: ListenerAuth | None = None
        self.sasl_keys: frozenset[int] = frozenset()
        if sidecar.config.is_sasl(listener):
            from proxy.handlers.sasl import SASL_KEYS, ListenerAuth  # imports proxy.connection

            self.auth = ListenerAuth(sidecar, listener)
            self.sasl_keys = SASL_KEYS if self.auth.terminating else frozenset()
        self.rewriter = Rewriter(sidecar.address_book, listener, self._unmapped)
        # ApiVersions answers depend only on (version, request body) and what the broker
        # said (``upstream.info``, replaced whole on each refresh): built once, reused.
        self._versions_info: object = None
        self._versions_answers: dict[tuple[int, bytes], tuple[int, bytes]] = {}

    def decide(self, header: RequestHeader, body: memoryview | None = None) -> Decision:
        """FORWARD, LOCAL or UNSUPPORTED for this request (``body``: the frame after its size)."""
        key, version = header.api_key, header.api_version
        if key in QUOTA_KEYS and body is not None:
            info = self.sidecar.upstream.info
            broker_has = info is not None and key in info.api_versions
            if client_quotas.is_ours(self.registry, key, version, body[header.size :], broker_has):
                return Decision.LOCAL
        if key in self.local_keys:
            # ApiVersions answers every version itself (UNSUPPORTED_VERSION with a v0 body).
            api = self.registry.api(key)
            if key == API_VERSIONS or version in api.versions:
                return Decision.LOCAL
            return Decision.UNSUPPORTED
        info = self.sidecar.upstream.info
        if info is not None:
            span = info.api_versions.get(key)
            if span is not None and span[0] <= version <= span[1]:
                return Decision.FORWARD
            return Decision.UNSUPPORTED
        known = self.registry.get(key)
        return Decision.FORWARD if known is not None and version in known.versions else Decision.UNSUPPORTED

    async def answer(
        self, header: RequestHeader, body: memoryview, connection: Connection
    ) -> tuple[int, bytes]:
        """Answer a LOCAL request: ``(response version, response body)``."""
        if header.api_key in scram_credentials.KEYS:
            return header.api_version, await scram_credentials.handle(self.sidecar, connection, header, body)
        if header.api_key == client_quotas.DESCRIBE_CLIENT_QUOTAS:
            return header.api_version, await client_quotas.handle_describe(self.sidecar, header.api_version, body)
        if header.api_key == client_quotas.ALTER_CLIENT_QUOTAS:
            return header.api_version, await client_quotas.handle_alter(self.sidecar, header.api_version, body)
        if header.api_key == API_VERSIONS:
            info = self.sidecar.upstream.info
            if info is not self._versions_info:
                self._versions_info, self._versions_answers = info, {}
            key = (header.api_version, bytes(body))
            answer = self._versions_answers.get(key)
            if answer is None:
                ranges = advertised_ranges(
                    self.registry, info.api_versions if info else None, self.local_keys | QUOTA_KEYS | self.sasl_keys
                )
                features = info.api_versions_body if info is not None else None
                answer = handle_api_versions(self.registry, header.api_version, body, ranges, features)
                if len(self._versions_answers) < MAX_CACHED_ANSWERS:
                    self._versions_answers[key] = answer
            return answer
        me, others = self.sidecar.broker_entries(self.listener)
        return header.api_version, handle_broker_metadata(
            self.registry, header.api_version, body, me, others
        )

    def sasl_gate(self, connection: Connection) -> SaslGate | None:
        """A new connection's SASL gate (``None`` unless this is a SASL listener)."""
        return self.auth.gate(connection) if self.auth is not None else None

    def rewrite_response(
        self, header: RequestHeader, response_header_version: int, body: memoryview
    ) -> bytes | None:
        """A rewritten response frame, or ``None`` to send the original bytes."""
        api = self.registry.get(header.api_key)
        if api is None or not rewrites_version(api, header.api_version):
            return None
        head_size = response_header_size(body, response_header_version)
        result = self.rewriter.rewrite(api, header.api_version, body[head_size:])
        if result is None:
            return None
        metrics = self.sidecar.metrics
        if result.rewritten:
            metrics.rewrites.labels(api.name).inc()
        head = bytes(body[:head_size])  # the broker's own header, tags and all
        return size_prefix(len(head) + len(result.body)) + head + result.body

    def _unmapped(self, api_name: str, node_id: int) -> None:
        self.sidecar.metrics.unmapped.labels(api_name).inc()
        self.sidecar.log_unmapped(api_name, node_id)
