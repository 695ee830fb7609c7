"""The security operations on the wire: the HELLO handshake, the SCRAM log-in
(AUTH_START, AUTH_FINISH) with its slow-down after failures, and the users' and rules'
operations (USER_*, ACL_*: changed in etcd when the node is in a cluster). The users,
credentials and failure counts they work on are the server's
:class:`~fmq.server.authn.Authenticator`."""

from __future__ import annotations

import asyncio
import json
import logging

from scramp import ScramException

from fmq.errors import AuthenticationFailed, AuthenticationRequired, InvalidArgument
from fmq.protocol import PROTOCOL_VERSION, Op
from fmq.protocol.schema import HELLO_NODE_VERSION
from fmq.security import Operation, Rule, StoredCredential
from fmq.security.credentials import ScramKeys
from fmq.security.document import RuleAddition
from fmq.security.users import MECHANISM
from fmq.server.authn import Authenticator
from fmq.server.context import RequestSession, ServerContext
from fmq.server.ops.operation import BEFORE_LOGIN, HANDSHAKE, SERVES, on_cluster, operation
from fmq.version import __version__

logger = logging.getLogger("fmq.server")

#: Users and rules change over the wire only by an administrator of the cluster.
ADMIN = on_cluster(Operation.ADMIN)


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


@operation(Op.HELLO, access=HANDSHAKE, hosted=None, follower=SERVES)
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


@operation(Op.AUTH_START, access=BEFORE_LOGIN, hosted=None, follower=SERVES)
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


@operation(Op.AUTH_FINISH, access=BEFORE_LOGIN, hosted=None, follower=SERVES)
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


@operation(Op.USER_PUT, access=ADMIN, hosted=None, follower=SERVES)
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


@operation(Op.USER_REMOVE, access=ADMIN, hosted=None, follower=SERVES)
async def _user_remove(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    _require_users(ctx, "removing users")
    auth: Authenticator = ctx.authenticator
    await ctx.run(auth.change, lambda d: d.without_user(req["user"], allow_last=False))
    logger.info("%s at %s removed user %r", session.principal or "an unauthenticated client",
                session.peer, req["user"])
    return {}


@operation(Op.USER_LIST, access=ADMIN, hosted=None, follower=SERVES)
async def _user_list(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    _require_users(ctx, "listing users")
    return {"users": ctx.authenticator.store.users()}


def _rule(req: dict) -> Rule:
    return Rule.make(req["principal"], req["resource_type"], req["pattern"] or "",
                     req["prefix"], req["operation"], req["allow"])


@operation(Op.ACL_ADD, access=ADMIN, hosted=None, follower=SERVES)
async def _acl_add(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    _require_users(ctx, "adding access rules")
    rule = _rule(req)
    addition = RuleAddition(rule)
    await ctx.run(ctx.authenticator.change, addition)
    added = addition.added
    logger.info("%s at %s added the rule: %s", session.principal or "an unauthenticated client",
                session.peer, rule.text())
    return {"added": added}


@operation(Op.ACL_REMOVE, access=ADMIN, hosted=None, follower=SERVES)
async def _acl_remove(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    _require_users(ctx, "removing access rules")
    rule = _rule(req)
    await ctx.run(ctx.authenticator.change, lambda d: d.without_rule(rule))
    logger.info("%s at %s removed the rule: %s", session.principal or
                "an unauthenticated client", session.peer, rule.text())
    return {}


@operation(Op.ACL_LIST, access=ADMIN, hosted=None, follower=SERVES)
async def _acl_list(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    _require_users(ctx, "listing access rules")
    return {"json": json.dumps({"rules": [r.to_json() for r in
                                          ctx.authenticator.store.rules]})}
