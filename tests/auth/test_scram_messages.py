"""Describe/AlterUserScramCredentials typed messages against Kafka's specs (version 0, flexible).

Requests go through our codec first (encoded from field values, decoded again); responses
are compared with bodies written out by hand from
``protocol/specs/kafka/*UserScramCredentials*.json`` and encoded.
"""

from __future__ import annotations

from typing import Any

from protocol.apis import (
    ALTER_USER_SCRAM_CREDENTIALS,
    DEFAULT_REGISTRY,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
)
from protocol.errors import ErrorCode
from protocol.schema import decode, encode, struct_defaults
from proxy.auth.sasl.scram_messages import (
    AlteredUser,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CredentialInfo,
    Deletion,
    DescribedUser,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    Upsertion,
)


def wire_request(key: int, **fields: Any) -> Any:
    spec = DEFAULT_REGISTRY.api(key).request
    body = dict(struct_defaults(spec.fields, 0))
    body.update(fields)
    return decode(spec, 0, encode(spec, 0, body))


def encodes(key: int, body: dict[str, Any]) -> dict[str, Any]:
    encode(DEFAULT_REGISTRY.api(key).response, 0, body)
    return body


def test_describe_request_null_empty_and_named() -> None:
    def read(users: Any) -> DescribeUserScramCredentialsRequest:
        return DescribeUserScramCredentialsRequest.from_wire(0, wire_request(DESCRIBE_USER_SCRAM_CREDENTIALS,
                                                                             Users=users))

    assert read(None) == DescribeUserScramCredentialsRequest(users=None)
    assert read([]) == DescribeUserScramCredentialsRequest(users=())
    assert read([{"Name": "alice"}, {"Name": "bob"}]) == DescribeUserScramCredentialsRequest(users=("alice", "bob"))


def test_describe_response() -> None:
    response = DescribeUserScramCredentialsResponse(results=(
        DescribedUser(user="alice", credentials=(CredentialInfo(mechanism=1, iterations=4096),
                                                 CredentialInfo(mechanism=2, iterations=8192))),
        DescribedUser(user="bob", error=ErrorCode.RESOURCE_NOT_FOUND, error_message="none"),
    ))
    assert encodes(DESCRIBE_USER_SCRAM_CREDENTIALS, response.to_wire(0)) == {
        "ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "Results": [
            {"User": "alice", "ErrorCode": 0, "ErrorMessage": None, "CredentialInfos": [
                {"Mechanism": 1, "Iterations": 4096}, {"Mechanism": 2, "Iterations": 8192}]},
            {"User": "bob", "ErrorCode": 91, "ErrorMessage": "none", "CredentialInfos": []},
        ]}


def test_alter_request() -> None:
    body = wire_request(ALTER_USER_SCRAM_CREDENTIALS,
                        Deletions=[{"Name": "alice", "Mechanism": 1}],
                        Upsertions=[{"Name": "bob", "Mechanism": 2, "Iterations": 4096, "Salt": b"salt",
                                     "SaltedPassword": b"pbkdf2-output"}])
    request = AlterUserScramCredentialsRequest.from_wire(0, body)
    assert request == AlterUserScramCredentialsRequest(deletions=(Deletion("alice", 1),),
                                                       upsertions=(Upsertion("bob", 2, 4096, b"salt", b"pbkdf2-output"),))
    assert type(request.upsertions[0].salt) is bytes
    assert "pbkdf2-output" not in repr(request)


def test_alter_response_and_a_failed_write() -> None:
    response = AlterUserScramCredentialsResponse(results=(
        AlteredUser(user="alice"), AlteredUser(user="bob"),
        AlteredUser(user="", error=ErrorCode.UNACCEPTABLE_CREDENTIAL, error_message="Username must not be empty")))
    assert encodes(ALTER_USER_SCRAM_CREDENTIALS, response.to_wire(0)) == {"ThrottleTimeMs": 0, "Results": [
        {"User": "alice", "ErrorCode": 0, "ErrorMessage": None},
        {"User": "bob", "ErrorCode": 0, "ErrorMessage": None},
        {"User": "", "ErrorCode": 93, "ErrorMessage": "Username must not be empty"},
    ]}
    failed = response.failed("bob", ErrorCode.UNKNOWN_SERVER_ERROR, "ZooKeeper write failed: gone")
    assert [(r["User"], r["ErrorCode"]) for r in failed.to_wire(0)["Results"]] == [("alice", 0), ("bob", -1), ("", 93)]
