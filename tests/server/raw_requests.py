"""Request frames written and answers read on a plain socket, without the SDK: for the tests
that send a server frames of their own making (valid or not) and compare its answers byte
for byte, one request at a time or in pipelined windows."""

from __future__ import annotations

import socket
import struct
import time

from fmq.protocol import PROTOCOL_VERSION, FrameDecoder, Op

#: The request id of the PING that opens each session (the session's first request goes
#: the general way, whatever the test compares).
PING_ID = 1 << 40


def request_frame(payload: bytes, rid: int, version: int = PROTOCOL_VERSION, flags: int = 0,
                  op: int = Op.SEND) -> bytes:
    """A request frame: its header (any version and flags, to make bad ones) and payload."""
    return struct.pack(">IBBHQ", 12 + len(payload), version, op, flags, rid) + payload


def read_answer(sock: socket.socket, decoder: FrameDecoder) -> bytes | None:
    """The next answer frame (opcode, flags, request id, payload), None when the server
    closed the session instead."""
    deadline = time.monotonic() + 30
    frames: list = []
    while not frames and time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        frames = decoder.feed(chunk)
    assert len(frames) == 1, "one answer per request, one request at a time"
    frame = frames[0]
    return bytes([frame.opcode, frame.flags]) + struct.pack(">Q", frame.request_id) + bytes(
        frame.payload)


def open_session(port: int) -> tuple[socket.socket, FrameDecoder]:
    """A connection to the server at ``port`` whose session has answered its first request
    (a PING), and the decoder of its answers."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    decoder = FrameDecoder(1 << 24)
    try:
        sock.sendall(request_frame(b"", PING_ID, op=Op.PING))
        assert read_answer(sock, decoder) is not None
    except BaseException:
        sock.close()
        raise
    return sock, decoder


def closed_after_error(sock: socket.socket, decoder: FrameDecoder) -> bool:
    """Whether the server closed the session after the error answer just read (a PING
    sent after it gets no answer)."""
    try:
        sock.sendall(request_frame(b"", PING_ID, op=Op.PING))
        return read_answer(sock, decoder) is None
    except (BrokenPipeError, ConnectionResetError):
        return True


def answers_one_at_a_time(port: int, frames: list[bytes]) -> list[bytes]:
    """Each frame's answer, sent one at a time; after an error answer a PING tells whether
    the server closed the session ("|closed": the next frame goes on a new connection)."""
    out: list[bytes] = []
    sock = decoder = None
    for data in frames:
        if sock is None:
            sock, decoder = open_session(port)
        sock.sendall(data)
        answer = read_answer(sock, decoder)
        if answer is not None and answer[1] & 2:
            closed = closed_after_error(sock, decoder)
            if not closed:
                answer += b"|open"
            else:
                answer = answer + b"|closed"
        if answer is None or answer.endswith(b"|closed"):
            answer = answer or b"|closed"
            sock.close()
            sock = None
        out.append(answer)
    if sock is not None:
        sock.close()
    return out


def answers_in_windows(port: int, frames: list[bytes], window: int) -> dict[int, bytes]:
    """Each frame's answer (opcode, flags, payload) by request id, the frames written
    ``window`` at a time on one connection (a window's answers all read before the next is
    written)."""
    answers: dict[int, bytes] = {}
    sock, decoder = open_session(port)
    with sock:
        for at in range(0, len(frames), window):
            sent = frames[at:at + window]
            sock.sendall(b"".join(sent))
            deadline = time.monotonic() + 60
            got = 0
            while got < len(sent) and time.monotonic() < deadline:
                chunk = sock.recv(1 << 16)
                assert chunk, "the server closed a session no frame of which was malformed"
                for frame in decoder.feed(chunk):
                    answers[frame.request_id] = (bytes([frame.opcode, frame.flags])
                                                 + bytes(frame.payload))
                    got += 1
            assert got == len(sent), "a window's answers did not all come"
    return answers
