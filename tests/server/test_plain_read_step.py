"""PULL's and COMMIT_OFFSET's short step (``SessionRequests._start_plain_read``) against the
general way (``SessionRequests.plain_reads = False``, every request through ``_start``): the
same PULL, COMMIT_OFFSET and FETCH_OFFSET frames, valid and invalid (unknown and bad
topics and groups, queue ids and offsets out of range, ``max_messages`` 0 and huge, a
message larger than ``max_reply_size``, records older than ``pull_on_loop_bytes``, short
long polls on empty queues, malformed payloads, bad headers), sent to one real server on
127.0.0.1 in this process (its real broker, prefilled once, so both ways read the same
records), get byte for byte the same answers, one at a time and in pipelined windows; so
do long polls woken by a send, a fenced primary's COMMIT_OFFSET, and a user's refusals.
The step must really have answered PULLs and COMMIT_OFFSETs (counted), or the comparison
would compare the general way with itself."""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest

from fmq import Broker, BrokerConfig, Message
from fmq.protocol import PROTOCOL_VERSION, FrameDecoder, Op, encode_request
from fmq.server.net import session_requests
from fmq.server.net.session_requests import _DECLINED, SessionRequests
from fmq.server.ops import plain_pull, pull_reads
from fmq.server.ops.pull_answers import encoded_cache
from tests.server.in_process_servers import InProcessServer
from tests.server.raw_requests import (
    answers_in_windows,
    answers_one_at_a_time,
    open_session,
    read_answer,
    request_frame,
)

pytestmark = pytest.mark.timeout(300)

QUEUES = 4
PER_QUEUE = 30
BIG = 70 * 1024  # a body larger than max_reply_size (64 KiB, its least)
TOPICS = [b"t"] * 8 + [b"small", b"nope", b"", b"bad topic", b"%RETRY%g", b"a" * 128,
                       b"\xff", "é".encode()]
GROUPS = ["g1", "g2", "g3"] * 3 + ["é", "%g", "bad group", "", "x\x00y", "a" * 300]


def _prefill(broker: Broker) -> None:
    """Messages of every shape in queues 0-3 of ``t`` (queue 3 ends with two larger than
    max_reply_size, offsets 12 and 13), one message in ``small``; the first ones are older
    than ``pull_on_loop_bytes``."""
    broker.topics.create("small", queues=1)
    rnd = random.Random(7)
    for i in range(PER_QUEUE):
        for q in range(QUEUES):
            body = bytes([i % 256]) * rnd.choice([0, 1, 100, 1000, 5000])
            if q == 3 and i in (12, 13):
                body = b"B" * BIG
            props = rnd.choice([None, None, {"a": "1"}, {"é": "ü", "b": ""}])
            broker.send(Message("t", body, key=rnd.choice([None, "k", "é"]),
                                tags=rnd.choice([None, "x", "x||y"]), properties=props,
                                queue_id=q))
    broker.send(Message("small", b"s", queue_id=0))
    # A transaction's messages (REF_MESSAGE entries, bodies in PRE_MESSAGEs) between plain
    # ones with the dedup window's own properties, which a pull leaves out.
    broker.topics.create("txt", queues=1)
    for i in range(6):
        broker.send(Message("txt", bytes([i]) * (i * 300), key="k" if i % 2 else None,
                            properties={"%producer": "p1", "%seq": str(i), "a": "b"},
                            queue_id=0))
        tx = broker.transactions.prepare(
            [Message("txt", b"tx" * i, tags="x" if i % 2 else None,
                     properties={"c": "é"} if i % 3 else None, queue_id=0)
             for _ in range(3)], "pg")
        broker.transactions.commit(tx, "pg")
    assert broker.wait_indexed(30)


def _server(data_dir: str) -> InProcessServer:
    """A real server in a thread of this process (so that the way a session takes is this
    process's ``SessionRequests.plain_reads``), over a prefilled broker."""
    broker = Broker.open(data_dir, BrokerConfig(queues_per_topic=QUEUES))
    _prefill(broker)
    return InProcessServer(broker, max_reply_size=64 * 1024, pull_on_loop_bytes=256 * 1024,
                           max_wait_ms=200)


@pytest.fixture
def server(tmp_path):
    with _server(str(tmp_path / "data")) as srv:
        yield srv


