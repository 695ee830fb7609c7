"""TransactionProducer.commit_with_next against a real server on 127.0.0.1: the COMMIT goes
out in one write with the next PREPARE, and its outcome is exactly what commit() gives: the
final state once answered, the server's refusal as its typed error, a lost connection as an
error (or retried), never a commit reported done without its answer, never lost silently."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from fmq.client import Client, PendingCommit, TransactionProducer
from fmq.errors import (
    ConnectionLost,
    DuplicateTransaction,
    InvalidArgument,
    NotSent,
    TransactionConflict,
    UnknownTransaction,
)
from fmq.message import Message
from fmq.protocol import Op
from fmq.tx.state import TxState
from tests.client.helpers import read_topic
from tests.frame_proxy import FrameProxy

_HEAD = struct.Struct(">IBBHQ")  # length, version, opcode, flags, request id


def opcodes(data: bytes) -> list[int]:
    """The opcodes of the whole request frames in ``data``, in order."""
    out, at = [], 0
    while at < len(data):
        length, _version, opcode, _flags, _rid = _HEAD.unpack_from(data, at)
        out.append(opcode)
        at += 4 + length
    return out


class RecordedWrites:
    """Stands between a connection and its socket and records what each write carried (the
    reader thread keeps reading the socket itself)."""

    def __init__(self, io: socket.socket) -> None:
        self._io = io
        self.writes: list[list[int]] = []

    def sendall(self, data: bytes) -> None:
        self.writes.append(opcodes(data))
        self._io.sendall(data)


def record_writes(producer: TransactionProducer) -> RecordedWrites:
    producer.ping()  # connected
    conn = producer._conn
    recorded = RecordedWrites(conn._io)
    conn._io = recorded
    return recorded


class CuttingProxy(FrameProxy):
    """Forwards everything; once ``cut_at_commit_answer`` is set, the next COMMIT answer is
    swallowed and every connection through the proxy is cut (the server applied it, the
    client never hears). New connections are accepted as before."""

    def __init__(self, upstream: str) -> None:
        self.cut_at_commit_answer = threading.Event()
        self.was_cut = threading.Event()
        super().__init__(upstream)

    def answer(self, frame: bytes) -> bytes | None:
        if _HEAD.unpack_from(frame)[2] == Op.COMMIT and self.cut_at_commit_answer.is_set():
            self.cut_at_commit_answer.clear()
            self.cut()
            return None
        return frame

    def cut(self) -> None:
        self.was_cut.set()  # before the client can see the cut
        for s in self._sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def producer(address: str, **options) -> TransactionProducer:
    return TransactionProducer(address, "pipe", lambda u: TxState.UNKNOWN, feedback=False,
                               **options)


def open_ids(address: str) -> set[str]:
    with Client(address) as c:
        return {t["tx_id"] for t in c.call(Op.LIST_TX, {})["transactions"]
                if t["producer_group"] == "pipe"}


def bodies(address: str, topic: str) -> list[bytes]:
    return [m.body for q in read_topic(address, topic).values() for m in q]


def wait_done(pending: PendingCommit, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not pending.done() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_the_commit_goes_out_with_the_next_prepare_and_reports_its_outcome(start_server):
    srv = start_server()
    with producer(srv.address) as p:
        p.route("cwn1")
        writes = record_writes(p)
        first = p.prepare([Message("cwn1", b"one")])
        pending = p.commit_with_next(first, linger_ms=10_000)
        assert not pending.done()  # held: nothing was written for it yet
        assert [Op.COMMIT] not in writes.writes
        second = p.prepare([Message("cwn1", b"two")])
        assert [Op.COMMIT, Op.PREPARE] in writes.writes  # one write, the COMMIT first
        assert pending.result() == TxState.COMMIT and pending.tx_id == first
        assert p.commit(second) == TxState.COMMIT
    assert sorted(bodies(srv.address, "cwn1")) == [b"one", b"two"]
    assert open_ids(srv.address) == set()


def test_a_refused_commit_raises_its_typed_error_and_the_prepare_with_it_stands(start_server):
    srv = start_server()
    with producer(srv.address) as p:
        p.route("cwn2")  # read now, so that the next request after each COMMIT is a PREPARE
        writes = record_writes(p)
        unknown = p.commit_with_next("never-prepared", linger_ms=10_000)
        tx = p.prepare([Message("cwn2", b"kept")])
        with pytest.raises(UnknownTransaction):
            unknown.result()
        rolled = p.prepare([Message("cwn2", b"rolled back")])
        assert p.rollback(rolled) == TxState.ROLLBACK
        conflict = p.commit_with_next(rolled, linger_ms=10_000)
        tx2 = p.prepare([Message("cwn2", b"kept too")])
        with pytest.raises(TransactionConflict):
            conflict.result()
        assert writes.writes.count([Op.COMMIT, Op.PREPARE]) == 2
        for t in (tx, tx2):
            assert p.commit(t) == TxState.COMMIT
    assert sorted(bodies(srv.address, "cwn2")) == [b"kept", b"kept too"]


def test_a_refused_prepare_does_not_hide_the_commit_written_with_it(start_server):
    srv = start_server()
    with producer(srv.address) as p:
        tx = p.prepare([Message("cwn3", b"committed")])
        pending = p.commit_with_next(tx, linger_ms=10_000)
        with pytest.raises(DuplicateTransaction):  # the id in use: refused, nothing stored
            p.prepare([Message("cwn3", b"other")], tx_id=tx)
        assert pending.result() == TxState.COMMIT
    assert bodies(srv.address, "cwn3") == [b"committed"]


def test_many_transactions_keep_their_order_and_each_message_is_stored_once(start_server):
    srv = start_server()
    n = 400
    pendings: list[PendingCommit] = []
    with producer(srv.address) as p:
        p.route("cwn4")
        writes = record_writes(p)
        for i in range(n):
            tx = p.prepare([Message("cwn4", b"%d" % i, queue_id=0)])
            pendings.append(p.commit_with_next(tx, linger_ms=10_000))
        # The last one has no next PREPARE: result() writes it alone.
        assert [pc.result() for pc in pendings] == [TxState.COMMIT] * n
        assert writes.writes.count([Op.COMMIT, Op.PREPARE]) == n - 1
        assert writes.writes.count([Op.COMMIT]) == 1
    queues = read_topic(srv.address, "cwn4")
    assert [m.body for m in queues[0]] == [b"%d" % i for i in range(n)]
    assert [m.queue_offset for m in queues[0]] == list(range(n))
    assert sum(len(q) for q in queues.values()) == n
    assert open_ids(srv.address) == set()


def test_a_commit_nothing_follows_is_written_alone_after_its_linger(start_server):
    srv = start_server()
    with producer(srv.address) as p:
        tx = p.prepare([Message("cwn5", b"alone")])
        started = time.monotonic()
        pending = p.commit_with_next(tx, linger_ms=50)
        wait_done(pending)  # nobody asks for result(): the linger writes it
        assert pending.done() and time.monotonic() - started >= 0.05
        assert pending.result(0) == TxState.COMMIT
    assert bodies(srv.address, "cwn5") == [b"alone"]


def test_close_writes_a_held_commit_and_waits_for_its_answer(start_server):
    srv = start_server()
    p = producer(srv.address)
    tx = p.prepare([Message("cwn6", b"at close")])
    pending = p.commit_with_next(tx, linger_ms=60_000)
    p.close()
    assert pending.done() and pending.result(0) == TxState.COMMIT
    assert bodies(srv.address, "cwn6") == [b"at close"]


def test_a_connection_lost_before_the_answer_is_an_error_and_the_broker_decides_nothing(
        start_server):
    srv = start_server()
    proxy = CuttingProxy(srv.address)
    try:
        with producer(proxy.address, retries=0) as p:
            tx = p.prepare([Message("cwn7", b"applied, unheard")])
            proxy.cut_at_commit_answer.set()
            pending = p.commit_with_next(tx, linger_ms=10_000)
            nxt = None
            try:
                nxt = p.prepare([Message("cwn7", b"next")])
            except ConnectionLost:
                pass  # its answer went with the cut connection
            with pytest.raises(ConnectionLost, match="may or may not have been applied"):
                pending.result()
            assert proxy.was_cut.is_set()
        # A fresh client sees the COMMIT applied: committed, not lost, not open.
        assert bodies(srv.address, "cwn7") == [b"applied, unheard"]
        assert tx not in open_ids(srv.address)
        assert nxt is None or nxt in open_ids(srv.address)
    finally:
        proxy.close()


def test_a_commit_whose_answer_was_lost_is_retried_to_its_outcome(start_server):
    srv = start_server()
    proxy = CuttingProxy(srv.address)
    try:
        with producer(proxy.address) as p:  # retries within delivery_timeout (the default)
            tx = p.prepare([Message("cwn8", b"retried")])
            proxy.cut_at_commit_answer.set()
            pending = p.commit_with_next(tx)
            assert pending.result(30) == TxState.COMMIT  # asked again: already committed
            assert proxy.was_cut.is_set()
        assert bodies(srv.address, "cwn8") == [b"retried"]
    finally:
        proxy.close()


def test_a_commit_never_written_fails_as_not_sent_and_the_transaction_stays_open(
        start_server):
    srv = start_server()
    proxy = CuttingProxy(srv.address)
    try:
        with producer(proxy.address, retries=0) as p:
            tx = p.prepare([Message("cwn9", b"still open")])
            conn = p._conn
            pending = p.commit_with_next(tx, linger_ms=60_000)
            proxy.cut()
            for _ in range(1000):
                if conn.closed:
                    break
                time.sleep(0.01)
            assert conn.closed
            with pytest.raises(NotSent, match="before the request was sent"):
                pending.result()
        # Never written, so never applied: the transaction is open for the check-back.
        assert tx in open_ids(srv.address)
        assert bodies(srv.address, "cwn9") == []
        with producer(srv.address) as again:
            assert again.commit(tx) == TxState.COMMIT
        assert bodies(srv.address, "cwn9") == [b"still open"]
    finally:
        proxy.close()


def test_a_bad_linger_is_refused_before_anything_is_held(start_server):
    srv = start_server()
    with producer(srv.address) as p:
        tx = p.prepare([Message("cwn10", b"x")])
        with pytest.raises(InvalidArgument, match="linger_ms"):
            p.commit_with_next(tx, linger_ms=-1)
        assert p.commit(tx) == TxState.COMMIT
