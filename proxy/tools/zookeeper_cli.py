"""``ksidecar zookeeper``: secure an existing tree, and the ZooKeeper identity of the CLIs.

    ksidecar zookeeper --zookeeper HOST:PORT[/chroot] --zk-config-file FILE secure
    ksidecar zookeeper --zookeeper HOST:PORT[/chroot] --zk-config-file FILE unsecure

``secure`` sets every existing znode's ACL as a sidecar with ``zookeeper.set.acl=true``
would have created it (owned by the identity in ``FILE``, world-readable except credentials
and ACLs), like Kafka's ``zookeeper-security-migration.sh --zookeeper.acl=secure``;
``unsecure`` opens them again. With a chroot, the chroot node and everything in it is
walked; without, the sidecar's and Kafka's top-level nodes (never ``/zookeeper``).

``--zk-config-file`` (also on ``ksidecar users``) names a properties file, the sidecar's own
will do: of it only ``zookeeper.set.acl``, ``zookeeper.digest.username``,
``zookeeper.digest.password`` and the ``zookeeper.ssl.*`` keys (TLS to ZooKeeper) are read
(as Kafka's tools read only the ``zookeeper.*`` keys of ``--zk-tls-config-file``);
``KSIDECAR_ZOOKEEPER_*`` environment variables override them, as for ``ksidecar run``.
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from typing import Any

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from proxy.config.keys import KEYS, ConfigError, check_zookeeper_identity, env_overrides
from proxy.config.properties import PropertiesError, read_properties
from proxy.control.zk import split_chroot
from proxy.control.zk_security import ZkSecurity, secure_tree

TIMEOUT = 10.0
#: The keys ``--zk-config-file`` reads.
IDENTITY_KEYS = (
    "zookeeper.set.acl", "zookeeper.digest.username", "zookeeper.digest.password",
    "zookeeper.ssl.client.enable", "zookeeper.ssl.keystore.location", "zookeeper.ssl.keystore.password",
    "zookeeper.ssl.keystore.type", "zookeeper.ssl.truststore.location", "zookeeper.ssl.truststore.password",
    "zookeeper.ssl.truststore.type", "zookeeper.ssl.endpoint.identification.enable",
)


def add_zk_config_argument(parser: argparse.ArgumentParser) -> None:
    """``--zk-config-file FILE``: the ZooKeeper identity, from the sidecar's keys."""
    parser.add_argument("--zk-config-file", metavar="FILE",
                        help="properties with zookeeper.set.acl, zookeeper.digest.username, "
                             "zookeeper.digest.password and zookeeper.ssl.* (the sidecar's file will do)")


def security_from_file(path: str | None, environ: dict[str, str] | None = None) -> ZkSecurity:
    """The identity in ``path`` (other keys ignored), then ``KSIDECAR_ZOOKEEPER_*``.

    Raises :class:`ConfigError` or :class:`PropertiesError` naming the problem.
    """
    env = dict(os.environ) if environ is None else environ
    raw = read_properties(path, environ=env) if path else {}
    raw.update(env_overrides(env))
    keys = {key.name: key for key in KEYS if key.name in IDENTITY_KEYS}
    values = {name: key.read(raw.get(name, key.default or "")) for name, key in keys.items()}
    check_zookeeper_identity(values)
    return ZkSecurity.from_values(values)


def add_parser(sub: Any) -> None:
    """Register the ``zookeeper`` subcommand on the main parser."""
    parser = sub.add_parser("zookeeper", help="secure (or open) the ACLs of an existing ZooKeeper tree")
    parser.add_argument("--zookeeper", required=True, metavar="HOST:PORT[/CHROOT]",
                        help="as zookeeper.connect")
    add_zk_config_argument(parser)
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("secure", help="owned by the identity, world-readable except credentials and ACLs")
    verbs.add_parser("unsecure", help="open to anyone again (world:anyone, all permissions)")


def run(args: argparse.Namespace) -> int:
    """Run one ``zookeeper`` command: 0 on success, 1 when it failed, 2 on bad usage."""
    try:
        security = security_from_file(args.zk_config_file)
    except (ConfigError, PropertiesError) as exc:
        print(f"ksidecar zookeeper: {exc}", file=sys.stderr)
        return 2
    if not security.username:
        print("ksidecar zookeeper: needs the sidecars' identity: zookeeper.digest.username and "
              "zookeeper.digest.password in --zk-config-file", file=sys.stderr)
        return 2
    _, chroot = split_chroot(args.zookeeper)
    client = security.client(args.zookeeper, timeout=TIMEOUT)
    try:
        client.start(timeout=TIMEOUT)
    except (KazooTimeoutError, ssl.SSLError) as exc:
        print(f"ksidecar zookeeper: {args.zookeeper}: {exc}", file=sys.stderr)
        return 1
    try:
        done = secure_tree(client, secure=args.verb == "secure", whole_tree=chroot is not None)
    except KazooException as exc:
        print(f"ksidecar zookeeper: {type(exc).__name__} (is the tree secured by another identity?)",
              file=sys.stderr)
        return 1
    finally:
        client.stop()
        client.close()
    what = "secured" if args.verb == "secure" else "opened"
    print(f"{done.changed} znode(s) {what}, {done.unchanged} already so, under {args.zookeeper}.")
    return 0
