"""Who the sidecar is to ZooKeeper, and the ACLs of the znodes it creates.

With ``zookeeper.set.acl=true`` (Kafka's key and meaning) every znode a sidecar or a CLI
creates is owned by the identity its session authenticated as (ZooKeeper's
``CREATOR_ALL_ACL``), and is readable by anyone else only where Kafka leaves it readable
(:func:`acls_for`, after Kafka's ``ZkData.defaultAcls``). The identity is ZooKeeper's
``digest`` scheme (``addauth digest user:password``): every ZooKeeper accepts it without
server-side configuration, and the ACL entries it yields (``digest:user:<hash>``) are what
``zkCli.sh getAcl`` shows. Every sidecar of a fleet and the CLIs use the same identity, so
each may change what another created.

kazoo takes one ``default_acl`` for every create; :class:`SecureKazooClient` chooses the ACL
from each node's path instead, at the one place every create goes out (plain, ``makepath``
parents, ``ensure_path``, sequence nodes) and in transactions. :func:`secure_tree` sets the
ACLs on a tree created before (Kafka's ``zookeeper-security-migration.sh``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import NoNodeError
from kazoo.protocol.serialization import Auth
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions, make_digest_acl_credential

log = logging.getLogger(__name__)


class _HideCredentials(logging.Filter):
    """kazoo logs every request it sends at DEBUG, ``Auth(scheme='digest', auth='user:password')``
    included: show the scheme only."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, Auth) for a in record.args):
            record.args = tuple(f"Auth(scheme={a.scheme!r}, auth=<hidden>)" if isinstance(a, Auth) else a
                                for a in record.args)
        return True


# kazoo's connection logs through its client's logger (``kazoo.client`` unless one is given).
for _name in ("kazoo.client", "kazoo.protocol.connection"):
    logging.getLogger(_name).addFilter(_HideCredentials())

#: All permissions for the identities of the session that creates (or sets) the ACL.
CREATOR_ALL = ACL(Permissions.ALL, Id("auth", ""))
#: Read (data and children) for anyone.
WORLD_READ = ACL(Permissions.READ, Id("world", "anyone"))

#: Kafka's ``ZkData.SensitiveRootPaths``: credentials (SCRAM salts and stored keys under
#: ``/config/users``, broker configs that may hold passwords, delegation tokens).
KAFKA_SENSITIVE_ROOTS = ("/config/users", "/config/brokers", "/delegation_token/tokens")
#: The ACLs and their change notifications. Kafka leaves them world-readable; here they are
#: not (issue 35: who may do what is itself worth hiding).
ACL_ROOTS = ("/kafka-acl", "/kafka-acl-changes", "/kafka-acl-extended", "/kafka-acl-extended-changes")
#: Never readable but by the sidecars' identity, nor their children.
SENSITIVE_ROOTS = KAFKA_SENSITIVE_ROOTS + ACL_ROOTS

#: The top-level nodes the sidecar writes, and Kafka's others (``ZkData.SecureRootPaths``,
#: with ``/consumers``): what :func:`secure_tree` walks when there is no chroot.
ROOTS = (
    "/admin", "/brokers", "/cluster", "/config", "/consumers", "/controller", "/controller_epoch",
    "/coordinators", "/delegation_token", "/feature", "/isr_change_notification",
    "/latest_producer_id_block", "/log_dir_event_notification", "/migration", *ACL_ROOTS,
)


def is_sensitive(path: str) -> bool:
    """Whether ``path`` (relative to the chroot) is, or is under, a :data:`SENSITIVE_ROOTS` node."""
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOTS)


def acls_for(path: str) -> list[ACL]:
    """The ACL a znode at ``path`` (relative to the chroot) is created with when
    ``zookeeper.set.acl=true``: the creator's identity may do everything; anyone may read
    unless the path :func:`is_sensitive`.

    Kafka's ``ZkData.defaultAcls`` leaves ``/consumers`` itself open (the old consumers wrote
    there themselves); here the sidecars are the only writers of group offsets and state,
    so it is secured like the rest.
    """
    return [CREATOR_ALL] if is_sensitive(path) else [CREATOR_ALL, WORLD_READ]


