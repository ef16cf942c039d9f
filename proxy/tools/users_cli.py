"""``ksidecar users``: SASL users from the shell, with kafka-configs.sh habits.

    ksidecar users --zookeeper HOST:PORT[/chroot] add NAME [--mechanism SCRAM-SHA-256 ...]
        [--iterations N] (--password-stdin | --password-file FILE)
    ksidecar users --zookeeper HOST:PORT[/chroot] delete NAME [--mechanism ...]
    ksidecar users --zookeeper HOST:PORT[/chroot] list
    ksidecar users --plain-file FILE add|delete|list ...

    (with --zookeeper, --zk-config-file FILE: the sidecars' ZooKeeper identity and
    zookeeper.set.acl, see :mod:`proxy.tools.zookeeper_cli`)

``--zookeeper`` writes SCRAM credentials to ``/config/users/<user>`` (the connect string's
chroot as in ``zookeeper.connect``; created if missing, as a sidecar does); running sidecars
see the change through their watch. ``--plain-file`` edits the PLAIN users file
(``sidecar.sasl.plain.users.file``), which sidecars re-read when it changes. The password
is read from stdin (without echo at a terminal) or from the first line of a file, and is
never printed; only salted derivations are stored.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
import tempfile
from typing import Any

from kazoo.exceptions import NoAuthError
from kazoo.handlers.threading import KazooTimeoutError

from proxy.auth.sasl.password_file import (
    PasswordFileError,
    check_user_name,
    format_users,
    hash_password,
    parse_users,
)
from proxy.auth.sasl.scram import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    derive_credential,
)
from proxy.auth.user_store import UserStore
from proxy.config.keys import ConfigError
from proxy.config.properties import PropertiesError
from proxy.control.zk import ensure_chroot
from proxy.tools.zookeeper_cli import add_zk_config_argument, security_from_file

TIMEOUT = 10.0


class UsageError(Exception):
    """A command that cannot run as given (exit code 2)."""


def add_parser(sub: Any) -> None:
    """Register the ``users`` subcommand on the main parser."""
    parser = sub.add_parser("users", help="add, delete or list SASL users (SCRAM in ZooKeeper, PLAIN in a file)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="SCRAM users in ZooKeeper")
    where.add_argument("--plain-file", metavar="FILE", help="PLAIN users file")
    add_zk_config_argument(parser)
    verbs = parser.add_subparsers(dest="verb", required=True)
    add = verbs.add_parser("add", help="create a user or change its password")
    add.add_argument("name")
    add.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS),
                     help="SCRAM mechanism (repeatable; default: both)")
    add.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                     help=f"PBKDF2 iterations (default {DEFAULT_ITERATIONS})")
    secret = add.add_mutually_exclusive_group(required=True)
    secret.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    secret.add_argument("--password-file", metavar="FILE", help="read the password from a file's first line")
    delete = verbs.add_parser("delete", help="remove a user (or some of its SCRAM mechanisms)")
    delete.add_argument("name")
    delete.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS))
    verbs.add_parser("list", help="list users and mechanisms (never secrets)")


def run(args: argparse.Namespace) -> int:
    """Run one ``users`` command: 0 on success, 1 when it failed, 2 on bad usage."""
    try:
        if args.plain_file:
            return _plain(args)
        return _zookeeper(args)
    except (UsageError, ConfigError, PropertiesError) as exc:
        print(f"ksidecar users: {exc}", file=sys.stderr)
        return 2
    except NoAuthError:
        print("ksidecar users: ZooKeeper refused (NoAuth): the tree is secured; give the sidecars' "
              "identity with --zk-config-file", file=sys.stderr)
        return 1
    except (OSError, PasswordFileError, KazooTimeoutError, RuntimeError) as exc:
        print(f"ksidecar users: {exc}", file=sys.stderr)
        return 1


def read_password(args: argparse.Namespace) -> str:
    """The password from ``--password-file`` or stdin; never echoed."""
    if args.password_file:
        with open(args.password_file, encoding="utf-8") as f:
            password = f.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = getpass.getpass("Password: ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise UsageError("the password is empty")
    return password


def _zookeeper(args: argparse.Namespace) -> int:
    if args.verb == "add" and not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        raise UsageError(f"--iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS} for SCRAM")
    security = security_from_file(args.zk_config_file)
    password = read_password(args) if args.verb == "add" else ""
    ensure_chroot(args.zookeeper, TIMEOUT, security)
    client = security.client(args.zookeeper, timeout=TIMEOUT)
    client.start(timeout=TIMEOUT)
    try:
        store = UserStore(client)
        if args.verb == "list":
            users = store.read()
            if not users:
                print("No SCRAM users.")
            for name in sorted(users):
                listed = ", ".join(f"{m} (iterations {c.iterations})" for m, c in sorted(users[name].items()))
                print(f"{name}: {listed}")
            return 0
        mechanisms: list[str] = args.mechanism or sorted(MECHANISMS)
        if args.verb == "add":
            store.apply(args.name, {
                m: derive_credential(MECHANISMS[m], password, args.iterations) for m in mechanisms
            })
            print(f"Set {', '.join(mechanisms)} for user '{args.name}'.")
            return 0
        present = store.read().get(args.name, {})
        gone = [m for m in mechanisms if m in present]
        if not gone:
            print(f"ksidecar users: user '{args.name}' has no {' or '.join(mechanisms)} credential", file=sys.stderr)
            return 1
        store.apply(args.name, dict.fromkeys(gone))
        print(f"Deleted {', '.join(gone)} for user '{args.name}'.")
        return 0
    finally:
        client.stop()
        client.close()


def _plain(args: argparse.Namespace) -> int:
    path = args.plain_file
    try:
        with open(path, encoding="utf-8") as f:
            users = parse_users(f.read())
    except FileNotFoundError:
        users = {}
    if args.verb == "list":
        if not users:
            print("No PLAIN users.")
        for name in sorted(users):
            print(f"{name}: PLAIN (pbkdf2-sha256, iterations {users[name].iterations})")
        return 0
    if args.mechanism:
        raise UsageError("--mechanism applies to SCRAM users (--zookeeper), not to the PLAIN file")
    if args.verb == "add":
        try:
            check_user_name(args.name)
            users[args.name] = hash_password(read_password(args), args.iterations)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        _write_atomically(path, format_users(users))
        print(f"Set PLAIN password for user '{args.name}'.")
        return 0
    if users.pop(args.name, None) is None:
        print(f"ksidecar users: user '{args.name}' is not in {path}", file=sys.stderr)
        return 1
    _write_atomically(path, format_users(users))
    print(f"Deleted PLAIN user '{args.name}'.")
    return 0


def _write_atomically(path: str, text: str) -> None:
    # Readers (sidecars) see the old file or the new one, never half of it; owner-only.
    directory = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=".users-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(temp, 0o600)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
