"""The users of a broker, their SCRAM-SHA-256 credentials and the access rules, in
``DATA_DIR/security.json``.

The file holds one :class:`~fmq.security.document.SecurityDocument` and is replaced whole
(written to a temporary file, fsync'd, renamed, the directory fsync'd), so a crash leaves the
old version or the new one. Why a file and not the log: docs/security.md, "Where users are
stored". In a cluster the file is the node's copy of the document etcd holds
(:mod:`fmq.coordination.cluster_security`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from fmq.errors import ConfigError
from fmq.security.acl import Rule
from fmq.security.credentials import (
    ITERATIONS,
    MECHANISM,
    StoredCredential,
    check_user_name,
    make_credential,
)
from fmq.security.document import SecurityDocument

__all__ = ["ITERATIONS", "MECHANISM", "SECURITY_FILE", "StoredCredential", "UserStore",
           "check_user_name", "make_credential"]

SECURITY_FILE = "security.json"


class UserStore:
    """The security document of one data directory; thread-safe; every change is durable
    when it returns."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, SECURITY_FILE)
        self._lock = threading.Lock()
        self._document = SecurityDocument()
        #: Whether this directory holds its security.json (read now, or written since).
        self.stored = False
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ConfigError(f"cannot read {self.path} ({exc}); restore it from a backup, or "
                              f"move it away to start with no users and no rules") from None
        self._document = SecurityDocument.loads(text, self.path, "restore it from a backup")
        self.stored = True

    def _save(self, document: SecurityDocument) -> None:
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, document.dumps().encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dir_fd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._document = document
        self.stored = True

    @property
    def document(self) -> SecurityDocument:
        """The whole document (immutable: safe to read from any thread)."""
        return self._document

    def change(self, change: Callable[[SecurityDocument], SecurityDocument]) -> SecurityDocument:
        """Store ``change(document)`` (nothing is written when it returns the same
        document); the document now in force."""
        with self._lock:
            new = change(self._document)
            if new is not self._document:
                self._save(new)
            return new

    def replace(self, document: SecurityDocument) -> bool:
        """Make ``document`` the one in force (a cluster's copy); whether it changed (or
        the file was written for the first time)."""
        with self._lock:
            if document == self._document and self.stored:
                return False
            self._save(document)
            return True

    # ------------------------------------------------------------------ users

    @property
    def has_users(self) -> bool:
        return bool(self._document.users)

    def users(self) -> list[str]:
        return sorted(self._document.users)

    def credential(self, user: str) -> StoredCredential | None:
        return self._document.users.get(user)

    def put_user(self, user: str, credential: StoredCredential, *, create: bool) -> None:
        """Add ``user`` (``create``: it must not exist) or change its password (it must)."""
        self.change(lambda d: d.with_user(user, credential, create=create))

    def remove_user(self, user: str) -> None:
        self.change(lambda d: d.without_user(user))

    # ------------------------------------------------------------------ rules

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The access rules (replaced whole on change: safe to read from any thread)."""
        return self._document.rules

    def add_rule(self, rule: Rule) -> bool:
        """Add ``rule``; False when it is there already."""
        before = self._document
        return self.change(lambda d: d.with_rule(rule)) is not before

    def remove_rule(self, rule: Rule) -> None:
        self.change(lambda d: d.without_rule(rule))
