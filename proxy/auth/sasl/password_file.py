"""The PLAIN users file (``sidecar.sasl.plain.users.file``): salted PBKDF2 hashes, one a line.

Format (UTF-8 text; ``#`` starts a comment line; blank lines are skipped)::

    <user>:pbkdf2-sha256:<iterations>:<salt, base64>:<hash, base64>

The user name is everything before the last four ``:``-separated fields, so it may hold
``:``; it may not be empty, start with ``#`` or hold a line break or NUL. The hash is
``PBKDF2-HMAC-SHA256(password as UTF-8, salt, iterations)``, 32 bytes; salts are 24 random
bytes; iterations at least 4096 (the floor Kafka sets for SCRAM, whose stored keys are of
the same strength). ``ksidecar users add NAME --plain-file FILE`` writes entries.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

SCHEME = "pbkdf2-sha256"
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 10_000_000
HEADER = (
    "# ksidecar PLAIN users (sidecar.sasl.plain.users.file); written by `ksidecar users`.\n"
    "# <user>:pbkdf2-sha256:<iterations>:<salt base64>:<hash base64>\n"
)


class PasswordFileError(ValueError):
    """A users file that cannot be read; the message names the line."""


@dataclass(frozen=True, slots=True, repr=False)
class PasswordHash:
    """A salted PBKDF2 hash of one password."""

    iterations: int
    salt: bytes
    digest: bytes

    def __repr__(self) -> str:
        return f"PasswordHash(iterations={self.iterations}, <hidden>)"

    def matches(self, password: str) -> bool:
        """True when ``password`` hashes to this (constant-time comparison)."""
        candidate = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), self.salt, self.iterations)
        return hmac.compare_digest(candidate, self.digest)


def hash_password(password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None) -> PasswordHash:
    """A new salted hash of ``password``."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
    salt = secrets.token_bytes(24) if salt is None else salt
    return PasswordHash(iterations, salt, hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations))


def check_user_name(name: str) -> None:
    """Refuse a name the file cannot hold (:class:`ValueError`)."""
    if not name or name.startswith("#") or any(ch in name for ch in "\r\n\0"):
        raise ValueError("a user name must be non-empty, not start with '#' and hold no line break or NUL")


def parse_users(text: str) -> dict[str, PasswordHash]:
    """Read a users file's text; :class:`PasswordFileError` names the first bad line."""
    users: dict[str, PasswordHash] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.rsplit(":", 4)
        if len(fields) != 5 or fields[1] != SCHEME or not fields[0]:
            raise PasswordFileError(f"line {number}: expected <user>:{SCHEME}:<iterations>:<salt>:<hash>")
        name, _, iterations, salt, digest = fields
        try:
            entry = PasswordHash(
                int(iterations),
                base64.b64decode(salt, validate=True),
                base64.b64decode(digest, validate=True),
            )
        except (ValueError, binascii.Error):
            raise PasswordFileError(f"line {number}: iterations, salt or hash unreadable") from None
        if entry.iterations < 1 or len(entry.digest) != 32:
            raise PasswordFileError(f"line {number}: iterations must be positive and the hash 32 bytes")
        if name in users:
            raise PasswordFileError(f"line {number}: user {name!r} appears twice")
        users[name] = entry
    return users


def format_users(users: Mapping[str, PasswordHash]) -> str:
    """A users file's text (sorted by name)."""
    lines = [HEADER.rstrip("\n")]
    for name in sorted(users):
        entry = users[name]
        salt = base64.b64encode(entry.salt).decode("ascii")
        digest = base64.b64encode(entry.digest).decode("ascii")
        lines.append(f"{name}:{SCHEME}:{entry.iterations}:{salt}:{digest}")
    return "\n".join(lines) + "\n"


#: Checked for unknown users, so that a miss costs what a wrong password costs.
_DUMMY = hash_password(secrets.token_urlsafe(16))


def verify_user(users: Mapping[str, PasswordHash], name: str, password: str) -> bool:
    """True when ``name`` is listed and ``password`` is its password."""
    entry = users.get(name)
    if entry is None:
        _DUMMY.matches(password)
        return False
    return entry.matches(password)