@pytest.fixture
def taken(monkeypatch):
    """The opcodes of the requests the step answered or started (a PULL answered at once,
    a COMMIT_OFFSET written without a task); "wait" for a PULL it read and handed to the
    general way's wait."""
    seen: list[int] = []
    pull_now = session_requests.answer_pull_now
    start_commit = SessionRequests._start_commit_offset

    def answered(ctx, session, op, rid, fields, *woken):
        done = pull_now(ctx, session, op, rid, fields, *woken)
        if done is True:
            seen.append(op)
        elif done is not False:
            seen.append("wait")
        return done

    def started(self, frame):
        request = start_commit(self, frame)
        if request is not _DECLINED:
            seen.append(frame.opcode)
        return request

    monkeypatch.setattr(session_requests, "answer_pull_now", answered)
    monkeypatch.setattr(SessionRequests, "_start_commit_offset", started)
    return seen


def _pull(topic: bytes, queue_id: int, offset: int, max_messages: int, wait_ms: int) -> bytes:
    return (struct.pack(">H", len(topic)) + topic
            + struct.pack(">IQII", queue_id, offset, max_messages, wait_ms))


def _names(*names: bytes) -> bytes:
    return b"".join(struct.pack(">H", len(n)) + n for n in names)


def _group(rnd: random.Random, run: str) -> bytes:
    """A group name, the run's own (so that one run's commits are not the other run's
    fetches), valid or not."""
    name = rnd.choice(GROUPS)
    return (f"{run}-{name}" if name else name).encode()


def _requests(seed: int, count: int, run: str, intact: bool = False) -> list[bytes]:
    """PULL, COMMIT_OFFSET and FETCH_OFFSET frames near every check's edge (request ids
    1..); ``intact``: none malformed, no bad header (no session is closed) and no
    FETCH_OFFSET."""
    rnd = random.Random(seed)
    frames = []
    topics = [t for t in TOPICS if t != b"\xff"] if intact else TOPICS
    queue_ids = [0, 1, 2, 3] * 3 + [4, 0xFFFF_FFFF]
    offsets = [0, 1, 5, 11, 12, 13, 20, PER_QUEUE - 2, PER_QUEUE - 1, PER_QUEUE, PER_QUEUE + 1, 1 << 63,
               (1 << 64) - 1]
    for rid in range(1, count + 1):
        kind = rnd.random()
        if kind < 0.6:
            op = Op.PULL
            payload = _pull(rnd.choice(topics), rnd.choice(queue_ids), rnd.choice(offsets),
                            rnd.choice([1, 1, 2, 3, 10, 4097, 0, 0xFFFF_FFFF]),
                            rnd.choice([0, 0, 0, 0, 30, 1000]))
        elif kind < 0.9 or intact:
            # (No FETCH_OFFSET in windows: it races the window's commits on either way.)
            op = Op.COMMIT_OFFSET
            payload = (_names(_group(rnd, run), rnd.choice(topics))
                       + struct.pack(">IQ", rnd.choice(queue_ids), rnd.choice(offsets)))
        else:
            op = Op.FETCH_OFFSET
            payload = (_names(_group(rnd, run), rnd.choice(TOPICS[:9]))
                       + struct.pack(">I", rnd.choice(queue_ids[:12])))
        how = rnd.random() if not intact else 1.0
        if how < 0.04:  # cut short: malformed, the session closes
            payload = payload[:rnd.randrange(len(payload))]
        elif how < 0.07:  # trailing bytes: malformed too
            payload += b"\x00"
        header = {"version": PROTOCOL_VERSION, "flags": 0}
        if rnd.random() < 0.03 and not intact:
            header = rnd.choice([{"version": 2, "flags": 0},
                                 {"version": PROTOCOL_VERSION, "flags": 1}])
        frames.append(request_frame(payload, rid, op=op, **header))
    return frames


def _without_run(answers: list[bytes] | dict, run: str) -> list[bytes] | dict:
    """The answers with the run's group prefix taken out of their error texts."""
    def plain(a: bytes) -> bytes:
        return a.replace(f"{run}-".encode(), b"")
    if isinstance(answers, dict):
        return {rid: plain(a) for rid, a in answers.items()}
    return [plain(a) for a in answers]


