"""Traffic for the topic-source tests: plain messages, committed transactions spread over
every queue, rolled-back and open transactions, sent to a real server through the client;
and what a reader must find (committed bodies) and must never find (the others)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import fmq
from fmq.client import Producer, TransactionProducer

QUEUES = 4
#: Server configuration of these tests: few queues, nobody asks about open transactions.
SERVER_CONFIG = {"queues_per_topic": QUEUES, "tx_check_after_ms": 600_000,
                 "checkpoint_interval_ms": 0}


@dataclass
class Traffic:
    committed: set[bytes] = field(default_factory=set)
    forbidden: set[bytes] = field(default_factory=set)  # rolled back or left open
    plain: dict[bytes, fmq.SendResult] = field(default_factory=dict)
    transactions: list[list[bytes]] = field(default_factory=list)  # committed ones


def send_round(address: str, topics: tuple[str, ...], round_: int, traffic: Traffic,
               plain_per_topic: int = 6) -> None:
    """One round: plain sends to every topic, a committed transaction with one message
    per queue of the first topic plus one in each other topic, one rolled back, one left
    open."""
    with Producer(address) as p:
        for topic in topics:
            for i in range(plain_per_topic):
                body = f"plain-{topic}-{round_}-{i}".encode()
                r = p.send(topic, body, key=f"k{i % 3}", tags="t" if i % 2 else None,
                           properties={"i": str(i)} if i % 3 == 0 else None)
                traffic.plain[body] = r
                traffic.committed.add(body)
    with TransactionProducer(address, "spark-topic-tests", lambda u: fmq.TxState.UNKNOWN,
                             feedback=False) as tp:
        bodies = [f"tx-{round_}-q{q}".encode() for q in range(QUEUES)]
        msgs = [fmq.Message(topics[0], b, queue_id=q) for q, b in enumerate(bodies)]
        for topic in topics[1:]:
            bodies.append(f"tx-{round_}-{topic}".encode())
            msgs.append(fmq.Message(topic, bodies[-1]))
        tp.commit(tp.prepare(msgs))
        traffic.committed.update(bodies)
        traffic.transactions.append(bodies)
        gone = [fmq.Message(t, f"rolledback-{round_}-{t}".encode()) for t in topics]
        tp.rollback(tp.prepare(gone))
        traffic.forbidden.update(m.body for m in gone)
        left = [fmq.Message(t, f"open-{round_}-{t}".encode()) for t in topics]
        tp.prepare(left)
        traffic.forbidden.update(m.body for m in left)


class BackgroundTraffic:
    """Rounds of :func:`send_round` in a thread until :meth:`stop` (or ``rounds``)."""

    def __init__(self, address: str, topics: tuple[str, ...], rounds: int,
                 pause: float = 0.05) -> None:
        self.traffic = Traffic()
        self.rounds_sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._args = (address, topics, rounds, pause)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        address, topics, rounds, pause = self._args
        try:
            for r in range(rounds):
                if self._stop.is_set():
                    return
                send_round(address, topics, r, self.traffic, plain_per_topic=3)
                self.rounds_sent += 1
                self._stop.wait(pause)
        except BaseException as exc:  # noqa: BLE001 - the test asserts on it
            self.error = exc

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the producer did not finish in time"
        assert self.error is None, self.error

    def stop(self, timeout: float = 60) -> None:
        self._stop.set()
        self.join(timeout)
