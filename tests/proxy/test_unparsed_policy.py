"""``sidecar.unparsed.request.policy``: what the broker serves but the sidecar cannot parse.

The "broker" is real Tansu behind a small relay that plays a vendor's build: its ApiVersions
answers also advertise key :data:`VENDOR_KEY` (v0-2), and it answers that key itself (the
correlation id, then ``vendor:`` and the request body echoed). Everything else goes to
Tansu as it is. Expected frames are written here by hand.
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar

import pytest
import trio

from observers.api import Observer
from protocol.apis import DEFAULT_REGISTRY
from protocol.framing import EOF, NEED_DATA, FrameDecoder, encode_frame
from protocol.schema import decode, encode
from proxy.config.keys import ConfigError, build_config
from proxy.control.server import Sidecar
from proxy.tools.rig.tansu import TansuServer
from tests.proxy.conftest import StartSidecar, sidecar_keys
from tests.proxy.wire import CLIENT_ID, Wire, request_frame, sample, wait_until

pytestmark = pytest.mark.integration

#: A key no Kafka release has, as a vendor's build would add.
VENDOR_KEY = 20001
API_VERSIONS = 18


class HeaderObserver(Observer):
    """Keeps what observers learn of each request (named by import path below)."""

    name = "headers"
    seen: ClassVar[list[tuple[int, int, str | None, str, bool]]] = []

    def wants(self, api_key: int, api_version: int) -> bool:
        return True

    def record_request(self, request: Any, client_address: Any, principal: str, api_key: int,
                       api_version: int, correlation: Any, info: Any) -> None:
        HeaderObserver.seen.append((api_key, api_version, info.client_id, principal, info.local))

    def record_response(self, *args: Any) -> None:
        pass


async def _frames(stream: trio.abc.Stream, decoder: FrameDecoder) -> bytes | None:
    while True:
        frame = decoder.next_frame()
        if frame is EOF:
            return None
        if frame is not NEED_DATA:
            return bytes(frame[4:])
        data = await stream.receive_some(65536)
        decoder.receive_data(data)


def vendor_versions(body: bytes, version: int) -> bytes:
    """An ApiVersions response body with the vendor key added (v0-2)."""
    api = DEFAULT_REGISTRY.api(API_VERSIONS)
    answer = dict(decode(api.response, version, body, allow_trailing=True))
    keys = list(answer["ApiKeys"])
    keys.append({"ApiKey": VENDOR_KEY, "MinVersion": 0, "MaxVersion": 2})
    answer["ApiKeys"] = keys
    return encode(api.response, version, answer)


async def vendor_relay(tansu: TansuServer, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the vendor relay on a free port (reported through ``task_status``)."""

    async def one(client: trio.SocketStream) -> None:
        upstream = await trio.open_tcp_stream(tansu.host, tansu.port)
        mine, theirs = FrameDecoder(1 << 26), FrameDecoder(1 << 26)
        try:
            while True:
                request = await _frames(client, mine)
                if request is None:
                    return
                key, version, correlation = struct.unpack_from(">hhi", request)
                if key == VENDOR_KEY:
                    client_id_len = struct.unpack_from(">h", request, 8)[0]
                    body = request[10 + max(client_id_len, 0):]
                    await client.send_all(encode_frame(struct.pack(">i", correlation) + b"vendor:" + body))
                    continue
                await upstream.send_all(encode_frame(request))
                response = await _frames(upstream, theirs)
                if response is None:
                    return
                if key == API_VERSIONS and version in DEFAULT_REGISTRY.api(API_VERSIONS).versions:
                    response = response[:4] + vendor_versions(response[4:], version)
                await client.send_all(encode_frame(response))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return
        finally:
            await trio.aclose_forcefully(upstream)
            await trio.aclose_forcefully(client)

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(one, listeners)


async def relay_and_sidecar(nursery: trio.Nursery, start_sidecar: StartSidecar, policy: str,
                            **keys: str) -> tuple[Sidecar, Wire]:
    tansu = nursery_tansu[0]
    port = await nursery.start(vendor_relay, tansu)
    sidecar = await start_sidecar(sidecar_keys(f"127.0.0.1:{port}", sidecar_unparsed_request_policy=policy, **keys))
    wire = await Wire.connect("127.0.0.1", sidecar.bound["PLAINTEXT"].port)
    return sidecar, wire


nursery_tansu: list[TansuServer] = []


@pytest.fixture(autouse=True)
def _tansu(tansu: TansuServer) -> None:
    nursery_tansu[:] = [tansu]


