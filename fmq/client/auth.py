"""Logging in: a user and a password (given, or from the environment or a file) and the
SCRAM-SHA-256 exchange a client runs right after it connects (docs/security.md).

The exchange is written once, as a generator of requests (:func:`login_steps`); the
threaded and the asyncio client each drive it with their own I/O.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from scramp import ScramClient, ScramException, ScramMechanism

from fmq.errors import AuthenticationFailed, InvalidArgument, ProtocolError
from fmq.protocol import PROTOCOL_VERSION, Op
from fmq.version import __version__

MECHANISM = "SCRAM-SHA-256"
USER_ENV = "FMQ_USER"
PASSWORD_ENV = "FMQ_PASSWORD"
PASSWORD_FILE_ENV = "FMQ_PASSWORD_FILE"


@dataclass(frozen=True)
class Credentials:
    """A user and its password (the password is never shown by ``repr``)."""

    user: str
    password: str = field(repr=False)


def read_password_file(path: str) -> str:
    """The first line of ``path``, without its line end."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")
    except OSError as exc:
        raise InvalidArgument(f"cannot read the password file {path}: "
                              f"{exc.strerror or exc}") from None


def resolve_credentials(user: str | None = None, password: str | None = None,
                        password_file: str | None = None) -> Credentials | None:
    """The credentials a client uses: the arguments first, else FMQ_USER with FMQ_PASSWORD
    or FMQ_PASSWORD_FILE; None when no user is given anywhere (no log-in)."""
    user = user or os.environ.get(USER_ENV) or None
    if user is None:
        if password or password_file:
            raise InvalidArgument("a password without a user: give the user too "
                                  "(user=, --user or FMQ_USER)")
        return None
    if password is None and password_file:
        password = read_password_file(password_file)
    if password is None:
        password = os.environ.get(PASSWORD_ENV)
    if password is None and os.environ.get(PASSWORD_FILE_ENV):
        password = read_password_file(os.environ[PASSWORD_FILE_ENV])
    if not password:
        raise InvalidArgument(f"no password for user {user!r}: give it in FMQ_PASSWORD, or "
                              f"a file named by --password-file or FMQ_PASSWORD_FILE")
    return Credentials(user, password)


LoginSteps = Generator[tuple[Op, dict[str, Any]], dict[str, Any], str]


def login_steps(credentials: Credentials) -> LoginSteps:
    """Yields each request of the log-in and is sent its answer; returns the principal.
    Raises AuthenticationFailed when the server's proof is wrong (a fake server)."""
    hello = yield Op.HELLO, {"protocol_version": PROTOCOL_VERSION,
                             "client": f"fmq-python/{__version__}"}
    return (yield from scram_steps(hello, credentials))


def scram_steps(hello: dict[str, Any], credentials: Credentials) -> LoginSteps:
    """The log-in after HELLO's answer ``hello``: the SCRAM requests (none when the server
    has no users); returns the principal ("" without users)."""
    if not hello["auth_required"]:
        return ""  # a server without users (yet): nothing to log in to
    if MECHANISM not in hello["mechanisms"]:
        raise ProtocolError(f"the server offers {hello['mechanisms']}, not {MECHANISM}")
    try:
        scram = ScramClient([MECHANISM], credentials.user, credentials.password)
        first = yield Op.AUTH_START, {"mechanism": MECHANISM,
                                      "message": scram.get_client_first()}
        scram.set_server_first(first["message"])
        final = yield Op.AUTH_FINISH, {"message": scram.get_client_final()}
        scram.set_server_final(final["message"])
    except ScramException as exc:
        raise AuthenticationFailed(f"the server's SCRAM answer does not verify ({exc}); it "
                                   f"may not be the server you meant") from None
    return final["principal"]


def make_user_fields(user: str, password: str, create: bool) -> dict[str, Any]:
    """USER_PUT's fields: a new salted, iterated credential made here, so the password
    never travels."""
    if not password:
        raise InvalidArgument("the password must not be empty")
    salt, stored_key, server_key, iterations = ScramMechanism(MECHANISM).make_auth_info(
        password, iteration_count=4096)
    # SCRAM-SHA-512 keys too, for Kafka clients (docs/kafka.md).
    salt5, stored5, server5, iterations5 = ScramMechanism("SCRAM-SHA-512").make_auth_info(
        password, iteration_count=4096)
    return {"user": user, "create": create, "salt": salt, "iterations": iterations,
            "stored_key": stored_key, "server_key": server_key,
            "sha512": {"salt": salt5, "iterations": iterations5, "stored_key": stored5,
                       "server_key": server5}}


def log_in(request: Callable[[Op, dict[str, Any]], dict[str, Any]],
           credentials: Credentials) -> str | None:
    """Run the SCRAM exchange through ``request`` (one request, its answer); returns the
    principal logged in as (None: the server has no users, nothing to log in to)."""
    steps = login_steps(credentials)
    try:
        op, fields = next(steps)
        while True:
            op, fields = steps.send(request(op, fields))
    except StopIteration as done:
        return done.value or None
