"""A fail-over the application does not see: producers with the default delivery deadline.

3 ``fmq server`` processes (``sync``, ``min_insync = 1``, ``lease_ttl_s = 3``) elect their
primary through a real etcd. One idempotent producer and one transactional producer, both
with their default options (``delivery_timeout`` 120 s, no count of retries) and all three
addresses, send throughout while the primary is SIGKILLed 10 times (each time restarted,
so it rejoins as a follower and the group stays 3). No exception may reach either
producer; afterwards every acknowledged send and every committed transaction's message is
readable exactly once on every node, and nothing else is; the gap of each fail-over (from
the SIGKILL to the next acknowledgement each producer got) is printed.
"""

from __future__ import annotations

import os
import statistics
import threading
import time

import pytest

from fmq.client import Producer, TransactionProducer
from fmq.message import Message
from fmq.tx.state import TxState
from tests.etcdkit import ETCD

from .failover_kit import (
    TOPIC,
    TTL_S,
    FailoverGroup,
    History,
    check_readable_soon,
    wait_no_open_transactions,
)

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

KILLS = 10
#: Acknowledgements this soon after a kill were on their way before it.
IN_FLIGHT_S = 0.2


class Acks:
    """When each producer got its acknowledgements (monotonic seconds), and what failed."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {"send": [], "tx": []}
        self.errors: list[BaseException] = []

    def gap_after(self, kind: str, kill: float) -> float | None:
        # An answer the dead primary had sent before it died may still be read just after:
        # no election ends within IN_FLIGHT_S (a lease TTL, seconds), so those are skipped.
        later = [t for t in self.times[kind] if t > kill + IN_FLIGHT_S]
        return min(later) - kill if later else None


def plain(servers: str, history: History, acks: Acks, stop: threading.Event) -> None:
    with Producer(servers, linger_ms=0) as producer:
        i = 0
        while not stop.is_set():
            mid = f"p0-{i}"
            i += 1
            body = history.attempt_send(mid, 100)
            try:
                result = producer.send(TOPIC, body)
            except Exception as exc:  # noqa: BLE001 - what the application would see
                acks.errors.append(exc)
                return
            history.acked_send(mid, result)
            acks.times["send"].append(time.monotonic())


def transactional(servers: str, history: History, acks: Acks, stop: threading.Event,
                  done: threading.Event) -> None:
    def checker(uncertain) -> TxState:
        decision = history.decisions.get(uncertain.tx_id)
        if decision is None:
            return TxState.UNKNOWN  # its prepare is still being retried
        return TxState.COMMIT if decision == "commit" else TxState.ROLLBACK

    def local(tx_id: str, _arg) -> TxState:
        history.decide(tx_id, "commit")
        return TxState.COMMIT

    with TransactionProducer(servers, "shop", checker) as producer:
        i = 0
        while not stop.is_set():
            tx = f"tx-0-{i}"
            mids = [f"t0-{i}-{j}" for j in range(2)]
            i += 1
            bodies = history.attempt_tx(tx, mids, 80)
            try:
                result = producer.send_in_transaction([Message(TOPIC, b) for b in bodies],
                                                      local, tx_id=tx)
            except Exception as exc:  # noqa: BLE001 - what the application would see
                acks.errors.append(exc)
                return
            if result.state != TxState.COMMIT or result.error is not None:
                acks.errors.append(AssertionError(f"{tx}: {result}"))
                return
            history.acked("commit", tx)
            acks.times["tx"].append(time.monotonic())
        done.wait(60)  # answer check-backs until no transaction is open


def summary(gaps: list[float]) -> str:
    return (f"median {statistics.median(gaps):.2f} s, max {max(gaps):.2f} s, "
            f"min {min(gaps):.2f} s")


def test_ten_primary_kills_reach_neither_producer_and_lose_nothing(tmp_path):
    group = FailoverGroup(str(tmp_path)).start()
    history, acks = History(), Acks()
    stop, done = threading.Event(), threading.Event()
    workers = [threading.Thread(target=plain, args=(group.servers, history, acks, stop)),
               threading.Thread(target=transactional,
                                args=(group.servers, history, acks, stop, done))]
    kills: list[float] = []
    try:
        group.wait_whole()
        for w in workers:
            w.start()
        for _ in range(KILLS):
            primary = group.wait_whole()
            seen = {k: len(v) for k, v in acks.times.items()}
            deadline = time.monotonic() + 30
            while (any(len(acks.times[k]) < seen[k] + 5 for k in seen)
                   and time.monotonic() < deadline and not acks.errors):
                time.sleep(0.05)  # both producers are sending to this primary
            primary.kill()  # SIGKILL: no shutdown code runs (returns once it is dead)
            kills.append(time.monotonic())  # an answer after this is the new primary's
            group.wait_primary(among=group.others(primary))
            primary.start()  # back as a follower: the group stays 3
            assert not acks.errors, acks.errors
        group.wait_whole()
        time.sleep(1)  # an acknowledgement after the last fail-over too
        stop.set()
        wait_no_open_transactions(group.servers)
        done.set()
        for w in workers:
            w.join(150)
        assert not any(w.is_alive() for w in workers), "a producer did not finish"
        assert not acks.errors, f"the application saw: {acks.errors!r}"
        gaps = {k: [acks.gap_after(k, t) for t in kills] for k in acks.times}
        assert all(g is not None for v in gaps.values() for g in v), gaps
        group.wait_same_end()
        check_readable_soon(group, history)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{group.logs()}") from exc
    finally:
        stop.set()
        done.set()
        group.kill()
    print(f"{KILLS} SIGKILLs of the primary (lease_ttl_s = {TTL_S}): "
          f"{len(history.acked_sends())} acknowledged sends, "
          f"{len(history.acked_ops('commit'))} committed transactions, no error; "
          f"gap from the kill to the next acknowledged send: {summary(gaps['send'])}; "
          f"to the next committed transaction: {summary(gaps['tx'])}")