@pytest.mark.parametrize("seed", [1, 2])
def test_reads_are_answered_as_the_general_way_answers_them(server, taken, monkeypatch, seed):
    port = server.server.port
    fast = answers_one_at_a_time(port, _requests(seed, 300, "one"))
    monkeypatch.setattr(SessionRequests, "plain_reads", False)
    count = len(taken)
    general = answers_one_at_a_time(port, _requests(seed, 300, "two"))
    assert len(taken) == count, "the general way took the step"
    assert taken.count(Op.PULL) > 30 and taken.count(Op.COMMIT_OFFSET) > 20, \
        "the step took too few requests to compare"
    assert _without_run(fast, "one") == _without_run(general, "two")
    # Some of each ending: messages, empty answers, errors, closed sessions.
    assert any(a[0] == Op.PULL and a[1] == 1 and len(a) > 10 + 4 + 16 + 100 for a in fast)
    assert any(a[0] == Op.COMMIT_OFFSET and a[1] == 1 for a in fast)
    assert any(a[1] & 2 and a.endswith(b"|open") for a in fast)
    assert any(a.endswith(b"|closed") for a in fast)


@pytest.mark.parametrize("seed", [3, 4])
def test_pipelined_reads_are_answered_as_the_general_way_answers_them(server, taken,
                                                                      monkeypatch, seed):
    port = server.server.port
    fast = answers_in_windows(port, _requests(seed, 320, "one", intact=True), 16)
    monkeypatch.setattr(SessionRequests, "plain_reads", False)
    general = answers_in_windows(port, _requests(seed, 320, "two", intact=True), 16)
    assert taken.count(Op.PULL) > 30 and taken.count(Op.COMMIT_OFFSET) > 20
    assert len(fast) == 320
    assert _without_run(fast, "one") == _without_run(general, "two")


def _sessions_by_way(monkeypatch) -> list[bool]:
    """The list of ways the sessions opened from now on take for their reads, one each in
    order (True: the step; False: the general way); a session opened when it is empty
    takes the step. The caller fills it right before opening the sessions it compares."""
    ways: list[bool] = []
    init = SessionRequests.__init__

    def way_per_session(self, session):
        init(self, session)
        self.plain_reads = ways.pop(0) if ways else True

    monkeypatch.setattr(SessionRequests, "__init__", way_per_session)
    return ways


def test_a_long_poll_woken_by_a_send_is_answered_alike(server, taken, monkeypatch):
    """A PULL that finds nothing and may wait is handed by the step to the general way's
    wait, which the send ends; both connections get the same answer, the message."""
    port = server.server.port
    ways = _sessions_by_way(monkeypatch)
    ways.extend([True, False])
    fast, fast_decoder = open_session(port)
    general, general_decoder = open_session(port)
    pull = request_frame(_pull(b"t", 2, PER_QUEUE, 5, 30_000), 7, op=Op.PULL)
    try:
        fast.sendall(pull)
        general.sendall(pull)
        time.sleep(0.05)  # both wait (max_wait_ms 200: the send must come before)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as producer:
            message = {"topic": "t", "body": b"late", "key": None, "tags": None,
                       "properties": {}, "queue_id": 2}
            producer.sendall(encode_request(Op.SEND, 1, {"message": message}))
            assert read_answer(producer, FrameDecoder(1 << 24))[1] == 1
        got_fast = read_answer(fast, fast_decoder)
        got_general = read_answer(general, general_decoder)
    finally:
        fast.close()
        general.close()
    assert got_fast == got_general
    assert b"late" in got_fast
    assert taken == ["wait", Op.PULL], "the step did not wait and answer the woken pull"


def test_a_woken_long_poll_the_step_declines_goes_on_the_general_way(server, taken,
                                                                     monkeypatch):
    """Woken by a message larger than ``max_reply_size`` (the room the step takes), the
    step declines the woken pull, and the general way's task reads it with room for the
    message: the same answer as a session of the general way."""
    port = server.server.port
    ways = _sessions_by_way(monkeypatch)
    ways.extend([True, False])
    fast, fast_decoder = open_session(port)
    general, general_decoder = open_session(port)
    pull = request_frame(_pull(b"small", 0, 1, 5, 30_000), 8, op=Op.PULL)
    try:
        fast.sendall(pull)
        general.sendall(pull)
        time.sleep(0.05)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as producer:
            message = {"topic": "small", "body": b"L" * BIG, "key": None, "tags": None,
                       "properties": {}, "queue_id": 0}
            producer.sendall(encode_request(Op.SEND, 1, {"message": message}))
            assert read_answer(producer, FrameDecoder(1 << 24))[1] == 1
        got_fast = read_answer(fast, fast_decoder)
        got_general = read_answer(general, general_decoder)
    finally:
        fast.close()
        general.close()
    assert got_fast == got_general
    assert got_fast[1] == 1 and b"L" * BIG in got_fast
    assert taken == ["wait"], "the step answered a message larger than its room"