@dataclass(frozen=True)
class ZkTlsClient:
    """TLS to ZooKeeper (``zookeeper.ssl.*``): PEM files, as Kafka's keys with type PEM."""

    #: One PEM file with the client's private key and certificate chain; empty: no client certificate.
    keystore: str = ""
    keystore_password: str = field(default="", repr=False)
    #: The CA bundle verifying the servers; empty: the system's CAs.
    truststore: str = ""
    #: ``zookeeper.ssl.endpoint.identification.enable``: the certificate must name the host.
    check_hostname: bool = True

    def kazoo_kwargs(self) -> dict[str, Any]:
        """kazoo's TLS arguments. The chain is always verified (``verify_certs``); kazoo
        loads a client certificate only when given both ``certfile`` and ``keyfile``: the
        same combined file."""
        kwargs: dict[str, Any] = {"use_ssl": True, "verify_certs": True, "check_hostname": self.check_hostname}
        if self.truststore:
            kwargs["ca"] = self.truststore
        if self.keystore:
            # "" rather than None for an unencrypted key: with None, OpenSSL would prompt on
            # the terminal for an encrypted one.
            kwargs.update(certfile=self.keystore, keyfile=self.keystore, keyfile_password=self.keystore_password)
        return kwargs


@dataclass(frozen=True)
class ZkSecurity:
    """The sidecar's ZooKeeper identity, whether it sets ACLs, and TLS to ZooKeeper (never
    logs a password)."""

    set_acl: bool = False
    username: str = ""
    password: str = field(default="", repr=False)
    #: TLS to ZooKeeper (``zookeeper.ssl.client.enable``), or None for plain TCP.
    tls: ZkTlsClient | None = None

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> ZkSecurity:
        """From validated configuration values (``zookeeper.set.acl``, ``zookeeper.digest.*``,
        ``zookeeper.ssl.*``)."""
        tls = None
        if values.get("zookeeper.ssl.client.enable"):
            tls = ZkTlsClient(
                keystore=str(values["zookeeper.ssl.keystore.location"]),
                keystore_password=str(values["zookeeper.ssl.keystore.password"]),
                truststore=str(values["zookeeper.ssl.truststore.location"]),
                check_hostname=bool(values["zookeeper.ssl.endpoint.identification.enable"]),
            )
        return cls(
            set_acl=bool(values["zookeeper.set.acl"]),
            username=str(values["zookeeper.digest.username"]),
            password=str(values["zookeeper.digest.password"]),
            tls=tls,
        )

    def describe(self) -> str:
        """What the log may say about this: the user, the ACL choice, TLS (no secret)."""
        who = f"digest user {self.username!r}" if self.username else "no identity"
        tls = "off" if self.tls is None else "on" + (" with a client certificate" if self.tls.keystore else "")
        return f"{who}; zookeeper.set.acl={str(self.set_acl).lower()}; TLS {tls}"

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's ``auth_data``: the ``digest`` credentials sent on every (re)connect."""
        return [("digest", f"{self.username}:{self.password}")] if self.username else []

    def client(self, hosts: str, **kwargs: Any) -> KazooClient:
        """A kazoo client that authenticates as this identity (over TLS when configured)
        and, with ``set_acl``, creates every znode with :func:`acls_for` its path."""
        kind = SecureKazooClient if self.set_acl else KazooClient
        tls = self.tls.kazoo_kwargs() if self.tls is not None else {}
        return kind(hosts=hosts, auth_data=self.auth_data or None, **tls, **kwargs)


class _PerPath(list[ACL]):
    """The marker ``default_acl`` of :class:`SecureKazooClient`: choose by path."""


#: Holds :data:`CREATOR_ALL` in case some kazoo path ever creates without our hook: the
#: safe side. A non-empty list, since kazoo tests ``acl or default_acl``.
PER_PATH = _PerPath([CREATOR_ALL])


