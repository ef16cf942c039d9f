"""The PLAIN users file of a running sidecar, re-read when it changes.

Each PLAIN login stats the file (``sidecar.sasl.plain.users.file``) and re-reads it when
its size or modification time differ from the last read, so ``ksidecar users add
--plain-file`` takes effect at the next login without a restart. A file that cannot be
read or parsed keeps the previous users (logged once per change); before any good read
there are none. Blocking: call from a worker thread (logins run there).
"""

from __future__ import annotations

import logging
import os
import threading

from proxy.auth.sasl.password_file import PasswordFileError, PasswordHash, parse_users, verify_user

log = logging.getLogger(__name__)


class PlainUsersFile:
    """The users of one file; :meth:`verify` checks a login."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._users: dict[str, PasswordHash] = {}
        self._seen: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def users(self) -> dict[str, PasswordHash]:
        """The current users (re-reading the file if it changed)."""
        if not self.path:
            return {}
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            self._note((-1, -1), f"cannot read {self.path}: {exc.strerror}")
            return self._users
        mark = (stat.st_mtime_ns, stat.st_size)
        if mark != self._seen:
            try:
                with open(self.path, encoding="utf-8") as f:
                    users = parse_users(f.read())
            except (OSError, UnicodeDecodeError, PasswordFileError) as exc:
                self._note(mark, f"{self.path}: {exc}; keeping the previous users")
                return self._users
            with self._lock:
                self._users, self._seen = users, mark
            log.info("PLAIN users file %s: %d user(s)", self.path, len(users))
        return self._users

    def verify(self, user: str, password: str) -> bool:
        """True when the file lists ``user`` with ``password``."""
        return verify_user(self.users(), user, password)

    def _note(self, mark: tuple[int, int], message: str) -> None:
        with self._lock:
            if mark == self._seen:
                return
            self._seen = mark
        log.warning("sidecar.sasl.plain.users.file: %s", message)
