"""The users of a broker and their SCRAM-SHA-256 credentials, in ``DATA_DIR/security.json``.

Only what SCRAM needs is stored: a random salt, the iteration count, and the StoredKey and
ServerKey derived from the salted password (RFC 5802); a password is never stored nor
sent to the server. The file is replaced whole (written to a temporary file, fsync'd,
renamed, the directory fsync'd), so a crash leaves the old version or the new one. Why a
file and not the log: docs/security.md, "Where users are stored".
"""

from __future__ import annotations

import base64
import json
import os
import threading
from dataclasses import dataclass

from scramp import ScramMechanism

from fmq.errors import ConfigError, InvalidArgument
from fmq.message import check_name
from fmq.security.acl import Rule

SECURITY_FILE = "security.json"
FORMAT_VERSION = 1
MECHANISM = "SCRAM-SHA-256"
#: PBKDF2 rounds of a new credential (the client pays them at each log-in; 4096 is the
#: minimum RFC 7677 allows).
ITERATIONS = 4096


@dataclass(frozen=True)
class StoredCredential:
    """A user's SCRAM-SHA-256 credential: nothing in it gives the password back."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict:
        return {"mechanism": MECHANISM, "iterations": self.iterations,
                **{k: base64.b64encode(getattr(self, k)).decode()
                   for k in ("salt", "stored_key", "server_key")}}

    @classmethod
    def from_json(cls, data: dict) -> StoredCredential:
        return cls(base64.b64decode(data["salt"]), int(data["iterations"]),
                   base64.b64decode(data["stored_key"]), base64.b64decode(data["server_key"]))


def make_credential(password: str, iterations: int = ITERATIONS) -> StoredCredential:
    """A new credential for ``password``, with a fresh random salt."""
    if not password:
        raise InvalidArgument("the password must not be empty")
    salt, stored_key, server_key, i = ScramMechanism(MECHANISM).make_auth_info(
        password, iteration_count=iterations)
    return StoredCredential(salt, i, stored_key, server_key)


def check_user_name(user: str) -> str:
    check_name(user, "user name", allow_none=False)
    if any(c in user for c in ",=") or user != user.strip():
        raise InvalidArgument(f"user name {user!r} must not contain ',' or '=' nor start or "
                              f"end with a space")
    return user


class UserStore:
    """The users of one data directory; thread-safe; every change is durable when it
    returns."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, SECURITY_FILE)
        self._lock = threading.Lock()
        self._users: dict[str, StoredCredential] = {}
        self._rules: list[Rule] = []
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {self.path} ({exc}); restore it from a backup, or "
                              f"move it away to start with no users and no rules") from None
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise ConfigError(f"{self.path} is not an FMQ security file of version "
                              f"{FORMAT_VERSION}; restore it from a backup")
        try:
            self._users = {u: StoredCredential.from_json(c) for u, c in data["users"].items()}
            self._rules = [Rule.from_json(r) for r in data.get("rules", [])]
        except (KeyError, TypeError, ValueError, InvalidArgument) as exc:
            raise ConfigError(f"{self.path} is damaged ({exc!r}); restore it from a "
                              f"backup") from None

    def _save(self, users: dict[str, StoredCredential], rules: list[Rule]) -> None:
        data = {"version": FORMAT_VERSION,
                "users": {u: c.to_json() for u, c in sorted(users.items())},
                "rules": [r.to_json() for r in rules]}
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps(data, indent=1, sort_keys=True).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dir_fd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._users, self._rules = users, rules

    # ------------------------------------------------------------------ users

    @property
    def has_users(self) -> bool:
        return bool(self._users)

    def users(self) -> list[str]:
        return sorted(self._users)

    def credential(self, user: str) -> StoredCredential | None:
        return self._users.get(user)

    def put_user(self, user: str, credential: StoredCredential, *, create: bool) -> None:
        """Add ``user`` (``create``: it must not exist) or change its password (it must)."""
        check_user_name(user)
        if credential.iterations < ITERATIONS or not credential.salt:
            raise InvalidArgument(f"a credential needs a salt and at least {ITERATIONS} "
                                  f"iterations")
        with self._lock:
            if create and user in self._users:
                raise InvalidArgument(f"user {user!r} exists already; change its password "
                                      f"with `fmq user passwd`")
            if not create and user not in self._users:
                raise InvalidArgument(f"no user {user!r}; add it with `fmq user add`")
            self._save({**self._users, user: credential}, self._rules)

    def remove_user(self, user: str) -> None:
        with self._lock:
            if user not in self._users:
                raise InvalidArgument(f"no user {user!r} (`fmq user list` shows them)")
            users = dict(self._users)
            del users[user]
            self._save(users, self._rules)

    # ------------------------------------------------------------------ rules

    @property
    def rules(self) -> list[Rule]:
        """The access rules (a list replaced on change: safe to read from any thread)."""
        return self._rules

    def add_rule(self, rule: Rule) -> bool:
        """Add ``rule``; False when it is there already."""
        with self._lock:
            if rule in self._rules:
                return False
            self._save(self._users, [*self._rules, rule])
            return True

    def remove_rule(self, rule: Rule) -> None:
        with self._lock:
            if rule not in self._rules:
                raise InvalidArgument(f"no such rule ({rule.text()}); `fmq acl list` shows "
                                      f"them")
            self._save(self._users, [r for r in self._rules if r != rule])
