"""Bad share-group requests (KIP-932) cost nothing but their own answer: hypothesis writes
ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge and the offsets APIs
with arbitrary values (any ids, epochs, offsets, acknowledgement types, unknown topic ids),
a ``ksidecar run`` process in front of Tansu answers every one on one connection, which stays
open, and a well-formed request on it is still served afterwards."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient

from protocol.apis import DEFAULT_REGISTRY
from protocol.headers import decode_response_header
from protocol.schema import decode
from proxy.tools.admin_client import AdminClient
from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.faults.support import read_frame
from tests.protocol.strategies import message_values
from tests.proxy.wire import request_frame

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: The share APIs and the versions the sidecar serves (proxy/local/shares.py).
SHARE_APIS = ((76, 1), (77, 1), (78, 1), (78, 2), (79, 1), (79, 2), (90, 0), (90, 1), (91, 0), (92, 0))


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, tansu: TansuServer,
            zookeeper: ZooKeeperServer) -> Iterator[SidecarServer]:
    chroot = "/share-bad-input"
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    client.ensure_path(chroot)
    client.stop()
    client.close()
    server = start_sidecar(tmp_path_factory.mktemp("share-bad"), tansu.bootstrap, name="sidecar-share-bad", keys={
        "zookeeper.connect": zookeeper.connect_string(chroot), "sidecar.coordinator": "embedded",
        "super.users": "User:ANONYMOUS"})
    try:
        with AdminClient(server.bootstrap) as admin:
            answer = admin.call(57, 1, {"timeoutMs": 10000, "ValidateOnly": False, "FeatureUpdates": [
                {"Feature": "share.version", "MaxVersionLevel": 1, "UpgradeType": 1}]})
        assert answer.ErrorCode == 0, answer
        yield server
    finally:
        server.stop()


@st.composite
def share_requests(draw: st.DrawFn) -> tuple[int, int, Any]:
    key, version = draw(st.sampled_from(SHARE_APIS))
    body = draw(message_values(DEFAULT_REGISTRY.api(key).request, version))
    if key == 78:  # a long poll: arbitrary waits would only make the test slow
        body["MaxWaitMs"] = draw(st.integers(-1, 50))
    return key, version, body


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(requests=st.lists(share_requests(), min_size=1, max_size=4))
def test_arbitrary_share_requests_are_each_answered_and_the_connection_stays(
        sidecar: SidecarServer, requests: list[tuple[int, int, Any]]) -> None:
    with socket.create_connection((sidecar.host, sidecar.port), timeout=20) as sock:
        for correlation, (key, version, body) in enumerate(requests, start=1):
            sock.sendall(request_frame(key, version, correlation, body))
            frame = read_frame(sock)
            api = DEFAULT_REGISTRY.api(key)
            got, size = decode_response_header(frame, api.response_header_version(version))
            assert got == correlation, (key, version)
            decode(api.response, version, frame[size:])  # an answer of the API's own shape
        sock.sendall(request_frame(77, 1, 99, {"GroupIds": ["g"], "IncludeAuthorizedOperations": False}))
        frame = read_frame(sock)
        assert struct.unpack(">i", frame[:4])[0] == 99

