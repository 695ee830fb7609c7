"""A thread that writes and fdatasyncs one flush at a time for the event loop, and says
when each is done through an eventfd the loop watches (``loop.add_reader``).

The server's event loop takes the group commit's queued bytes itself
(:meth:`fmq.log.commit.GroupCommit.start_flush`) and hands them to a :class:`Flusher`:
:meth:`Flusher.start` queues the job, the thread makes the ``pwrite`` (short writes
continued) and the ``fdatasync``, then adds 1 to the eventfd; the loop, woken by it, takes
the outcome (:meth:`Flusher.outcome`) and ends the flush
(:meth:`~fmq.log.commit.GroupCommit.end_flush`).

This module is the reference: a Python thread, which takes the interpreter lock to take
the job and again to signal its end. Its compiled twin ``fmq.log._flusher_c``
(``_flusher_c.pyx``) runs the thread's whole loop (wait for a job, write, sync, signal)
without the interpreter lock: under load the event loop holds that lock most of the time,
and every take-back waited for the loop's turn to end (about 150 us a flush before the
write, 40 us after the sync). The bytes written, the order of the calls, the eventfd's
signal and the errors are the same (tests/log/test_flusher.py).

One job at a time: the loop starts the next one after it took the outcome of the last.
The buffer given to :meth:`Flusher.start` must not change until then (the group commit
hands over buffers no thread appends to any more; the compiled twin holds a buffer export).
"""

from __future__ import annotations

import os
import threading
import time

from fmq.log import write_sync
from fmq.threadname import name_os_thread

_IDLE, _QUEUED, _RUNNING, _DONE = range(4)


class Flusher:
    """The flush thread (started at once) and its eventfd (:attr:`fileno`)."""

    def __init__(self, name: str = "fmq-flusher") -> None:
        #: Readable (a count above zero) once a job ended; the reader drains it.
        self.fileno = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._cond = threading.Condition()
        self._state = _IDLE
        self._stopping = False
        self._job: tuple[int, bytes | bytearray | memoryview, int] | None = None
        self._error: OSError | None = None
        #: When the last job's sync returned (or its write failed), on the monotonic
        #: clock (``time.monotonic_ns``): what the flush took, without the loop's wait to
        #: see it.
        self.ended_ns = 0
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def start(self, fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
        """Write ``data`` at ``position`` of ``fd`` and fdatasync it, in the thread."""
        with self._cond:
            if self._state != _IDLE or self._stopping:
                raise RuntimeError("a flush is under way (or the flusher is closed): take "
                                   "its outcome before starting the next")
            self._job = (fd, data, position)
            self._state = _QUEUED
            self._cond.notify_all()

    def drain(self) -> int:
        """Read the eventfd's count (0 when it was not signalled)."""
        try:
            return os.eventfd_read(self.fileno)
        except BlockingIOError:
            return 0

    def busy(self) -> bool:
        """A job was started and its outcome not taken yet."""
        return self._state != _IDLE

    def done(self) -> bool:
        """The job started ended (its outcome is ready)."""
        return self._state == _DONE

    def outcome(self) -> OSError | None:
        """The ended job's failure (None: written and synced); the flusher is free again.
        Call only once :meth:`done`."""
        with self._cond:
            if self._state != _DONE:
                raise RuntimeError("no flush has ended: wait for the eventfd or call wait()")
            error, self._error = self._error, None
            self._job = None
            self._state = _IDLE
            return error

    def wait(self) -> OSError | None:
        """Block until the job under way ends; its :meth:`outcome` (None if none ran)."""
        with self._cond:
            while self._state in (_QUEUED, _RUNNING):
                self._cond.wait()
            if self._state != _DONE:
                return None
        return self.outcome()

    def close(self) -> None:
        """Stop the thread (after the job under way, if any) and close the eventfd."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()
        os.close(self.fileno)

    def _serve(self) -> None:
        name_os_thread()
        while True:
            with self._cond:
                while self._state != _QUEUED and not self._stopping:
                    self._cond.wait()
                if self._state != _QUEUED:
                    return
                self._state = _RUNNING
                fd, data, position = self._job  # type: ignore[misc]
            error: OSError | None = None
            try:
                write_sync.write_then_sync(fd, data, position)
            except OSError as exc:
                error = exc
            ended = time.monotonic_ns()
            with self._cond:
                self.ended_ns = ended
                self._error = error
                self._state = _DONE
                self._cond.notify_all()
            os.eventfd_write(self.fileno, 1)
