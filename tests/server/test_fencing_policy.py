"""The fencing policy: a follower refuses writes before they run (NotPrimary), a primary
that cannot prove it holds the lease refuses their answers (LeadershipLost); reads pass."""

from __future__ import annotations

import asyncio

import pytest

import fmq
from fmq.errors import LeadershipLost, NotPrimary
from fmq.protocol import Op
from fmq.server.cluster.fencing import fencing_refusal, follower_refusal, refused_by_follower
from fmq.server.cluster.replica_role import ReplicationRole

WRITES = [Op.SEND, Op.SEND_BATCH, Op.PREPARE, Op.COMMIT, Op.ROLLBACK, Op.COMMIT_OFFSET,
          Op.RESET_OFFSETS, Op.SEND_AT, Op.NACK, Op.DLQ_REDRIVE, Op.ANSWER_UNCERTAIN]
READS = [Op.PULL, Op.STATS, Op.QUEUE_RANGE, Op.REPL_FETCH, Op.REPL_STATUS]


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_writes_are_refused_and_reads_are_not():
    assert all(refused_by_follower(op) for op in WRITES)
    assert not any(refused_by_follower(op) for op in READS)
    assert not refused_by_follower(999)  # an unknown opcode is refused elsewhere


def test_a_fenced_primary_refuses_the_answers_of_writes_only(broker, loop):
    role = ReplicationRole(broker, loop)
    assert all(fencing_refusal(role, op) is None for op in WRITES + READS)
    role.lease_holds = lambda: False  # etcd may have handed the lease to another node
    for op in WRITES:
        assert isinstance(fencing_refusal(role, op), LeadershipLost)
    assert all(fencing_refusal(role, op) is None for op in READS)
    assert fencing_refusal(None, Op.SEND) is None  # no replication: nothing to fence
    assert all(follower_refusal(role, op) is None for op in WRITES)  # it is the primary


def test_a_follower_refuses_writes_naming_its_primary(tmp_path, small_config, loop):
    cfg = small_config.replace(follow="127.0.0.1:9")
    with fmq.Broker.open(str(tmp_path / "f"), cfg) as follower:
        role = ReplicationRole(follower, loop)
        for op in WRITES:
            refusal = follower_refusal(role, op)
            assert isinstance(refusal, NotPrimary) and "127.0.0.1:9" in str(refusal)
        assert all(follower_refusal(role, op) is None for op in READS)
