"""OAUTHBEARER end to end: clients get their tokens from a real OpenID provider.

The provider is oidc-provider (Node.js, the certified implementation, from npm; one for the
session). librdkafka's ``sasl.oauthbearer.method=oidc`` runs the client-credentials grant
against its token endpoint; kafka-python asks its ``sasl_oauth_token_provider``, which runs
the same grant here. The sidecar checks the JWT against the provider's JWKS, logs the client
in as ``User:<client id>``, and the client produces and consumes through it (in a group, under
ACLs written for that principal). A token for another audience is refused with Kafka's OAuth
error JSON, which the client reports. A token that expires and is not renewed ends its session
at its ``exp`` (KIP-368): the next request closes the connection.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import trio

from proxy.auth.acl.model import (
    AclBinding,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from proxy.control.server import Sidecar
from proxy.tools.rig.oidc import OidcProvider
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.auth.conftest import OIDC_CLIENTS, OIDC_SHORT_TTL, new_topic
from tests.proxy.conftest import StartSidecar, sidecar_keys
from tests.proxy.wire import Wire, confluent_consume, our_decode, request_frame, sample, wait_until

pytestmark = pytest.mark.integration

RECORDS = [(f"k{i}".encode(), f"oauth-{i}".encode()) for i in range(3)]


async def oauth_sidecar(start_sidecar: StartSidecar, tansu: TansuServer, provider: OidcProvider,
                        audience: str = "urn:kafka", **keys: str) -> Sidecar:
    return await start_sidecar(sidecar_keys(
        tansu.bootstrap,
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        sasl_enabled_mechanisms="OAUTHBEARER",
        sasl_oauthbearer_jwks_endpoint_url=provider.jwks_url,
        sasl_oauthbearer_expected_issuer=provider.issuer,
        sasl_oauthbearer_expected_audience=audience,
        **keys,
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


# -- kafka-python with a token provider, in a group, under ACLs for User:<client id> ----------

TOPIC_AUTHORIZATION_FAILED = "TopicAuthorizationFailedError"
GROUP_AUTHORIZATION_FAILED = "GroupAuthorizationFailedError"
SESSION_MS = 6000
"""The consumer's group session: Tansu holds a first JoinGroup for half of it."""


def client_credentials_provider(provider: OidcProvider, client_id: str) -> Any:
    """kafka-python's ``sasl_oauth_token_provider``: ``token()`` runs the client-credentials
    grant at the provider, and reuses the token until 30 s before it expires."""
    import jwt
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class ClientCredentials(AbstractTokenProvider):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.fetched = 0
            self._token = ""
            self._exp = 0.0

        def token(self) -> str:
            if time.time() > self._exp - 30:
                self._token = provider.token(client_id)
                self._exp = float(jwt.decode(self._token, options={"verify_signature": False})["exp"])
                self.fetched += 1
            return self._token

    return ClientCredentials()


