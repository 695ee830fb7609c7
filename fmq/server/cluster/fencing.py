"""Which requests a node that must not write refuses, and with what error: a follower
refuses them before they run (NotPrimary, naming its primary); a primary elected through
etcd that can no longer prove it holds the lease (fencing) refuses their answers, after
the write (LeadershipLost), since another node may hold the lease by now.
"""

from __future__ import annotations

from fmq.errors import FMQError, LeadershipLost, NotPrimary
from fmq.protocol import Op
from fmq.server.cluster.replica_role import ReplicationRole

#: What a follower refuses: writes (its log changes only by what its primary ships) and
#: the feedback that would end transactions. A fenced primary refuses the same answers.
FOLLOWER_REFUSES = frozenset({
    Op.SEND, Op.SEND_BATCH, Op.PREPARE, Op.COMMIT, Op.ROLLBACK, Op.POLL_UNCERTAIN,
    Op.ANSWER_UNCERTAIN, Op.RESOLVE_TX, Op.COMMIT_OFFSET, Op.RESET_OFFSETS, Op.SEND_AT,
    Op.NACK, Op.DLQ_REDRIVE, Op.TOPIC_CREATE, Op.TOPIC_ALTER, Op.TOPIC_DELETE})


def follower_refusal(role: ReplicationRole | None, op: int) -> FMQError | None:
    """NotPrimary for a write sent to a follower (checked before the request is decoded);
    None when ``op`` may run here."""
    primary = role.primary if role is not None else None
    if primary is not None and op in FOLLOWER_REFUSES:
        return NotPrimary(primary)
    return None


def fencing_refusal(role: ReplicationRole | None, op: int) -> FMQError | None:
    """LeadershipLost for a write done but not to be acknowledged: this primary cannot
    prove it still holds the group's lease. Checked as the answer is released, after the
    fsync and the replication wait; None when the answer may go out."""
    if op in FOLLOWER_REFUSES and role is not None and not role.acknowledges():
        return LeadershipLost(role.primary or "")
    return None
