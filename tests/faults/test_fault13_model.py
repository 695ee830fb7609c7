"""Fault 13: a Hypothesis ``RuleBasedStateMachine`` against a simple in-memory model.

Rules: send, prepare, commit, rollback, pull (compare everything consumable with the
model), crash (abandon the broker object without close, flush or checkpoint, and reopen:
recovery runs from the last checkpoint), restart (clean close and reopen), checkpoint,
retention (delete the oldest segments; the model forgets exactly the messages whose bodies
lay in them).

The model: acknowledged plain messages and messages of committed transactions are
consumable exactly once with their bytes, in per-queue send order; messages of open or
rolled-back transactions never are; open transactions come back after every crash.
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

import fmq
from tests.faults.invariants import consumable
from tests.faults.workload import INDEX_WRITER, TOPICS, body_for, message_id

CONFIG = fmq.BrokerConfig(segment_size=16 * 1024, max_message_size=4096,
                          checkpoint_interval_ms=0, retention_interval_ms=0,
                          retention_bytes=48 * 1024, queues_per_topic=2,
                          tx_check_after_ms=60_000, index_writer=INDEX_WRITER)


def abandon(b: fmq.Broker) -> None:
    """Drop a broker as a crash would: no flush, no checkpoint, no index sync. (Every
    acknowledged write is already fdatasync'd; the page cache survives, as after SIGKILL.)"""
    b._closed = True
    b._stop.set()
    b._maintenance.join()
    b._timers.stop()
    b._dispatcher.stop()
    b._index.close()
    b._log.close()
    b._release()


class BrokerModel(RuleBasedStateMachine):
    open_txs = Bundle("open_txs")

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="fmq-model-")
        self.broker = fmq.Broker.open(self.dir, CONFIG)
        self.visible: dict[str, tuple[str, int]] = {}  # id -> (topic, size)
        self.pending: dict[str, list[tuple[str, str, int]]] = {}  # tx -> [(id, topic, size)]
        self.ended: dict[str, str] = {}
        self.n = 0

    def _id(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"

    # ------------------------------------------------------------------ writes

    @rule(topic=st.sampled_from(TOPICS), size=st.integers(1, 3000),
          key=st.sampled_from([None, "a", "b"]))
    def send(self, topic, size, key):
        mid = self._id("m")
        self.broker.send(fmq.Message(topic, body_for(mid, size), key=key))
        self.visible[mid] = (topic, size)

    @rule(target=open_txs, sizes=st.lists(st.integers(1, 1500), min_size=1, max_size=3),
          topic=st.sampled_from(TOPICS))
    def prepare(self, sizes, topic):
        tx = self._id("tx")
        msgs = [(self._id(f"{tx}."), topic, s) for s in sizes]
        self.broker.transactions.prepare([fmq.Message(t, body_for(m, s)) for m, t, s in msgs],
                                         "shop",
                            tx_id=tx)
        self.pending[tx] = msgs
        return tx

    @rule(tx=consumes(open_txs))
    def commit(self, tx):
        assert self.broker.transactions.commit(tx) == fmq.TxState.COMMIT
        for mid, topic, size in self.pending.pop(tx):
            self.visible[mid] = (topic, size)
        self.ended[tx] = "commit"

    @rule(tx=consumes(open_txs))
    def rollback(self, tx):
        assert self.broker.transactions.rollback(tx) == fmq.TxState.ROLLBACK
        self.pending.pop(tx)
        self.ended[tx] = "rollback"

    @rule()
    def checkpoint(self):
        self.broker.checkpoint()

    @precondition(lambda self: len(self.broker._log.segments) > 3)
    @rule()
    def retention(self):
        self.broker.wait_indexed(30)
        where = consumable(self.broker)
        offsets = {}
        for msgs in self.broker.reads.all_messages(TOPICS).values():
            for m in msgs:
                offsets[message_id(m.body)] = m.offset
        self.broker.enforce_retention()
        first = self.broker._log.first_offset
        for mid in list(self.visible):
            if offsets.get(mid, first) < first:
                del self.visible[mid]
        assert where  # something was consumable to begin with

    # ------------------------------------------------------------------ faults

    @rule()
    def crash(self):
        abandon(self.broker)
        self.broker = fmq.Broker.open(self.dir, CONFIG)

    @rule()
    def restart(self):
        self.broker.close()
        self.broker = fmq.Broker.open(self.dir, CONFIG)

    # ------------------------------------------------------------------ checks

    @rule()
    def pull(self):
        self.check_consumable()

    @invariant()
    def open_transactions_match(self):
        got = {t["tx_id"] for t in self.broker.transactions.open_transactions()}
        assert got == set(self.pending), f"open {sorted(got)}, model {sorted(self.pending)}"

    @invariant()
    def ended_answers_are_stable(self):
        for tx, how in list(self.ended.items())[-3:]:
            txs = self.broker.transactions
            state = txs.commit(tx) if how == "commit" else txs.rollback(tx)
            assert state.value == how

    def check_consumable(self):
        assert self.broker.wait_indexed(30)
        seen = consumable(self.broker)
        for mid, (topic, size) in self.visible.items():
            where = seen.get(mid, [])
            assert len(where) == 1, f"{mid} consumable {len(where)} times"
            assert where[0][0] == topic and where[0][3] == body_for(mid, size)
        extra = set(seen) - set(self.visible)
        assert not extra, f"consumable but not in the model: {sorted(extra)[:5]}"

    def teardown(self):
        try:
            self.check_consumable()
        finally:
            self.broker.close()
            shutil.rmtree(self.dir, ignore_errors=True)


BrokerModel.TestCase.settings = settings(
    max_examples=20, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestBrokerModel = BrokerModel.TestCase
