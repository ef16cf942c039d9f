"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), answered locally.

When the sidecar terminates SASL (``sidecar.sasl.mode=terminate`` with a SASL listener and
ZooKeeper), the SCRAM users are its own, in ``/config/users``: these requests are
answered here on every listener, so Kafka's admin tools (``kafka-configs.sh``,
``AdminClient.alter_user_scram_credentials``) manage them. The decisions are
:mod:`proxy.sasl.scram_admin`'s; this module decodes, writes ZooKeeper off the event loop
and encodes. Only principals in ``super.users`` may use them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from protocol.apis import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS
from protocol.errors import ErrorCode
from protocol.headers import RequestHeader
from protocol.schema import decode, encode
from proxy.sasl import scram_admin

if TYPE_CHECKING:
    from proxy.connection import Connection
    from proxy.server import Sidecar

log = logging.getLogger(__name__)

KEYS = frozenset({DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS})


def answered_locally(sidecar: Sidecar) -> bool:
    """True when this sidecar owns the SCRAM users (see the module docstring)."""
    config = sidecar.config
    return (
        config["sidecar.sasl.mode"] == "terminate"
        and bool(config["zookeeper.connect"])
        and any(config.is_sasl(e.name) for e in config.listeners)
    )


async def handle(sidecar: Sidecar, connection: Connection, header: RequestHeader, body: memoryview) -> bytes:
    """Answer a request of :data:`KEYS` (the response body)."""
    version = header.api_version
    api = sidecar.registry.api(header.api_key)
    # librdkafka (2.16) ends AlterUserScramCredentials v0 with one byte more than the schema
    # holds; Kafka's parser ignores what follows a request, and so does this one.
    request = decode(api.request, version, body, allow_trailing=True)
    authorized = connection.principal in sidecar.config["super.users"]
    registration = sidecar.registration
    assert registration is not None  # answered_locally() needs ZooKeeper
    users = registration.scram_users
    if header.api_key == DESCRIBE_USER_SCRAM_CREDENTIALS:
        names = None if request["Users"] is None else [u["Name"] for u in request["Users"]]
        return encode(api.response, version, scram_admin.describe(names, users, authorized))
    deletions = [scram_admin.Deletion(d["Name"], d["Mechanism"]) for d in request["Deletions"]]
    upsertions = [
        scram_admin.Upsertion(u["Name"], u["Mechanism"], u["Iterations"], bytes(u["Salt"]),
                              bytes(u["SaltedPassword"]))
        for u in request["Upsertions"]
    ]
    response, writes = scram_admin.plan_alter(deletions, upsertions, users, authorized)
    updated = {user: dict(credentials) for user, credentials in users.items()}
    for user, changes in writes.items():
        try:
            await trio.to_thread.run_sync(registration.user_store.apply, user, changes)
        except Exception as exc:  # ZooKeeper failed: tell the client, keep the connection
            log.warning("AlterUserScramCredentials: ZooKeeper write for %r failed: %s", user, exc)
            for result in response["Results"]:
                if result["User"] == user:
                    result["ErrorCode"] = int(ErrorCode.UNKNOWN_SERVER_ERROR)
                    result["ErrorMessage"] = f"ZooKeeper write failed: {exc}"
            continue
        mine = updated.setdefault(user, {})
        for mechanism, credential in changes.items():
            if credential is None:
                mine.pop(mechanism, None)
            else:
                mine[mechanism] = credential
            log.info("SCRAM credential %s for %r %s by %s", mechanism, user,
                     "deleted" if credential is None else "set", connection.principal)
    # Read-your-writes for the next login and Describe; the watch brings the same state.
    registration.set_scram_users({u: c for u, c in updated.items() if c})
    return encode(api.response, version, response)
