"""Real clients authenticate through a SASL-terminating sidecar (PLAIN, SCRAM-SHA-256/512).

confluent-kafka, kafka-python and aiokafka each produce and consume a few records as a
user created with ``ksidecar users``; a wrong password fails cleanly for each and is
counted. Users come from ZooKeeper (SCRAM) and the PLAIN users file.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from proxy.tools.rig.tansu import TansuServer
from tests.auth.conftest import USERS, StartSasl, new_topic
from tests.proxy.test_tls import Pki
from tests.proxy.wire import confluent_consume, sample, wait_until

pytestmark = pytest.mark.integration

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
RECORDS = [(f"k{i}".encode(), f"value-{i}".encode() * (1 + i)) for i in range(5)]


def confluent_config(bootstrap: str, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def run_confluent(bootstrap: str, mechanism: str, user: str, password: str, topic: str) -> list[tuple[bytes, bytes]]:
    from confluent_kafka import Producer

    common = confluent_config(bootstrap, mechanism, user, password)
    producer = Producer({**common, "linger.ms": 1})
    for key, value in RECORDS:
        producer.produce(topic, value=value, key=key, partition=0)
    assert producer.flush(20) == 0
    return confluent_consume(common, topic, len(RECORDS), 20)


def python_client_config(bootstrap: str, mechanism: str, user: str, password: str) -> dict[str, Any]:
    """kafka-python's and aiokafka's (same) SASL settings."""
    return {
        "bootstrap_servers": bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


def run_kafka_python(bootstrap: str, mechanism: str, user: str, password: str, topic: str) -> list[tuple[bytes, bytes]]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    common = python_client_config(bootstrap, mechanism, user, password)
    producer = KafkaProducer(**common)
    try:
        for key, value in RECORDS:
            producer.send(topic, value=value, key=key, partition=0)
        producer.flush(20)
    finally:
        producer.close()
    consumer = KafkaConsumer(**common, enable_auto_commit=False, consumer_timeout_ms=20000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek(TopicPartition(topic, 0), 0)
    got: list[tuple[bytes, bytes]] = []
    try:
        for message in consumer:
            got.append((message.key, message.value))
            if len(got) == len(RECORDS):
                break
    finally:
        consumer.close()
    return got


def run_aiokafka(bootstrap: str, mechanism: str, user: str, password: str, topic: str) -> list[tuple[bytes, bytes]]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def main() -> list[tuple[bytes, bytes]]:
        common = python_client_config(bootstrap, mechanism, user, password)
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for key, value in RECORDS:
                await producer.send_and_wait(topic, value=value, key=key, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**common, enable_auto_commit=False)
        await consumer.start()
        got: list[tuple[bytes, bytes]] = []
        try:
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            consumer.seek(partition, 0)
            async with asyncio.timeout(20):
                while len(got) < len(RECORDS):
                    message = await consumer.getone()
                    assert message.key is not None and message.value is not None
                    got.append((message.key, message.value))
        finally:
            await consumer.stop()
        return got

    return asyncio.run(main())


RUNNERS = {"confluent-kafka": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", sorted(RUNNERS))
async def test_client_authenticates_and_round_trips(
    client: str, mechanism: str, sasl_sidecar: StartSasl, tansu: TansuServer
) -> None:
    rig = await sasl_sidecar()
    topic = await new_topic(tansu)
    user = "bob"  # a name and password with ',' and '=' in the password
    with trio.fail_after(90):
        got = await trio.to_thread.run_sync(RUNNERS[client], rig.bootstrap, mechanism, user, USERS[user], topic)
    assert got == RECORDS
    listener = "SASL_PLAINTEXT"
    assert sample(rig.sidecar, "ksidecar_sasl_authentications_total",
                  listener=listener, mechanism=mechanism, result="success") >= 2
    assert sample(rig.sidecar, "ksidecar_sasl_authentications_total",
                  listener=listener, mechanism=mechanism, result="failure") == 0


def confluent_wrong(bootstrap: str, mechanism: str, user: str, password: str) -> str:
    from confluent_kafka import KafkaError, Producer

    errors: list[Any] = []
    producer = Producer({**confluent_config(bootstrap, mechanism, user, password), "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        producer.poll(0.2)
    failures = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert failures, errors
    return str(failures[0].str())


def kafka_python_wrong(bootstrap: str, mechanism: str, user: str, password: str) -> str:
    # kafka-python retries a failed bootstrap until its timeout and then raises a timeout;
    # what the sidecar answered is in its log record of the first failed connection.
    import logging

    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "Bootstrap connection" in record.getMessage():
                seen.append(record.getMessage())

    handler = Keep()
    logging.getLogger("kafka.net.manager").addHandler(handler)
    try:
        KafkaAdminClient(**python_client_config(bootstrap, mechanism, user, password),
                         bootstrap_timeout_ms=1000).close()
    except KafkaError:
        pass
    else:
        raise AssertionError("kafka-python connected with a wrong password")
    finally:
        logging.getLogger("kafka.net.manager").removeHandler(handler)
    assert seen
    return seen[0]


def aiokafka_wrong(bootstrap: str, mechanism: str, user: str, password: str) -> str:
    from aiokafka.conn import create_conn
    from aiokafka.errors import KafkaError

    host, port = bootstrap.split(":")

    async def main() -> str:
        try:
            conn = await create_conn(host, int(port), **{
                k: v for k, v in python_client_config(bootstrap, mechanism, user, password).items()
                if k != "bootstrap_servers"})
        except KafkaError as exc:
            return f"{type(exc).__name__}: {exc}"
        conn.close()
        raise AssertionError("aiokafka connected with a wrong password")

    return asyncio.run(main())


WRONG = {"confluent-kafka": confluent_wrong, "kafka-python": kafka_python_wrong, "aiokafka": aiokafka_wrong}


@pytest.mark.parametrize("client", sorted(WRONG))
async def test_wrong_password_and_unknown_user_fail_cleanly(client: str, sasl_sidecar: StartSasl) -> None:
    rig = await sasl_sidecar()
    messages: dict[tuple[str, str], str] = {}
    with trio.fail_after(120):
        for mechanism in MECHANISMS:
            for user in ("alice", "mallory"):  # wrong password; no such user
                messages[mechanism, user] = await trio.to_thread.run_sync(
                    WRONG[client], rig.bootstrap, mechanism, user, "not-the-password")
    for (_mechanism, user), message in messages.items():
        assert "Authentication failed" in message or "SaslAuthenticationFailed" in message, message
        # Kafka's message names the mechanism, never the user or whether it exists.
        assert user not in message
    for mechanism in MECHANISMS:
        assert sample(rig.sidecar, "ksidecar_sasl_authentications_total",
                      listener="SASL_PLAINTEXT", mechanism=mechanism, result="failure") >= 2
        assert sample(rig.sidecar, "ksidecar_sasl_authentications_total",
                      listener="SASL_PLAINTEXT", mechanism=mechanism, result="success") == 0
    await wait_until(lambda: sample(rig.sidecar, "ksidecar_connections_closed_total", listener="SASL_PLAINTEXT",
                                    reason="sasl_authentication_failed") >= 6)


async def test_sasl_ssl_listener(sasl_sidecar: StartSasl, tansu: TansuServer, tmp_path: Path) -> None:
    """SASL_SSL: TLS first (the listener's keystore), then the same SASL exchange."""
    from confluent_kafka import Producer

    pki = Pki(tmp_path)
    rig = await sasl_sidecar(listeners="SASL_SSL://127.0.0.1:0", ssl_keystore_location=str(pki.keystore))
    topic = await new_topic(tansu)
    bootstrap = f"127.0.0.1:{rig.sidecar.bound['SASL_SSL'].port}"

    def produce() -> int:
        producer = Producer({**confluent_config(bootstrap, "SCRAM-SHA-256", "alice", USERS["alice"]),
                             "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca_path)})
        producer.produce(topic, b"over tls", partition=0)
        return int(producer.flush(20))

    with trio.fail_after(30):
        assert await trio.to_thread.run_sync(produce) == 0
    assert sample(rig.sidecar, "ksidecar_sasl_authentications_total", listener="SASL_SSL",
                  mechanism="SCRAM-SHA-256", result="success") >= 1
