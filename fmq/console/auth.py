"""Log-in, the session cookie and CSRF tokens of the console.

A password is checked by the server's own AUTH_START and AUTH_FINISH handlers: the console
plays the SCRAM client (the PBKDF2 work stays in the console's thread) against the same
credentials, with the same failure delay, log lines and counts as a client's log-in.
A logged-in person gets a random session id in an HttpOnly SameSite=Strict cookie (Secure
over HTTPS); every form that changes something carries the session's CSRF token, and a
POST without it is refused. Sessions live in the server's memory: a restart logs everyone
out.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass

from scramp import ScramClient

from fmq.console.gateway import ConsoleSession, ServerGateway
from fmq.errors import AuthenticationFailed
from fmq.protocol import Op
from fmq.security.credentials import MECHANISM

COOKIE = "fmq_console"
#: A session ends this long after its log-in.
SESSION_SECONDS = 8 * 3600
#: Sessions kept at most (the oldest is dropped first).
MAX_SESSIONS = 10_000


@dataclass
class LoginSession:
    user: str
    csrf: str
    expires: float


class ConsoleSessions:
    """Who is logged in, by the random id in their cookie (the console's thread only)."""

    def __init__(self) -> None:
        self._sessions: OrderedDict[str, LoginSession] = OrderedDict()

    def open(self, user: str) -> tuple[str, LoginSession]:
        sid = secrets.token_urlsafe(32)
        login = LoginSession(user, secrets.token_urlsafe(32),
                             time.monotonic() + SESSION_SECONDS)
        self._sessions[sid] = login
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return sid, login

    def find(self, sid: str | None) -> LoginSession | None:
        login = self._sessions.get(sid or "")
        if login is None:
            return None
        if login.expires < time.monotonic():
            del self._sessions[sid]
            return None
        return login

    def close(self, sid: str | None) -> None:
        self._sessions.pop(sid or "", None)


def anonymous_login() -> LoginSession:
    """Everyone's session on a server without users: its CSRF token still keeps another
    site's page from posting a change to the console (cross-site forms cannot read it)."""
    return LoginSession("", secrets.token_urlsafe(32), float("inf"))


def csrf_matches(login: LoginSession, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(login.csrf, given)


async def check_password(gateway: ServerGateway, user: str, password: str, peer: str) -> str:
    """The user name once the server's SCRAM handlers accept ``password`` for ``user``;
    AuthenticationFailed (after the server's failure delay) otherwise."""
    if not user or not password:
        raise AuthenticationFailed("give a user name and a password")
    session = ConsoleSession(None, peer)
    client = ScramClient([MECHANISM], user, password)
    first = await gateway.call(session, Op.AUTH_START,
                               {"mechanism": MECHANISM, "message": client.get_client_first()})
    try:
        client.set_server_first(first["message"])
    except Exception as exc:  # scramp's own errors: a server answer it cannot use
        raise AuthenticationFailed(f"the server's SCRAM answer was not usable ({exc})") \
            from None
    final = await asyncio.to_thread(client.get_client_final)  # PBKDF2: off the loop
    done = await gateway.call(session, Op.AUTH_FINISH, {"message": final})
    return done["principal"]
