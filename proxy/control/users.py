"""SCRAM users as the sidecar holds them: ``/config/users``, watched, written compare-and-set.

:class:`ScramUsers` is the user directory of the local APIs
(:class:`~proxy.local.ports.UserDirectory`: Describe/AlterUserScramCredentials) and the
credential source of SCRAM logins. Without ZooKeeper there are no SCRAM users.
"""

from __future__ import annotations

from collections.abc import Mapping

from proxy.auth.sasl.scram import ScramCredential
from proxy.auth.user_store import Users, UserStore
from proxy.control.zk import ZooKeeper


class ScramUsers:
    """The SCRAM users of the sidecar (a watch-fed snapshot)."""

    def __init__(self, zk: ZooKeeper | None) -> None:
        self.zk = zk
        self.users: Users = {}
        self.store = UserStore(zk.client, zk.deliver(self.install)) if zk is not None else None

    def install(self, users: Users) -> None:
        """A new snapshot of the users (new logins use it)."""
        self.users = users

    def scram_users(self) -> Users:
        """The users as currently known."""
        return self.users

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """One user's credential for a mechanism, if any."""
        return self.users.get(user, {}).get(mechanism)

    async def start(self) -> None:
        """Start watching ``/config/users``."""
        if self.store is not None and self.zk is not None:
            await self.zk.call(self.store.start)

    async def apply(self, user: str, changes: Mapping[str, ScramCredential | None]) -> None:
        """Write one user's changes; ours take effect at once (read-your-writes)."""
        assert self.store is not None and self.zk is not None
        await self.zk.call(self.store.apply, user, changes)
        updated = {name: dict(credentials) for name, credentials in self.users.items()}
        mine = updated.setdefault(user, {})
        for mechanism, credential in changes.items():
            if credential is None:
                mine.pop(mechanism, None)
            else:
                mine[mechanism] = credential
        self.install({name: credentials for name, credentials in updated.items() if credentials})
