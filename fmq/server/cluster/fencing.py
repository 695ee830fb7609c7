"""What a node that must not write does with the requests declared ``follower=REFUSES``
(:mod:`fmq.server.ops.operation`), and with what error: a follower
refuses them before they run (NotPrimary, naming its primary); a primary elected through
etcd that can no longer prove it holds the lease (fencing) refuses their answers, after
the write (LeadershipLost), since another node may hold the lease by now.
"""

from __future__ import annotations

from fmq.errors import FMQError, LeadershipLost, NotPrimary
from fmq.server.cluster.replica_role import ReplicationRole
from fmq.server.ops.operation import REFUSES
from fmq.server.ops.table import OPERATIONS


def refused_by_follower(op: int) -> bool:
    """Whether operation ``op`` is declared ``follower=REFUSES``: a write (a follower's log
    changes only by what its primary ships) or feedback that would end transactions. A
    fenced primary refuses the same answers. The Kafka door asks for the FMQ operation its
    request stands for."""
    declared = OPERATIONS.get(op)
    return declared is not None and declared.follower is REFUSES


def follower_refusal(role: ReplicationRole | None, op: int) -> FMQError | None:
    """NotPrimary for a write sent to a follower (checked before the request is decoded);
    None when ``op`` may run here."""
    primary = role.primary if role is not None else None
    if primary is not None and refused_by_follower(op):
        return NotPrimary(primary)
    return None


def fencing_refusal(role: ReplicationRole | None, op: int) -> FMQError | None:
    """LeadershipLost for a write done but not to be acknowledged: this primary cannot
    prove it still holds the group's lease. Checked as the answer is released, after the
    fsync and the replication wait; None when the answer may go out."""
    if role is not None and refused_by_follower(op) and not role.acknowledges():
        return LeadershipLost(role.primary or "")
    return None
