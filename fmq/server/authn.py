"""Authentication on the server: who must log in, the users' credentials for SCRAM-SHA-256
(``scramp``), and the slow-down after failed attempts.

A session starts unauthenticated. While the server has no users nothing is asked (the
server then listens on loopback only, docs/security.md); once it has users, a session may
only send HELLO, AUTH_START, AUTH_FINISH and PING until AUTH_FINISH succeeded (their
declarations say ``before_login``). A node whose users live in etcd and that has read
neither them nor a copy of them refuses everything but PING and HELLO (declared
``before_users_known``), log-ins included (:meth:`Authenticator.wait_for_cluster_users`).
An unknown user gets a made-up credential, so the exchange fails at the proof exactly as
with a wrong password and does not tell which users exist. The handshake, the log-in and
the operations on users and rules are :mod:`fmq.server.ops.security_ops`.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from scramp import ScramMechanism

from fmq.coordination.cluster_security import ClusterSecurity
from fmq.errors import AuthenticationRequired, FMQError, UsersNotLoaded
from fmq.security import StoredCredential, UserStore
from fmq.security.document import SecurityDocument
from fmq.security.users import ITERATIONS, MECHANISM
from fmq.server.context import RequestSession
from fmq.server.ops.operation import FmqOperation

logger = logging.getLogger("fmq.server")

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

    def refusal(self, session: RequestSession, declared: FmqOperation) -> FMQError | None:
        """Why operation ``declared`` may not run on ``session`` (asked only while
        enforcing)."""
        if session.principal is not None:
            return None
        access, name = declared.access, declared.op.name
        if not self.users_known and not access.before_users_known:
            return UsersNotLoaded(
                f"{name} refused: this node has not read its users from etcd yet "
                f"(etcd does not answer, or the node has only just started); retry in a "
                f"moment, logged in when the cluster has users (docs/security.md)")
        if access.before_login:
            return None
        return AuthenticationRequired(
            f"{name} refused: this server requires authentication first; give a "
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
