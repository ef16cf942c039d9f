"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), answered locally.

When the sidecar terminates SASL (``sidecar.sasl.mode=terminate`` with a SASL listener and
ZooKeeper), the SCRAM users are its own, in ``/config/users``: these requests are
answered here on every listener, so Kafka's admin tools (``kafka-configs.sh``,
``AdminClient.alter_user_scram_credentials``) manage them. The decisions are
:mod:`proxy.auth.sasl.scram_admin`'s, answered with the typed messages of
:mod:`proxy.auth.sasl.scram_messages`; the writes go through the user directory
(:class:`~proxy.local.ports.UserDirectory`) as an answer-later. Only principals in
``super.users`` may use them.
"""

from __future__ import annotations

import logging

from protocol.apis import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS, ApiRegistry
from protocol.errors import ErrorCode
from proxy.auth.sasl import scram_admin
from proxy.auth.sasl.scram_messages import (
    AlterUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequest,
)
from proxy.local.api import Answer, Context, Later, LocalApi, LocalRequest, Respond

log = logging.getLogger(__name__)

KEYS = frozenset({DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS})


def describe(request: LocalRequest, context: Context) -> Answer:
    """Answer DescribeUserScramCredentials."""
    users = context.ports.users
    assert request.body is not None and users is not None
    authorized = context.principal in context.ports.super_users
    asked = DescribeUserScramCredentialsRequest.from_wire(request.version, request.body)
    response = scram_admin.describe(asked.users, users.scram_users(), authorized)
    return Respond(body=response.to_wire(request.version))


def alter(request: LocalRequest, context: Context) -> Answer:
    """Answer AlterUserScramCredentials: later, once ZooKeeper has the changes."""
    users = context.ports.users
    assert request.body is not None and users is not None
    version = request.version
    authorized = context.principal in context.ports.super_users
    asked = AlterUserScramCredentialsRequest.from_wire(version, request.body)
    planned, writes = scram_admin.plan_alter(asked.deletions, asked.upsertions, users.scram_users(), authorized)
    if not writes:
        return Respond(body=planned.to_wire(version))

    async def answer() -> Respond:
        response = planned
        for user, changes in writes.items():
            try:
                await users.apply(user, changes)
            except Exception as exc:  # ZooKeeper failed: tell the client, keep the connection
                log.warning("AlterUserScramCredentials: ZooKeeper write for %r failed: %s", user, exc)
                response = response.failed(user, ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper write failed: {exc}")
                continue
            for mechanism, credential in changes.items():
                log.info("SCRAM credential %s for %r %s by %s", mechanism, user,
                         "deleted" if credential is None else "set", context.principal)
        return Respond(body=response.to_wire(version))

    return Later(answer=answer)


def entries(registry: ApiRegistry) -> list[LocalApi]:
    """The table entries for the two SCRAM credential APIs."""
    out = []
    for key, handler in ((DESCRIBE_USER_SCRAM_CREDENTIALS, describe), (ALTER_USER_SCRAM_CREDENTIALS, alter)):
        api = registry.api(key)
        assert api.versions.hi is not None
        # librdkafka (2.16) ends AlterUserScramCredentials v0 with one byte more than the
        # schema holds; Kafka's parser ignores what follows a request, and so does the
        # sidecar's (protocol.leniency).
        out.append(LocalApi(key=key, name=api.name, versions=(api.versions.lo, api.versions.hi),
                            handler=handler))
    return out
