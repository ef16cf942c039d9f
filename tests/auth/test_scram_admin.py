"""Kafka's rules for DescribeUserScramCredentials / AlterUserScramCredentials (sans-IO)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Any

from proxy.auth.sasl import scram_admin
from proxy.auth.sasl.scram import SCRAM_SHA_256, derive_credential
from proxy.auth.sasl.scram_admin import Deletion, Upsertion, Users, Writes

USERS = {"alice": {"SCRAM-SHA-256": derive_credential(SCRAM_SHA_256, "pw", 4096, b"s")}}


# The decisions answer with typed responses; these tests read them as Kafka's wire bodies.


def describe(names: Sequence[str] | None, users: Users, authorized: bool) -> dict[str, Any]:
    return scram_admin.describe(names, users, authorized).to_wire(0)


def plan_alter(deletions: Sequence[Deletion], upsertions: Sequence[Upsertion], users: Users,
               authorized: bool) -> tuple[dict[str, Any], Writes]:
    response, writes = scram_admin.plan_alter(deletions, upsertions, users, authorized)
    return response.to_wire(0), writes


def upsert(name: str, mechanism: int = 1, iterations: int = 4096) -> Upsertion:
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", iterations)
    return Upsertion(name, mechanism, iterations, b"salt", salted)


def results(response: dict[str, object]) -> list[tuple[object, object]]:
    return [(r["User"], r["ErrorCode"]) for r in response["Results"]]  # type: ignore[attr-defined,index]


def test_describe_all_named_duplicate_missing_and_unauthorized() -> None:
    every = describe(None, USERS, True)
    assert every["ErrorCode"] == 0
    assert every["Results"][0]["CredentialInfos"] == [{"Mechanism": 1, "Iterations": 4096}]
    assert results(describe([], USERS, True)) == [("alice", 0)]
    assert results(describe(["bob", "alice", "alice"], USERS, True)) == [("bob", 91), ("alice", 92)]
    refused = describe(["alice"], USERS, False)
    assert (refused["ErrorCode"], results(refused)) == (31, [("alice", 31)])


def test_alter_rules() -> None:
    response, writes = plan_alter(
        [Deletion("alice", 1), Deletion("carol", 2), Deletion("", 1), Deletion("dan", 9)],
        [upsert("bob"), upsert("bob"), upsert("eve", iterations=100), upsert("fay", iterations=20000),
         upsert("gus", mechanism=2, iterations=4096)],
        USERS, True)
    assert results(response) == [("alice", 0), ("carol", 91), ("", 93), ("dan", 33), ("bob", 92),
                                 ("eve", 93), ("fay", 93), ("gus", 0)]
    assert writes["alice"] == {"SCRAM-SHA-256": None}
    (mechanism, credential), = writes["gus"].items()
    assert mechanism == "SCRAM-SHA-512" and credential is not None
    # The server key is HMAC-SHA-512(salted password, "Server Key"), whatever bytes were sent.
    salted = upsert("gus").salted_password
    assert credential.server_key == hmac.new(salted, b"Server Key", "sha512").digest()
    assert sorted(writes) == ["alice", "gus"]


def test_alter_unauthorized_writes_nothing() -> None:
    response, writes = plan_alter([Deletion("alice", 1)], [upsert("bob")], USERS, False)
    assert results(response) == [("alice", 31), ("bob", 31)] and writes == {}
