"""A user's SCRAM credentials and the rules for user names.

Only what SCRAM needs is kept: a random salt, the iteration count, and the StoredKey and
ServerKey derived from the salted password (RFC 5802); a password is never stored nor
sent to the server. Every credential has SCRAM-SHA-256 keys (FMQ's own log-in); a password
set by this release also gets SCRAM-SHA-512 keys (:attr:`StoredCredential.sha512`, for
Kafka clients, docs/kafka.md). A user whose password was set before has none until the
password is set again (``fmq user passwd``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from scramp import ScramMechanism

from fmq.errors import InvalidArgument
from fmq.message import check_name

MECHANISM = "SCRAM-SHA-256"
SHA512_MECHANISM = "SCRAM-SHA-512"
#: PBKDF2 rounds of a new credential (the client pays them at each log-in; 4096 is the
#: minimum RFC 7677 allows).
ITERATIONS = 4096


@dataclass(frozen=True)
class ScramKeys:
    """The SCRAM-SHA-512 keys of a password: nothing in them gives the password back."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict:
        return {"iterations": self.iterations,
                **{k: base64.b64encode(getattr(self, k)).decode()
                   for k in ("salt", "stored_key", "server_key")}}

    @classmethod
    def from_json(cls, data: dict) -> ScramKeys:
        return cls(base64.b64decode(data["salt"]), int(data["iterations"]),
                   base64.b64decode(data["stored_key"]), base64.b64decode(data["server_key"]))


@dataclass(frozen=True)
class StoredCredential:
    """A user's SCRAM-SHA-256 credential, and its SCRAM-SHA-512 keys when its password was
    set by a release that keeps them (None before)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes
    sha512: ScramKeys | None = None

    def to_json(self) -> dict:
        data = {"mechanism": MECHANISM, "iterations": self.iterations,
                **{k: base64.b64encode(getattr(self, k)).decode()
                   for k in ("salt", "stored_key", "server_key")}}
        if self.sha512 is not None:
            data["sha512"] = self.sha512.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict) -> StoredCredential:
        sha512 = ScramKeys.from_json(data["sha512"]) if data.get("sha512") else None
        return cls(base64.b64decode(data["salt"]), int(data["iterations"]),
                   base64.b64decode(data["stored_key"]), base64.b64decode(data["server_key"]),
                   sha512)


def make_credential(password: str, iterations: int = ITERATIONS) -> StoredCredential:
    """A new credential for ``password`` (SHA-256 and SHA-512 keys), with fresh random
    salts."""
    if not password:
        raise InvalidArgument("the password must not be empty")
    salt, stored_key, server_key, i = ScramMechanism(MECHANISM).make_auth_info(
        password, iteration_count=iterations)
    return StoredCredential(salt, i, stored_key, server_key,
                            make_sha512_keys(password, iterations))


def make_sha512_keys(password: str, iterations: int = ITERATIONS) -> ScramKeys:
    salt, stored_key, server_key, i = ScramMechanism(SHA512_MECHANISM).make_auth_info(
        password, iteration_count=iterations)
    return ScramKeys(salt, i, stored_key, server_key)


def check_user_name(user: str) -> str:
    check_name(user, "user name", allow_none=False)
    if any(c in user for c in ",=") or user != user.strip():
        raise InvalidArgument(f"user name {user!r} must not contain ',' or '=' nor start or "
                              f"end with a space")
    return user
