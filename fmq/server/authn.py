"""Authentication on the server: the HELLO handshake, SCRAM-SHA-256 (``scramp``), the
users' wire operations, and the slow-down after failed attempts.

A session starts unauthenticated. While the server has no users nothing is asked (the
server then listens on loopback only, docs/security.md); once it has users, a session may
only send HELLO, AUTH_START, AUTH_FINISH and PING until AUTH_FINISH succeeded
(:data:`OPEN_OPS`). A node whose users live in etcd and that has read neither them nor a
copy of them refuses everything but :data:`HANDSHAKE_OPS`, log-ins included
(:meth:`Authenticator.wait_for_cluster_users`). An unknown user gets a made-up credential,
so the exchange fails at the proof exactly as with a wrong password and does not tell which
users exist.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from scramp import ScramException, ScramMechanism

from fmq.coordination.cluster_security import ClusterSecurity
from fmq.errors import (
    AuthenticationFailed,
    AuthenticationRequired,
    FMQError,
    InvalidArgument,
    UsersNotLoaded,
)
from fmq.protocol import PROTOCOL_VERSION, Op
from fmq.protocol.schema import HELLO_NODE_VERSION
from fmq.security import Rule, StoredCredential, UserStore
from fmq.security.credentials import ScramKeys
from fmq.security.document import RuleAddition, SecurityDocument
from fmq.security.users import ITERATIONS, MECHANISM
from fmq.server.context import RequestSession, ServerContext
from fmq.server.handlers import handles
from fmq.version import __version__

logger = logging.getLogger("fmq.server")

#: What an unauthenticated session may send when the server has users.
OPEN_OPS = frozenset({Op.PING, Op.HELLO, Op.AUTH_START, Op.AUTH_FINISH})
#: What any session may send while the node does not know its users yet.
HANDSHAKE_OPS = frozenset({Op.PING, Op.HELLO})
#: Failed attempts remembered per client address (the oldest address is forgotten first).
MAX_ADDRESSES = 10_000
#: Seconds without a failure after which an address starts again from no failures.
FORGET_S = 60.0


class Authenticator:
    """The users, SCRAM, and failure counts of one server."""

    def __init__(self, store: UserStore, first_delay_ms: int = 100,
                 max_delay_ms: int = 5_000) -> None:
        self.store = store
        #: The cluster's users in etcd (fmq.coordination.cluster_security), or None when
        #: this node's file is where they live.
        self.cluster: ClusterSecurity | None = None
        #: The slow-down: a failure answers after first_delay doubled for each earlier
        #: failure of the connection and of its address, up to max_delay.
        self.first_delay = first_delay_ms / 1000
        self.max_delay = max_delay_ms / 1000
        #: True while the server has users: sessions must authenticate (read on every
        #: request: a plain attribute).
        self.enforcing = store.has_users
        #: False while the users live in etcd and this node has read neither them nor a
        #: copy of them: it cannot tell whether the cluster has users, so it lets nobody in.
        self.users_known = True
        self._mechanism = ScramMechanism(MECHANISM)
        self._secret = os.urandom(32)
        #: Failed attempts per client address, and when the last one was (monotonic).
        self.failures_by_address: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self.failures = 0  # for the server's stats

    def refusal(self, session: RequestSession, op: int) -> FMQError | None:
        """Why ``op`` may not run on ``session`` (asked only while enforcing)."""
        if session.principal is not None:
            return None
        if not self.users_known and op not in HANDSHAKE_OPS:
            return UsersNotLoaded(
                f"{Op(op).name} refused: this node has not read its users from etcd yet "
                f"(etcd does not answer, or the node has only just started); retry in a "
                f"moment, logged in when the cluster has users (docs/security.md)")
        if op in OPEN_OPS:
            return None
        return AuthenticationRequired(
            f"{Op(op).name} refused: this server requires authentication first; give a "
            f"user and password (FMQ_USER and FMQ_PASSWORD, or --user and --password-file; "
            f"docs/security.md)")

    def users_changed(self) -> None:
        self.enforcing = self.store.has_users or not self.users_known

    def wait_for_cluster_users(self, where: str) -> None:
        """Enter the state where this node knows no users: its users live at ``where``
        (etcd) and it has no copy of them, so the cluster may have users it does not know.
        Every request but the handshake is refused until :meth:`cluster_users_read`."""
        self.users_known = False
        self.enforcing = True
        logger.warning("this node's users live in %s and it has not read its users yet (no "
                       "security.json here): it refuses every request but HELLO and PING, "
                       "asking clients to retry, until it has read them", where)

    def cluster_users_read(self, where: str) -> None:
        """The cluster's users were just read from ``where`` (and copied into the store):
        leave the state of :meth:`wait_for_cluster_users`. Called from the follower's
        thread; the store is replaced before, so no request runs unchecked in between."""
        if self.users_known:
            return
        self.users_known = True
        self.enforcing = self.store.has_users
        logger.warning("this node read its users from %s (%d users): it serves again, %s",
                       where, len(self.store.users()),
                       "after a log-in" if self.enforcing else "without a log-in (the "
                       "cluster has no users)")

    def change(self, change: Callable[[SecurityDocument], SecurityDocument]) -> SecurityDocument:
        """Apply ``change`` where the users live: the cluster's document in etcd when this
        node is in a cluster (then copied here at once), else this node's file. Blocking:
        run it on a worker thread."""
        if self.cluster is None:
            document = self.store.change(change)
        else:
            document = self.cluster.change(change)
            self.store.replace(document)
        self.users_changed()
        return document

    def credential(self, user: str) -> tuple[StoredCredential, bool]:
        """The user's credential and True, or a made-up one and False (unknown user)."""
        found = self.store.credential(user)
        if found is not None:
            return found, True
        fake = hmac.new(self._secret, user.encode(), hashlib.sha256).digest()
        return StoredCredential(fake[:16], ITERATIONS, fake, fake[::-1]), False

    def start(self, client_first: str) -> tuple[Any, str, str, bool]:
        """SCRAM's first step: (server state, server-first message, user, known)."""
        seen: dict[str, Any] = {}

        def auth_fn(user: str) -> tuple[bytes, bytes, bytes, int]:
            cred, known = self.credential(user)
            seen.update(user=user, known=known)
            return cred.salt, cred.stored_key, cred.server_key, cred.iterations

        server = self._mechanism.make_server(auth_fn)
        server.set_client_first(client_first)
        return server, server.get_server_first(), seen["user"], seen["known"]

    def delay(self, session_failures: int, address: str) -> float:
        """Seconds to wait before answering this failure; counts it. An address's count
        is forgotten FORGET_S after its last failure (a success does not reset it: any
        account would otherwise let a guesser start over)."""
        self.failures += 1
        now = time.monotonic()
        count, last = self.failures_by_address.pop(address, (0, now))
        count = 1 if now - last > FORGET_S else count + 1
        self.failures_by_address[address] = (count, now)
        while len(self.failures_by_address) > MAX_ADDRESSES:
            self.failures_by_address.popitem(last=False)
        earlier = session_failures + count - 1
        return min(self.max_delay, self.first_delay * 2 ** min(earlier, 16))


