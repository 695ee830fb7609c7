"""Resends while a group cannot acknowledge are stored once (issue 37, items 3 and 4).

3 ``fmq server`` processes (``sync``, ``min_insync = 2``) elect their primary through a
real etcd. Two idempotent producers (``send``), one idempotent producer of batches
(``send_batch`` of 4) and one transactional producer write throughout with their default
options (the delivery deadline, all three addresses) while the group cannot acknowledge:

* **etcd paused** (SIGSTOP, as when the majority of a co-located etcd dies): the primary
  can no longer prove its lease, so it stores each request, has it replicated, and answers
  ``LeadershipLost``; then it steps down, and is elected again once etcd is back;
* **two of three nodes killed at once** (SIGKILL), then restarted: the node left (the
  primary, or a follower that takes over) stores each request alone and answers
  ``NotEnoughReplicas`` until they rejoin;
* the paused etcd in a group of one (quicker, the same cause).

No exception may reach a producer (in particular no ``DuplicateTransaction``: a retried
PREPARE is the same transaction), and afterwards, on every node, each message body and
each (producer, sequence) is in the log exactly once, each transaction's PREPARE once.
Before the fix the paused etcd stored the message each idempotent producer had in flight
7 times on every node (the resends were numbered anew after ``LeadershipLost``), and the
transactional producer got ``DuplicateTransaction``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import pytest

from fmq.client import Producer, TransactionProducer
from fmq.log.record import RecordType
from fmq.message import PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY, Message
from fmq.tx.state import TxState
from tests.etcdkit import ETCD
from tests.faults.invariants import log_records

from .failover_kit import GROUP_CONFIG, TOPIC, FailoverGroup

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

CONFIG = {**GROUP_CONFIG, "min_insync": 2}
#: How long the group cannot acknowledge: longer than the lease TTL (3 s), so the primary
#: fences itself and steps down, or its followers drop out of its in-sync set.
OUTAGE_S = 6.0


class Writers:
    """The producers' threads and everything that reached the application."""

    def __init__(self, servers: str) -> None:
        self.servers = servers
        self.stop = threading.Event()
        self.errors: list[tuple[str, int, BaseException]] = []
        self.acks: Counter = Counter()  # kind -> acknowledged requests
        self.decided: dict[str, TxState] = {}
        self.threads = [threading.Thread(target=self._send, args=(i,), name=f"send{i}", daemon=True)
                        for i in range(2)]
        self.threads += [threading.Thread(target=self._batch, name="batch", daemon=True),
                         threading.Thread(target=self._tx, name="tx", daemon=True)]

    def start(self) -> Writers:
        for t in self.threads:
            t.start()
        return self

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(150)
        assert not any(t.is_alive() for t in self.threads), "a producer did not finish"

    def wait_acks(self, more: int, timeout: float = 60.0) -> None:
        """Until every kind of request got ``more`` acknowledgements from now."""
        want = {k: self.acks[k] + more for k in ("send0", "send1", "batch", "tx")}
        deadline = time.monotonic() + timeout
        while any(self.acks[k] < n for k, n in want.items()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(self.acks[k] >= n for k, n in want.items()), (dict(self.acks), want,
                                                                 self.errors[:3])

    def _send(self, k: int) -> None:
        with Producer(self.servers, linger_ms=0) as producer:
            i = 0
            while not self.stop.is_set():
                try:
                    producer.send(TOPIC, f"send{k}-{i}".encode())
                    self.acks[f"send{k}"] += 1
                except Exception as exc:  # noqa: BLE001 - what the application would see
                    self.errors.append((f"send{k}", i, exc))
                i += 1

    def _batch(self) -> None:
        with Producer(self.servers, linger_ms=0) as producer:
            i = 0
            while not self.stop.is_set():
                try:
                    producer.send_batch([Message(TOPIC, f"batch{i}-{j}".encode())
                                         for j in range(4)])
                    self.acks["batch"] += 1
                except Exception as exc:  # noqa: BLE001 - what the application would see
                    self.errors.append(("batch", i, exc))
                i += 1

    def _tx(self) -> None:
        def checker(uncertain) -> TxState:
            return self.decided.get(uncertain.tx_id, TxState.UNKNOWN)  # UNKNOWN: retrying

        with TransactionProducer(self.servers, "shop", checker) as producer:
            i = 0
            while not self.stop.is_set():
                tx = f"tx{i}"
                i += 1
                try:
                    producer.prepare([Message(TOPIC, f"{tx}-{j}".encode()) for j in range(2)],
                                     tx_id=tx)
                    self.decided[tx] = TxState.COMMIT
                    producer.commit(tx)
                    self.acks["tx"] += 1
                except Exception as exc:  # noqa: BLE001 - what the application would see
                    self.decided.setdefault(tx, TxState.ROLLBACK)
                    self.errors.append(("tx", i - 1, exc))


def copies(data_dir: str) -> tuple[Counter, Counter, Counter]:
    """In a stopped node's log: how often each idempotent message body, each (producer,
    sequence) and each transaction's PREPARE is stored."""
    bodies, sequences, prepares = Counter(), Counter(), Counter()
    for rec in log_records(data_dir):
        props = rec.properties or {}
        if rec.type == RecordType.MESSAGE and PRODUCER_ID_PROPERTY in props:
            bodies[bytes(rec.body)] += 1
            sequences[(props[PRODUCER_ID_PROPERTY], props[SEQUENCE_PROPERTY])] += 1
        elif rec.type == RecordType.PREPARE:
            prepares[rec.tx_id] += 1
    return bodies, sequences, prepares


def pause_etcd(group: FailoverGroup) -> None:
    group.etcd.proc.send_signal(signal.SIGSTOP)
    time.sleep(OUTAGE_S)
    group.etcd.proc.send_signal(signal.SIGCONT)


def kill_and_restart(victims: list) -> None:
    for node in victims:
        node.kill()
    time.sleep(OUTAGE_S)
    for node in victims:
        node.start()


def kill_two(group: FailoverGroup) -> None:
    """The primary and a follower: the one left takes over alone (NotEnoughReplicas)."""
    primary = group.wait_primary()
    kill_and_restart([primary, group.others(primary)[0]])


def kill_followers(group: FailoverGroup) -> None:
    """Both followers: the primary stores alone (NotEnoughReplicas) until they rejoin."""
    kill_and_restart(group.others(group.wait_primary()))


@pytest.mark.parametrize(("names", "config", "outage"), [
    (("n1", "n2", "n3"), CONFIG, pause_etcd),
    (("n1", "n2", "n3"), CONFIG, kill_two),
    (("n1", "n2", "n3"), CONFIG, kill_followers),
    # The same cause in a group of one (nothing to wait for but its own disk): quicker.
    (("n1",), {**CONFIG, "ack_mode": "async", "min_insync": 1}, pause_etcd),
], ids=["etcd-paused", "primary-and-follower-killed", "followers-killed",
                          "one-node-etcd-paused"])
def test_resends_while_the_group_cannot_acknowledge_are_stored_once(tmp_path, names, config,
                                                                    outage):
    group = FailoverGroup(str(tmp_path), names, config).start()
    writers = Writers(group.servers)
    try:
        group.wait_whole(60)
        writers.start()
        writers.wait_acks(5)
        outage(group)
        group.wait_whole(60)
        writers.wait_acks(5)  # every producer got through the outage
        writers.join()
        group.wait_same_end(60)
        group.stop()
        stored_again = {}
        for node in group.nodes:
            bodies, sequences, prepares = copies(node.data_dir)
            assert len(bodies) > 20, (node.data_dir, len(bodies))
            stored_again[node.data_dir] = [{k: n for k, n in counts.items() if n > 1}
                                           for counts in (bodies, sequences, prepares)]
        seen = Counter(type(exc).__name__ for _kind, _i, exc in writers.errors)
        assert not writers.errors and not any(any(v) for v in stored_again.values()), (
            f"the application saw {dict(seen)}: {writers.errors[:3]!r}; stored more than "
            f"once (messages, sequences, prepares) per node: {stored_again}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{group.logs()}") from exc
    finally:
        writers.stop.set()
        group.kill()
