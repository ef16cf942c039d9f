"""User and client-id quota resolution (KIP-55's eight levels), sanitization, entity paths.

Every expected value and sensor below is written by hand from Kafka's
``ClientQuotaManager`` (``DefaultQuotaCallback.quotaMetricTags`` and ``quotaLimit``).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotas.clients import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotas,
    Entity,
    desanitize,
    entity_of_path,
    entity_path,
    format_value,
    quotas_from_configs,
    resolve,
    sanitize,
    znode_path,
)

P = PRODUCER_BYTE_RATE

# One entity per level, each with its own value: the value says which level won.
LEVELS: dict[int, Entity] = {
    1: Entity(user="alice", client_id="p1"),
    2: Entity(user="alice", client_id=DEFAULT),
    3: Entity(user="alice"),
    4: Entity(user=DEFAULT, client_id="p1"),
    5: Entity(user=DEFAULT, client_id=DEFAULT),
    6: Entity(user=DEFAULT),
    7: Entity(client_id="p1"),
    8: Entity(client_id=DEFAULT),
}


def snapshot(*levels: int) -> ClientQuotas:
    return ClientQuotas({LEVELS[n]: {P: float(n * 100)} for n in levels})


ALL = (1, 2, 3, 4, 5, 6, 7, 8)

# (levels set, user, client id, expected value, expected sensor (user tag, client-id tag))
PRECEDENCE = [
    # everything set: the most specific level for each connection
    (ALL, "alice", "p1", 100.0, ("alice", "p1")),  # 1 user + client
    (ALL, "alice", "p2", 200.0, ("alice", "p2")),  # 2 user + <default client>: per client id
    (ALL, "bob", "p1", 400.0, ("bob", "p1")),  # 4 <default user> + client
    (ALL, "bob", "p2", 500.0, ("bob", "p2")),  # 5 <default user> + <default client>
    # peel the levels off one by one, for alice/p1
    ((2, 3, 4, 5, 6, 7, 8), "alice", "p1", 200.0, ("alice", "p1")),
    ((3, 4, 5, 6, 7, 8), "alice", "p1", 300.0, ("alice", "")),  # 3: all alice's clients share
    ((4, 5, 6, 7, 8), "alice", "p1", 400.0, ("alice", "p1")),
    ((5, 6, 7, 8), "alice", "p1", 500.0, ("alice", "p1")),
    ((6, 7, 8), "alice", "p1", 600.0, ("alice", "")),  # 6: each user apart, all its clients
    ((7, 8), "alice", "p1", 700.0, ("", "p1")),  # 7: p1 shared across users
    ((8,), "alice", "p1", 800.0, ("", "p1")),  # 8: each client id apart, across users
    ((), "alice", "p1", None, None),
    # a user level beats any client-id-only level
    ((3, 7), "alice", "p1", 300.0, ("alice", "")),
    ((3, 7), "bob", "p1", 700.0, ("", "p1")),
    ((3, 7), "bob", "p2", None, None),
    ((6, 7), "bob", "p1", 600.0, ("bob", "")),
    ((6, 8), "carol", "x", 600.0, ("carol", "")),
    ((7, 8), "carol", "x", 800.0, ("", "x")),
    # a default applies to each name separately, never to <default> tags
    ((5,), "carol", "x", 500.0, ("carol", "x")),
    ((2,), "alice", "x", 200.0, ("alice", "x")),
    ((2,), "bob", "x", None, None),
    ((4,), "bob", "p1", 400.0, ("bob", "p1")),
    ((4,), "bob", "p2", None, None),
    # the user level beats <default user> + client (level 3 before 4)
    ((3, 4), "alice", "p1", 300.0, ("alice", "")),
    ((3, 4), "bob", "p1", 400.0, ("bob", "p1")),
    # Kafka's quirk, kept: an empty client id turns levels 2 and 5 into tags (user, ""),
    # which read levels 3 and 6 only
    ((5,), "alice", "", None, None),
    ((2,), "alice", "", None, None),
    ((2, 3), "alice", "", 300.0, ("alice", "")),
    ((5, 6), "bob", "", 600.0, ("bob", "")),
    ((8,), "alice", "", None, None),
]


@pytest.mark.parametrize(("levels", "user", "client_id", "value", "sensor"), PRECEDENCE)
def test_precedence(
    levels: tuple[int, ...], user: str, client_id: str, value: float | None,
    sensor: tuple[str, str] | None,
) -> None:
    found = resolve(snapshot(*levels), user, client_id, P)
    if value is None:
        assert found is None
    else:
        assert found is not None
        assert (found.value, found.sensor) == (value, sensor)
        assert found.entity == LEVELS[int(value) // 100]


def test_each_key_resolves_on_its_own() -> None:
    quotas = ClientQuotas({
        Entity(user="alice", client_id="p1"): {P: 10.0},
        Entity(user="alice"): {CONSUMER_BYTE_RATE: 20.0},
        Entity(client_id=DEFAULT): {REQUEST_PERCENTAGE: 30.0},
    })
    producer = resolve(quotas, "alice", "p1", P)
    consumer = resolve(quotas, "alice", "p1", CONSUMER_BYTE_RATE)
    request = resolve(quotas, "alice", "p1", REQUEST_PERCENTAGE)
    assert producer is not None and (producer.value, producer.sensor) == (10.0, ("alice", "p1"))
    assert consumer is not None and (consumer.value, consumer.sensor) == (20.0, ("alice", ""))
    assert request is not None and (request.value, request.sensor) == (30.0, ("", "p1"))
    assert resolve(quotas, "alice", "p1", "controller_mutation_rate") is None
    assert resolve(quotas, "alice", "p1", "no_such_key") is None


def test_sensor_carries_the_sanitized_user() -> None:
    quotas = ClientQuotas({Entity(user=DEFAULT): {P: 1.0}, Entity(user="ANONYMOUS"): {P: 2.0}})
    odd = resolve(quotas, "CN=a b*,O=x", "c", P)
    assert odd is not None and odd.sensor == ("CN%3Da%20b%2A%2CO%3Dx", "")
    anonymous = resolve(quotas, "ANONYMOUS", "c", P)
    assert anonymous is not None and (anonymous.value, anonymous.sensor) == (2.0, ("ANONYMOUS", ""))


def test_resolution_is_cached_per_snapshot() -> None:
    quotas = snapshot(3)
    first = resolve(quotas, "alice", "p1", P)
    assert first is not None and resolve(quotas, "alice", "p1", P) is first
    newer = snapshot(1, 3)
    found = resolve(newer, "alice", "p1", P)
    assert found is not None and found.value == 100.0


def test_snapshot_drops_non_quota_keys_and_empty_entities() -> None:
    quotas = ClientQuotas({Entity(user="a"): {"SCRAM-SHA-256": 1.0}, Entity(user="b"): {P: 5.0}})
    assert list(quotas) == [Entity(user="b")]
    assert quotas == ClientQuotas({Entity(user="b"): {P: 5.0}})


# -- sanitization and paths ------------------------------------------------------------------

SANITIZED = [
    ("alice", "alice"),
    ("a.b-c_d09", "a.b-c_d09"),
    ("a b", "a%20b"),
    ("a*b", "a%2Ab"),
    ("a+b", "a%2Bb"),
    ("a~b", "a%7Eb"),
    ("CN=x/y", "CN%3Dx%2Fy"),
    ("ü", "%C3%BC"),
    ("<default>", "%3Cdefault%3E"),
]


@pytest.mark.parametrize(("name", "node"), SANITIZED)
def test_sanitize_as_kafka(name: str, node: str) -> None:
    assert sanitize(name) == node
    assert desanitize(node) == name


def test_desanitize_reads_a_plus_as_a_space() -> None:
    assert desanitize("a+b") == "a b"  # Java's URLDecoder


@given(st.text())
def test_sanitize_round_trip(name: str) -> None:
    node = sanitize(name)
    assert desanitize(node) == name
    assert all(c.isascii() and (c.isalnum() or c in "._-%") for c in node)


PATHS = [
    (Entity(user="alice"), "users/alice"),
    (Entity(user=DEFAULT), "users/<default>"),
    (Entity(client_id="p 1"), "clients/p%201"),
    (Entity(client_id=DEFAULT), "clients/<default>"),
    (Entity(user="alice", client_id="p1"), "users/alice/clients/p1"),
    (Entity(user=DEFAULT, client_id=DEFAULT), "users/<default>/clients/<default>"),
    (Entity(user="<default>", client_id="*"), "users/%3Cdefault%3E/clients/%2A"),
]


@pytest.mark.parametrize(("entity", "path"), PATHS)
def test_entity_paths(entity: Entity, path: str) -> None:
    assert entity_path(entity) == path
    assert znode_path(entity) == f"/config/{path}"
    assert entity_of_path(path) == entity
    assert entity_of_path(f"/config/{path}") == entity


@pytest.mark.parametrize("path", [
    "users", "users/", "users/a/clients", "users/a/topics/b", "clients/a/b", "ips/1.2.3.4",
    "brokers/0", "users/a/clients/b/c", "",
])
def test_not_entity_paths(path: str) -> None:
    with pytest.raises(ValueError):
        entity_of_path(path)


parts = st.one_of(st.just(DEFAULT), st.text(min_size=1))


@given(st.one_of(
    st.builds(Entity, user=parts), st.builds(Entity, client_id=parts),
    st.builds(Entity, user=parts, client_id=parts),
))
def test_entity_path_round_trip(entity: Entity) -> None:
    assert entity_of_path(entity_path(entity)) == entity


def test_entities_need_a_part_and_names() -> None:
    with pytest.raises(ValueError):
        Entity()
    with pytest.raises(ValueError):
        entity_path(Entity(user=""))


def test_configs_to_snapshot() -> None:
    quotas = quotas_from_configs({
        "users/alice": {"SCRAM-SHA-256": "salt=...", P: "1048576"},
        "users/bob": {},  # only the parent of bob's clients
        "users/bob/clients/<default>": {REQUEST_PERCENTAGE: "12.5"},
        "clients/p%201": {P: "not a number", CONSUMER_BYTE_RATE: "2048"},
        "clients/nan": {P: "NaN"},
        "ips/1.2.3.4": {"connection_creation_rate": "5"},
        "weird/path": {P: "1"},
    })
    assert dict(quotas.entries) == {
        Entity(user="alice"): {P: 1048576.0},
        Entity(user="bob", client_id=DEFAULT): {REQUEST_PERCENTAGE: 12.5},
        Entity(client_id="p 1"): {CONSUMER_BYTE_RATE: 2048.0},
    }


def test_values_as_kafka_writes_them() -> None:
    assert format_value(P, 1048576.0) == "1048576"
    assert format_value(P, 2.0**63) == "9223372036854775807"
    assert format_value(REQUEST_PERCENTAGE, 12.5) == "12.5"
    assert format_value(REQUEST_PERCENTAGE, 100.0) == "100.0"
