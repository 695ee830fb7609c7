"""A turn's PREPAREs and COMMITs placed kind by kind when they arrive interleaved
(``fmq.server.ops.batcher.by_kind``): producers that write each COMMIT with their next
PREPARE (``TransactionProducer.commit_with_next``, ``fmq bench tx
--commit-with-next-prepare``) hand the send pipeline COMMIT, PREPARE, COMMIT, PREPARE, ...,
which was placed one request per writer call. Only when no two writes of the turn touch the
same transaction or scope; otherwise in arrival order, as before."""

from __future__ import annotations

import socket

from fmq.protocol import FrameDecoder, Op, decode_error, decode_response, encode_request
from fmq.server.ops.batcher import UNSHARED, by_kind
from fmq.server.ops.tx_ops import touches
from fmq.tx.writers import TxWriter
from tests.server.send_servers import sends_server, stored_messages


def write(kind: str, key: object) -> tuple:
    """A grouped write as the send pipeline queues it (its future and callbacks left out)."""
    return ((kind, f"item-{kind}-{key}", key), None, None, None)


def kinds_and_keys(writes: list) -> list[tuple]:
    return [(w[0][0], w[0][2]) for w in writes]


def test_interleaved_kinds_with_distinct_keys_are_brought_together_in_order():
    writes = [write("commit", ("g", "a")), write("prepare", UNSHARED),
              write("commit", ("g", "b")), write("prepare", ("g", "c")),
              write("commit", ("g", "d")), write("prepare", UNSHARED)]
    assert kinds_and_keys(by_kind(writes)) == [
        ("commit", ("g", "a")), ("commit", ("g", "b")), ("commit", ("g", "d")),
        ("prepare", UNSHARED), ("prepare", ("g", "c")), ("prepare", UNSHARED)]


def test_a_turn_is_left_as_it_came_when_two_writes_touch_the_same_state():
    shared = [write("commit", ("g", "a")), write("prepare", ("g", "b")),
              write("commit", ("g", "c")), write("prepare", ("g", "a"))]
    assert by_kind(shared) is shared
    unsaid = [write("commit", ("g", "a")), write("prepare", None), write("commit", ("g", "c"))]
    assert by_kind(unsaid) is unsaid
    own = [write("commit", ("g", "a")), ("a write of its own", None, None, None),
           write("prepare", UNSHARED), write("commit", ("g", "c"))]
    assert by_kind(own) is own
    one_kind = [write("commit", ("g", "a")), write("commit", ("g", "b"))]
    assert by_kind(one_kind) is one_kind


def test_an_id_of_a_scope_touches_its_whole_scope_and_its_mark():
    assert touches("g", "S//a") == touches("g", "S//b") == touches("g", "S") == ("g", "S")
    assert touches("g", "plain") == ("g", "plain") != touches("h", "plain")
    assert touches("g", None) is None and touches("g", b"bytes") is None


class Session:
    """One connection, its first request (PING) answered, so that its later reads take the
    short step (the first read of a session takes the general way)."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.settimeout(30)
        self.decoder = FrameDecoder()
        self.exchange([encode_request(Op.PING, 1_000_000, {})])

    def exchange(self, frames: list[bytes]) -> dict[int, object]:
        """``frames`` in one write; each request id's decoded answer (or error)."""
        self.sock.sendall(b"".join(frames))
        got: list = []
        while len(got) < len(frames):
            data = self.sock.recv(1 << 16)
            assert data, "the server closed the connection"
            got.extend(self.decoder.feed(data))
        return {f.request_id: decode_error(f) if f.is_error else decode_response(f)
                for f in got}


def prepare(rid: int, body: bytes, tx_id: str | None = None) -> bytes:
    return encode_request(Op.PREPARE, rid, {"producer_group": "g", "tx_id": tx_id, "messages": [
        {"topic": "t", "body": body, "key": None, "tags": None, "properties": {},
         "queue_id": -1}]})


def commit(rid: int, tx_id: str) -> bytes:
    return encode_request(Op.COMMIT, rid, {"producer_group": "g", "tx_id": tx_id})


def test_commits_written_with_the_next_prepares_are_placed_by_one_call_per_kind(
        tmp_path, monkeypatch):
    calls: dict[str, list[int]] = {"prepares": [], "commits": []}
    real_prepares, real_commits = TxWriter.place_prepares, TxWriter.place_commits

    def place_prepares(self, items):
        calls["prepares"].append(len(items))
        return real_prepares(self, items)

    def place_commits(self, items):
        calls["commits"].append(len(items))
        return real_commits(self, items)

    monkeypatch.setattr(TxWriter, "place_prepares", place_prepares)
    monkeypatch.setattr(TxWriter, "place_commits", place_commits)
    data_dir = str(tmp_path / "data")
    srv = sends_server(data_dir)
    session = None
    try:
        session = Session(f"127.0.0.1:{srv.server.port}")
        n = 24
        first = session.exchange( [prepare(i, b"first %d" % i) for i in range(1, n + 1)])
        ids = [first[i]["tx_id"] for i in range(1, n + 1)]
        calls["prepares"].clear()
        # Each producer's COMMIT followed by its next PREPARE (a server-made id, and one
        # the client names), the producers' pairs one after the other in one read.
        frames = []
        for i, tx_id in enumerate(ids):
            frames.append(commit(100 + i, tx_id))
            frames.append(prepare(200 + i, b"next %d" % i, None if i % 2 else f"named-{i}"))
        answers = session.exchange(frames)
        assert [answers[100 + i] for i in range(n)] == [{"state": "commit"}] * n
        nxt = [answers[200 + i]["tx_id"] for i in range(n)]
        assert all(nxt[i] == f"named-{i}" for i in range(0, n, 2))
        # One turn (two if the read was cut): one call per kind, not one per request.
        assert sum(calls["commits"]) == n and len(calls["commits"]) <= 2, calls
        assert sum(calls["prepares"]) == n and len(calls["prepares"]) <= 2, calls
        last = session.exchange([commit(300 + i, t) for i, t in enumerate(nxt)])
        assert all(a == {"state": "commit"} for a in last.values())
    finally:
        if session is not None:
            session.sock.close()
        srv.stop()
    stored = sorted(m[4] for m in stored_messages(data_dir))  # each message once
    assert stored == sorted([b"first %d" % i for i in range(1, n + 1)]
                            + [b"next %d" % i for i in range(n)])