class SecureKazooClient(KazooClient):  # type: ignore[misc]  # kazoo is untyped
    """A kazoo client that creates each znode with :func:`acls_for` its path, unless the
    caller names an ACL."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, default_acl=PER_PATH, **kwargs)

    # Every create goes out here: create(), its makepath parents, ensure_path(); ``path`` is
    # relative to the chroot, as Kafka's paths are.
    def _create_async_inner(self, path: str, value: bytes, acl: list[ACL], flags: int,
                            trailing: bool = False, include_data: bool = False) -> Any:
        if acl is PER_PATH:
            acl = acls_for(path)
        return super()._create_async_inner(path, value, acl, flags, trailing=trailing,
                                           include_data=include_data)

    def transaction(self) -> TransactionRequest:
        """A transaction whose creates choose their ACL by path too."""
        return _SecureTransaction(self)


class _SecureTransaction(TransactionRequest):  # type: ignore[misc]  # kazoo is untyped
    def create(self, path: str, value: bytes = b"", acl: list[ACL] | None = None,
               ephemeral: bool = False, sequence: bool = False) -> None:
        super().create(path, value, acls_for(path) if acl is None else acl, ephemeral, sequence)


@dataclass(frozen=True, kw_only=True)
class Secured:
    """What :func:`secure_tree` did."""

    changed: int
    unchanged: int


def secure_tree(client: KazooClient, *, secure: bool = True, whole_tree: bool) -> Secured:
    """Set every existing node's ACL to :func:`acls_for` its path (``secure``) or back to
    open (``secure=False``), top-down, as Kafka's ``zookeeper-security-migration.sh
    --zookeeper.acl=secure|unsecure`` does.

    ``whole_tree``: the client is chrooted, so the chroot node and everything in it is the
    sidecars'; otherwise only the known :data:`ROOTS` are walked (the ZooKeeper may hold
    others' nodes, and its own ``/zookeeper``). Nodes that vanish meanwhile are skipped.
    """
    changed = unchanged = 0
    for path in _walk(client, ["/"] if whole_tree else list(ROOTS)):
        wanted = acls_for(path) if secure else list(OPEN_ACL_UNSAFE)
        try:
            current, stat = client.get_acls(path)
            if _same(current, wanted, client):
                unchanged += 1
                continue
            client.set_acls(path, wanted, version=stat.aversion)
            changed += 1
        except NoNodeError:
            continue
    log.info("%s: %d znode ACLs set, %d already so", "secured" if secure else "opened", changed, unchanged)
    return Secured(changed=changed, unchanged=unchanged)


def _walk(client: KazooClient, roots: list[str]) -> Iterator[str]:
    stack = list(reversed(roots))
    while stack:
        path = stack.pop()
        try:
            children = client.get_children(path)
        except NoNodeError:
            continue
        yield path
        base = "" if path == "/" else path
        stack.extend(f"{base}/{child}" for child in sorted(children, reverse=True))


def _same(current: list[ACL], wanted: list[ACL], client: KazooClient) -> bool:
    # ZooKeeper stores CREATOR_ALL as the session's own ids (digest:user:hash): compare with
    # what it becomes, not with the request. Over TLS with a client certificate the session
    # also holds an ``x509`` id (the certificate's subject), which ZooKeeper adds to
    # CREATOR_ALL too; sidecars may present different certificates, so such entries are
    # not compared (the digest entry is what every sidecar and CLI shares).
    if any(a.id.scheme == "auth" for a in wanted):
        current = [a for a in current if a.id.scheme != "x509"]
    expected: set[tuple[int, str, str]] = set()
    for a in wanted:
        if a.id.scheme != "auth":
            expected.add((a.perms, a.id.scheme, a.id.id))
            continue
        for scheme, credential in client.auth_data:
            if scheme == "digest":
                user, _, password = credential.partition(":")
                expected.add((a.perms, "digest", make_digest_acl_credential(user, password)))
    return {(a.perms, a.id.scheme, a.id.id) for a in current} == expected
