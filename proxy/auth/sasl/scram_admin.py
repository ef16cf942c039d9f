"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): the decisions.

Pure functions over plain data, answering with the typed responses of
:mod:`proxy.auth.sasl.scram_messages` (the handler converts, writes ZooKeeper), with
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

from protocol.errors import ErrorCode
from proxy.auth.sasl.scram import (
    BY_TYPE,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted,
)
from proxy.auth.sasl.scram_messages import (
    AlteredUser,
    AlterUserScramCredentialsResponse,
    CredentialInfo,
    Deletion,
    DescribedUser,
    DescribeUserScramCredentialsResponse,
    Upsertion,
)

__all__ = ["Deletion", "Upsertion", "Users", "Writes", "describe", "plan_alter"]

Users = Mapping[str, Mapping[str, ScramCredential]]

#: ``{user: {mechanism name: new credential or None (delete)}}``.
Writes = dict[str, dict[str, "ScramCredential | None"]]

#: Kafka's type id of each mechanism name (DescribeUserScramCredentials' CredentialInfos).
BY_TYPE_BY_NAME = {mechanism.name: type_id for type_id, mechanism in BY_TYPE.items()}
_AUTH_FAILED_MESSAGE = "Cluster authorization failed."


def describe(names: Sequence[str] | None, users: Users, authorized: bool) -> DescribeUserScramCredentialsResponse:
    """The DescribeUserScramCredentials answer."""
    if not authorized:
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return DescribeUserScramCredentialsResponse(
            error=denied, error_message=_AUTH_FAILED_MESSAGE,
            results=tuple(DescribedUser(user=n, error=denied, error_message=_AUTH_FAILED_MESSAGE)
                          for n in names or ()))
    counts: dict[str, int] = {}
    for name in names or sorted(users):
        counts[name] = counts.get(name, 0) + 1
    results = []
    for name, count in counts.items():
        if count > 1:
            results.append(DescribedUser(user=name, error=ErrorCode.DUPLICATE_RESOURCE, error_message=(
                f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}")))
        elif not users.get(name):
            results.append(DescribedUser(user=name, error=ErrorCode.RESOURCE_NOT_FOUND, error_message=(
                f"Attempt to describe a user credential that does not exist: {name}")))
        else:
            results.append(DescribedUser(user=name, credentials=tuple(
                CredentialInfo(mechanism=BY_TYPE_BY_NAME[m], iterations=c.iterations)
                for m, c in sorted(users[name].items()))))
    return DescribeUserScramCredentialsResponse(results=tuple(results))


def plan_alter(
    deletions: Sequence[Deletion], upsertions: Sequence[Upsertion], users: Users, authorized: bool
) -> tuple[AlterUserScramCredentialsResponse, Writes]:
    """The AlterUserScramCredentials answer and the writes to make for it.

    Every result is NONE until a write fails; the handler then fails that user's result
    (:meth:`~proxy.auth.sasl.scram_messages.AlterUserScramCredentialsResponse.failed`).
    """
    order: list[str] = []
    errors: dict[str, tuple[ErrorCode, str]] = {}
    writes: Writes = {}

    def refuse(name: str, code: ErrorCode, message: str) -> None:
        errors[name] = (code, message)
        writes.pop(name, None)

    changes: list[Deletion | Upsertion] = [*deletions, *upsertions]
    for change in changes:
        name = change.name
        if name not in order:
            order.append(name)
        if not authorized:
            errors[name] = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _AUTH_FAILED_MESSAGE)
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
        code, message = errors.get(name, (ErrorCode.NONE, ""))
        results.append(AlteredUser(user=name, error=code, error_message=message or None))
    return AlterUserScramCredentialsResponse(results=tuple(results)), writes


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
