"""The event loop leads the send pipeline's flushes: a flusher thread that needs no
interpreter lock writes them, and the loop answers what each made durable. On by default
(``SendBatcher.LOOP_FLUSH``): on a quiet 2-core machine row 1 ran 1.09x to 1.15x faster
with it; with both cores oversubscribed several times over it ran slower (0.79x), since
every flush then waits for the loop to be scheduled (docs/performance.md).

When a turn's sends are placed and no flush is under way, the loop takes the group
commit's queued bytes itself (:meth:`Broker.start_flush`, under the log's lock: threads
that call ``wait_durable`` meanwhile follow this flush) and hands them to its
:class:`~fmq.log.flusher.Flusher`, whose compiled thread makes the ``pwrite`` and the
``fdatasync`` and adds 1 to an eventfd without ever taking the interpreter lock. The loop
watches that eventfd (``loop.add_reader``) and looks at the flusher at the end of each
turn's placement too; once the flush ended it does the group commit's bookkeeping
(:meth:`Broker.end_flush`: offsets, statistics, the covered waiters woken, the index told),
answers every placed batch now durable and starts the next flush at once when more is
placed.

Before, a thread (the acknowledger) led each flush from ``wait_durable`` and handed the
batches back: woken at the placement, it waited about 150 us for the interpreter lock the
busy loop held before its write could start, and 40 us more after the sync.

A flush the loop cannot take (a thread leads one already, a segment roll, an unsynced
segment, a test's I/O that counts or crashes each step) is waited for in a thread of its
own (:class:`ThreadFlush`: ``wait_durable``, leading or following, then the same eventfd),
so every flush goes through the group commit's one path for it. A failed write or fsync
fails the log for good, as it does for any leader: every waiter, every placed request and
every later append gets :class:`~fmq.errors.LogFailed`.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Callable

from fmq import native
from fmq.engine.broker import Broker
from fmq.errors import LogFailed
from fmq.log import flusher as pure_flusher
from fmq.log.commit import PendingFlush
from fmq.server.ops.placed import Placed
from fmq.threadname import name_os_thread

#: The flusher thread: the compiled twin (no interpreter lock) or the pure reference.
Flusher = native.choose(pure_flusher).Flusher

#: Answers a flush's batches on the loop: (the batches, the failure or None).
Answer = Callable[[list[Placed], BaseException | None], None]


class LoopFlush:
    """The loop's flushes of the placed batches (``placed``, in log order, appended by
    the batcher), answered through ``answer``. Made and used on the event loop but for
    :meth:`close`."""

    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop,
                 placed: deque[Placed], answer: Answer) -> None:
        self._broker = broker
        self._loop = loop
        self._placed = placed
        self._answer = answer
        self._flusher = Flusher("fmq-flusher")
        self._signal = self._flusher.fileno
        self._flush: PendingFlush | None = None  # the flusher's job under way
        #: The flushes the flusher made (the others were led by a thread).
        self.flushes = 0
        self._thread_flush = ThreadFlush(broker, self._signal)
        self._stopping = False
        self._drained = threading.Event()
        loop.add_reader(self._signal, self._signalled)

    def _signalled(self) -> None:
        self._flusher.drain()  # 0 when a look that came first drained it
        self.look()

    def look(self) -> None:
        """End the flush under way if it ended, answer what is durable, and start the next
        flush if batches wait for one (on the loop: its eventfd, and each placement)."""
        failure: BaseException | None = None
        if self._flush is not None:
            if not self._flusher.done():
                return
            self._end(self._flush)
        elif self._thread_flush.busy():
            if not self._thread_flush.done():
                return
            failure = self._thread_flush.outcome()
        placed = self._placed
        if placed:
            failed = self._broker.log_failure
            if failed is not None:
                failure = LogFailed(failed)
            if failure is not None:  # every placed batch fails with it
                done = list(placed)
                placed.clear()
                self._answer(done, failure)
            else:
                durable = self._broker.durable_end
                done = []
                while placed and placed[0].end <= durable:
                    done.append(placed.popleft())
                if placed:
                    # The next flush first: the disk works while the loop answers this one
                    # (answering a flush of 64 sends takes about as long as its fdatasync).
                    self._start(placed[-1].end)
                if done:
                    self._answer(done, None)
        if self._stopping and not placed and self._flush is None \
                and not self._thread_flush.busy():
            self._shut()

    def _start(self, end: int) -> None:
        flush = self._broker.start_flush()
        if flush is None:
            self._thread_flush.start(end)
        else:
            self._write(flush)

    def _write(self, flush: PendingFlush) -> None:
        self._flush = flush
        self.flushes += 1
        self._flusher.start(flush.fd, flush.data, flush.position)

    def _end(self, flush: PendingFlush) -> None:
        self._flush = None
        self._broker.end_flush(flush, self._flusher.outcome())

    # ------------------------------------------------------------------ stopping

    def close(self) -> None:
        """Once every placed batch is answered, stop the threads (from a thread other than
        the loop's, the server stopping). A loop that no longer runs leaves its batches
        unanswered, as the acknowledger did: the flush under way still ends here."""
        try:
            self._loop.call_soon_threadsafe(self._stop)
        except RuntimeError:  # the loop is closed
            pass
        else:
            while not self._drained.wait(0.1):
                if self._loop.is_closed() or not self._loop.is_running():
                    break
        if self._flush is not None:  # the loop is gone: end its flush here
            flush, self._flush = self._flush, None
            self._broker.end_flush(flush, self._flusher.wait())
        self._thread_flush.close()
        self._flusher.close()

    def _stop(self) -> None:
        self._stopping = True
        self.look()

    def _shut(self) -> None:
        self._loop.remove_reader(self._signal)
        self._drained.set()


class ThreadFlush:
    """Waits in a thread for a flush the loop cannot take itself (``wait_durable``,
    leading it or following another thread's), then adds 1 to ``signal`` (an eventfd)."""

    def __init__(self, broker: Broker, signal: int) -> None:
        self._broker = broker
        self._signal = signal
        self._cond = threading.Condition()
        self._target: int | None = None  # the end to wait for, while the wait is due
        self._busy = False  # started, and its outcome not taken yet
        self._done = False
        self._error: BaseException | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="fmq-flush-wait",
                                        daemon=True)
        self._thread.start()

    def start(self, end: int) -> None:
        with self._cond:
            self._target = end
            self._busy = True
            self._cond.notify()

    def busy(self) -> bool:
        return self._busy

    def done(self) -> bool:
        return self._done

    def outcome(self) -> BaseException | None:
        """The wait's failure (None: durable); ready for the next :meth:`start`."""
        with self._cond:
            error, self._error = self._error, None
            self._busy = self._done = False
            return error

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        name_os_thread()
        while True:
            with self._cond:
                while self._target is None and not self._stopping:
                    self._cond.wait()
                if self._target is None:
                    return
                end, self._target = self._target, None
            error: BaseException | None = None
            try:
                self._broker.wait_durable(end)
            except BaseException as exc:  # noqa: BLE001 - a failed fsync fails the batches
                error = exc
            with self._cond:
                self._error = error
                self._done = True
            os.eventfd_write(self._signal, 1)
