"""The primary's lease in etcd, with fencing and epochs.

A broker group's leader key (``/fmq/<group>/leader``) is bound to an etcd lease: it disappears
when its holder stops refreshing for ``ttl_s`` seconds, and then another node may create it.
Two rules make this safe for a log that acknowledges writes:

* **Fencing.** The holder counts its lease valid only until ``ttl_s - margin_s`` after it
  *sent* its last successful refresh. etcd expires the lease ``ttl_s`` after it *received* that
  refresh, later still, so the old holder stops trusting its lease before any other node can
  take it, whatever the network or a paused process did in between. A broker acknowledges a
  write only while :meth:`LeaderLease.holds` is true.
* **Epochs.** Each acquisition increments ``/fmq/<group>/epoch`` in the same etcd transaction
  that creates the leader key, so every term has a number no earlier term had (the new primary
  records it in its log; a returning old primary compares epochs to find where its log
  diverged). ``min_epoch`` lets a node whose log already holds a later epoch (after a manual
  promotion without etcd) move the counter past it.

The etcd client is ``etcd3gw`` (etcd's v3 HTTP gateway), an optional dependency:
``pip install 'fmq[replication]'``.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from fmq.coordination import etcd_io
from fmq.coordination.etcd_io import Etcd3Exception, describe_cause
from fmq.errors import ConfigError, CoordinatorUnavailable


@dataclass(frozen=True)
class LeaderRecord:
    """What the leader key holds: who leads, where clients reach it, and its term."""

    node: str
    address: str
    epoch: int


def leader_key(group: str) -> str:
    """The etcd key naming ``group``'s primary (a :class:`LeaderRecord` as JSON)."""
    return f"/fmq/{group}/leader"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class LeaderLease:
    """One node's view of its broker group's leadership in etcd.

    ``clock`` is a monotonic clock in seconds (tests may pass their own); every etcd request
    gives up after ``request_timeout_s``.
    """

    def __init__(self, coordinator: str, group: str, node: str, address: str, *,
                 ttl_s: int = 10, margin_s: float = 1.0, request_timeout_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not (isinstance(ttl_s, int) and ttl_s >= 2):
            raise ConfigError(f"lease ttl_s must be an integer of at least 2 seconds, "
                              f"not {ttl_s!r}")
        if not 0 <= margin_s < ttl_s - request_timeout_s:
            raise ConfigError(f"lease margin_s ({margin_s}) plus request_timeout_s "
                              f"({request_timeout_s}) must stay below ttl_s ({ttl_s})")
        self.coordinator = coordinator
        self.group, self.node, self.address = group, node, address
        self.ttl_s, self.margin_s = ttl_s, margin_s
        self._clock = clock
        self._etcd = etcd_io.open_client(coordinator, request_timeout_s,
                                         "the leader lease in etcd")
        self._lease: Any = None
        self._valid_until = 0.0
        self.record: LeaderRecord | None = None  # ours, while we hold the lease

    @property
    def etcd(self) -> Any:
        """The etcd client (the group registry shares it)."""
        return self._etcd

    @property
    def leader_key(self) -> str:
        return leader_key(self.group)

    @property
    def epoch_key(self) -> str:
        return f"/fmq/{self.group}/epoch"

    def holds(self) -> bool:
        """Whether this node may act as primary now: it holds the lease and its fencing
        deadline has not passed. False as soon as it cannot prove it."""
        return self.record is not None and self._clock() < self._valid_until

    def seconds_left(self) -> float:
        """Until the fencing deadline (0 when the lease is not held)."""
        return max(0.0, self._valid_until - self._clock()) if self.record else 0.0

    def leader(self) -> LeaderRecord | None:
        """The current leader as etcd has it, or None when nobody holds the lease."""
        values = self._call("read the leader key", lambda: self._etcd.get(self.leader_key))
        if not values:
            return None
        return LeaderRecord(**json.loads(values[0]))

    def current_epoch(self) -> int:
        """The last epoch any node started (0 before the first)."""
        return self._read_epoch()[0]

    def try_acquire(self, min_epoch: int = 0) -> LeaderRecord | None:
        """Become the leader if nobody is: our record (with a new epoch above both etcd's
        counter and ``min_epoch``), or None when another node holds the lease."""
        if self.holds():
            return self.record
        started = self._clock()
        lease = self._call("grant a lease", lambda: self._etcd.lease(self.ttl_s))
        epoch, epoch_revision = self._read_epoch()
        record = LeaderRecord(self.node, self.address, max(epoch, min_epoch) + 1)
        epoch_check = ({"key": _b64(self.epoch_key), "target": "MOD", "result": "EQUAL",
                        "mod_revision": epoch_revision} if epoch_revision else
                       {"key": _b64(self.epoch_key), "target": "CREATE", "result": "EQUAL",
                        "create_revision": 0})
        txn = {
            "compare": [{"key": _b64(self.leader_key), "target": "CREATE", "result": "EQUAL",
                         "create_revision": 0}, epoch_check],
            "success": [
                {"request_put": {"key": _b64(self.leader_key),
                                 "value": _b64(json.dumps(asdict(record))),
                                 "lease": lease.id}},
                {"request_put": {"key": _b64(self.epoch_key), "value": _b64(str(record.epoch))}},
            ],
            "failure": [],
        }
        result = self._call("create the leader key", lambda: self._etcd.transaction(txn))
        if not result.get("succeeded"):
            self._revoke(lease)
            return None
        self._lease, self.record = lease, record
        self._valid_until = started + self.ttl_s - self.margin_s
        return record

    def refresh(self) -> bool:
        """Keep the lease alive; whether it is still held. A failed refresh leaves the last
        deadline in force (the lease may still be valid), never extends it."""
        if self.record is None:
            return False
        sent = self._clock()
        try:
            ttl = self._lease.refresh()
        except (Etcd3Exception, OSError):
            return self.holds()
        if ttl <= 0:  # etcd says the lease is gone: someone may lead already
            self._drop()
            return False
        self._valid_until = max(self._valid_until, sent + min(ttl, self.ttl_s) - self.margin_s)
        return self.holds()

    def release(self) -> None:
        """Give the lease up at once (a graceful stop), so another node need not wait out
        the TTL."""
        lease = self._lease
        self._drop()
        if lease is not None:
            self._revoke(lease)

    def _drop(self) -> None:
        self.record, self._lease, self._valid_until = None, None, 0.0

    def _revoke(self, lease: Any) -> None:
        try:
            lease.revoke()
        except (Etcd3Exception, OSError):
            pass  # it expires on its own after ttl_s

    def _read_epoch(self) -> tuple[int, int]:
        values = self._call("read the epoch",
                            lambda: self._etcd.get(self.epoch_key, metadata=True))
        if not values:
            return 0, 0
        value, meta = values[0]
        return int(value), int(meta["mod_revision"])

    def call(self, what: str, request: Callable[[], Any]) -> Any:
        """Run one etcd request; CoordinatorUnavailable when etcd cannot be reached."""
        return self._call(what, request)

    def _call(self, what: str, request: Callable[[], Any]) -> Any:
        try:
            return request()
        except (Etcd3Exception, OSError) as exc:
            raise CoordinatorUnavailable(
                f"could not {what} at {self.coordinator}: {describe_cause(exc)}. Check that "
                f"etcd runs there and is reachable; this node does not act as primary meanwhile"
            ) from None
