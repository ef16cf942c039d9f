"""What the data path hands to observers: one finished exchange, raw frames and facts.

An :class:`Exchange` is built on the data path (one per request), so it holds plain
references only: the frames are slices of immutable bytes, safe to keep, never copied.
The facts of the connection it came over are one shared :class:`Link` (built once per
connection), not repeated per exchange. Both are frozen, keyword-only dataclasses: a
hand-off whose fields are named where it is built (STYLE.md, 10).

The worker turns an exchange into the :class:`~observers.api.RequestInfo` /
:class:`~observers.api.ResponseInfo` an observer gets (:meth:`Exchange.infos`), or hands
it as it is to an observer's ``record_exchange`` (raw exchanges, :mod:`observers.api`).
"""

from __future__ import annotations

from dataclasses import dataclass

from observers.api import ClientAddress, Correlation, RequestInfo, ResponseInfo
from protocol.headers import RequestHeader
from protocol.scan import response_header_size

Frame = bytes | memoryview


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """The connection an exchange came over (one per connection, shared by its exchanges)."""

    #: Unique per connection within one sidecar run (counts from 1).
    connection_id: int
    #: The sidecar listener the client connected to.
    listener: str
    #: The client's end of the TCP connection.
    client: ClientAddress
    #: The sidecar's broker id when the connection was accepted (-1 while not known).
    broker_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Exchange:
    """One request and what became of it, as the data path saw it. Read-only for everyone."""

    #: The connection it came over.
    link: Link
    #: Unique per request within one sidecar run (counts from 1).
    request_id: int
    #: The request's header (``size`` is where the body starts in ``frame``).
    header: RequestHeader
    #: The version of the response header (0 or 1, by API version: KIP-482).
    response_header_version: int
    #: ``User:<name>``, or ``User:ANONYMOUS``.
    principal: str
    #: ``(ClientSoftwareName, ClientSoftwareVersion)`` from the connection's ApiVersions v3+
    #: request, or ``None`` when the client has not sent one (yet).
    client_software: tuple[str, str] | None = None
    #: What the sidecar's ACLs refused of this request (``sidecar.authorizer=acls``):
    #: ``(resource type, name, operation, mode)`` each, mode ``enforce`` or ``shadow`` (in
    #: shadow mode nothing was refused: it would have been).
    denials: tuple[tuple[str, str, str, str], ...] = ()
    #: The request frame, size prefix included; ``None`` when it was not kept (secrets).
    frame: Frame | None
    #: Bytes of the request frame, size prefix included.
    request_size: int
    #: When the request was read, Unix seconds.
    received: float
    #: False for a Produce with ``acks=0``.
    expects_response: bool
    #: True when the sidecar answered the request itself.
    local: bool
    #: The response frame as sent, size prefix included, or ``None`` when none was.
    response: Frame | None
    #: Request read to response sent, seconds (meaningful when ``response`` is set).
    elapsed: float | None
    #: Request forwarded to broker response read, seconds (likewise; not when ``local``).
    upstream_elapsed: float | None

    def request_body(self) -> memoryview | None:
        """The request body (the frame after its size prefix and header); ``None`` when
        the frame was not kept."""
        if self.frame is None:
            return None
        return memoryview(self.frame)[4 + self.header.size :]

    def response_body(self) -> memoryview | None:
        """The response body (after size prefix and header); ``None`` when none was sent.
        Raises :class:`~protocol.errors.DecodeError` when the header is cut short."""
        if self.response is None:
            return None
        body = memoryview(self.response)[4:]
        if self.response_header_version >= 1 and len(body) > 4 and body[4] == 0:
            return body[5:]  # the usual header v1: correlation id, no tags
        return body[response_header_size(body, self.response_header_version) :]

    def infos(self) -> tuple[Correlation, RequestInfo, ResponseInfo]:
        """The facts as observers that take views get them."""
        link, header, response = self.link, self.header, self.response
        sent = response is not None
        request = RequestInfo(
            request_id=self.request_id, broker_id=link.broker_id, listener=link.listener,
            client_id=header.client_id, time=self.received, size=self.request_size,
            expects_response=self.expects_response, local=self.local,
        )
        answer = ResponseInfo(
            sent=sent, size=len(response) if response is not None else None,
            latency=self.elapsed if sent else None,
            upstream_latency=self.upstream_elapsed if sent and not self.local else None,
        )
        return Correlation(link.connection_id, header.correlation_id), request, answer


__all__ = ["Exchange", "Frame", "Link"]
