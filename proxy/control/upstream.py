"""The broker behind the sidecar: opening links, and what the control connection learns.

Every client connection gets its own upstream connection (:meth:`Upstream.connect`).
One more, the *control connection*, asks the broker for its ApiVersions and its Metadata
at start and every ``sidecar.upstream.api.versions.refresh.ms``: the sidecar answers
ApiVersions from the intersection of that with what it can parse, and learns its own
broker id when ``broker.id`` is -1. When the broker authenticates clients
(``sidecar.sasl.mode=passthrough``), the control connection logs in first with
``sidecar.upstream.sasl.*`` (:class:`Login`); client connections authenticate themselves.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from typing import Any

import construct as c
import trio

from coordinator.topics import TopicInfo
from protocol.apis import (
    API_VERSIONS,
    DEFAULT_REGISTRY,
    METADATA,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    ApiRegistry,
)
from protocol.errors import ProtocolError
from protocol.framing import EOF, NEED_DATA, FrameDecoder, encode_frame
from protocol.headers import decode_response_header, encode_request_header
from protocol.leniency import QUIET, Leniency
from protocol.schema import encode
from proxy.auth.sasl.client import login_client
from proxy.auth.sasl.errors import SaslError
from proxy.config import HostPort, SidecarConfig
from proxy.config.keys import ConfigError
from proxy.control.topic_reader import TopicReader
from proxy.datapath.errors import UpstreamError
from proxy.datapath.slices import Slicer
from proxy.local.ports import BrokerAddress, UpstreamInfo

log = logging.getLogger(__name__)

CLIENT_ID = "ksidecar-control"
#: How often the broker is asked again while it does not answer (seconds).
FAST_RECHECK = 0.5
#: The coordinator's topic refresh reads this many topics of an answer at a time.
TOPICS_PER_STEP = 256


@dataclass(frozen=True, repr=False)
class Login:
    """The control connection's SASL login (its ``repr`` hides the password)."""

    mechanism: str
    username: str
    password: str

    def __repr__(self) -> str:
        return f"Login({self.mechanism}, {self.username!r})"


def upstream_login(config: SidecarConfig) -> Login | None:
    """The control connection's login from ``sidecar.upstream.sasl.*`` (``None``: none)."""
    mechanism = config["sidecar.upstream.sasl.mechanism"]
    if not mechanism:
        return None
    return Login(mechanism, config["sidecar.upstream.sasl.username"], config["sidecar.upstream.sasl.password"])


