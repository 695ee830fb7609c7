"""Election through etcd: which node of a broker group is the primary, and when it changes.

One :class:`Elector` thread per server process, across its role changes
(:mod:`fmq.server.lifecycle` reopens the broker in each new role and attaches the new
:class:`~fmq.server.cluster.replica_role.ReplicationRole`). Every tick (a sixth of the lease TTL;
every :data:`SUSPECT_STEP_S` on a follower whose primary is unreachable or unknown, so a
fail-over takes about the lease TTL and not a few ticks more):

* **Holding the lease**: refresh it. The primary's write answers check
  :meth:`LeaderLease.holds <fmq.coordination.lease.LeaderLease.holds>` as they are released
  (fencing: false before etcd can hand the lease to another node); once a refresh cannot
  keep it, the node steps down: it reopens as a follower waiting for the next leader.
* **Otherwise**: publish this node's (epoch, durable offset); follow the leader key's
  address when there is one; when there is none, take the lease if the group rule allows
  it (:func:`fmq.coordination.broker_group.may_take_lease`), then reopen as the primary of the
  lease's epoch (the EPOCH record is written before anything is acknowledged).
"""

from __future__ import annotations

import logging
import threading
import time

from fmq.config import BrokerConfig
from fmq.coordination.broker_group import BrokerGroupRegistry, may_take_lease
from fmq.coordination.lease import LeaderLease
from fmq.errors import CoordinatorUnavailable
from fmq.server.cluster.replica_role import UNKNOWN_PRIMARY, ReplicationRole, RoleChange
from fmq.server.config import ServerConfig
from fmq.threadname import name_os_thread

logger = logging.getLogger("fmq.election")

#: Seconds between two warnings that etcd cannot be reached, or that the rule refuses.
_QUIET_S = 5.0
#: The longest step of a follower that lost its primary or waits for an election: it sees
#: the leader key expire, wins the election and sees the new leader this soon after the
#: fact rather than up to a tick later (each tick costing the application that long).
SUSPECT_STEP_S = 0.2


class Elector:
    """This node's part in its group's election: the lease, its report, the rule."""

    def __init__(self, config: ServerConfig, broker_config: BrokerConfig, address: str) -> None:
        ttl = config.lease_ttl_s
        self.node = config.node or address
        self.lease = LeaderLease(config.coordinator, config.group, self.node, address,
                                 ttl_s=ttl, margin_s=ttl / 4,
                                 request_timeout_s=min(2.0, ttl / 4))
        self.registry = BrokerGroupRegistry(self.lease, ttl)
        self.min_insync = broker_config.min_insync
        self.tick_s = ttl / 6
        self._role: ReplicationRole | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fmq-elector", daemon=True)
        self._quiet_until = 0.0
        #: Our report's etcd revision when we saw the leader key gone (None: not gone).
        self._vacant_since: int | None = None

    def initial_follow(self) -> str:
        """Register this node and return whom to follow at start: the leader's address, or
        :data:`UNKNOWN_PRIMARY` until an election (this node never starts as primary: it
        must win the lease first)."""
        try:
            self.registry.register()
            leader = self.lease.leader()
        except CoordinatorUnavailable as exc:
            logger.warning("%s; waiting for etcd as a follower", exc)
            return UNKNOWN_PRIMARY
        if leader is None or leader.node == self.node:
            return UNKNOWN_PRIMARY
        return leader.address

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop electing; give the lease and the report up at once (a graceful stop)."""
        self._stop.set()
        self._thread.join(10)
        self.lease.release()
        self.registry.withdraw()

    def attach(self, role: ReplicationRole) -> None:
        """A round starts: ``role`` is this node's part now."""
        if role.primary is None:
            role.lease_holds = self.lease.holds  # fencing, checked by every write answer
        with self._lock:
            self._role = role

    def detach(self) -> None:
        """The round ends (the broker closes)."""
        with self._lock:
            self._role = None

    # ------------------------------------------------------------------ the thread

    def _step_wait(self) -> float:
        """Seconds to the next step: a tick, or :data:`SUSPECT_STEP_S` while this node
        follows no primary, its connection to the primary is down, or an election runs."""
        with self._lock:
            role = self._role
        if role is None or self.lease.record is not None or role.primary is None:
            return self.tick_s
        follower = role.follower
        if (not role.primary or self._vacant_since is not None or follower is None
                or not follower.connected):
            return min(self.tick_s, SUSPECT_STEP_S)
        return self.tick_s

    def _run(self) -> None:
        name_os_thread()
        while not self._stop.wait(self._step_wait()):
            try:
                with self._lock:
                    role = self._role
                if role is not None:
                    self._step(role)
                elif self.lease.record is not None:
                    self.lease.refresh()  # a new primary reopening: keep the lease alive
            except CoordinatorUnavailable as exc:
                self._warn("%s", exc)
            except Exception:  # noqa: BLE001 - a bug must not end the election thread
                logger.exception("election step failed; trying again")

    def _step(self, role: ReplicationRole) -> None:
        if self.lease.record is not None:  # this node leads, or did until now
            if self.lease.refresh():
                if role.primary is not None:  # won while another role change was under way
                    self._change(role, RoleChange("", epoch=self.lease.record.epoch,
                                                  node=self.node))
                    return
                self.registry.publish(role.epoch, role.broker.replica.flushed_offset)
                return
            logger.error("the leader lease of %s could not be renewed in time: no write is "
                         "acknowledged any more; stepping down", self.node)
            self.lease.release()
            self._change(role, RoleChange(UNKNOWN_PRIMARY))
            return
        if role.primary is None:  # a primary round without the lease (it lapsed meanwhile)
            self._change(role, RoleChange(UNKNOWN_PRIMARY))
            return
        epoch = role.epoch
        self.registry.publish(epoch, role.broker.replica.flushed_offset)
        leader = self.lease.leader()
        if leader is not None:
            self._vacant_since = None
            if leader.node != self.node and leader.address != role.following:
                self._change(role, RoleChange(leader.address))
            elif leader.node != self.node:
                role.primary = leader.address
            return
        role.primary = ""  # unknown while the election runs
        reports = self.registry.reports()
        if self._vacant_since is None:  # count only reports published from now on
            own = reports.get(self.node)
            self._vacant_since = own.revision if own is not None else None
            return
        allowed, why = may_take_lease(self.node, self.registry.nodes(), reports,
                                      self.min_insync, self._vacant_since)
        if not allowed:
            self._warn("not taking the free leader lease: %s", why)
            return
        record = self.lease.try_acquire(min_epoch=epoch)
        if record is not None:
            self._vacant_since = None
            logger.info("took the leader lease of group %s: epoch %d (%s)",
                        self.lease.group, record.epoch, why)
            self._change(role, RoleChange("", epoch=record.epoch, node=self.node))

    def _change(self, role: ReplicationRole, change: RoleChange) -> None:
        if role.change_role is not None:
            with self._lock:
                self._role = None  # nothing more of this round: the next one attaches
            role.change_role(change)

    def _warn(self, fmt: str, *args: object) -> None:
        now = time.monotonic()
        if now >= self._quiet_until:
            self._quiet_until = now + _QUIET_S
            logger.warning(fmt, *args)