async def advertised(wire: Wire) -> dict[int, tuple[int, int]]:
    frame = await wire.call(API_VERSIONS, 3, 1, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})
    body = decode(DEFAULT_REGISTRY.api(API_VERSIONS).response, 3, frame[4:])
    return {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in body["ApiKeys"]}


async def test_forward_passes_a_vendor_key_through(nursery: trio.Nursery, start_sidecar: StartSidecar) -> None:
    HeaderObserver.seen.clear()
    sidecar, wire = await relay_and_sidecar(nursery, start_sidecar, "forward",
                                            observer_class_names=f"{__name__}.HeaderObserver")
    try:
        with trio.fail_after(10):
            ranges = await advertised(wire)
            assert ranges[VENDOR_KEY] == (0, 2)
            # Metadata names brokers: never advertised beyond what the sidecar rewrites.
            assert ranges[3][1] <= DEFAULT_REGISTRY.api(3).versions.hi
            await wire.send(request_frame(VENDOR_KEY, 1, 42, b"\x00\x01payload"))
            frame = await wire.read_frame()
        assert frame == struct.pack(">i", 42) + b"vendor:\x00\x01payload"
        assert sample(sidecar, "ksidecar_unparsed_requests_total", api_key=str(VENDOR_KEY), api_version="1",
                      outcome="forwarded") == 1
        # The connection goes on: a parsed request after it is served as usual.
        assert (await advertised(wire))[VENDOR_KEY] == (0, 2)
        # Observers (the audit among them) get it from its header: key, version, client id.
        await wait_until(lambda: any(k == VENDOR_KEY for k, *_ in HeaderObserver.seen))
        assert (VENDOR_KEY, 1, CLIENT_ID, "User:ANONYMOUS", False) in HeaderObserver.seen
    finally:
        await wire.aclose()


async def test_answer_gives_the_kip35_answer_and_keeps_the_connection(
        nursery: trio.Nursery, start_sidecar: StartSidecar) -> None:
    _sidecar, wire = await relay_and_sidecar(nursery, start_sidecar, "answer")
    try:
        with trio.fail_after(10):
            assert VENDOR_KEY not in await advertised(wire)
            await wire.send(request_frame(VENDOR_KEY, 1, 43, b"payload"))
            frame = await wire.read_frame()
            assert frame == struct.pack(">i", 43)  # KIP-35: the correlation id alone
            assert await advertised(wire)  # still open
    finally:
        await wire.aclose()


async def test_close_closes_only_that_connection(nursery: trio.Nursery, start_sidecar: StartSidecar) -> None:
    sidecar, wire = await relay_and_sidecar(nursery, start_sidecar, "close")
    other = await Wire.connect("127.0.0.1", sidecar.bound["PLAINTEXT"].port)
    try:
        with trio.fail_after(10):
            await wire.send(request_frame(VENDOR_KEY, 1, 44, b"payload"))
            assert await wire.wait_closed() == b""
            assert await advertised(other)
        assert sample(sidecar, "ksidecar_unparsed_requests_total", api_key=str(VENDOR_KEY), api_version="1",
                      outcome="closed") == 1
    finally:
        await wire.aclose()
        await other.aclose()


async def test_malformed_header_closes_only_its_connection(
        nursery: trio.Nursery, start_sidecar: StartSidecar) -> None:
    sidecar, wire = await relay_and_sidecar(nursery, start_sidecar, "forward")
    other = await Wire.connect("127.0.0.1", sidecar.bound["PLAINTEXT"].port)
    try:
        with trio.fail_after(10):
            # Key 20001 v1, correlation 45, then a client id length of 300 with 3 bytes.
            await wire.send(encode_frame(struct.pack(">hhih", VENDOR_KEY, 1, 45, 300) + b"abc"))
            assert await wire.wait_closed() == b""
            assert (await advertised(other))[VENDOR_KEY] == (0, 2)
    finally:
        await wire.aclose()
        await other.aclose()


async def test_broker_metadata_key_must_not_shadow_a_broker_key(nursery: trio.Nursery) -> None:
    port = await nursery.start(vendor_relay, nursery_tansu[0])
    config = build_config(sidecar_keys(f"127.0.0.1:{port}", sidecar_broker_metadata_api_key=str(VENDOR_KEY)))
    with pytest.raises(BaseExceptionGroup) as caught, trio.fail_after(20):
        await Sidecar(config).serve()
    errors, _rest = caught.value.split(ConfigError)
    assert errors is not None
    leaf: BaseException = errors
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    assert f"advertises API key {VENDOR_KEY}" in str(leaf)
    assert f"sidecar.broker.metadata.api.key={VENDOR_KEY}" in str(leaf)
