"""The answers of one hand-back of the send pipeline written once per connection, and sent to
their sockets with the interpreter lock released once for all of them.

The send pipeline answers every request a flush covered in one event-loop callback
(:func:`fmq.server.ops.placed.answer_placed`). Each answer written at once is a
``transport.write``, and uvloop sends what it is given right away: one ``write`` system call
per answer, 64 for a connection that pipelined 64 requests. While :class:`AnswerWrites` is
open (the callback runs), a session keeps its answers; when it closes, each session that
kept some writes them in one piece, in the order they were made. The bytes on the socket are
the same; only their system calls are fewer (issue 41, item 5).

Who writes them (issue 41, item 5 too): uvloop makes its ``write`` system call with the
interpreter lock held, one connection after another, while the index writer and the send
acknowledger wait for the lock. So a connection whose answers may go straight to its socket
(:meth:`HoldsAnswers.held_for_socket`: a plain TCP transport, see :func:`socket_fd`, open and
holding no unsent bytes, so nothing written earlier can be overtaken) hands them over, and
:data:`SEND_ANSWERS` sends all of them from C in one release of the lock
(``_answer_send_c``). What a socket did not take (a partial send, EAGAIN, an error) goes
through that connection's transport before anything else is written to it, so the transport
buffers the rest, or meets the error and closes the connection, exactly as if it had
written the whole answer. Any other connection (TLS, a transport without a socket of its
own, bytes still buffered) writes through its transport as before.

On the pure path (``FMQ_NO_EXTENSIONS=1``, or no compiled twin built) there is no direct
sender (:data:`SEND_ANSWERS` is None): the pure twin ``answer_send.send_answers`` would
take nothing, so each session that kept answers writes them through its transport at once
(:meth:`HoldsAnswers.write_held`), with no gathering of sockets and pieces for a sender
that sends nothing. The bytes each connection gets are the same either way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from fmq import native
from fmq.server.net import answer_send

logger = logging.getLogger("fmq.server")


def direct_sender() -> Callable[[Sequence[int], Sequence[bytes]], list[int]] | None:
    """``send_answers`` of the compiled twin where it runs; None on the pure path, whose
    twin sends nothing (every answer goes whole through its transport)."""
    chosen = native.choose(answer_send)
    return None if chosen is answer_send else chosen.send_answers


#: ``send_answers(fds, answers) -> bytes each socket took``, or None: no direct sends (the
#: pure path). Read when each hold ends, so that a test may swap it while a server runs.
SEND_ANSWERS = direct_sender()


def _plain_transports() -> tuple[type, ...]:
    """The transports that write the connection's own socket with ``send`` and nothing
    else: asyncio's and uvloop's TCP transports. A TLS transport (its socket carries
    records, not the answer's bytes) or anything else is not among them."""
    from asyncio.selector_events import _SelectorSocketTransport

    found: list[type] = [_SelectorSocketTransport]
    try:
        from uvloop.loop import TCPTransport
    except ImportError:
        pass
    else:
        found.append(TCPTransport)
    return tuple(found)


_PLAIN_TRANSPORTS = _plain_transports()


def socket_fd(transport: asyncio.BaseTransport) -> int:
    """The descriptor of ``transport``'s socket when answers may be sent to it directly
    (a plain TCP transport of asyncio or uvloop), else -1: decided once per connection."""
    if type(transport) not in _PLAIN_TRANSPORTS \
            or transport.get_extra_info("sslcontext") is not None:
        return -1
    sock = transport.get_extra_info("socket")
    if sock is None:
        return -1
    try:
        return sock.fileno()
    except OSError:
        return -1


class HoldsAnswers(Protocol):
    """A session that kept answers while the writes were held."""

    def held_for_socket(self) -> tuple[int, bytes] | None: ...

    def write_held(self) -> None: ...

    def write_held_rest(self, data: bytes, sent: int) -> None: ...


class AnswerWrites:
    """Whether answers are being held now, and which sessions hold some (event loop only)."""

    __slots__ = ("holding", "_sessions")

    def __init__(self) -> None:
        self.holding = False
        self._sessions: list[HoldsAnswers] = []

    def keep(self, session: HoldsAnswers) -> None:
        """``session`` holds answers: it writes them (:meth:`HoldsAnswers.write_held`) when
        the hold ends. Called once per session and hold."""
        self._sessions.append(session)

    def __enter__(self) -> AnswerWrites:
        self.holding = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.holding = False
        sessions, self._sessions = self._sessions, []
        send = SEND_ANSWERS
        if send is None:  # the pure path: every session's answers through its transport
            for session in sessions:
                try:
                    session.write_held()
                except Exception:  # noqa: BLE001 - the other connections still get theirs
                    logger.exception("writing a connection's answers failed")
            return
        direct: list[HoldsAnswers] = []
        fds: list[int] = []
        answers: list[bytes] = []
        for session in sessions:
            try:
                taken = session.held_for_socket()
                if taken is None:
                    session.write_held()
                    continue
            except Exception:  # noqa: BLE001 - the other connections still get theirs
                logger.exception("writing a connection's answers failed")
                continue
            direct.append(session)
            fds.append(taken[0])
            answers.append(taken[1])
        if not direct:
            return
        try:
            sent = send(fds, answers)
        except Exception:  # noqa: BLE001 - nothing was sent: the transports write it all
            logger.exception("sending a flush's answers to their sockets failed; writing "
                             "them through the connections' transports")
            sent = [0] * len(answers)
        for session, answer, n in zip(direct, answers, sent, strict=True):
            try:
                session.write_held_rest(answer, n)
            except Exception:  # noqa: BLE001 - the other connections still get theirs
                logger.exception("writing a connection's answers failed")
