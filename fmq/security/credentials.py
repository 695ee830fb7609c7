"""A user's SCRAM-SHA-256 credential and the rules for user names.

Only what SCRAM needs is kept: a random salt, the iteration count, and the StoredKey and
ServerKey derived from the salted password (RFC 5802); a password is never stored nor
sent to the server.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from scramp import ScramMechanism

from fmq.errors import InvalidArgument
from fmq.message import check_name

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
