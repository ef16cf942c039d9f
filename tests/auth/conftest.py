"""Fixtures for authentication tests: a sidecar that terminates SASL, with real users.

``sasl_sidecar(**keys)`` starts a sidecar in front of the session's Tansu with a
``SASL_PLAINTEXT`` listener, ZooKeeper (a fresh chroot) for SCRAM users and a PLAIN users
file; the users below are created through the ``ksidecar users`` command itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from proxy.control.server import Sidecar
from proxy.tools.cli import main as cli_main
from proxy.tools.rig.oidc import OidcProvider, start_provider
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.proxy.conftest import StartSidecar, sidecar_keys, start_sidecar
from tests.proxy.wire import Wire, create_topic

__all__ = ["start_sidecar"]  # the fixture, shared with tests/proxy

#: The users every SASL sidecar here knows: name → password (both mechanisms + PLAIN).
USERS = {"alice": "alice-secret", "bob": "b0b,=secret"}


@dataclass
class SaslRig:
    """A running SASL sidecar and where its users live."""

    sidecar: Sidecar
    zookeeper: str
    plain_file: Path
    tmp: Path

    @property
    def port(self) -> int:
        """The SASL_PLAINTEXT listener's port."""
        return self.sidecar.bound["SASL_PLAINTEXT"].port

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>`` of the SASL listener."""
        return f"127.0.0.1:{self.port}"

    def users(self, *args: str, password: str | None = None) -> int:
        """Run ``ksidecar users --zookeeper … <args>`` (blocking); the password from a file."""
        return run_users(["--zookeeper", self.zookeeper, *args], self.tmp, password)

    def plain_users(self, *args: str, password: str | None = None) -> int:
        """Run ``ksidecar users --plain-file … <args>`` (blocking)."""
        return run_users(["--plain-file", str(self.plain_file), *args], self.tmp, password)


def run_users(args: list[str], tmp: Path, password: str | None) -> int:
    """``ksidecar users ARGS [--password-file F]`` in this process."""
    extra: list[str] = []
    if password is not None:
        secret = tmp / f"pw-{uuid.uuid4().hex[:8]}"
        secret.write_text(password + "\n")
        extra = ["--password-file", str(secret)]
    return cli_main(["users", *args, *extra])


StartSasl = Callable[..., Awaitable[SaslRig]]


@pytest.fixture
def sasl_sidecar(
    start_sidecar: StartSidecar,
    tansu: TansuServer,
    zookeeper: ZooKeeperServer,
    zk_path: str,
    tmp_path: Path,
) -> StartSasl:
    """Start a SASL-terminating sidecar whose users are :data:`USERS`."""

    async def start(**keys: str) -> SaslRig:
        connect = zookeeper.connect_string(zk_path)
        plain_file = tmp_path / "plain-users"
        settings = {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "zookeeper_connect": connect,
            "sidecar_sasl_plain_users_file": str(plain_file),
            **keys,
        }
        raw = sidecar_keys(tansu.bootstrap, **settings)
        placeholder = SaslRig(None, connect, plain_file, tmp_path)  # type: ignore[arg-type]
        for name, password in USERS.items():
            assert await trio.to_thread.run_sync(
                lambda n=name, p=password: placeholder.users("add", n, password=p)) == 0
            assert await trio.to_thread.run_sync(
                lambda n=name, p=password: placeholder.plain_users("add", n, password=p)) == 0
        sidecar = await start_sidecar(raw)
        return SaslRig(sidecar, connect, plain_file, tmp_path)

    return start


async def new_topic(tansu: TansuServer, prefix: str = "auth-") -> str:
    """A fresh one-partition topic named ``<prefix><random>``, created on the broker directly."""
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    wire = await Wire.connect(tansu.host, tansu.port)
    try:
        with trio.fail_after(10):
            await create_topic(wire, name)
    finally:
        await wire.aclose()
    return name


#: The OpenID provider's clients (client id → secret) for the OAUTHBEARER tests.
OIDC_CLIENTS = {"svc-a": "svc-a-secret-0123456789-0123456789", "svc-b": "svc-b-secret-0123456789-0123456789",
                "svc-short": "svc-short-secret-0123456789-012345"}
#: Seconds ``svc-short``'s tokens live (the others' live 300 s): the expiry test's client.
OIDC_SHORT_TTL = 2


@pytest.fixture(scope="session")
def oidc_provider(rig_dir: Path) -> Iterator[OidcProvider]:
    """A real OpenID provider (oidc-provider on Node.js) for the session: client credentials,
    RS256 JWT access tokens for audience ``urn:kafka``, its keys at ``.jwks_url``;
    ``svc-short``'s tokens expire :data:`OIDC_SHORT_TTL` seconds after they are issued."""
    provider = start_provider(rig_dir, OIDC_CLIENTS, client_ttls={"svc-short": OIDC_SHORT_TTL})
    try:
        yield provider
    finally:
        provider.stop()