def _address(session: RequestSession) -> str:
    return session.peer.rpartition(":")[0] or session.peer


async def _refuse(ctx: ServerContext, session: RequestSession, user: str | None,
                  why: str) -> AuthenticationFailed:
    """Log and count a failed attempt, wait the slow-down, and give the error to raise."""
    auth: Authenticator = ctx.authenticator
    session.auth_failures += 1
    delay = auth.delay(session.auth_failures - 1, _address(session))
    # The user name only: the exchange never carries the password itself.
    logger.warning("connection %d from %s: authentication%s failed (%s); answering in %d ms",
                   session.id, session.peer, f" of user {user!r}" if user else "", why,
                   round(delay * 1000))
    await asyncio.sleep(delay)
    return AuthenticationFailed(
        "authentication failed: wrong user name or password, or a malformed SCRAM "
        "exchange; check FMQ_USER and FMQ_PASSWORD (or --user, --password-file)")


def _require_users(ctx: ServerContext, what: str) -> None:
    """Users and rules change over the wire only by a logged-in administrator, so only on
    a server that has users; the first ones are added offline."""
    if not ctx.authenticator.enforcing:
        raise AuthenticationRequired(
            f"{what} over the network needs a logged-in user with admin on the cluster, and "
            f"this server has no users yet: stop it and add the first user and its rules "
            f"offline (`fmq user add USER DATA_DIR`, `fmq acl add DATA_DIR ...`; "
            f"docs/security.md)")


