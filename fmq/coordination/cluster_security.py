"""A cluster's users and access rules in etcd: one security document, changed by
compare-and-swap, that every node copies into its own ``security.json``.

Why one key: a change (a new user, a rule) is read, changed and written back only if nobody
wrote in between (the key's ``mod_revision``), so two administrators changing users at the
same time both land, one after the other; and a node that reads the key gets one whole
version, never half of a change. The document holds SCRAM's salted keys, never passwords
(docs/security.md, *Users and rules in a cluster*).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from fmq.coordination import etcd_io
from fmq.errors import ConfigError, CoordinatorUnavailable
from fmq.security.document import SecurityDocument
from fmq.security.users import UserStore

logger = logging.getLogger("fmq.coordination")

#: The cluster a node or a command belongs to when none is named.
DEFAULT_CLUSTER = "fmq"
#: How often a compare-and-swap is tried again when another writer got in between.
CHANGE_ATTEMPTS = 50
REMEDY = ("write a good one back with `fmq user add --coordinator ...` after removing the "
          "key, or restore it from an etcd backup")


def check_cluster_name(cluster: str) -> str:
    """``cluster`` if it can name a cluster (it is part of etcd keys), else ConfigError."""
    if not cluster or not isinstance(cluster, str) or "/" in cluster:
        raise ConfigError(f"cluster name {cluster!r} must be non-empty and without '/'")
    return cluster


def security_key(cluster: str) -> str:
    return f"/fmq-cluster/{cluster}/security"


class ClusterSecurity:
    """The security document of ``cluster`` in the etcd at ``coordinator``."""

    def __init__(self, coordinator: str, cluster: str = DEFAULT_CLUSTER, *,
                 request_timeout_s: float = 2.0) -> None:
        check_cluster_name(cluster)
        self._etcd = etcd_io.open_client(coordinator, request_timeout_s,
                                         "users and rules in etcd")
        self.coordinator, self.cluster = coordinator, cluster
        self.key = security_key(cluster)

    @property
    def where(self) -> str:
        return f"etcd key {self.key} at {self.coordinator}"

    def _call(self, what: str, request: Callable[[], Any]) -> Any:
        return etcd_io.call(self.coordinator, what, request)

    def read(self) -> tuple[SecurityDocument | None, int]:
        """The document and its revision; (None, 0) when the cluster has none yet."""
        values = self._call("read the cluster's users",
                            lambda: self._etcd.get(self.key, metadata=True))
        if not values:
            return None, 0
        value, meta = values[0]
        return SecurityDocument.loads(value, self.where, REMEDY), int(meta["mod_revision"])

    def _swap(self, revision: int, document: SecurityDocument) -> bool:
        """Write ``document`` if the key is still at ``revision`` (0: still absent)."""
        check = ({"key": etcd_io.b64(self.key), "target": "MOD", "result": "EQUAL",
                  "mod_revision": revision} if revision else
                 {"key": etcd_io.b64(self.key), "target": "CREATE", "result": "EQUAL",
                  "create_revision": 0})
        txn = {"compare": [check],
               "success": [{"request_put": {"key": etcd_io.b64(self.key),
                                            "value": etcd_io.b64(document.dumps())}}],
               "failure": []}
        result = self._call("change the cluster's users",
                            lambda: self._etcd.transaction(txn))
        return bool(result.get("succeeded"))

    def change(self, change: Callable[[SecurityDocument], SecurityDocument]
               ) -> SecurityDocument:
        """Apply ``change`` to the cluster's document (an empty one when there is none) by
        compare-and-swap; the document now stored. ``change`` may raise (a duplicate user,
        an unknown rule): nothing is written then."""
        for _ in range(CHANGE_ATTEMPTS):
            current, revision = self.read()
            current = current or SecurityDocument()
            new = change(current)
            if new is current:
                return current
            if self._swap(revision, new):
                return new
        raise CoordinatorUnavailable(
            f"the cluster's users changed {CHANGE_ATTEMPTS} times while this change was "
            f"being made; try again")

    def seed(self, document: SecurityDocument) -> SecurityDocument:
        """Store ``document`` if the cluster has none yet; the document etcd holds after."""
        current, _revision = self.read()
        if current is not None:
            return current
        if self._swap(0, document):
            return document
        return self.read()[0] or SecurityDocument()

    def wait_for_change(self, after_revision: int, timeout_s: float) -> None:
        """Return when the key changes after ``after_revision``, after ``timeout_s``, or at
        once when etcd cannot be asked. A watch stream can stop delivering without an
        error; the time-out bounds how long a change can go unseen."""
        etcd_io.wait_for_change(self._etcd, self.key, after_revision, timeout_s)


class SecurityFollower:
    """Keeps a node's ``security.json`` equal to its cluster's document: read at start,
    then on every change etcd reports, and at least every ``resync_s`` seconds.

    While etcd does not answer, the node goes on with the copy it has (log-in works before
    etcd does). When the cluster has no document yet and this node has users, the node's
    document becomes the cluster's (the first node seeds it); after that etcd wins.
    """

    def __init__(self, cluster: ClusterSecurity, store: UserStore,
                 on_change: Callable[[], None], resync_s: float = 10.0,
                 on_read: Callable[[], None] = lambda: None) -> None:
        self.cluster, self.store = cluster, store
        self.on_change = on_change
        #: Called after every read of the cluster's document that went through (the
        #: store then holds it, or the cluster has none).
        self.on_read = on_read
        self.resync_s = resync_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fmq-security-follower",
                                        daemon=True)
        self._warned = False

    def start(self) -> SecurityFollower:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop following. A watch in progress may hold the thread up to ``resync_s``
        longer; it writes nothing after this returns."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def sync_once(self) -> int:
        """Copy the cluster's document into the store (seeding it first if the cluster has
        none); the revision read, 0 when there is none."""
        document, revision = self.cluster.read()
        if self._stop.is_set():
            return revision
        if document is None and self.store.has_users:
            self.cluster.seed(self.store.document)
            document, revision = self.cluster.read()
            logger.info("the users and rules of this node are now the cluster's (%s)",
                        self.cluster.where)
        if document is None and not self.store.stored:
            # The cluster has no users: the copy says so too, so that after a restart
            # this node knows it without etcd (fmq.server.cluster.cluster_users).
            document = SecurityDocument()
        if document is not None and self.store.replace(document):
            logger.info("users and rules updated from %s: %d users, %d rules",
                        self.cluster.where, len(document.users), len(document.rules))
            self.on_change()
        return revision

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                revision = self.sync_once()
                self._warned = False
                self.on_read()
            except CoordinatorUnavailable as exc:
                if not self._warned:
                    logger.warning("%s; this node keeps its copy of the users and rules "
                                   "meanwhile", exc)
                    self._warned = True
                self._stop.wait(etcd_io.retry_delay(self.resync_s))
                continue
            except Exception:  # a damaged document: keep the copy, say so, try again later
                logger.exception("could not take the users and rules from %s",
                                 self.cluster.where)
                self._stop.wait(self.resync_s)
                continue
            if not self._stop.is_set():
                self.cluster.wait_for_change(revision, self.resync_s)
