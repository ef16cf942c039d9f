"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): the decisions.

Pure functions over plain data (the handler decodes, writes ZooKeeper and encodes), with
Kafka's rules and messages (``ScramControlManager``, ``ScramImage.describe``):

* Describe: no users named (null or empty) describes every user with a credential; a
  user named twice is DUPLICATE_RESOURCE, one without credentials RESOURCE_NOT_FOUND.
* Alter: one change per user per request (a second is DUPLICATE_RESOURCE for that user);
  an empty name or bad iteration count (4096-16384) is UNACCEPTABLE_CREDENTIAL, an unknown
  mechanism UNSUPPORTED_SASL_MECHANISM, deleting a missing credential RESOURCE_NOT_FOUND.
  Upsertions carry the salted password, never the password; only the derived stored and
  server keys are kept.
* A principal not in ``super.users`` gets CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from protocol.errors import ErrorCode
from proxy.auth.sasl.scram import (
    BY_TYPE,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted,
)

Users = Mapping[str, Mapping[str, ScramCredential]]


@dataclass(frozen=True, slots=True)
class Deletion:
    """Remove one user's credential for one mechanism (Kafka's type id)."""

    name: str
    mechanism: int


@dataclass(frozen=True, slots=True, repr=False)
class Upsertion:
    """Set one user's credential for one mechanism from a salted password."""

    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:
        return f"Upsertion(name={self.name!r}, mechanism={self.mechanism}, <secrets hidden>)"


#: ``{user: {mechanism name: new credential or None (delete)}}``.
Writes = dict[str, dict[str, "ScramCredential | None"]]

#: Kafka's type id of each mechanism name (DescribeUserScramCredentials' CredentialInfos).
BY_TYPE_BY_NAME = {mechanism.name: type_id for type_id, mechanism in BY_TYPE.items()}
_AUTH_FAILED = (int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "Cluster authorization failed.")


def describe(names: Sequence[str] | None, users: Users, authorized: bool) -> dict[str, Any]:
    """The DescribeUserScramCredentials response body."""
    if not authorized:
        code, message = _AUTH_FAILED
        return {"ThrottleTimeMs": 0, "ErrorCode": code, "ErrorMessage": message,
                "Results": [_result(n, code, message) for n in names or ()]}
    counts: dict[str, int] = {}
    for name in names or sorted(users):
        counts[name] = counts.get(name, 0) + 1
    results = []
    for name, count in counts.items():
        if count > 1:
            results.append(_result(name, int(ErrorCode.DUPLICATE_RESOURCE),
                                   f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}"))
        elif not users.get(name):
            results.append(_result(name, int(ErrorCode.RESOURCE_NOT_FOUND),
                                   f"Attempt to describe a user credential that does not exist: {name}"))
        else:
            infos = [{"Mechanism": BY_TYPE_BY_NAME[m], "Iterations": c.iterations}
                     for m, c in sorted(users[name].items())]
            results.append(_result(name, 0, None, infos))
    return {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "Results": results}


def _result(user: str, code: int, message: str | None, infos: list[dict[str, int]] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"User": user, "ErrorCode": code, "ErrorMessage": message}
    if infos is not None:
        entry["CredentialInfos"] = infos
    return entry


def plan_alter(
    deletions: Sequence[Deletion], upsertions: Sequence[Upsertion], users: Users, authorized: bool
) -> tuple[dict[str, Any], Writes]:
    """The AlterUserScramCredentials response body and the writes to make for it.

    Every result is ErrorCode 0 until a write fails; the handler then rewrites that
    user's result.
    """
    order: list[str] = []
    errors: dict[str, tuple[int, str]] = {}
    writes: Writes = {}

    def refuse(name: str, code: ErrorCode, message: str) -> None:
        errors[name] = (int(code), message)
        writes.pop(name, None)

    changes: list[Deletion | Upsertion] = [*deletions, *upsertions]
    for change in changes:
        name = change.name
        if name not in order:
            order.append(name)
        if not authorized:
            errors[name] = _AUTH_FAILED
            continue
        if name in errors:
            continue
        if name in writes:
            refuse(name, ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
            continue
        problem = _problem(change, users)
        if problem is not None:
            refuse(name, *problem)
            continue
        mechanism = BY_TYPE[change.mechanism]
        if isinstance(change, Upsertion):
            writes[name] = {mechanism.name: credential_from_salted(
                mechanism, change.salt, change.salted_password, change.iterations)}
        else:
            writes[name] = {mechanism.name: None}
    results = []
    for name in order:
        code, message = errors.get(name, (0, ""))
        results.append(_result(name, code, message or None))
    return {"ThrottleTimeMs": 0, "Results": results}, writes


def _problem(change: Deletion | Upsertion, users: Users) -> tuple[ErrorCode, str] | None:
    if not change.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    mechanism = BY_TYPE.get(change.mechanism)
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if isinstance(change, Deletion):
        if mechanism.name not in users.get(change.name, {}):
            return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
        return None
    if change.iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if change.iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not change.salt or not change.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None