class Upstream:
    """Opens connections to the broker and keeps :attr:`info` current."""

    def __init__(
        self,
        address: HostPort,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        connect_timeout: float = 10.0,
        registry: ApiRegistry = DEFAULT_REGISTRY,
        login: Login | None = None,
        leniency: Leniency = QUIET,
    ) -> None:
        self.address = address
        #: Reads the broker's answers by the sidecar's one rule (docs/protocol.md, "Leniency").
        self.leniency = leniency
        self.login = login
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname or address.host
        self.connect_timeout = connect_timeout
        self.registry = registry
        self._topics = TopicReader(registry.api(METADATA).response)
        self.info: UpstreamInfo | None = None
        self.healthy = False
        #: The idle control connection kept open while the broker answers (watched).
        self.link: trio.abc.Stream | None = None
        self._learned = trio.Event()
        self._recheck = trio.Event()
        self._correlation = 0

    def sibling(self, address: HostPort) -> Upstream:
        """An :class:`Upstream` for another broker of the same cluster, at ``address`` (as
        the broker's Metadata names it on the sidecar's listener): this one's TLS context
        (the certificate checked against ``address``'s host), login, timeout, registry and
        leniency. It learns nothing by itself; :meth:`connect` is what it is for."""
        return Upstream(address, ssl_context=self.ssl_context, connect_timeout=self.connect_timeout,
                        registry=self.registry, login=self.login, leniency=self.leniency)

    async def connect(self) -> trio.abc.Stream:
        """A new connection to the broker (TLS if configured); raises :class:`UpstreamError`."""
        try:
            with trio.fail_after(self.connect_timeout):
                stream: trio.abc.Stream = await trio.open_tcp_stream(
                    self.address.host, self.address.port
                )
                if self.ssl_context is not None:
                    tls = trio.SSLStream(
                        stream, self.ssl_context, server_hostname=self.server_hostname
                    )
                    await tls.do_handshake()
                    stream = tls
                return stream
        except trio.TooSlowError:
            raise UpstreamError(
                f"broker {self.address} did not accept a connection within {self.connect_timeout:g}s"
            ) from None
        except (OSError, trio.BrokenResourceError, ssl.SSLError) as exc:
            raise UpstreamError(f"broker {self.address} unreachable: {exc}") from None

    async def call(
        self, stream: trio.abc.Stream, api_key: int, version: int, body: dict[str, Any]
    ) -> c.Container:
        """Send one request on ``stream`` and decode its response (control use only)."""
        raw = await self.exchange(stream, api_key, version, body)
        return self.leniency.response(self.registry.api(api_key), version, raw)[0]

    async def exchange(
        self, stream: trio.abc.Stream, api_key: int, version: int, body: dict[str, Any]
    ) -> memoryview:
        """Send one request on ``stream``; its response's body, after the header, undecoded."""
        api = self.registry.api(api_key)
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation_id = self._correlation
        header = encode_request_header(
            api_key, version, correlation_id, CLIENT_ID, api.request_header_version(version)
        )
        await stream.send_all(encode_frame(header + encode(api.request, version, body)))
        decoder = FrameDecoder()
        while True:
            frame = decoder.next_frame()
            if frame is NEED_DATA:
                data = await stream.receive_some(65536)
                decoder.receive_data(data)
                continue
            if frame is EOF:
                raise UpstreamError(f"broker {self.address} closed the control connection")
            body_bytes = memoryview(frame)[4:]
            got, size = decode_response_header(body_bytes, api.response_header_version(version))
            if got != correlation_id:
                raise UpstreamError(f"control connection: correlation id {got}, expected {correlation_id}")
            return body_bytes[size:]

    async def learn(self, keep: bool = False) -> UpstreamInfo:
        """Ask the broker for its ApiVersions and Metadata; store and return what it said.

        ``keep``: leave the control connection open and make it :attr:`link`, so that
        :meth:`refresh_forever` notices at once when the broker goes away.
        """
        stream = await self.connect()
        kept = False
        try:
            with trio.fail_after(self.connect_timeout):
                versions_body = await self._api_versions(stream)
                if self.login is not None:
                    await self._log_in(stream, self.login)
                ranges = {
                    k.ApiKey: (k.MinVersion, k.MaxVersion) for k in versions_body.ApiKeys
                }
                brokers, cluster_id = await self._metadata(stream, ranges)
            if keep:
                await self._drop_link()
                self.link, kept = stream, True
        except trio.TooSlowError:
            raise UpstreamError(f"broker {self.address} did not answer the control requests in time") from None
        except (ProtocolError, trio.BrokenResourceError, OSError) as exc:
            raise UpstreamError(f"broker {self.address} control exchange failed: {exc}") from None
        finally:
            if not kept:
                await trio.aclose_forcefully(stream)
        shadowed = self.registry.broker_metadata_key
        ours = self.registry.api(shadowed).versions
        if shadowed in ranges and ranges[shadowed] != (ours.lo, ours.hi):
            # (The same range at the same key is BrokerMetadata itself: a sidecar in front
            # of another sidecar, as in a passthrough chain.)
            lo, hi = ranges[shadowed]
            message = (f"the broker {self.address} advertises API key {shadowed} (v{lo}-{hi}), which "
                       f"sidecar.broker.metadata.api.key={shadowed} gives to BrokerMetadata: the sidecar "
                       "would answer the broker's API itself; choose another key (93-32767)")
            if self.info is None:
                raise ConfigError(message)  # at start: refuse to serve
            log.error("%s (the sidecar keeps answering BrokerMetadata on it)", message)
        node_id = self._own_node_id(brokers)
        self.info = UpstreamInfo(ranges, versions_body, brokers, cluster_id, node_id)
        if not self.healthy:
            log.info("upstream %s answers: ready", self.address)
        self.healthy = True
        self._learned.set()
        return self.info

    def report_failure(self, why: str, unreachable: bool) -> None:
        """The data path could not reach the broker, or a link broke: re-check at once.

        A failed dial marks the sidecar not ready straight away; a broken link only
        triggers the re-check (one client's link can break while the broker is fine).
        """
        if unreachable:
            if self.healthy:
                log.warning("upstream %s: %s: not ready until it answers again", self.address, why)
            self.healthy = False
        self._recheck.set()

    async def _drop_link(self) -> None:
        if self.link is not None:
            await trio.aclose_forcefully(self.link)
            self.link = None

    async def wait_learned(self) -> UpstreamInfo:
        """The first answer of the control connection, once it came."""
        await self._learned.wait()
        assert self.info is not None
        return self.info

    async def _api_versions(self, stream: trio.abc.Stream) -> c.Container:
        ours = self.registry.api(API_VERSIONS).versions
        assert ours.hi is not None
        body = await self.call(
            stream, API_VERSIONS, ours.hi,
            {"ClientSoftwareName": "ksidecar", "ClientSoftwareVersion": "0.1.0"},
        )
        if body.ErrorCode == 35:  # the broker is older than us: retry at v0 as clients do
            body = await self.call(stream, API_VERSIONS, 0, {})
        if body.ErrorCode != 0:
            raise UpstreamError(f"broker ApiVersions failed with error {body.ErrorCode}")
        return body

    async def _log_in(self, stream: trio.abc.Stream, login: Login) -> None:
        shake = await self.call(stream, SASL_HANDSHAKE, 1, {"Mechanism": login.mechanism})
        if shake.ErrorCode != 0:
            raise UpstreamError(
                f"broker refused SASL mechanism {login.mechanism} (error {shake.ErrorCode}; "
                f"it offers {', '.join(shake.Mechanisms)})"
            )
        client = login_client(login.mechanism, login.username, login.password)
        token: bytes | None = client.first()
        while token is not None:
            answer = await self.call(stream, SASL_AUTHENTICATE, 1, {"AuthBytes": token})
            if answer.ErrorCode != 0:
                raise UpstreamError(
                    f"broker refused the control connection's login as {login.username!r}: "
                    f"{answer.ErrorMessage} (error {answer.ErrorCode})"
                )
            try:
                token = client.respond(bytes(answer.AuthBytes))
            except SaslError as exc:
                raise UpstreamError(f"control connection login: {exc.message}") from None

    async def _metadata(
        self, stream: trio.abc.Stream, ranges: dict[int, tuple[int, int]]
    ) -> tuple[tuple[BrokerAddress, ...], str | None]:
        ours = self.registry.api(METADATA).versions
        lo, hi = ranges.get(METADATA, (0, -1))
        version = min(hi, ours.hi if ours.hi is not None else hi)
        if version < max(lo, ours.lo):
            raise UpstreamError("broker and sidecar share no Metadata version")
        # An empty topic list asks for brokers only (null would mean every topic).
        body = await self.call(stream, METADATA, version, {"Topics": []})
        brokers = tuple(
            BrokerAddress(b.NodeId, b.Host, b.Port, b.get("Rack")) for b in body.Brokers
        )
        return brokers, body.get("ClusterId")

    async def topics(self, names: set[str] | None) -> list[TopicInfo]:
        """The broker's topics and partition counts (``names`` only, or all): a Metadata
        request on a connection of its own (the embedded coordinator's refresh)."""
        info = self.info
        if info is None:
            raise UpstreamError(f"broker {self.address} not reached yet")
        ours = self.registry.api(METADATA).versions
        lo, hi = info.api_versions.get(METADATA, (0, -1))
        version = min(hi, ours.hi if ours.hi is not None else hi)
        if version < max(lo, ours.lo):
            raise UpstreamError("broker and sidecar share no Metadata version")
        topics = None if names is None else [{"Name": name} for name in sorted(names)]
        stream = await self.connect()
        try:
            with trio.fail_after(self.connect_timeout):
                if self.login is not None:
                    await self._api_versions(stream)
                    await self._log_in(stream, self.login)
                raw = await self.exchange(stream, METADATA, version,
                                          {"Topics": topics, "AllowAutoTopicCreation": False})
                found = await self._read_topics(version, raw)
        except trio.TooSlowError:
            raise UpstreamError(f"broker {self.address} did not answer Metadata in time") from None
        except (ProtocolError, trio.BrokenResourceError, OSError) as exc:
            raise UpstreamError(f"broker {self.address} Metadata failed: {exc}") from None
        finally:
            await trio.aclose_forcefully(stream)
        return found

    async def _read_topics(self, version: int, raw: memoryview) -> list[TopicInfo]:
        """The answer's topics, :data:`TOPICS_PER_STEP` at a time in slices with scheduler
        passes between them (:mod:`proxy.datapath.slices`): 5,000 changed topics take tens
        of milliseconds, which no other connection waits for in one piece."""
        read = self._topics.begin(version, raw)
        slicer = Slicer()
        while not read.step(TOPICS_PER_STEP):
            await slicer.turn()
        return read.finish()

    def _own_node_id(self, brokers: tuple[BrokerAddress, ...]) -> int | None:
        for broker in brokers:
            if broker.host == self.address.host and broker.port == self.address.port:
                return broker.node_id
        if len(brokers) == 1:
            return brokers[0].node_id
        return None

    async def refresh_forever(
        self, interval: float, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep :attr:`info` and :attr:`healthy` current; reports started after the first try.

        While the broker answers, the control connection stays open and is watched: the
        broker's death closes it, and the sidecar is not ready within moments, whether or
        not clients are sending. It is re-learned every ``interval`` seconds, at once when
        the data path reports a failure (:meth:`report_failure`), and every
        :data:`FAST_RECHECK` seconds while the broker does not answer.
        """
        started = False
        try:
            while True:
                try:
                    await self.learn(keep=True)
                except UpstreamError as exc:
                    if self.healthy or not started:
                        log.warning("upstream control connection: %s", exc)
                    self.healthy = False
                    await self._drop_link()
                if not started:
                    started = True
                    task_status.started()
                self._recheck = trio.Event()
                wait = interval if self.healthy else min(interval, FAST_RECHECK)
                with trio.move_on_after(wait):
                    async with trio.open_nursery() as watch:
                        watch.start_soon(self._wait_recheck, watch.cancel_scope)
                        if self.link is not None:
                            watch.start_soon(self._watch_link, self.link, watch.cancel_scope)
        finally:
            with trio.CancelScope(shield=True):
                await self._drop_link()

    async def _wait_recheck(self, scope: trio.CancelScope) -> None:
        await self._recheck.wait()
        scope.cancel()

    async def _watch_link(self, link: trio.abc.Stream, scope: trio.CancelScope) -> None:
        """Return (ending the wait) when the idle control connection ends or breaks."""
        try:
            data = await link.receive_some(1)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            data = b""
        if not data:
            log.info("upstream %s closed the control connection; re-checking", self.address)
        scope.cancel()
