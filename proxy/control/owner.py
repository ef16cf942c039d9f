"""The owner's side of a remote local-API call (:mod:`proxy.local.remote`).

The supervisor of a sidecar with several workers owns the sidecar-wide state: the
embedded coordinator, features, ACL, SCRAM and quota administration. A worker that reads
one of their requests sends it here; :class:`OwnerService` answers it with the very
handlers a single-process sidecar runs, under a :class:`~proxy.local.api.Context` rebuilt
from what the worker knew of the client (listener, address, principal, software), and
returns the answer's body encoded, ready for the worker to frame.

What a local API keeps per client connection (``Context.extra``, ``Context.closing``: a
share session ends with its connection) lives here in a :class:`WorkerConnections`, one per
worker: the calls of one client connection share it, and it ends when the worker says the
connection ended, or when the worker's channel does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from protocol.apis import ApiRegistry
from protocol.errors import ProtocolError
from protocol.headers import RequestHeader
from protocol.leniency import Leniency
from protocol.schema import encode
from proxy.local.api import (
    Close,
    Context,
    Later,
    LocalApiTable,
    LocalRequest,
    Respond,
    connection_ended,
)
from proxy.local.ports import Ports
from proxy.local.remote import RemoteCall
from proxy.local.table import TableSpec, owned_entries


class OwnerService:
    """Answers the owned local APIs for every worker."""

    def __init__(self, registry: ApiRegistry, spec: TableSpec, ports: Ports, leniency: Leniency) -> None:
        self.registry = registry
        self.ports = ports
        self.leniency = leniency
        self.table = LocalApiTable(owned_entries(registry, spec))

    def worker(self, name: str) -> WorkerConnections:
        """The client connections of the worker ``name`` (one per call channel)."""
        return WorkerConnections(self, name)

    def begin(self, call: RemoteCall, kept: Kept | None = None) -> Respond | Close | Callable[[], Awaitable[Respond | Close]]:
        """Run the API's handler for ``call`` now, as a single process runs it when the
        request is read (calls begin in the order they arrive, so the shared state changes
        in the order the client asked); an answer-later is returned to be awaited. Bodies
        come back encoded. ``kept``: what the handlers keep for the call's client connection
        (none: a context of its own)."""
        entry = self.table.get(call.api_key)
        named = f"api key {call.api_key} v{call.api_version}"
        if entry is None:  # the worker's table and ours are built from one configuration
            return Close(reason="owner_refused", detail=f"{named} is not served by the sidecar's owner process")
        api = self.registry.api(call.api_key)
        try:
            body = self.leniency.request(api, call.api_version, call.body) if entry.decode else None
        except ProtocolError as exc:
            return Close(reason="bad_request", detail=f"{api.name} v{call.api_version}: {exc}")
        header = RequestHeader(api_key=call.api_key, api_version=call.api_version,
                               correlation_id=call.correlation_id, client_id=call.client_id,
                               header_version=0, size=0)
        context = Context(listener=call.listener, peer=call.peer, ports=self.ports, principal=call.principal,
                          client_software=call.client_software)
        if kept is not None:
            context.extra, context.closing = kept.extra, kept.closing
        try:
            answer = entry.handler(LocalRequest(header=header, body=body, raw=call.body), context)
        except ProtocolError as exc:
            return Close(reason="bad_request", detail=f"{entry.name} v{call.api_version}: {exc}")
        if isinstance(answer, Later):
            later = answer.answer

            async def finish() -> Respond | Close:
                return self._finished(await later(), call)

            return finish
        return self._finished(answer, call)

    def _finished(self, answer: Respond | Close, call: RemoteCall) -> Respond | Close:
        if isinstance(answer, Respond):
            return self._encoded(answer, call)
        if answer.answer is not None:
            return Close(reason=answer.reason, detail=answer.detail, answer=self._encoded(answer.answer, call),
                         linger=answer.linger)
        return answer

    def _encoded(self, answer: Respond, call: RemoteCall) -> Respond:
        if isinstance(answer.body, bytes):
            return answer
        version = call.api_version if answer.version is None else answer.version
        return Respond(body=encode(self.registry.api(call.api_key).response, version, answer.body),
                       version=answer.version)


@dataclass(slots=True)
class Kept:
    """What the owner's local APIs keep for one client connection of a worker."""

    extra: dict[str, Any] = field(default_factory=dict)
    closing: list[Callable[[], None]] = field(default_factory=list)


class WorkerConnections:
    """The client connections of one worker that made calls, each with what is kept for it
    until the worker says it ended (:meth:`ended`) or the worker's channel ends
    (:meth:`close`): then its ``closing`` callbacks run, as a single process runs them."""

    def __init__(self, service: OwnerService, name: str) -> None:
        self.service = service
        self.name = name
        self.kept: dict[tuple[str, tuple[str, int]], Kept] = {}

    def begin(self, call: RemoteCall) -> Respond | Close | Callable[[], Awaitable[Respond | Close]]:
        """:meth:`OwnerService.begin` with what is kept for the call's client connection."""
        kept = self.kept.get((call.listener, call.peer))
        if kept is None:
            kept = self.kept[(call.listener, call.peer)] = Kept()
        return self.service.begin(call, kept)

    def ended(self, listener: str, peer: tuple[str, int]) -> None:
        """The worker's client connection at ``peer`` on ``listener`` ended."""
        kept = self.kept.pop((listener, peer), None)
        if kept is not None:
            connection_ended(kept.closing)

    def close(self) -> None:
        """The worker's channel ended: so did every connection it served."""
        kept, self.kept = self.kept, {}
        for each in kept.values():
            connection_ended(each.closing)
