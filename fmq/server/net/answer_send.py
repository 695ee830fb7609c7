"""How much of each of a flush's gathered answers goes straight to its socket, before the
rest goes through the connection's transport (:class:`fmq.server.net.answer_writes.AnswerWrites`).

This module is the reference, and it sends nothing itself: every answer goes whole through
``transport.write``, as on any event loop. Its compiled twin ``fmq.server.net._answer_send_c``
(``_answer_send_c.pyx``, compiled by setup.py) sends them all from C in one release of the
interpreter lock, each with one non-blocking ``send``, and says how many bytes each took;
what it could not send goes through the transport the same way. The bytes on each socket
are the same either way (tests/server/test_answer_send.py compares the streams); only who
makes the system call, and with or without the lock held, differs.
:data:`fmq.server.net.answer_writes.SEND_ANSWERS` is the compiled one where it runs, and
None on the pure path: since this twin takes nothing, ``AnswerWrites`` does not gather a
flush's answers for it there, and each connection writes its own through its transport.
"""

from __future__ import annotations

from collections.abc import Sequence


def send_answers(fds: Sequence[int], answers: Sequence[bytes]) -> list[int]:
    """How many bytes of ``answers[i]`` were sent to the socket ``fds[i]``: none here (the
    caller writes each answer whole through its transport)."""
    if len(fds) != len(answers):
        raise ValueError(f"send_answers: {len(fds)} sockets for {len(answers)} answers")
    return [0] * len(answers)
