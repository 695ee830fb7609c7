"""A broker group of 3 real ``fmq server`` processes electing through a real etcd, and the
checks the fail-over tests run on it afterwards.

:class:`FailoverGroup` starts etcd (``tests/etcdkit.py``) and the nodes, says who is primary
and when the group is whole again (one primary, every other node following it and in its
in-sync set), kills and restarts nodes. :class:`History` is what producers record
client-side: every message they tried to store, every acknowledgement, every transaction
decision. :func:`check_readable` checks a node's consumer view against it;
:func:`check_data_dir` runs the fault suite's invariants (``tests/faults/invariants.py``) on
a stopped node's data directory.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter

import fmq
from fmq.client import Client, Consumer, Producer, TransactionProducer
from fmq.errors import FMQError
from fmq.message import Message
from fmq.protocol import Op
from fmq.tx.state import TxState
from tests.etcdkit import EtcdProcess
from tests.faults.invariants import (
    check_acked_and_transactions,
    check_index_matches_rebuild,
    compare_states,
    log_records,
    state_of,
)
from tests.faults.workload import body_for, message_id, msg
from tests.server.harness import ServerProcess

from .cluster import SMALL, assert_identical_up_to, pull_all, status

#: The topic the producers write (one of the fault suite's topics, which its checks read).
TOPIC = "orders"
QUEUES = 4
#: The smallest lease TTL the server accepts: a fail-over takes about this long.
TTL_S = 3
GROUP_CONFIG = {**SMALL, "queues_per_topic": QUEUES, "ack_mode": "sync", "min_insync": 1,
                "tx_check_after_ms": 300, "server": {"lease_ttl_s": TTL_S}}


def broker_config(config: dict) -> fmq.BrokerConfig:
    """The broker part of a server config dict (without the ``server`` section)."""
    return fmq.BrokerConfig(**{k: v for k, v in config.items() if k != "server"})


def role_of(node: ServerProcess) -> dict:
    """The node's REPL_STATUS, or ``{"role": "down"}`` when it does not answer."""
    if not node.alive:
        return {"role": "down"}
    try:
        return status(node)
    except (FMQError, OSError):
        return {"role": "down"}


