"""OAUTHBEARER through a passthrough sidecar (``sidecar.sasl.mode=passthrough``), at the
connection seam: memory streams, no real broker, trio's virtual clock.

No broker in the rig authenticates OAUTHBEARER (Tansu has no SASL; librdkafka's mock cluster
serves neither SaslHandshake nor SaslAuthenticate), so a fake broker stands in: it keeps
every frame it receives and answers the SASL requests as Kafka's broker would. The frames it
received must be the client's, byte for byte, and the client must read the broker's answers
as the broker wrote them: the sidecar forwards the exchange untouched, and the connection's
principal stays ``User:ANONYMOUS`` (an OAUTHBEARER token names no user the sidecar reads).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import trio
import trio.testing

from protocol.apis import ApiRegistry
from protocol.framing import encode_frame
from protocol.headers import decode_request_header
from protocol.schema import decode, encode
from proxy.auth.gate import ListenerAuth
from proxy.config.settings import ConnectionSettings, SaslSettings
from proxy.datapath.addressing import StaticAddressBook
from proxy.datapath.connection import Connection, Parts
from proxy.datapath.metrics import SidecarMetrics
from proxy.datapath.rewrite import Rewriter
from proxy.datapath.routing import Router
from proxy.local.api import Context
from proxy.local.ports import BrokerEntry, Ports, UpstreamInfo
from proxy.local.table import TableSpec, build_table
from tests.proxy.wire import our_decode, request_frame

LISTENER = "SASL_PLAINTEXT"
HANDSHAKE, AUTHENTICATE = 17, 36
# Any JWT-shaped bearer: the fake broker judges it, the sidecar must not look.
TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJzdmMtYSJ9.c2lnbmF0dXJl"
INITIAL = f"n,,\x01auth=Bearer {TOKEN}\x01host=broker\x01port=9092\x01\x01".encode()
ERROR_JSON = b'{"status":"invalid_token"}'


class NoUpstreamInfo:
    info: UpstreamInfo | None = None


class NoBrokers:
    def broker_entries(self, listener: str) -> tuple[BrokerEntry, list[BrokerEntry]]:
        return BrokerEntry(1, "h", 1), []


@dataclass
class OAuthBroker:
    """Kafka's side of OAUTHBEARER: accepts the bearer ``good``, refuses others with the
    error challenge, then SASL_AUTHENTICATION_FAILED; raw tokens after a v0 handshake."""

    good: str = TOKEN
    received: list[bytes] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)
    registry: ApiRegistry = field(default_factory=ApiRegistry)

    async def serve(self, stream: trio.abc.Stream) -> None:
        buffer, raw = b"", False
        while data := await stream.receive_some(65536):
            buffer += data
            while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">i", buffer[:4])[0]:
                size = struct.unpack(">i", buffer[:4])[0]
                frame, buffer = buffer[: 4 + size], buffer[4 + size :]
                self.received.append(frame)
                if raw:  # a v0 raw token: a raw answer (empty: accepted)
                    raw = False
                    answer = encode_frame(b"" if self._accepts(frame[4:]) else ERROR_JSON)
                else:
                    answer, raw = self._answer(frame[4:])
                self.sent.append(answer)
                await stream.send_all(answer)

    def _accepts(self, token: bytes) -> bool:
        return token.startswith(b"n,,\x01auth=Bearer " + self.good.encode() + b"\x01")

    def _answer(self, body: bytes) -> tuple[bytes, bool]:
        api_key, version, correlation_id = struct.unpack(">hhi", body[:8])
        api = self.registry.api(api_key)
        if api_key == HANDSHAKE:
            values = {"ErrorCode": 0, "Mechanisms": ["OAUTHBEARER"]}
            return encode_frame(struct.pack(">i", correlation_id) + encode(api.response, version, values)), version == 0
        assert api_key == AUTHENTICATE and version == 1, (api_key, version)
        header = decode_request_header(body, self.registry)
        token = bytes(decode(api.request, version, body[header.size :])["AuthBytes"])
        if token == b"\x01":  # the client's acknowledgement of the error challenge
            values = {"ErrorCode": 58, "ErrorMessage": ERROR_JSON.decode(), "AuthBytes": b"", "SessionLifetimeMs": 0}
        elif self._accepts(token):
            values = {"ErrorCode": 0, "ErrorMessage": None, "AuthBytes": b"", "SessionLifetimeMs": 60_000}
        else:
            values = {"ErrorCode": 0, "ErrorMessage": None, "AuthBytes": ERROR_JSON, "SessionLifetimeMs": 0}
        return encode_frame(struct.pack(">i", correlation_id) + encode(api.response, version, values)), False


@dataclass
class Harness:
    client: trio.abc.Stream
    broker: OAuthBroker
    context: Context
    decoder_buffer: bytes = b""

    async def call(self, frame: bytes) -> bytes:
        """Send one frame, read one whole answer frame (with its size prefix)."""
        await self.client.send_all(frame)
        while len(self.decoder_buffer) < 4 or len(self.decoder_buffer) < 4 + struct.unpack(">i", self.decoder_buffer[:4])[0]:
            data = await self.client.receive_some(65536)
            assert data, "the connection closed"
            self.decoder_buffer += data
        size = struct.unpack(">i", self.decoder_buffer[:4])[0]
        answer, self.decoder_buffer = self.decoder_buffer[: 4 + size], self.decoder_buffer[4 + size :]
        return answer


async def passthrough(nursery: trio.Nursery) -> Harness:
    registry = ApiRegistry()
    broker = OAuthBroker()
    auth = ListenerAuth(LISTENER, SaslSettings(terminate=False, mechanisms=("OAUTHBEARER",)),
                        lambda _user, _mechanism: None, lambda *_labels: None, has_zookeeper=False)
    router = Router(registry, build_table(registry, TableSpec()), NoUpstreamInfo(),
                    Rewriter(StaticAddressBook({}), LISTENER))

    async def open_upstream() -> trio.abc.Stream:
        ours, theirs = trio.testing.memory_stream_pair()
        nursery.start_soon(broker.serve, theirs)
        return ours

    parts = Parts(settings=ConnectionSettings(), registry=registry, router=router, metrics=SidecarMetrics(registry),
                  open_upstream=open_upstream, gate=lambda context: auth.gate(context, registry))
    client, server_side = trio.testing.memory_stream_pair()
    context = Context(listener=LISTENER, peer=("127.0.0.1", 5), ports=Ports(upstream=NoUpstreamInfo(), brokers=NoBrokers()))
    nursery.start_soon(Connection(parts, server_side, context).run)
    return Harness(client, broker, context)


async def test_v1_exchange_reaches_the_broker_untouched(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        h = await passthrough(nursery)
        sent = [request_frame(HANDSHAKE, 1, 1, {"Mechanism": "OAUTHBEARER"}),
                request_frame(AUTHENTICATE, 1, 2, {"AuthBytes": INITIAL})]
        answers = [await h.call(frame) for frame in sent]
        assert h.broker.received == sent  # the client's bytes, as sent
        assert answers == h.broker.sent  # the broker's bytes, as written
        _, body = our_decode(answers[1][4:], AUTHENTICATE, 1)
        assert (body.ErrorCode, body.SessionLifetimeMs) == (0, 60_000)
        assert h.context.principal == "User:ANONYMOUS"
        await h.client.aclose()


async def test_refused_token_challenge_and_ack_pass_untouched(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        h = await passthrough(nursery)
        h.broker.good = "another.token.entirely"
        sent = [request_frame(HANDSHAKE, 1, 1, {"Mechanism": "OAUTHBEARER"}),
                request_frame(AUTHENTICATE, 1, 2, {"AuthBytes": INITIAL}),
                request_frame(AUTHENTICATE, 1, 3, {"AuthBytes": b"\x01"})]
        answers = [await h.call(frame) for frame in sent]
        assert h.broker.received == sent and answers == h.broker.sent
        _, challenge = our_decode(answers[1][4:], AUTHENTICATE, 1)
        assert (challenge.ErrorCode, bytes(challenge.AuthBytes)) == (0, ERROR_JSON)
        _, final = our_decode(answers[2][4:], AUTHENTICATE, 1)
        assert (final.ErrorCode, final.ErrorMessage) == (58, ERROR_JSON.decode())
        assert h.context.principal == "User:ANONYMOUS"
        await h.client.aclose()


async def test_v0_raw_token_reaches_the_broker_untouched(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        h = await passthrough(nursery)
        sent = [request_frame(HANDSHAKE, 0, 1, {"Mechanism": "OAUTHBEARER"}), encode_frame(INITIAL)]
        answers = [await h.call(frame) for frame in sent]
        assert h.broker.received == sent and answers == h.broker.sent
        assert answers[1] == encode_frame(b"")  # the broker's raw answer: accepted
        assert h.context.principal == "User:ANONYMOUS"
        await h.client.aclose()