def kafka_python_oauth_flow(bootstrap: str, provider: OidcProvider, client_id: str, topic: str,
                            group: str) -> dict[str, Any]:
    """As ``client_id``: produce RECORDS, then consume them in ``group`` and commit."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError

    tokens = client_credentials_provider(provider, client_id)
    common: dict[str, Any] = {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT",
                              "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": tokens}
    out: dict[str, Any] = {"delivery": []}
    producer = KafkaProducer(**common, max_block_ms=8000, request_timeout_ms=8000, retries=0)
    try:
        for key, value in RECORDS:
            try:
                producer.send(topic, value=value, key=key, partition=0).get(timeout=10)
                out["delivery"].append(None)
            except KafkaError as exc:
                out["delivery"].append(type(exc).__name__)
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(**common, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=SESSION_MS)
    got: list[tuple[bytes, bytes]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < len(RECORDS) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((message.key, message.value) for message in records)
        if len(got) == len(RECORDS):
            consumer.commit()
            out["committed"] = consumer.committed(next(iter(consumer.assignment())))
    except KafkaError as exc:
        out["consume_error"] = type(exc).__name__
    finally:
        consumer.close()
    out["got"] = got
    out["tokens_fetched"] = tokens.fetched
    return out


def allow(principal: str, rtype: ResourceType, name: str, op: Operation) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, PatternType.LITERAL),
                      AclEntry(principal, "*", op, Permission.ALLOW))


async def test_kafka_python_token_provider_in_a_group_under_acls_for_the_client_id(
    start_sidecar: StartSidecar, tansu: TansuServer, oidc_provider: OidcProvider,
    zookeeper: ZooKeeperServer, zk_path: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """svc-a may Write and Read the topic and Read the group: it produces and consumes in the
    group. svc-b may only Read the topic: its sends get TOPIC_AUTHORIZATION_FAILED and its
    group GROUP_AUTHORIZATION_FAILED, from kafka-python itself."""
    caplog.set_level(logging.INFO, logger="proxy.auth.gate")
    sidecar = await oauth_sidecar(start_sidecar, tansu, oidc_provider, sidecar_authorizer="acls",
                                  zookeeper_connect=zookeeper.connect_string(zk_path))
    assert sidecar.acls is not None
    topic = await new_topic(tansu, "oauth-acl-")
    group = f"oauth-group-{topic[-10:]}"
    await sidecar.acls.create([
        allow("User:svc-a", ResourceType.TOPIC, topic, Operation.WRITE),
        allow("User:svc-a", ResourceType.TOPIC, topic, Operation.READ),
        allow("User:svc-a", ResourceType.GROUP, group, Operation.READ),
        allow("User:svc-b", ResourceType.TOPIC, topic, Operation.READ),
    ])
    bootstrap = f"127.0.0.1:{sidecar.bound['SASL_PLAINTEXT'].port}"
    with trio.fail_after(90):
        a = await trio.to_thread.run_sync(kafka_python_oauth_flow, bootstrap, oidc_provider, "svc-a", topic, group)
        b = await trio.to_thread.run_sync(kafka_python_oauth_flow, bootstrap, oidc_provider, "svc-b", topic, group)
    assert a["delivery"] == [None] * len(RECORDS)
    assert a["got"] == RECORDS and "consume_error" not in a
    assert a["committed"] == len(RECORDS)
    assert a["tokens_fetched"] == 1  # fetched once, reused by every connection of both clients
    assert "authenticated as User:svc-a with OAUTHBEARER" in caplog.text
    assert b["delivery"] == [TOPIC_AUTHORIZATION_FAILED] * len(RECORDS)
    assert b["got"] == [] and b["consume_error"] == GROUP_AUTHORIZATION_FAILED
    assert "authenticated as User:svc-b with OAUTHBEARER" in caplog.text
    for operation, resource in (("Write", "Topic"), ("Describe", "Group")):
        assert sample(sidecar, "ksidecar_authorization_denials_total",
                      operation=operation, resource_type=resource, mode="enforce") >= 1


# -- KIP-368: a token that expires and is not renewed ----------------------------------------


async def test_an_expired_token_not_renewed_closes_the_connection_at_its_next_request(
    start_sidecar: StartSidecar, tansu: TansuServer, oidc_provider: OidcProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """svc-short's tokens live OIDC_SHORT_TTL seconds. The session ends at the token's exp even
    though connections.max.reauth.ms is a minute; a client that does not re-authenticate has
    its connection closed at its first request after that, counted as session_expired."""
    caplog.set_level(logging.INFO, logger="proxy.datapath.connection")
    sidecar = await oauth_sidecar(start_sidecar, tansu, oidc_provider, connections_max_reauth_ms="60000")
    token = await trio.to_thread.run_sync(oidc_provider.token, "svc-short")
    with trio.fail_after(OIDC_SHORT_TTL + 8):
        wire = await Wire.connect("127.0.0.1", sidecar.bound["SASL_PLAINTEXT"].port)
        _, shake = our_decode(await wire.call(17, 1, 1, {"Mechanism": "OAUTHBEARER"}), 17, 1)
        assert shake.ErrorCode == 0
        initial = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
        _, auth = our_decode(await wire.call(36, 1, 2, {"AuthBytes": initial}), 36, 1)
        lifetime_ms = auth.SessionLifetimeMs
        assert auth.ErrorCode == 0 and 0 < lifetime_ms <= OIDC_SHORT_TTL * 1000
        _, metadata = our_decode(await wire.call(3, 1, 3, {"Topics": []}), 3, 1)
        assert len(metadata.Brokers) == 1  # served while the token lives
        assert sample(sidecar, "ksidecar_connections_closed_total", listener="SASL_PLAINTEXT",
                      reason="session_expired") == 0
        await trio.sleep(lifetime_ms / 1000 + 0.1)
        await wire.send(request_frame(3, 1, 4, {"Topics": []}))
        assert await wire.wait_closed() == b""  # no answer: closed, as Kafka closes it
    await wait_until(lambda: sample(sidecar, "ksidecar_connections_closed_total", listener="SASL_PLAINTEXT",
                                    reason="session_expired") == 1)
    assert "session_expired (api key 3 after the session expired" in caplog.text