class FailoverGroup:
    """etcd and the nodes ``names`` of group ``group``, their data under ``work``;
    ``cluster``: the cluster name they register the group in (the server's default when
    None)."""

    def __init__(self, work: str, names: tuple[str, ...] = ("n1", "n2", "n3"),
                 config: dict = GROUP_CONFIG, group: str = "g",
                 cluster: str | None = None) -> None:
        self.work = work
        self.config = config
        self.group = group
        self.cluster_args = () if cluster is None else ("--cluster-name", cluster)
        self.etcd = EtcdProcess(os.path.join(work, "etcd"))
        self.nodes: list[ServerProcess] = []
        self.names = names

    def start(self) -> FailoverGroup:
        self.etcd.start()
        for name in self.names:
            node = ServerProcess(os.path.join(self.work, name), self.config,
                                 extra_args=("--coordinator", self.etcd.url,
                                             "--group", self.group, "--node", name,
                                             *self.cluster_args))
            self.nodes.append(node)
        for node in self.nodes:
            node.start()
        return self

    @property
    def servers(self) -> str:
        """Every node's address, as clients take them."""
        return ",".join(n.address for n in self.nodes)

    def others(self, node: ServerProcess) -> list[ServerProcess]:
        return [n for n in self.nodes if n is not node]

    def wait_primary(self, among: list[ServerProcess] | None = None,
                     timeout: float = 30.0) -> ServerProcess:
        """The one node of ``among`` (default: all) serving as primary while every other
        live node of the group follows it."""
        among = among or self.nodes
        deadline = time.monotonic() + timeout
        roles: list[dict] = []
        while time.monotonic() < deadline:
            roles = [role_of(n) for n in self.nodes]
            primaries = [n for n, r in zip(self.nodes, roles, strict=True)
                         if r["role"] == "primary"]
            if len(primaries) == 1 and primaries[0] in among and all(
                    r.get("primary") == primaries[0].address
                    for n, r in zip(self.nodes, roles, strict=True)
                    if n is not primaries[0] and r["role"] != "down"):
                return primaries[0]
            time.sleep(0.05)
        raise AssertionError(f"no single primary among {[n.address for n in among]}: {roles}")

    def wait_whole(self, timeout: float = 30.0) -> ServerProcess:
        """Wait until every node is up, one is primary and the others are in its in-sync
        set; returns the primary."""
        deadline = time.monotonic() + timeout
        while True:
            primary = self.wait_primary(timeout=max(0.1, deadline - time.monotonic()))
            st = role_of(primary)
            want = {n.address for n in self.others(primary)}
            if st["role"] == "primary" and want <= set(st.get("in_sync", ())):
                return primary
            if time.monotonic() > deadline:
                raise AssertionError(f"the group is not whole and in sync: {st}")
            time.sleep(0.05)

    def wait_same_end(self, timeout: float = 30.0) -> tuple[ServerProcess, int]:
        """With no writes coming: wait until every node holds the primary's durable end;
        returns the primary and that end."""
        deadline = time.monotonic() + timeout
        while True:
            primary = self.wait_whole(timeout=max(0.1, deadline - time.monotonic()))
            ends = {role_of(n).get("durable_end") for n in self.nodes}
            if len(ends) == 1 and None not in ends:
                return primary, ends.pop()
            if time.monotonic() > deadline:
                raise AssertionError(f"the nodes hold different ends: {ends}")
            time.sleep(0.05)

    def assert_identical(self) -> tuple[ServerProcess, int]:
        """Every node's segment files are byte for byte the primary's up to the common
        durable end (the nodes running, nothing being written)."""
        primary, end = self.wait_same_end()
        for node in self.others(primary):
            assert_identical_up_to(primary, node, end)
        return primary, end

    def stop(self) -> None:
        """Stop the followers, then the primary (graceful), then etcd."""
        primary = next((n for n in self.nodes if role_of(n)["role"] == "primary"), None)
        for node in [*self.others(primary), primary] if primary else self.nodes:
            if node.alive:
                node.stop()
        self.etcd.stop()

    def kill(self) -> None:
        for node in self.nodes:
            if node.alive:
                node.proc.send_signal(signal.SIGCONT)  # a stopped one cannot die
                node.kill()
        self.etcd.stop()

    def count_in_logs(self, text: str) -> int:
        """How many times ``text`` occurs in the nodes' whole logs."""
        return sum(n.log().count(text) for n in self.nodes)

    def logs(self) -> str:
        return "\n".join(f"==== {n.address} ({n.data_dir})\n{n.log()[-4000:]}"
                         for n in self.nodes)


