"""The owner's side of a remote local-API call (proxy/control/owner.py), the table's remote
entries (proxy/local/remote.py) and the hand-off channel (proxy/control/handoff.py), without
processes (the worker count: test_worker_count.py)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from protocol.apis import DESCRIBE_CLIENT_QUOTAS, FIND_COORDINATOR, ApiRegistry
from protocol.headers import RequestHeader
from protocol.leniency import Leniency
from protocol.schema import decode, encode
from proxy.control import handoff
from proxy.control.owner import OwnerService
from proxy.control.quota_state import IpQuotas
from proxy.local.api import Close, Context, Later, LocalRequest, Respond
from proxy.local.api_versions import ApiVersionsApi
from proxy.local.ports import Ports, UpstreamInfo
from proxy.local.remote import RemoteCall
from proxy.local.table import TableSpec, build_table

REGISTRY = ApiRegistry()


class _Upstream:
    info: UpstreamInfo | None = None


class _Brokers:
    def broker_entries(self, listener: str) -> tuple[Any, list[Any]]:
        raise AssertionError("not asked")


def _ports() -> Ports:
    return Ports(upstream=_Upstream(), brokers=_Brokers(), quotas=IpQuotas(0.0, {"127.0.0.7": 5.0}, None))


def _describe_ip(ip: str) -> bytes:
    api = REGISTRY.api(DESCRIBE_CLIENT_QUOTAS)
    return encode(api.request, 1, {"Components": [{"EntityType": "ip", "MatchType": 0, "Match": ip}],
                                   "Strict": False})


async def _answer(owner: OwnerService, call: RemoteCall) -> Respond | Close:
    begun = owner.begin(call)
    return begun if isinstance(begun, Respond | Close) else await begun()


def _call(api_key: int, body: bytes, version: int = 1) -> RemoteCall:
    return RemoteCall(listener="PLAINTEXT", peer=("127.0.0.1", 5), principal="User:ANONYMOUS",
                      client_software=None, api_key=api_key, api_version=version, correlation_id=3,
                      client_id="admin", body=body)


async def test_the_owner_answers_with_the_handler_and_encodes_the_body() -> None:
    owner = OwnerService(REGISTRY, TableSpec(), _ports(), Leniency())
    answer = await _answer(owner, _call(DESCRIBE_CLIENT_QUOTAS, _describe_ip("127.0.0.7")))
    assert isinstance(answer, Respond) and isinstance(answer.body, bytes)
    body = decode(REGISTRY.api(DESCRIBE_CLIENT_QUOTAS).response, 1, answer.body)
    assert body["ErrorCode"] == 0
    [entry] = body["Entries"]
    assert [(e["EntityType"], e["EntityName"]) for e in entry["Entity"]] == [("ip", "127.0.0.7")]
    assert [(v["Key"], v["Value"]) for v in entry["Values"]] == [("connection_creation_rate", 5.0)]


async def test_the_owner_closes_for_what_it_does_not_own_and_for_an_unreadable_body() -> None:
    owner = OwnerService(REGISTRY, TableSpec(), _ports(), Leniency())
    not_owned = await _answer(owner, _call(FIND_COORDINATOR, b""))  # groups not embedded here
    assert isinstance(not_owned, Close) and not_owned.reason == "owner_refused"
    unreadable = await _answer(owner, _call(DESCRIBE_CLIENT_QUOTAS, b"\x00\x00\x00\x09"))
    assert isinstance(unreadable, Close) and unreadable.reason == "bad_request"


async def test_a_workers_table_sends_the_owned_apis_and_keeps_its_own() -> None:
    sent: list[RemoteCall] = []

    class Answer:
        async def answer(self) -> Respond | Close:
            return Respond(body=b"answered")

        def when_ready(self, callback: Callable[[Respond | Close], None]) -> Callable[[], None]:
            callback(Respond(body=b"answered"))
            return lambda: None

    ended: list[tuple[str, tuple[str, int]]] = []

    class Owner:
        def send(self, request: RemoteCall) -> Answer:
            sent.append(request)  # at once, when the handler runs: calls leave in order
            return Answer()

        def connection_ended(self, listener: str, peer: tuple[str, int]) -> None:
            ended.append((listener, peer))

    local = build_table(REGISTRY, TableSpec(groups=True))
    remote = build_table(REGISTRY, TableSpec(groups=True, owner=Owner()))
    assert remote.served() == local.served()  # ApiVersions advertises the same either way
    entry = remote.get(DESCRIBE_CLIENT_QUOTAS)
    assert entry is not None and entry.decode is False
    header = RequestHeader(api_key=DESCRIBE_CLIENT_QUOTAS, api_version=1, correlation_id=11, client_id="x",
                           header_version=2, size=0)
    context = Context(listener="SASL", peer=("10.0.0.1", 9), ports=_ports(), principal="User:bob",
                      client_software=("kcat", "1.7"))
    later = entry.handler(LocalRequest(header=header, body=None, raw=b"raw body"), context)
    assert isinstance(later, Later) and not later.hold
    assert len(sent) == 1  # sent before its answer is awaited
    assert await later.answer() == Respond(body=b"answered")
    assert later.when_ready is not None
    taken: list[Respond | Close] = []
    later.when_ready(taken.append)
    assert taken == [Respond(body=b"answered")]
    assert sent == [RemoteCall(listener="SASL", peer=("10.0.0.1", 9), principal="User:bob",
                               client_software=("kcat", "1.7"), api_key=DESCRIBE_CLIENT_QUOTAS, api_version=1,
                               correlation_id=11, client_id="x", body=b"raw body")]
    versions = remote.get(18)  # ApiVersions stays in the worker
    assert versions is not None and isinstance(getattr(versions.handler, "__self__", None), ApiVersionsApi)
    # A second call on the same connection hooks its end no second time; the owner hears
    # of the end once, naming the connection, when the connection ends.
    entry.handler(LocalRequest(header=header, body=None, raw=b"again"), context)
    assert len(sent) == 2 and ended == []
    context.end()
    assert ended == [("SASL", ("10.0.0.1", 9))]
    context.end()
    assert ended == [("SASL", ("10.0.0.1", 9))]


def _hooking(log: list[str], name: str) -> Any:
    """A local API that keeps a per-connection fact and hooks the connection's end once,
    as the share APIs do (proxy/local/shares.py ``_hooked``)."""
    def handler(request: LocalRequest, context: Context) -> Respond:
        calls = context.extra.get("calls", 0) + 1
        context.extra["calls"] = calls
        if calls == 1:
            context.closing.append(lambda: log.append(f"{name} {context.peer[1]} ended"))
        return Respond(body={"ErrorCode": 0, "Entries": [], "ThrottleTimeMs": calls})
    return handler


async def test_the_calls_of_one_client_connection_share_what_the_owner_keeps_until_it_ends() -> None:
    from dataclasses import replace

    owner = OwnerService(REGISTRY, TableSpec(), _ports(), Leniency())
    log: list[str] = []
    entry = owner.table.get(DESCRIBE_CLIENT_QUOTAS)
    assert entry is not None
    owner.table = type(owner.table)([replace(entry, handler=_hooking(log, "quotas"))])
    worker = owner.worker("worker 0")
    api = REGISTRY.api(DESCRIBE_CLIENT_QUOTAS)

    def throttle(call: RemoteCall) -> int:  # the handler's count of calls on that connection
        begun = worker.begin(call)
        assert isinstance(begun, Respond) and isinstance(begun.body, bytes)
        return int(decode(api.response, 1, begun.body)["ThrottleTimeMs"])

    first = _call(DESCRIBE_CLIENT_QUOTAS, _describe_ip("127.0.0.7"))
    other = replace(first, peer=("127.0.0.1", 6))
    assert [throttle(first), throttle(first), throttle(other)] == [1, 2, 1]
    worker.ended("PLAINTEXT", ("127.0.0.1", 5))
    assert log == ["quotas 5 ended"]
    worker.ended("PLAINTEXT", ("127.0.0.1", 5))  # told twice: nothing more
    assert log == ["quotas 5 ended"]
    assert throttle(first) == 1  # a new connection from the same address starts afresh
    worker.close()  # the worker's channel ended: so did both connections still open
    assert sorted(log) == ["quotas 5 ended", "quotas 5 ended", "quotas 6 ended"]
    assert worker.kept == {}
    # The plain begin (no worker) keeps nothing between calls.
    assert [_count(owner, first), _count(owner, first)] == [1, 1]


def _count(owner: OwnerService, call: RemoteCall) -> int:
    begun = owner.begin(call)
    assert isinstance(begun, Respond) and isinstance(begun.body, bytes)
    return int(decode(REGISTRY.api(DESCRIBE_CLIENT_QUOTAS).response, 1, begun.body)["ThrottleTimeMs"])


def test_a_closing_callback_that_fails_costs_only_its_log_line(caplog: pytest.LogCaptureFixture) -> None:
    called: list[int] = []

    def broken() -> None:
        raise RuntimeError("a bug")

    context = Context(listener="PLAINTEXT", peer=("127.0.0.1", 1), ports=_ports())
    context.closing.extend([lambda: called.append(1), broken, lambda: called.append(3)])
    context.end()
    assert called == [1, 3]
    assert "connection-closed callback failed" in caplog.text


async def test_a_socket_travels_with_its_message_and_still_carries_the_connection() -> None:
    ours, theirs = handoff.pair()
    a, b = socket.socketpair()
    with ours, theirs, a, b:
        sender, receiver = trio.socket.from_stdlib_socket(ours), trio.socket.from_stdlib_socket(theirs)
        await handoff.send(sender, {"op": "connection", "id": 4, "listener": "PLAINTEXT"}, a.fileno())
        a.close()  # the sender's copy: the connection lives on in the received one
        received = await handoff.receive(receiver)
        assert received is not None
        message, fd = received
        assert message == {"op": "connection", "id": 4, "listener": "PLAINTEXT"} and fd is not None
        with socket.socket(fileno=fd) as handed:
            handed.sendall(b"ping")
            assert b.recv(4) == b"ping"
        await handoff.send(sender, {"op": "drain"})
        assert await handoff.receive(receiver) == ({"op": "drain"}, None)


async def test_a_datagram_that_is_not_a_message_is_refused_and_its_socket_closed() -> None:
    ours, theirs = handoff.pair()
    a, b = socket.socketpair()
    with ours, theirs, a, b:
        sender, receiver = trio.socket.from_stdlib_socket(ours), trio.socket.from_stdlib_socket(theirs)
        await sender.sendmsg([b"[1, 2]"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, a.fileno().to_bytes(4, "little"))])
        a.close()
        with pytest.raises(handoff.HandOffError, match="not a message"):
            await handoff.receive(receiver)
        assert b.recv(1) == b""  # the only other copy was closed: the peer sees the end
        ours.close()
        assert await handoff.receive(receiver) is None


async def test_a_worker_that_exits_with_a_pong_unread_still_delivers_its_last_message() -> None:
    """The drain race of a fresh clone: the worker sends "drained" and exits while the
    supervisor's "pong" is queued for it, unread. Linux reports that as ECONNRESET once,
    before the queued "drained"; the channel reads on: "drained", then the end."""
    supervisor_end, worker_end = handoff.pair()
    with supervisor_end:
        channel = handoff.Channel(supervisor_end)
        worker = trio.socket.from_stdlib_socket(worker_end)
        await handoff.send(worker, {"op": "drained", "abandoned": 0})
        await channel.send({"op": "pong"})
        worker.close()
        assert await channel.receive() == ({"op": "drained", "abandoned": 0}, None)
        assert await channel.receive() is None


async def test_many_tasks_send_on_one_channel_past_a_full_queue(autojump_clock: trio.testing.MockClock) -> None:
    """Connections closing together each report it: sends wait their turn, none fails
    (a datagram queue holds ``net.unix.max_dgram_qlen`` messages, 10 by default)."""
    ours, theirs = handoff.pair()
    sender, receiver = handoff.Channel(ours), handoff.Channel(theirs)
    got: list[int] = []
    async with trio.open_nursery() as nursery:
        for n in range(200):
            nursery.start_soon(sender.send, {"op": "closed", "id": n})
        await trio.sleep(0.05)  # the queue is full and senders wait
        while len(got) < 200:
            received = await receiver.receive()
            assert received is not None
            got.append(received[0]["id"])
    assert sorted(got) == list(range(200))
    sender.close()
    assert await receiver.receive() is None
    receiver.close()
