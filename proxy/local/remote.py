"""Local APIs answered by another process of the same sidecar (``sidecar.workers`` > 1).

A sidecar with several workers keeps one owner for the state that must not be split: the
embedded group coordinator, KIP-584 features, ACL administration, SCRAM credentials and
quota administration (docs/operations.md, "Workers"). A worker still decides everything
about the request itself (its own SASL session, the ACL filter, the operators' filters,
whether the entry ``takes`` it); only the handler moves. :func:`remote` swaps an entry's
handler for one that sends a :class:`RemoteCall` to the owner as the request is read, and answers
:class:`~proxy.local.api.Later` with what comes back, so the client's answer keeps its
place in the response order as any other answer-later does. A connection that sent calls
tells the owner when it ends (:meth:`Owner.connection_ended`), so what the owner's local APIs
keep per connection ends with it, as in a single process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from typing import Protocol

from proxy.local.api import Answer, Close, Context, Later, LocalApi, LocalRequest, Respond


@dataclass(frozen=True, kw_only=True, slots=True)
class RemoteCall:
    """One request for the owner: what its handler may know of the client, and the body."""

    listener: str
    peer: tuple[str, int]
    principal: str
    client_software: tuple[str, str] | None
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    #: The request body (after the header), as the client sent it.
    body: bytes


class Sent(Protocol):
    """A call on its way."""

    async def answer(self) -> Respond | Close:
        """The owner's answer (a :class:`Close` when it cannot be reached); cancelling the
        wait cancels the call."""
        ...

    def when_ready(self, callback: Callable[[Respond | Close], None]) -> Callable[[], None]:
        """Call ``callback`` with the answer when it comes; the function returned cancels
        the call instead."""
        ...


class Owner(Protocol):
    """The channel to the process that owns the sidecar-wide state."""

    def send(self, request: RemoteCall) -> Sent:
        """Send ``request`` now: calls reach the owner in the order they were read."""
        ...

    def connection_ended(self, listener: str, peer: tuple[str, int]) -> None:
        """A client connection that sent calls ended (after its last call and any cancel):
        the owner ends what its local APIs keep for it (share sessions)."""
        ...


#: The :attr:`Context.extra` key that says the owner will be told of the connection's end.
_ENDS_AT_OWNER = "remote.ends_at_owner"


def remote(entries: Iterable[LocalApi], owner: Owner) -> list[LocalApi]:
    """``entries`` with their handlers sent to ``owner``; the body is not decoded here."""
    return [replace(entry, handler=_Forwarded(owner), decode=False) for entry in entries]


class _Forwarded:
    """A handler that asks the owner (the entry's ``takes`` still runs where the client is)."""

    __slots__ = ("owner",)

    def __init__(self, owner: Owner) -> None:
        self.owner = owner

    def __call__(self, request: LocalRequest, context: Context) -> Answer:
        if not context.extra.get(_ENDS_AT_OWNER):  # the owner hears of this connection's end, once
            context.extra[_ENDS_AT_OWNER] = True
            context.closing.append(partial(self.owner.connection_ended, context.listener, context.peer))
        header = request.header
        call = RemoteCall(
            listener=context.listener, peer=context.peer, principal=context.principal,
            client_software=context.client_software, api_key=header.api_key,
            api_version=header.api_version, correlation_id=header.correlation_id,
            client_id=header.client_id, body=request.raw,
        )
        sent = self.owner.send(call)
        return Later(answer=sent.answer, when_ready=sent.when_ready)