class History:
    """What the producers did, recorded client-side (thread-safe), in the fault suite's
    plan and acknowledgement format (``tests/faults/workload.py``) so its checks read it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.plan: list[dict] = []
        self.acks: list[dict] = []
        #: tx id -> "commit" or "rollback": the producer's own decision.
        self.decisions: dict[str, str] = {}
        #: tx id -> its message ids.
        self.tx_messages: dict[str, list[str]] = {}

    def attempt_send(self, mid: str, size: int) -> bytes:
        with self._lock:
            self.plan.append({"op": "send", "msgs": [msg(mid, size)]})
        return body_for(mid, size)

    def acked_send(self, mid: str, result: fmq.SendResult) -> None:
        with self._lock:
            self.acks.append({"op": "send", "ids": [mid], "results": [
                (result.offset, result.queue_id, result.queue_offset)]})

    def attempt_tx(self, tx: str, mids: list[str], size: int) -> list[bytes]:
        with self._lock:
            self.plan.append({"op": "prepare", "tx": tx, "msgs": [msg(m, size) for m in mids]})
            self.tx_messages[tx] = list(mids)
        return [body_for(m, size) for m in mids]

    def decide(self, tx: str, decision: str) -> None:
        with self._lock:
            self.decisions[tx] = decision

    def acked(self, op: str, tx: str) -> None:
        with self._lock:
            self.acks.append({"op": op, "tx": tx})

    def acked_sends(self) -> set[str]:
        return {a["ids"][0] for a in self.acks if a["op"] == "send"}

    def acked_ops(self, op: str) -> set[str]:
        return {a["tx"] for a in self.acks if a["op"] == op}


def plain_producer(k: int, rng: random.Random, servers: str, history: History,
                   stop: threading.Event, errors: list, options: dict,
                   queue_id: int | None = None) -> None:
    """Producer ``k`` sends messages of ``rng``'s sizes (to ``queue_id`` when given) until
    ``stop``, recording each attempt and acknowledgement in ``history``."""
    with Producer(servers, linger_ms=0, **options) as producer:
        i = 0
        while not stop.is_set():
            mid = f"p{k}-{i}"
            i += 1
            body = history.attempt_send(mid, rng.randrange(64, 400))
            try:
                history.acked_send(mid, producer.send(TOPIC, body, queue_id=queue_id))
            except FMQError as exc:  # not acknowledged: stored at most once
                errors.append(exc)


def tx_producer(k: int, rng: random.Random, servers: str, history: History,
                stop: threading.Event, errors: list, done: threading.Event, options: dict,
                group: str | None = None) -> None:
    """Transactional producer ``k`` (producer group ``shop{k}``; its transactions in broker
    group ``group`` when given) prepares 2-3 messages and commits 3 of 4 until ``stop``;
    its check-back answers from its own recorded decision, until ``done``."""
    def checker(uncertain) -> TxState:
        decision = history.decisions.get(uncertain.tx_id)
        if decision is None:
            return TxState.UNKNOWN  # its prepare is still being retried
        return TxState.COMMIT if decision == "commit" else TxState.ROLLBACK

    with TransactionProducer(servers, f"shop{k}", checker, **options) as producer:
        i = 0
        while not stop.is_set():
            tx = f"tx-{k}-{i}"
            mids = [f"t{k}-{i}-{j}" for j in range(rng.choice((2, 3)))]
            i += 1
            bodies = history.attempt_tx(tx, mids, rng.randrange(64, 300))
            try:
                producer.prepare([Message(TOPIC, b) for b in bodies], tx_id=tx, group=group)
            except FMQError as exc:  # given up: the check-back rolls back what is stored
                history.decide(tx, "rollback")
                errors.append(exc)
                continue
            history.acked("prepare", tx)
            decision = "commit" if rng.random() < 0.75 else "rollback"
            history.decide(tx, decision)
            try:
                state = producer.commit(tx) if decision == "commit" else producer.rollback(tx)
            except FMQError as exc:  # the check-back applies the decision
                errors.append(exc)
                continue
            assert state.value == decision, (tx, state)
            history.acked(decision, tx)
        done.wait(60)  # answer check-backs until every transaction is decided


class GroupConsumer:
    """The one member of consumer group ``group`` reading TOPIC throughout a run, given
    every node's address, committing after each batch as an application does (a commit
    refused meanwhile is simply made again with the next batch). ``consumed`` counts what
    it was handed, by message id."""

    def __init__(self, servers: str, group: str = "audit") -> None:
        self.servers = servers
        self.group = group
        self.consumed: Counter = Counter()
        self.errors: list[FMQError] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="group-consumer", daemon=True)

    def start(self) -> GroupConsumer:
        self._thread.start()
        return self

    def _run(self) -> None:
        with Consumer(self.servers, self.group, [TOPIC], retries=False, request_timeout=10,
                      backoff_max=0.5) as consumer:
            while not self._stop.is_set():
                try:
                    batch = consumer.poll(0.5)
                    for m in batch:
                        self.consumed[message_id(bytes(m.body))] += 1
                    if batch:
                        consumer.commit()
                except FMQError as exc:  # a fail-over: the consumer carries on
                    self.errors.append(exc)
                    self._stop.wait(0.2)

    def wait_for(self, ids: set[str], timeout: float = 60.0) -> None:
        """Until every id of ``ids`` was consumed, or ``timeout`` (the check then names
        what is missing)."""
        deadline = time.monotonic() + timeout
        while not ids <= self.consumed.keys() and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def acknowledged_messages(history: History) -> set[str]:
    """Every message a consumer must get: acknowledged sends and the messages of the
    transactions their producer decided to commit."""
    committed = {m for tx, mids in history.tx_messages.items()
                 if history.decisions.get(tx) == "commit" for m in mids}
    return history.acked_sends() | committed


def check_consumed(consumed: Counter, history: History) -> None:
    """The consumer-side invariant: the group consumed every acknowledged message at least
    once (a message a fail-over took back must not have moved the group past one)."""
    wanted = acknowledged_messages(history)
    skipped = sorted(wanted - consumed.keys())
    assert not skipped, (f"the group never consumed {len(skipped)} of {len(wanted)} "
                         f"acknowledged messages (skipped): {skipped[:5]}")


def readable(node: ServerProcess) -> Counter:
    """How many times each message id is readable on ``node`` (its consumer view)."""
    return Counter(message_id(bytes(body)) for queue in pull_all(node, TOPIC, QUEUES)
                   for _q, _o, body in queue)


def check_readable(node: ServerProcess, history: History) -> Counter:
    """On ``node``: every acknowledged send readable exactly once, an unacknowledged one at
    most once; every committed transaction wholly visible, a rolled-back or abandoned one
    not at all, none partly; nothing readable that no producer sent."""
    seen = readable(node)
    where = node.address
    sends = {op["msgs"][0]["id"] for op in history.plan if op["op"] == "send"}
    for mid in history.acked_sends():
        assert seen[mid] == 1, f"{where}: acknowledged {mid} is readable {seen[mid]} times"
    for mid in sends:
        assert seen[mid] <= 1, f"{where}: unacknowledged {mid} is readable {seen[mid]} times"
    for tx, mids in history.tx_messages.items():
        counts = [seen[m] for m in mids]
        decision = history.decisions.get(tx, "rollback")  # no decision: abandoned
        if decision == "commit":
            assert counts == [1] * len(mids), f"{where}: committed {tx} shows {counts}"
        else:
            assert counts == [0] * len(mids), f"{where}: {decision} {tx} shows {counts}"
    for tx in history.acked_ops("commit"):
        assert history.decisions.get(tx) == "commit", tx
    known = sends | {m for mids in history.tx_messages.values() for m in mids}
    stray = set(seen) - known
    assert not stray, f"{where}: readable messages no producer sent: {sorted(stray)[:5]}"
    return seen


def check_data_dir(data_dir: str, config: dict, history: History, work: str) -> None:
    """The fault suite's invariants on a stopped node's data directory: I1 and I3 against
    the producers' history, I6 (the index equals a rebuild from the log) and I5's first
    half (recovering again gives the same state)."""
    cfg = broker_config(config)
    broker = fmq.Broker.open(data_dir, cfg)
    try:
        check_acked_and_transactions(broker, log_records(data_dir), history.plan,
                                     history.acks)
        first = state_of(broker, data_dir)
        check_index_matches_rebuild(broker, data_dir, cfg, work)  # closes the broker
    finally:
        broker.close()
    again = fmq.Broker.open(data_dir, cfg)
    try:
        compare_states(first, state_of(again, data_dir), f"{data_dir} recovered twice")
    finally:
        again.close()


def wait_no_open_transactions(servers: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    with Client(servers, node="primary", request_timeout=10, retries=3) as c:
        while True:
            open_txs = c.call(Op.LIST_TX, {})["transactions"]
            if not open_txs:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"transactions still open: {open_txs[:5]}")
            time.sleep(0.1)


def check_readable_soon(group: FailoverGroup, history: History, timeout: float = 10.0) -> None:
    """check_readable on every node, allowing a follower's index a moment to catch up."""
    for node in group.nodes:
        deadline = time.monotonic() + timeout
        while True:
            try:
                check_readable(node, history)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