def test_a_long_poll_at_the_end_of_a_followed_queue_waits_without_a_read(server, taken,
                                                                         monkeypatch):
    """A consumer that caught up: its PULL at the end of the queue's tail in memory waits
    with no read of the queue (``Reader.nothing_from``), and, woken by a send, is answered
    as a session of the general way answers the same PULL."""
    port = server.server.port
    ways = _sessions_by_way(monkeypatch)
    reads: list[int] = []
    real = plain_pull.pull_now
    monkeypatch.setattr(plain_pull, "pull_now",
                        lambda *a, **k: reads.append(a[5]) or real(*a, **k))
    producer = socket.create_connection(("127.0.0.1", port), timeout=30)
    producer_decoder = FrameDecoder(1 << 24)

    def send(body: bytes, rid: int) -> None:
        message = {"topic": "t", "body": body, "key": None, "tags": None,
                   "properties": {}, "queue_id": 3}
        producer.sendall(encode_request(Op.SEND, rid, {"message": message}))
        assert read_answer(producer, producer_decoder)[1] == 1

    ways.extend([True, False])
    fast, fast_decoder = open_session(port)
    general, general_decoder = open_session(port)
    try:
        # Followed from this read on; the send gives the queue a tail in memory.
        fast.sendall(request_frame(_pull(b"t", 3, 0, 4096, 0), 1, op=Op.PULL))
        assert read_answer(fast, fast_decoder) is not None
        send(b"first", 1)
        assert server.server.ctx.broker.wait_indexed()
        end = server.server.ctx.broker.reads.queue_range("t", 3)[1]
        assert server.server.ctx.broker.reads.nothing_from("t", 3, end) == end
        reads.clear()
        pull = request_frame(_pull(b"t", 3, end, 5, 30_000), 7, op=Op.PULL)
        fast.sendall(pull)
        general.sendall(pull)
        time.sleep(0.05)  # both wait
        assert reads == [], "the step read a queue whose tail ends at the pull's offset"
        send(b"later", 2)
        got_fast = read_answer(fast, fast_decoder)
        got_general = read_answer(general, general_decoder)
    finally:
        for sock in (fast, general, producer):
            sock.close()
    assert got_fast == got_general and b"later" in got_fast
    assert reads == [end], "the woken pull was not read once, at its offset"
    assert taken[-2:] == ["wait", Op.PULL]


def test_an_expired_long_poll_is_answered_alike(server, taken, monkeypatch):
    """Nothing arrives: both ways answer empty after the wait (max_wait_ms)."""
    port = server.server.port
    pull = request_frame(_pull(b"small", 0, 1, 5, 60_000), 9, op=Op.PULL)
    fast = answers_one_at_a_time(port, [pull])
    monkeypatch.setattr(SessionRequests, "plain_reads", False)
    general = answers_one_at_a_time(port, [pull])
    assert fast == general and fast[0][1] == 1
    assert taken == ["wait", Op.PULL]


def test_a_fenced_primary_refuses_commit_offsets_alike(server, taken, monkeypatch):
    """A primary that cannot prove its lease refuses a COMMIT_OFFSET's answer
    (LeadershipLost) on both ways; its PULLs are answered."""
    role = server.server.ctx.replication
    assert role is not None
    role.lease_holds = lambda: False
    frames = [request_frame(_names(b"g1", b"t") + struct.pack(">IQ", 1, 3), 1,
                            op=Op.COMMIT_OFFSET),
              request_frame(_pull(b"t", 1, PER_QUEUE - 1, 1, 0), 2, op=Op.PULL)]
    port = server.server.port
    fast = answers_one_at_a_time(port, frames)
    monkeypatch.setattr(SessionRequests, "plain_reads", False)
    general = answers_one_at_a_time(port, frames)
    role.lease_holds = None
    assert fast == general
    assert fast[0][1] & 2 and b"lease" in fast[0].lower() and fast[1][1] == 1
    assert taken == [Op.COMMIT_OFFSET, Op.PULL]


