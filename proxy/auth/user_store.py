"""SCRAM users in ZooKeeper, where Kafka keeps them: ``/config/users/<user>``.

Each user's znode is Kafka's dynamic-config JSON with one entry per SCRAM mechanism
(:mod:`proxy.auth.sasl.credentials`); entries that are not SCRAM (user quotas) are kept as they
are. A running sidecar watches the path (new users log in without a restart); the
``ksidecar users`` command and AlterUserScramCredentials write through
:meth:`UserStore.apply`, compare-and-set on the znode version.

Kafka in ZooKeeper mode also writes a change notification under ``/config/changes`` so
brokers re-read the entity; sidecars watch the znodes themselves, so none is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from proxy.auth.sasl.credentials import format_credential, scram_credentials
from proxy.auth.sasl.scram import MECHANISMS, ScramCredential
from quotas.store import EntityConfigStore, decode_config

USERS_PATH = "/config/users"

#: ``{user: {mechanism name: credential}}``; users without a readable SCRAM entry are absent.
Users = dict[str, dict[str, ScramCredential]]
#: One user's changes: mechanism → new credential, or ``None`` to delete it.
Changes = Mapping[str, "ScramCredential | None"]


def sanitize(user: str) -> str:
    """The znode name of a user, as Kafka's ``Sanitizer`` makes it (URL-encoded UTF-8,
    only ``A-Za-z0-9._-`` kept, a space as ``%20``)."""
    return quote(user, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    """The user a znode name stands for."""
    return unquote(name)


def users_of(configs: Mapping[str, Mapping[str, str]]) -> Users:
    """The SCRAM users among entity configs (keyed by znode name)."""
    result: Users = {}
    for name, config in configs.items():
        credentials = scram_credentials(config)
        if credentials:
            result[desanitize(name)] = credentials
    return result


class UserStore(EntityConfigStore):
    """Watches and writes ``/config/users``; ``on_change`` receives :data:`Users` snapshots."""

    def __init__(self, client: KazooClient, on_change: Callable[[Users], None] | None = None) -> None:
        notify = on_change or (lambda _users: None)
        super().__init__(client, USERS_PATH, lambda configs: notify(users_of(configs)))

    def users(self) -> Users:
        """The SCRAM users as currently known (watch-fed)."""
        return users_of(self.configs())

    def read(self) -> Users:
        """The SCRAM users read directly from ZooKeeper (blocking; no watch needed)."""
        try:
            children = self.client.get_children(self.path)
        except NoNodeError:
            return {}
        configs: dict[str, dict[str, str]] = {}
        for child in children:
            try:
                configs[child] = decode_config(self.client.get(f"{self.path}/{child}")[0])
            except NoNodeError:
                continue
        return users_of(configs)

    def apply(self, user: str, changes: Changes) -> None:
        """Write one user's credential changes in one compare-and-set (blocking)."""

        def change(config: dict[str, str]) -> None:
            for mechanism, credential in changes.items():
                assert mechanism in MECHANISMS, mechanism
                if credential is None:
                    config.pop(mechanism, None)
                else:
                    config[mechanism] = format_credential(credential)

        self.edit(sanitize(user), change)
