"""The answers of one hand-back of the send pipeline written once per connection.

The send pipeline answers every request a flush covered in one event-loop callback
(:func:`fmq.server.ops.placed.answer_placed`). Each answer written at once is a
``transport.write``, and uvloop sends what it is given right away: one ``write`` system call
per answer, 64 for a connection that pipelined 64 requests. While :class:`AnswerWrites` is
open (the callback runs), a session keeps its answers; when it closes, each session that
kept some writes them in one piece, in the order they were made. The bytes on the socket are
the same; only their system calls are fewer (issue 41, item 5).
"""

from __future__ import annotations

import logging
from typing import Protocol

logger = logging.getLogger("fmq.server")


class HoldsAnswers(Protocol):
    """A session that kept answers while the writes were held."""

    def write_held(self) -> None: ...


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
        for session in sessions:
            try:
                session.write_held()
            except Exception:  # noqa: BLE001 - the other connections still get theirs
                logger.exception("writing a connection's answers failed")