def _stored_pulls(seed: int, count: int) -> list[bytes]:
    """PULLs of every queue of ``t`` and of ``txt`` (a transaction's REF entries, hidden
    properties), from any offset, of one to all messages, none waiting."""
    rnd = random.Random(seed)
    frames = []
    for rid in range(1, count + 1):
        topic, queue = rnd.choice([(b"t", 0), (b"t", 1), (b"t", 2), (b"t", 3), (b"txt", 0),
                                   (b"txt", 0)])
        frames.append(request_frame(_pull(topic, queue, rnd.randrange(0, PER_QUEUE + 2),
                                   rnd.choice([1, 2, 5, 16, 40, 4096]), 0), rid, op=Op.PULL))
    return frames


@pytest.mark.parametrize("seed", [5, 6])
def test_pulls_written_from_the_records_are_answered_as_decoded_ones(server, taken,
                                                                     monkeypatch, seed):
    """The answers written from the stored records (``pull_messages``, compiled where
    built) and, for the same frames, the way that decodes each record into a message and
    encodes it (``pull_decoded``, the reference of before): byte for byte the same, through
    the step and the general way, with two connections per round so that the second finds
    messages kept encoded."""
    port = server.server.port
    frames = _stored_pulls(seed, 200)

    def both_ways() -> list:
        # A cache of its own: no answer of the other way's found kept encoded.
        monkeypatch.setattr(server.server.ctx, "encoded", encoded_cache())
        got = [answers_one_at_a_time(port, frames), answers_one_at_a_time(port, frames)]
        monkeypatch.setattr(SessionRequests, "plain_reads", False)
        got += [answers_one_at_a_time(port, frames)]
        monkeypatch.setattr(SessionRequests, "plain_reads", True)
        return got

    written = both_ways()
    monkeypatch.setattr(pull_reads, "pull_now", pull_reads.pull_decoded)
    monkeypatch.setattr(plain_pull, "pull_now", pull_reads.pull_decoded)
    decoded = both_ways()
    assert taken.count(Op.PULL) >= 4 * 150
    for answers in written + decoded:
        assert answers == written[0]
    assert sum(a[1] == 1 and len(a) > 2000 for a in written[0]) > 20, "too few messages"
    assert len(server.server.ctx.encoded), "no message was kept encoded"


