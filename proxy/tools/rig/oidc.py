"""A real OpenID provider for the OAUTHBEARER tests: ``oidc-provider`` (npm) on Node.js.

``oidc-provider`` is the certified Node.js OpenID Connect implementation. ``oidc/provider.js``
configures it for the client-credentials grant on loopback: its ``/token`` issues RS256 JWT
access tokens for the audience given (resource indicators), signed with the keys this module
generates, and ``/jwks`` publishes their public halves. The npm packages live in
``proxy/tools/rig/oidc/node_modules`` (``npm ci`` there; ``scripts/test`` runs it when the
lock file changed). Readiness: ``/jwks`` answers 200.

:meth:`OidcProvider.rotate` restarts the provider on the same port with a new signing key,
which is what a rotation looks like from the sidecar (a new ``kid`` at the same JWKS URL).
"""

from __future__ import annotations

import base64
import json
import shutil
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from proxy.tools.rig.errors import ComponentNotFoundError
from proxy.tools.rig.ports import LOOPBACK
from proxy.tools.rig.process import ManagedProcess, Service, start_on_port

#: Where provider.js, package.json, the lock file and node_modules live.
OIDC_DIR = Path(__file__).parent / "oidc"


def find_node() -> str:
    """The ``node`` binary and an installed ``oidc-provider``; what to do if either is missing."""
    node = shutil.which("node")
    if node is None:
        raise ComponentNotFoundError("node", "Node.js (node >= 20) is not on PATH")
    if not (OIDC_DIR / "node_modules" / "oidc-provider" / "package.json").is_file():
        raise ComponentNotFoundError(
            "oidc-provider", f"not installed: run `npm ci` in {OIDC_DIR} (scripts/test does)")
    return node


def rsa_signing_key(kid: str | None = None) -> dict[str, Any]:
    """A new private RSA JWK (RS256, ``use: sig``) for the provider to sign with."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    numbers = key.private_numbers()
    public = numbers.public_numbers

    def b64(value: int) -> str:
        raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    return {
        "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid or uuid.uuid4().hex[:12],
        "n": b64(public.n), "e": b64(public.e), "d": b64(numbers.d),
        "p": b64(numbers.p), "q": b64(numbers.q), "dp": b64(numbers.dmp1),
        "dq": b64(numbers.dmq1), "qi": b64(numbers.iqmp),
    }  # fmt: skip


def _jwks_ready(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=1) as response:
        return bool(response.status == 200)


class OidcProvider(Service):
    """A running oidc-provider: ``issuer``, ``token_url``, ``jwks_url``; ``rotate()``."""

    def __init__(self, process: ManagedProcess, host: str, port: int, *, log_dir: Path,
                 config: dict[str, Any]) -> None:
        super().__init__(process, host, port)
        self._log_dir = log_dir
        self.config = config

    @property
    def issuer(self) -> str:
        """The ``iss`` of its tokens."""
        return f"http://{self.host}:{self.port}"

    @property
    def token_url(self) -> str:
        """The token endpoint (client credentials, HTTP Basic client authentication)."""
        return f"{self.issuer}/token"

    @property
    def jwks_url(self) -> str:
        """The JWKS endpoint."""
        return f"{self.issuer}/jwks"

    @property
    def kids(self) -> tuple[str, ...]:
        """Key ids it signs with (the first) and publishes."""
        return tuple(k["kid"] for k in self.config["jwks"]["keys"])

    def token(self, client_id: str) -> str:
        """An access token for ``client_id`` by the client-credentials grant (blocking)."""
        secret = next(c["client_secret"] for c in self.config["clients"] if c["client_id"] == client_id)
        basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
        request = urllib.request.Request(
            self.token_url, data=b"grant_type=client_credentials",
            headers={"Authorization": f"Basic {basic}",
                     "Content-Type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(request, timeout=5) as response:
            token: str = json.loads(response.read())["access_token"]
            return token

    def rotate(self, *, keep_old: bool = False) -> None:
        """Restart on the same port signing with a new key (the old one still published if
        ``keep_old``): the same issuer and JWKS URL, a new ``kid``."""
        keys = [rsa_signing_key(), *(self.config["jwks"]["keys"] if keep_old else [])]
        config = {**self.config, "jwks": {"keys": keys}}
        self.stop()
        fresh = _start(self._log_dir, config, self.host, self.port, self.name)
        self.process, self.config = fresh.process, config


def start_provider(
    log_dir: Path,
    clients: Mapping[str, str],
    *,
    audience: str = "urn:kafka",
    ttl_seconds: int = 300,
    client_ttls: Mapping[str, int] | None = None,
    host: str = LOOPBACK,
    port: int | None = None,
    name: str = "oidc-provider",
) -> OidcProvider:
    """Start oidc-provider with ``clients`` (client id → secret, at least 32 characters each).

    Tokens live ``ttl_seconds``; a client named in ``client_ttls`` gets tokens of its own
    lifetime (seconds), e.g. a few seconds for a test of expiry."""
    ttls = dict(client_ttls or {})
    config = {
        "jwks": {"keys": [rsa_signing_key()]},
        "clients": [{"client_id": c, "client_secret": s, **({"ttl": ttls[c]} if c in ttls else {})}
                    for c, s in clients.items()],
        "audience": audience,
        "ttl": ttl_seconds,
    }
    return _start(log_dir, config, host, port, name)


def _start(log_dir: Path, config: dict[str, Any], host: str, port: int | None, name: str) -> OidcProvider:
    node = find_node()
    config_file = log_dir / f"{name}-{uuid.uuid4().hex[:8]}.json"
    config_file.write_text(json.dumps(config))
    config_file.chmod(0o600)

    def build(chosen: int) -> ManagedProcess:
        return ManagedProcess(
            name, [node, str(OIDC_DIR / "provider.js")],
            log_path=log_dir / f"{name}.log",
            probe=lambda: _jwks_ready(f"http://{host}:{chosen}/jwks"),
            env={"PATH": "/usr/bin:/bin", "OIDC_PORT": str(chosen), "OIDC_HOST": host,
                 "OIDC_CONFIG_FILE": str(config_file), "NODE_ENV": "test"},
            cwd=OIDC_DIR,
            start_timeout=30.0,
        )

    chosen, process = start_on_port(build, port, host=host)
    return OidcProvider(process, host, chosen, log_dir=log_dir, config=config)
