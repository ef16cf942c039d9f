"""OAUTHBEARER end to end: confluent-kafka fetches its own token from a real OpenID provider.

The provider is oidc-provider (Node.js, the certified implementation, from npm; one for the
session). librdkafka's ``sasl.oauthbearer.method=oidc`` runs the client-credentials grant
against its token endpoint; the sidecar checks the JWT against the provider's JWKS, logs the
client in as ``User:<client id>``, and the client produces and consumes through it. A token
for another audience is refused with Kafka's OAuth error JSON, which the client reports.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from proxy.control.server import Sidecar
from proxy.tools.rig.oidc import OidcProvider
from proxy.tools.rig.tansu import TansuServer
from tests.auth.conftest import OIDC_CLIENTS, new_topic
from tests.proxy.conftest import StartSidecar, sidecar_keys
from tests.proxy.wire import confluent_consume

pytestmark = pytest.mark.integration

RECORDS = [(f"k{i}".encode(), f"oauth-{i}".encode()) for i in range(3)]


async def oauth_sidecar(start_sidecar: StartSidecar, tansu: TansuServer, provider: OidcProvider,
                        audience: str = "urn:kafka") -> Sidecar:
    return await start_sidecar(sidecar_keys(
        tansu.bootstrap,
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        sasl_enabled_mechanisms="OAUTHBEARER",
        sasl_oauthbearer_jwks_endpoint_url=provider.jwks_url,
        sasl_oauthbearer_expected_issuer=provider.issuer,
        sasl_oauthbearer_expected_audience=audience,
    ))


def oidc_config(bootstrap: str, provider: OidcProvider, client_id: str) -> dict[str, Any]:
    """confluent-kafka's settings: librdkafka fetches its token itself (KIP-768)."""
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": client_id,
        "sasl.oauthbearer.client.secret": OIDC_CLIENTS[client_id],
        "sasl.oauthbearer.token.endpoint.url": provider.token_url,
    }


def produce_and_consume(config: dict[str, Any], topic: str) -> list[tuple[bytes, bytes]]:
    from confluent_kafka import Producer

    producer = Producer({**config, "linger.ms": 1})
    for key, value in RECORDS:
        producer.produce(topic, value=value, key=key, partition=0)
    assert producer.flush(20) == 0
    return confluent_consume(config, topic, len(RECORDS), 20)


def refused_error(config: dict[str, Any]) -> str:
    """The error a producer reports when its login is refused."""
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({**config, "error_cb": lambda err: errors.append(str(err))})
    import time

    deadline = time.monotonic() + 15
    while not any("invalid_token" in e for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    return " | ".join(errors)


async def test_confluent_oidc_produces_and_consumes_as_the_client_id(
    start_sidecar: StartSidecar, tansu: TansuServer, oidc_provider: OidcProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="proxy.auth.gate")
    sidecar = await oauth_sidecar(start_sidecar, tansu, oidc_provider)
    bootstrap = f"127.0.0.1:{sidecar.bound['SASL_PLAINTEXT'].port}"
    topic = await new_topic(tansu, "oauth-")
    config = oidc_config(bootstrap, oidc_provider, "svc-a")
    got = await trio.to_thread.run_sync(produce_and_consume, config, topic)
    assert got == RECORDS
    assert "authenticated as User:svc-a with OAUTHBEARER" in caplog.text

    # The same provider's token, for an audience this second sidecar does not accept.
    strict = await oauth_sidecar(start_sidecar, tansu, oidc_provider, audience="urn:elsewhere")
    other = oidc_config(f"127.0.0.1:{strict.bound['SASL_PLAINTEXT'].port}", oidc_provider, "svc-b")
    error = await trio.to_thread.run_sync(refused_error, other)
    assert '{"status":"invalid_token"}' in error, error
    assert "audience 'urn:kafka' names none of urn:elsewhere" in caplog.text


async def test_key_rotation_is_picked_up_without_a_restart(
    start_sidecar: StartSidecar, tansu: TansuServer, oidc_provider: OidcProvider,
) -> None:
    sidecar = await oauth_sidecar(start_sidecar, tansu, oidc_provider)
    jwks = sidecar.jwks
    assert jwks is not None
    with trio.fail_after(10):
        while jwks.statistics()["fetches"] == 0:
            await trio.sleep(0.05)
    before = set(jwks.current().keys)
    await trio.to_thread.run_sync(oidc_provider.rotate)  # a new signing key, the old one gone
    assert before.isdisjoint(oidc_provider.kids)
    bootstrap = f"127.0.0.1:{sidecar.bound['SASL_PLAINTEXT'].port}"
    topic = await new_topic(tansu, "oauth-rot-")
    got = await trio.to_thread.run_sync(produce_and_consume, oidc_config(bootstrap, oidc_provider, "svc-b"), topic)
    assert got == RECORDS
    assert set(jwks.current().keys) == set(oidc_provider.kids)
