"""A flush's answers sent to their sockets from C (``fmq.server.net._answer_send_c``), with
the transport taking what a socket did not (``AnswerWrites``), against the pure path's way,
where there is no direct sender and each session writes its answers through
``transport.write`` (the reference), and against the pure twin ``answer_send.send_answers``
as the sender (it takes nothing: every answer is gathered, then goes whole through the
transport): a real ``Server`` on 127.0.0.1 in this process, on asyncio's loop and on uvloop,
real clients. The way is chosen by swapping ``answer_writes.SEND_ANSWERS`` while the server
runs, whichever path the test run takes.

* Every connection receives exactly the bytes its session made, in the order it made them
  (every ``ClientSession.send`` recorded), under one-in-flight and pipelined SENDs; and the
  three ways give the same answer streams (the log offset aside, which depends on how the
  connections' sends interleave). The pure path's way gathers nothing for a sender.
* A client that stops reading until its socket is full (partial sends, EAGAIN: the rest is
  buffered by the transport, and later answers wait behind it) still gets every answer
  whole and in order once it reads.
* A client reset while its answers are being sent: the others' answers are untouched, and
  the server closes that connection as the transport always did (nothing logged as an
  error, the server serves on).
* TLS connections are never given to the direct sends, and get their answers through their
  transport.
"""

from __future__ import annotations

import collections
import logging
import socket
import ssl
import struct
import threading
import time

import pytest
import trustme

from fmq import Broker, BrokerConfig
from fmq.protocol import FrameDecoder, Op
from fmq.server.net import answer_send, answer_writes
from fmq.server.net.session import ClientSession
from tests.native.test_plain_send_twins import send_payload
from tests.native.twins import compiled
from tests.server.in_process_servers import LOOPS, InProcessServer
from tests.server.raw_requests import request_frame

pytestmark = pytest.mark.timeout(300)

#: The compiled sender; the pure twin as the sender ("takes-nothing", the pure path's way
#: before it left the gathering out); no sender, as the pure path chooses ("pure").
WAYS = ["compiled", "takes-nothing", "pure"]
WINDOW = 64


def _sender(way: str):
    if way == "compiled":
        return compiled("fmq.server.net._answer_send_c").send_answers
    if way == "takes-nothing":
        return answer_send.send_answers
    return None


class LoopServer(InProcessServer):
    """A real server on 127.0.0.1 in a thread of this process, on the event loop named,
    over a new broker in ``data_dir``; the clients are closed before it stops."""

    def __init__(self, data_dir: str, loop_name: str, **config: object) -> None:
        super().__init__(Broker.open(data_dir, BrokerConfig()), loop_name, **config)

    def stop(self) -> None:
        close_clients()  # first: a TLS connection still open holds up uvloop's shut-down
        super().stop()


class Recorded:
    """What the server's sessions made (every ``ClientSession.send``, by peer), the sessions
    by peer, every call of ``send_answers``: (fds, answer lengths, bytes taken), and how
    many sessions were asked for their answers for the direct sends."""

    def __init__(self, monkeypatch, way: str, small_send_buffer: bool = False) -> None:
        self.made: dict[str, bytearray] = collections.defaultdict(bytearray)
        self.sessions: dict[str, ClientSession] = {}
        self.calls: list[tuple[list[int], list[int], list[int]]] = []
        #: Sockets given to the direct sends while their transport held unsent bytes.
        self.overtaking: list[int] = []
        #: Sessions asked for their answers for the direct sends (``held_for_socket``).
        self.gathered = 0
        #: Called with the fds before each real send (the reset test's hook).
        self.before_send = None
        #: Called with the session before it writes its kept answers through its transport
        #: (the reset test's hook on the pure path's way).
        self.before_write = None
        send, made = ClientSession.send, ClientSession.connection_made
        held_for_socket, write_held = ClientSession.held_for_socket, ClientSession.write_held
        real = _sender(way)
        recorded = self

        def recording_send(session, data, reserved=0) -> None:
            recorded.made[session.peer] += data
            send(session, data, reserved)

        def recording_made(session, transport) -> None:
            made(session, transport)
            recorded.sessions[session.peer] = session
            if small_send_buffer:  # the socket fills after a few KiB (no autotuning)
                transport.get_extra_info("socket").setsockopt(
                    socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)

        def recording_send_answers(fds, answers):
            by_fd = {session._answer_fd: session for session in recorded.sessions.values()
                     if not session.lost}
            # The rule that keeps a connection's bytes in order: nothing goes to a socket
            # directly while its transport holds bytes not sent yet.
            recorded.overtaking += [fd for fd in fds
                                    if by_fd[fd].transport.get_write_buffer_size()]
            if recorded.before_send is not None:
                recorded.before_send(fds)
            taken = real(fds, answers)
            recorded.calls.append((list(fds), [len(a) for a in answers], list(taken)))
            return taken

        def counted_held_for_socket(session):
            recorded.gathered += 1
            return held_for_socket(session)

        def hooked_write_held(session) -> None:
            if recorded.before_write is not None:
                recorded.before_write(session)
            write_held(session)

        monkeypatch.setattr(ClientSession, "send", recording_send)
        monkeypatch.setattr(ClientSession, "connection_made", recording_made)
        monkeypatch.setattr(ClientSession, "held_for_socket", counted_held_for_socket)
        monkeypatch.setattr(ClientSession, "write_held", hooked_write_held)
        monkeypatch.setattr(answer_writes, "SEND_ANSWERS",
                            None if real is None else recording_send_answers)

    def sent_directly(self) -> int:
        return sum(sum(taken) for _, _, taken in self.calls)