def test_a_window_of_pulls_answered_at_once_is_written_in_one_piece(server, taken,
                                                                    monkeypatch):
    """A pipelined consumer's window of PULLs, all answered at once, goes out in one
    ``write`` (two where the window came in two reads), not one per PULL; the answers are
    the general way's."""
    from fmq.server.net.session import ClientSession
    writes: list[int] = []
    write = ClientSession._write

    def counted(self, data, reserved):
        writes.append(len(data))
        write(self, data, reserved)

    monkeypatch.setattr(ClientSession, "_write", counted)
    frames = [request_frame(_pull(b"t", q % QUEUES, PER_QUEUE - 1 - q // QUEUES, 1, 0), 1 + q,
                            op=Op.PULL) for q in range(16)]
    port = server.server.port
    fast = answers_in_windows(port, frames, 16)
    pulls = writes[1:]  # the first answers the session's PING
    assert taken.count(Op.PULL) == 16
    assert 1 <= len(pulls) <= 2, f"{len(pulls)} writes for 16 answers"
    assert sum(pulls) == sum(len(a) - 2 + 16 for a in fast.values())
    monkeypatch.setattr(SessionRequests, "plain_reads", False)
    assert fast == answers_in_windows(port, frames, 16)


def _counting_writes(monkeypatch) -> list[tuple[str, int]]:
    """Each write of a session's answers from now on: ("one", bytes) for one piece through
    the transport, ("parts", bytes) for a list of parts given to it as they are, and
    ("direct", bytes) for answers held and sent to the socket by the compiled sender."""
    from fmq.server.net.session import ClientSession
    writes: list[tuple[str, int]] = []
    write, write_parts = ClientSession._write, ClientSession._write_parts
    held_for_socket = ClientSession.held_for_socket

    def one(self, data, reserved, sent=0):
        if not sent:  # (the rest of a direct send's answer is counted there)
            writes.append(("one", len(data)))
        write(self, data, reserved, sent)

    def parts(self, parts, reserved):
        writes.append(("parts", sum(map(len, parts))))
        write_parts(self, parts, reserved)

    def direct(self):
        taken = held_for_socket(self)
        if taken is not None:
            writes.append(("direct", len(taken[1])))
        return taken

    monkeypatch.setattr(ClientSession, "_write", one)
    monkeypatch.setattr(ClientSession, "_write_parts", parts)
    monkeypatch.setattr(ClientSession, "held_for_socket", direct)
    return writes


def _answers(sock: socket.socket, decoder: FrameDecoder, n: int) -> list[bytes]:
    """The next ``n`` answers, as ``read_answer`` gives one (several may come in one read)."""
    frames: list = []
    deadline = time.monotonic() + 30
    while len(frames) < n and time.monotonic() < deadline:
        chunk = sock.recv(1 << 16)
        assert chunk, "the server closed the session"
        frames += decoder.feed(chunk)
    assert len(frames) == n
    return [bytes([f.opcode, f.flags]) + struct.pack(">Q", f.request_id) + bytes(f.payload)
            for f in frames]


def test_long_polls_woken_by_one_write_are_written_in_one_piece(server, taken, monkeypatch):
    """A consumer waiting at the end of four queues, all woken by one send: its four
    answers go out in one write (held as the send pipeline's answers are), not one per
    PULL; they are the general way's answers."""
    port = server.server.port
    ways = _sessions_by_way(monkeypatch)
    ways.extend([True, False])
    fast, fast_decoder = open_session(port)
    general, general_decoder = open_session(port)
    ends = [server.server.ctx.broker.reads.queue_range("t", q)[1] for q in range(QUEUES)]
    pulls = b"".join(request_frame(_pull(b"t", q, ends[q], 5, 30_000), 20 + q, op=Op.PULL)
                     for q in range(QUEUES))
    writes = _counting_writes(monkeypatch)
    try:
        fast.sendall(pulls)
        general.sendall(pulls)
        time.sleep(0.1)  # all wait (max_wait_ms 200: the send must come before)
        assert writes == []
        with socket.create_connection(("127.0.0.1", port), timeout=30) as producer:
            batch = [{"topic": "t", "body": b"woken%d" % q, "key": None, "tags": None,
                      "properties": {}, "queue_id": q} for q in range(QUEUES)]
            producer.sendall(encode_request(Op.SEND_BATCH, 1, {"messages": batch}))
            assert read_answer(producer, FrameDecoder(1 << 24))[1] == 1
        got_fast = _answers(fast, fast_decoder, QUEUES)
        got_general = _answers(general, general_decoder, QUEUES)
    finally:
        fast.close()
        general.close()
    assert sorted(got_fast) == sorted(got_general)
    assert all(b"woken%d" % q in a for q, a in enumerate(sorted(got_fast)))
    assert taken.count("wait") == QUEUES and taken.count(Op.PULL) == QUEUES
    # The fast session's four answers in one write; the general way's, one each, and the
    # producer's answer.
    assert [n for _, n in writes].count(sum(len(a) + 6 for a in got_fast)) == 1, \
        f"the woken answers were not written in one piece: {writes}"


def test_a_large_answer_is_written_without_joining_its_parts(server, taken, monkeypatch):
    """An answer of tens of KiB of messages goes to the transport as its header, its
    messages and its range (no copy of the messages behind the header), and reads as the
    general way's answer."""
    port = server.server.port
    ctx = server.server.ctx
    ctx.broker.topics.create("large", queues=1)
    for i in range(4):
        ctx.broker.send(Message("large", bytes([65 + i]) * 9000, queue_id=0))
    assert ctx.broker.wait_indexed(30)
    pull = request_frame(_pull(b"large", 0, 0, 10, 0), 5, op=Op.PULL)
    writes = _counting_writes(monkeypatch)
    fast = answers_one_at_a_time(port, [pull])
    assert ("parts", len(fast[0]) + 6) in writes, writes
    monkeypatch.setattr(SessionRequests, "plain_reads", False)
    assert fast == answers_one_at_a_time(port, [pull])
    assert fast[0][1] == 1 and all(bytes([65 + i]) * 9000 in fast[0] for i in range(4))
    assert taken == [Op.PULL]
