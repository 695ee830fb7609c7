"""A broker group's members in etcd, and the rule that lets a node take the leader lease.

* **The registry**: ``/fmq/<group>/nodes/<node>`` = its address, one persistent key per node,
  written when the node first joins and removed only by an operator
  (``fmq replica forget``). It fixes F, the number of nodes that are not the primary.
* **Reports**: ``/fmq/<group>/reports/<node>`` = the node's newest epoch and durable log
  offset, bound to a lease of its own (it vanishes when the node stops refreshing).

**The rule** (:func:`may_take_lease`): when the leader key is gone, a node may try to take
it only if it sees the reports of at least ``F - min_insync + 1`` registered nodes (itself
included), published after it saw the key gone and no reported node has a higher (epoch, durable offset), ties going to the
lowest name. In ``sync`` mode an acknowledged write is on ``min_insync`` followers, so at
least one of the nodes seen has it, and the node with the highest (epoch, offset) has
everything any of them has: no acknowledged write is lost. The price: with 3 nodes and
``min_insync = 1``, losing the primary and one follower stops elections (the remaining
follower alone may lack an acknowledged write) until one of them returns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fmq.coordination.lease import LeaderLease


@dataclass(frozen=True)
class NodeReport:
    """What a node publishes about its log; ``revision`` is etcd's revision of the report
    (not published: read back)."""

    node: str
    address: str
    epoch: int
    durable: int
    revision: int = 0


def may_take_lease(me: str, nodes: dict[str, str], reports: dict[str, NodeReport],
                   min_insync: int, since_revision: int = -1) -> tuple[bool, str]:
    """Whether ``me`` may try to take the free leader key, and why (for the log). Only
    reports published after ``since_revision`` count (after this node saw the key gone:
    the last report of a node that died since is not evidence of what it holds)."""
    seen = {n: r for n, r in reports.items() if n in nodes and r.revision > since_revision}
    others = max(len(nodes) - 1, 0)
    need = max(1, others - min_insync + 1)
    if me not in seen:
        return False, "this node's own report is not published yet"
    if len(seen) < need:
        return False, (f"only {len(seen)} of the {len(nodes)} registered nodes report; "
                       f"{need} must (F - min_insync + 1, F = {others}) so that one of them "
                       f"holds every acknowledged write")
    best = min(seen.values(), key=lambda r: (-r.epoch, -r.durable, r.node))
    if best.node != me:
        return False, (f"{best.node} holds more (epoch {best.epoch}, durable offset "
                       f"{best.durable})")
    return True, f"{len(seen)} nodes report and this one holds the most"


class BrokerGroupRegistry:
    """The registry and the reports of ``lease``'s group, through its etcd client."""

    def __init__(self, lease: LeaderLease, report_ttl_s: int) -> None:
        self.lease = lease
        self.report_ttl_s = report_ttl_s
        self._report_lease: Any = None
        base = f"/fmq/{lease.group}"
        self.nodes_prefix, self.reports_prefix = f"{base}/nodes/", f"{base}/reports/"

    def register(self) -> None:
        """Add this node to the registry (kept until an operator removes it)."""
        lease = self.lease
        lease.call("register this node", lambda: lease.etcd.put(
            self.nodes_prefix + lease.node, lease.address))

    def forget(self, node: str) -> bool:
        """Remove ``node`` from the registry (an operator's decision); whether it was there."""
        return bool(self.lease.call("remove the node", lambda: self.lease.etcd.delete(
            self.nodes_prefix + node)))

    def nodes(self) -> dict[str, str]:
        """The registered nodes: name -> address."""
        return {name: value.decode() for name, value, _ in self._read(self.nodes_prefix)}

    def reports(self) -> dict[str, NodeReport]:
        return {name: NodeReport(**json.loads(value), revision=revision)
                for name, value, revision in self._read(self.reports_prefix)}

    def publish(self, epoch: int, durable: int) -> None:
        """Publish this node's (epoch, durable offset) under its report lease."""
        lease, etcd = self.lease, self.lease.etcd
        if self._report_lease is None or lease.call(
                "refresh the report lease", self._report_lease.refresh) <= 0:
            self._report_lease = lease.call("grant a report lease",
                                            lambda: etcd.lease(self.report_ttl_s))
        report = json.dumps({"node": lease.node, "address": lease.address, "epoch": epoch,
                             "durable": durable})
        lease.call("publish this node's report", lambda: etcd.put(
            self.reports_prefix + lease.node, report, lease=self._report_lease))

    def withdraw(self) -> None:
        """Remove this node's report at once (a graceful stop)."""
        report, self._report_lease = self._report_lease, None
        if report is not None:
            try:
                report.revoke()
            except Exception:  # noqa: BLE001 - it expires on its own
                pass

    def _read(self, prefix: str) -> list[tuple[str, bytes, int]]:
        """(name, value, etcd mod revision) of every key under ``prefix``."""
        rows = self.lease.call("read the group", lambda: self.lease.etcd.get_prefix(prefix))
        out = []
        for value, meta in rows:
            key = meta["key"]
            key = key.decode() if isinstance(key, bytes) else key
            out.append((key[len(prefix):], value if isinstance(value, bytes) else
                        value.encode(), int(meta.get("mod_revision", 0))))
        return out