def _peer(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def _sends(topic: str, first: int, count: int) -> bytes:
    return b"".join(request_frame(send_payload(topic, b"m%d" % (first + i), None, None, [], 0),
                                  first + i) for i in range(count))


class Client:
    """One client connection: its SENDs to its own topic's queue 0, every byte it received.
    Every one made is closed when the server stops, or its test ends."""

    opened: list[Client] = []

    def __init__(self, port: int, topic: str, rcvbuf: int | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        raw = socket.socket()
        if rcvbuf is not None:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        raw.settimeout(60)
        Client.opened.append(self)
        self.sock = raw
        raw.connect(("127.0.0.1", port))
        self.peer = _peer(raw)
        self.sock = tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls else raw
        self.topic = topic
        self.decoder = FrameDecoder(1 << 24)
        self.received = bytearray()
        self.frames: list = []
        self.next_id = 1

    def read_until(self, count: int, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while len(self.frames) < count:
            assert time.monotonic() < deadline, f"{len(self.frames)} of {count} answers"
            chunk = self.sock.recv(1 << 16)
            assert chunk, f"the server closed the connection after {len(self.frames)} answers"
            self.received += chunk
            self.frames += self.decoder.feed(bytes(chunk))

    def one_in_flight(self, count: int) -> None:
        for _ in range(count):
            self.sock.sendall(_sends(self.topic, self.next_id, 1))
            self.next_id += 1
            self.read_until(self.next_id - 1)

    def pipelined(self, windows: int) -> None:
        for _ in range(windows):
            self.sock.sendall(_sends(self.topic, self.next_id, WINDOW))
            self.next_id += WINDOW
            self.read_until(self.next_id - 1)

    def answers(self) -> list[tuple[int, int, int, bytes]]:
        """Each answer as (request id, opcode, flags, payload without the log offset)."""
        return [(f.request_id, f.opcode, f.flags, bytes(f.payload)[8:]) for f in self.frames]


def close_clients() -> None:
    for client in Client.opened:
        client.sock.close()
    Client.opened.clear()


@pytest.fixture(autouse=True)
def _clients_closed():
    yield
    close_clients()


def _run_clients(work: list) -> None:
    """Each (callable) in a thread of its own; the first failure is raised."""
    failures: list[BaseException] = []

    def run(fn) -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(fn,), daemon=True) for fn in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
        assert not t.is_alive(), "a client did not finish"
    if failures:
        raise failures[0]


def _check_complete(client: Client, recorded: Recorded, count: int) -> None:
    """Every answer, exactly the bytes the session made in the order it made them, each
    request answered once and acknowledged, the queue offsets of its queue 0 all there."""
    assert bytes(client.received) == bytes(recorded.made[client.peer])
    assert recorded.overtaking == []
    assert sorted(f.request_id for f in client.frames) == list(range(1, count + 1))
    assert all(f.opcode == Op.SEND and f.flags == 1 for f in client.frames), [
        (f.opcode, f.flags, bytes(f.payload)) for f in client.frames if f.flags != 1][:3]
    results = [struct.unpack(">QIQ", bytes(f.payload)) for f in client.frames]
    assert sorted(qoff for _, _, qoff in results) == list(range(count))
    assert {qid for _, qid, _ in results} == {0}


def _check_pure_gathers_nothing(recorded: Recorded) -> None:
    """No sender: every session wrote its own answers, none was asked for them."""
    assert recorded.calls == [] and recorded.gathered == 0, \
        f"{recorded.gathered} sessions' answers gathered for a sender on the pure path's way"


def _mixed_load(tmp_path, monkeypatch, loop_name: str, way: str) -> list:
    recorded = Recorded(monkeypatch, way)
    srv = LoopServer(str(tmp_path / f"data-{way}"), loop_name)
    try:
        singles = [Client(srv.port, f"one{i}") for i in range(8)]
        windows = [Client(srv.port, f"win{i}") for i in range(4)]
        _run_clients([lambda c=c: c.one_in_flight(60) for c in singles]
                     + [lambda c=c: c.pipelined(3) for c in windows])
        for c in singles:
            _check_complete(c, recorded, 60)
        for c in windows:
            _check_complete(c, recorded, 3 * WINDOW)
        if way == "compiled":
            assert recorded.sent_directly() > 0, "the direct sends were never used"
        elif way == "takes-nothing":
            assert recorded.calls and recorded.sent_directly() == 0
        else:
            _check_pure_gathers_nothing(recorded)
        streams = [c.answers() for c in singles + windows]
        return streams
    finally:
        srv.stop()


@pytest.mark.parametrize("loop_name", LOOPS)
def test_every_way_sends_every_connection_the_answers_it_made(tmp_path, monkeypatch,
                                                              loop_name) -> None:
    fast = _mixed_load(tmp_path, monkeypatch, loop_name, "compiled")
    monkeypatch.undo()
    taking_nothing = _mixed_load(tmp_path, monkeypatch, loop_name, "takes-nothing")
    monkeypatch.undo()
    reference = _mixed_load(tmp_path, monkeypatch, loop_name, "pure")
    # One-in-flight: the same answers in the same order; pipelined windows too (a window's
    # SENDs are placed and answered in the order they came).
    assert fast == reference
    assert taking_nothing == reference


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("loop_name", LOOPS)
def test_a_client_that_stops_reading_gets_everything_in_order_later(tmp_path, monkeypatch,
                                                                   loop_name, way) -> None:
    recorded = Recorded(monkeypatch, way, small_send_buffer=True)
    srv = LoopServer(str(tmp_path / "data"), loop_name)
    # 1,536 answers of 36 bytes: 54 KiB, far over the two 4 KiB socket buffers, under the
    # 64 KiB of unsent answers at which the server stops reading the connection.
    windows = 24
    try:
        slow = Client(srv.port, "slow", rcvbuf=4096)
        busy = Client(srv.port, "busy")
        for w in range(windows):
            # One window at a time (at most max_in_flight requests unanswered), answered
            # by the server before the next goes; the client reads none of them yet.
            slow.sock.sendall(_sends("slow", 1 + w * WINDOW, WINDOW))
            deadline = time.monotonic() + 60
            while len(recorded.made[slow.peer]) < (w + 1) * WINDOW * 36:
                assert time.monotonic() < deadline, f"window {w} was not answered"
                time.sleep(0.005)
            if w == windows // 2:  # meanwhile another connection is answered as usual
                busy.pipelined(4)
        slow.read_until(windows * WINDOW, 120)
        _check_complete(slow, recorded, windows * WINDOW)
        _check_complete(busy, recorded, 4 * WINDOW)
        if way == "pure":
            _check_pure_gathers_nothing(recorded)
            return
        fd = recorded.sessions[slow.peer]._answer_fd
        mine = [(n, taken) for fds, lengths, sent in recorded.calls
                for f, n, taken in zip(fds, lengths, sent, strict=True) if f == fd]
        assert mine, "the slow connection's answers never went to the direct sends"
        if way == "compiled":
            assert any(taken < n for n, taken in mine), "no send was ever partial"
            assert any(taken > 0 for _, taken in mine)
    finally:
        srv.stop()


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("loop_name", LOOPS)
def test_a_slow_reader_gets_its_answers_in_the_order_they_were_made(tmp_path, monkeypatch,
                                                                    loop_name, way) -> None:
    """The client reads a little at a time while answers keep coming: its socket fills and
    drains over and over, so answers are often held while the transport still has bytes
    of earlier ones, at moments when the socket has room again. Sent directly then, they
    would overtake those bytes."""
    recorded = Recorded(monkeypatch, way, small_send_buffer=True)
    srv = LoopServer(str(tmp_path / "data"), loop_name)
    windows = 48
    try:
        slow = Client(srv.port, "slow", rcvbuf=4096)

        def send_windows() -> None:
            for w in range(windows):
                deadline = time.monotonic() + 60
                while len(slow.frames) < (w - 3) * WINDOW:  # at most 4 windows unanswered
                    assert time.monotonic() < deadline, f"window {w - 4} was not answered"
                    time.sleep(0.002)
                slow.sock.sendall(_sends("slow", 1 + w * WINDOW, WINDOW))

        def read_slowly() -> None:
            deadline = time.monotonic() + 120
            while len(slow.frames) < windows * WINDOW:
                assert time.monotonic() < deadline, f"{len(slow.frames)} answers"
                chunk = slow.sock.recv(512)
                assert chunk, "the server closed the connection"
                slow.received += chunk
                slow.frames += slow.decoder.feed(bytes(chunk))
                time.sleep(0.0005)

        _run_clients([send_windows, read_slowly])
        _check_complete(slow, recorded, windows * WINDOW)
        if way == "compiled":
            fd = recorded.sessions[slow.peer]._answer_fd
            taken = [t for fds, lengths, sent in recorded.calls
                     for f, n, t in zip(fds, lengths, sent, strict=True) if f == fd]
            assert any(taken), "the slow connection's answers were never sent directly"
        elif way == "pure":
            _check_pure_gathers_nothing(recorded)
    finally:
        srv.stop()


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("loop_name", LOOPS)
def test_a_connection_reset_during_the_sends_leaves_the_others_alone(
        tmp_path, monkeypatch, caplog, loop_name, way) -> None:
    recorded = Recorded(monkeypatch, way)
    srv = LoopServer(str(tmp_path / "data"), loop_name)
    caplog.set_level(logging.WARNING)
    try:
        victim = Client(srv.port, "victim")
        windows = [Client(srv.port, f"window{i}") for i in range(4)]
        singles = [Client(srv.port, f"single{i}") for i in range(2)]
        victim_fd: list[int] = []
        reset = threading.Event()

        def reset_the_victim(session: ClientSession) -> None:
            # The peer resets while the server is about to send it its answers.
            victim.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            victim.sock.close()
            victim_fd.append(session._answer_fd)
            reset.set()

        def before_send(fds) -> None:
            session = recorded.sessions.get(victim.peer)
            if not reset.is_set() and session is not None and session._answer_fd in fds:
                reset_the_victim(session)

        def before_write(session: ClientSession) -> None:  # no sender: the pure path's way
            if not reset.is_set() and session.peer == victim.peer:
                reset_the_victim(session)

        recorded.before_send = before_send
        if way == "pure":
            recorded.before_write = before_write
        victim.sock.sendall(_sends("victim", 1, WINDOW))
        _run_clients([lambda c=c: c.pipelined(4) for c in windows]
                     + [lambda c=c: c.one_in_flight(40) for c in singles])
        assert reset.wait(60), "the victim's answers were never sent"
        for c in windows:
            _check_complete(c, recorded, 4 * WINDOW)
        for c in singles:
            _check_complete(c, recorded, 40)
        # Its send took nothing (or none was made); the transport met the error and closed
        # the connection.
        if way == "pure":
            _check_pure_gathers_nothing(recorded)
        else:
            taken = [t for fds, _, sent in recorded.calls
                     for f, t in zip(fds, sent, strict=True) if f == victim_fd[0]]
            assert taken[0] == 0
        session = recorded.sessions[victim.peer]
        deadline = time.monotonic() + 30
        while not session.lost and time.monotonic() < deadline:
            time.sleep(0.02)
        assert session.lost, "the reset connection was never closed"
        # The server serves on; nothing was logged as a failure of the writes.
        after = Client(srv.port, "after")
        after.one_in_flight(3)
        _check_complete(after, recorded, 3)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], \
            [r.getMessage() for r in caplog.records]
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> tuple[str, ssl.SSLContext]:
    where = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    pem = where / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return str(pem), client


@pytest.mark.parametrize("loop_name", LOOPS)
def test_tls_connections_write_through_their_transport(tmp_path, monkeypatch, tls_files,
                                                       loop_name) -> None:
    pem, client_ssl = tls_files
    recorded = Recorded(monkeypatch, "compiled")
    srv = LoopServer(str(tmp_path / "data"), loop_name, tls_cert_file=pem)
    try:
        singles = [Client(srv.port, f"tls{i}", tls=client_ssl) for i in range(3)]
        windows = [Client(srv.port, f"tlsw{i}", tls=client_ssl) for i in range(2)]
        _run_clients([lambda c=c: c.one_in_flight(40) for c in singles]
                     + [lambda c=c: c.pipelined(3) for c in windows])
        for c in singles:
            _check_complete(c, recorded, 40)
        for c in windows:
            _check_complete(c, recorded, 3 * WINDOW)
        assert all(recorded.sessions[c.peer]._answer_fd == -1 for c in singles + windows)
        assert recorded.calls == []  # no TLS connection's answers went to a socket directly
    finally:
        srv.stop()
