"""No acknowledged write lost across fail-over, Jepsen-style (issue 12).

3 ``fmq server`` processes in ``sync`` mode with ``min_insync = 1`` elect their primary
through a real etcd. Idempotent producers (the SDK, given all three addresses; some plain,
some transactional with 2-3 messages per transaction and a check-back answering from the
producer's own decision) record every acknowledgement client-side. A killer SIGKILLs the
current primary at random moments, restarts it (it comes back as a follower and cuts its
divergent tail) and waits for the group to be whole and in sync before the next kill.
Afterwards, on every node: each acknowledged message is readable exactly once, an
unacknowledged one at most once, committed transactions wholly, rolled-back ones not at
all; the logs are byte-identical; the fault suite's invariants hold on each data directory.

The kills are drawn from a seed printed on failure; ``FMQ_JEPSEN_SEED`` replays one.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter

import pytest

from fmq.client import Client, Producer, TransactionProducer
from fmq.message import Message
from fmq.protocol import Op
from fmq.tx.state import TxState
from tests.etcdkit import ETCD
from tests.server.harness import ServerProcess

from .failover_kit import (
    GROUP_CONFIG,
    TOPIC,
    FailoverGroup,
    GroupConsumer,
    History,
    acknowledged_messages,
    check_consumed,
    check_data_dir,
    check_readable,
    check_readable_soon,
    plain_producer,
    tx_producer,
    wait_no_open_transactions,
)

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

KILLS = 10
PLAIN_PRODUCERS = 2
TX_PRODUCERS = 2
#: Producer k's client options: the even ones outlast a fail-over (about the lease TTL) by
#: looking for the primary long enough; the odd ones give up during one, so some of their
#: sends and prepares end unacknowledged (stored at most once; an abandoned transaction is
#: rolled back by the check-back).
PATIENT = {"request_timeout": 10.0, "retries": 8, "backoff_max": 0.5}
IMPATIENT = {"request_timeout": 1.0, "retries": 1, "backoff_max": 0.2}


def options(k: int) -> dict:
    return PATIENT if k % 2 == 0 else IMPATIENT


def test_no_acknowledged_write_lost_across_repeated_failovers(tmp_path):
    seed = int(os.environ.get("FMQ_JEPSEN_SEED", time.time_ns() % 1_000_000))
    print(f"jepsen seed {seed} (FMQ_JEPSEN_SEED={seed} replays the kills)")
    rng = random.Random(seed)
    group = FailoverGroup(str(tmp_path)).start()
    history = History()
    stop, done = threading.Event(), threading.Event()
    errors: list = []
    workers = [threading.Thread(target=plain_producer, args=(
        k, random.Random(seed * 100 + k), group.servers, history, stop, errors, options(k)))
        for k in range(PLAIN_PRODUCERS)]
    workers += [threading.Thread(target=tx_producer, args=(
        k, random.Random(seed * 100 + 50 + k), group.servers, history, stop, errors, done,
        options(k))) for k in range(TX_PRODUCERS)]
    consumer = None
    failovers = 0
    try:
        group.wait_whole()
        consumer = GroupConsumer(group.servers).start()  # reads throughout the kills
        for w in workers:
            w.start()
        new = None
        for _ in range(KILLS):
            primary = group.wait_whole()
            # the restarted node came back as a follower of the node that took over
            assert new is None or primary is new, "the restarted node took the lease back"
            time.sleep(rng.uniform(0.2, 1.5))
            primary.kill()  # SIGKILL: no shutdown code runs
            new = group.wait_primary(among=group.others(primary))
            failovers += 1
            primary.start()  # back as a follower; it cuts what the new term never had
        assert group.wait_whole() is new
        stop.set()
        wait_no_open_transactions(group.servers)
        done.set()
        for w in workers:
            w.join(60)
        assert not any(w.is_alive() for w in workers), "a producer did not finish"
        acked = history.acked_sends()
        assert len(acked) > 100 and history.acked_ops("commit"), "too little got through"
        assert errors, "no attempt went unacknowledged: the at-most-once checks checked nothing"
        group.assert_identical()
        check_readable_soon(group, history)
        consumer.wait_for(acknowledged_messages(history))
        consumer.stop()
        check_consumed(consumer.consumed, history)
        group.stop()
        for node in group.nodes:
            check_data_dir(node.data_dir, group.config, history, str(tmp_path))
    except AssertionError as exc:
        raise AssertionError(
            f"seed {seed} after {failovers} fail-overs ({len(history.acks)} acks, "
            f"{len(errors)} unacknowledged attempts): {exc}\n{group.logs()}") from exc
    finally:
        stop.set()
        done.set()
        if consumer is not None:
            consumer.stop()
        group.kill()
    assert failovers >= 10
    print(f"{failovers} fail-overs; {len(history.acked_sends())} acknowledged sends, "
          f"{len(history.acked_ops('commit'))} acknowledged commits, "
          f"{len(history.acked_ops('rollback'))} acknowledged rollbacks, "
          f"{len(errors)} unacknowledged attempts "
          f"({dict(Counter(type(e).__name__ for e in errors))}); "
          f"the group consumed {len(consumer.consumed)} messages "
          f"({sum(n > 1 for n in consumer.consumed.values())} more than once); "
          f"{group.count_in_logs('cut the log at')} divergent tails cut")


def test_the_checks_catch_a_lost_ack_a_duplicate_and_a_partial_transaction(tmp_path):
    """The checks above can fail: one real server, a history that claims more than it
    stored, a message stored twice and a transaction committed with a message missing."""
    config = {k: v for k, v in GROUP_CONFIG.items() if k not in ("ack_mode", "server")}
    node = ServerProcess(str(tmp_path / "solo"), config).start()
    try:
        history = History()
        with Producer(node.address) as p:
            body = history.attempt_send("p0-0", 100)
            result = p.send(TOPIC, body)
            history.acked_send("p0-0", result)
        check_readable(node, history)  # the honest history passes
        # A group that consumed everything passes; one moved past p0-0 (a commit after a
        # message a fail-over took back) has skipped it.
        complete = GroupConsumer(node.address, "complete").start()
        complete.wait_for({"p0-0"}, 20)
        complete.stop()
        check_consumed(complete.consumed, history)
        with Client(node.address) as c:
            c.call(Op.COMMIT_OFFSET, {"group": "skipping", "topic": TOPIC,
                                      "queue_id": result.queue_id,
                                      "next_offset": result.queue_offset + 1})
        skipping = GroupConsumer(node.address, "skipping").start()
        skipping.wait_for({"p0-0"}, 3)
        skipping.stop()
        with pytest.raises(AssertionError, match=r"never consumed 1 of 1 .*p0-0"):
            check_consumed(skipping.consumed, history)
        lost = History()
        lost.plan, lost.acks = list(history.plan), list(history.acks)
        lost.attempt_send("p0-1", 100)
        lost.acks.append({**lost.acks[0], "ids": ["p0-1"]})  # acknowledged, never stored
        with pytest.raises(AssertionError, match="acknowledged p0-1 is readable 0 times"):
            check_readable(node, lost)
        node.stop()
        check_data_dir(node.data_dir, config, history, str(tmp_path))
        with pytest.raises(AssertionError, match="I1 violated: acknowledged message p0-1"):
            check_data_dir(node.data_dir, config, lost, str(tmp_path))
        node.start()
        partial = History()
        partial.plan, partial.acks = list(history.plan), list(history.acks)
        bodies = partial.attempt_tx("tx-0-0", ["t0-0-0", "t0-0-1"], 80)
        with TransactionProducer(node.address, "shop", lambda u: TxState.UNKNOWN) as tp:
            tp.prepare([Message(TOPIC, bodies[0])], tx_id="tx-0-0")  # one message of two
            partial.decide("tx-0-0", "commit")
            tp.commit("tx-0-0")
        with pytest.raises(AssertionError, match=r"committed tx-0-0 shows \[1, 0\]"):
            check_readable(node, partial)
        with Producer(node.address, idempotent=False) as p:
            p.send(TOPIC, body)  # p0-0 a second time
        with pytest.raises(AssertionError, match="p0-0 is readable 2 times"):
            check_readable(node, history)
    finally:
        node.kill()