@handles(Op.HELLO)
async def _hello(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    node = node_role(ctx) if req["protocol_version"] >= HELLO_NODE_VERSION else None
    return {"protocol_version": min(req["protocol_version"], PROTOCOL_VERSION),
            "server_version": __version__, "auth_required": ctx.authenticator.enforcing,
            "mechanisms": [MECHANISM], "node": node}


def node_role(ctx: ServerContext) -> dict[str, str]:
    """HELLO's ``node``: this node's role and its primary, read now (a follower may be
    promoted, a primary may step down). It is answered before log-in, so it says no more
    than what a follower's NotPrimary says to anyone."""
    role = ctx.replication
    if role is None:
        return {"role": "primary", "primary": ""}
    return {"role": role.describe()["role"], "primary": role.primary or ""}


@handles(Op.AUTH_START)
async def _auth_start(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    session.scram = None
    if session.principal is not None:
        raise InvalidArgument(f"this connection is authenticated as {session.principal!r} "
                              f"already; open a new one to log in as another user")
    if not ctx.authenticator.enforcing:  # nothing to guess: no slow-down
        raise AuthenticationFailed("this server has no users: connect without a user and "
                                   "password (docs/security.md)")
    if req["mechanism"] != MECHANISM:
        raise await _refuse(ctx, session, None, f"unknown mechanism {req['mechanism']!r}")
    try:
        server, first, user, known = ctx.authenticator.start(req["message"])
    except (ScramException, KeyError, ValueError, TypeError, IndexError) as exc:
        raise await _refuse(ctx, session, None, f"bad client-first message: {exc}") from None
    session.scram = (server, user, known)
    return {"message": first}


@handles(Op.AUTH_FINISH)
async def _auth_finish(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    state, session.scram = session.scram, None  # one try per AUTH_START: no replays
    if state is None and not ctx.authenticator.enforcing:
        raise AuthenticationFailed("this server has no users: connect without a user and "
                                   "password (docs/security.md)")
    if state is None:
        raise await _refuse(ctx, session, None, "AUTH_FINISH without AUTH_START")
    server, user, known = state
    try:
        server.set_client_final(req["message"])
        final = server.get_server_final()
    except (ScramException, KeyError, ValueError, TypeError, IndexError) as exc:
        raise await _refuse(ctx, session, user, f"bad proof: {exc}") from None
    if not known:  # a made-up credential cannot verify; this is defence in depth
        raise await _refuse(ctx, session, user, "unknown user")
    session.principal = user
    logger.info("connection %d from %s: authenticated as %r", session.id, session.peer, user)
    return {"message": final, "principal": user}


@handles(Op.USER_PUT)
async def _user_put(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    _require_users(ctx, "adding users or changing passwords")
    sha512 = req.get("sha512")  # None from a client older than SCRAM-SHA-512
    cred = StoredCredential(req["salt"], req["iterations"], req["stored_key"],
                            req["server_key"], sha512 and ScramKeys(
                                sha512["salt"], sha512["iterations"], sha512["stored_key"],
                                sha512["server_key"]))
    auth: Authenticator = ctx.authenticator
    await ctx.run(auth.change, lambda d: d.with_user(req["user"], cred, create=req["create"]))
    logger.info("%s at %s %s user %r", session.principal or "an unauthenticated client",
                session.peer, "added" if req["create"] else "changed the password of",
                req["user"])
    return {}


@handles(Op.USER_REMOVE)
async def _user_remove(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    _require_users(ctx, "removing users")
    auth: Authenticator = ctx.authenticator
    await ctx.run(auth.change, lambda d: d.without_user(req["user"], allow_last=False))
    logger.info("%s at %s removed user %r", session.principal or "an unauthenticated client",
                session.peer, req["user"])
    return {}


@handles(Op.USER_LIST)
async def _user_list(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    _require_users(ctx, "listing users")
    return {"users": ctx.authenticator.store.users()}


def _rule(req: dict) -> Rule:
    return Rule.make(req["principal"], req["resource_type"], req["pattern"] or "",
                     req["prefix"], req["operation"], req["allow"])


@handles(Op.ACL_ADD)
async def _acl_add(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    _require_users(ctx, "adding access rules")
    rule = _rule(req)
    addition = RuleAddition(rule)
    await ctx.run(ctx.authenticator.change, addition)
    added = addition.added
    logger.info("%s at %s added the rule: %s", session.principal or "an unauthenticated client",
                session.peer, rule.text())
    return {"added": added}


@handles(Op.ACL_REMOVE)
async def _acl_remove(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    _require_users(ctx, "removing access rules")
    rule = _rule(req)
    await ctx.run(ctx.authenticator.change, lambda d: d.without_rule(rule))
    logger.info("%s at %s removed the rule: %s", session.principal or
                "an unauthenticated client", session.peer, rule.text())
    return {}


@handles(Op.ACL_LIST)
async def _acl_list(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    _require_users(ctx, "listing access rules")
    return {"json": json.dumps({"rules": [r.to_json() for r in
                                          ctx.authenticator.store.rules]})}
