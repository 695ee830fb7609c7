"""One Kafka client's socket: frames in, answers out in request order.

Requests are read as they come and run at once (a client pipelines up to its
``max.in.flight``; the Produce requests of every connection share a group commit), and their
answers are written in the order the requests came, as the protocol requires. At most
``max_in_flight`` requests run per connection; past that, reading waits.

The limits of FMQ's own connections hold here too: a frame's bytes are taken from the
server's request budget (per connection and in total) before they are read and given back
when its answer is ready, so connections announcing large frames cannot make the server
allocate more than the budget; a frame must arrive within ``read_timeout_ms`` once its size
did, and a connection that sends nothing for ``idle_timeout_ms`` is closed. A frame that
cannot be a request closes the connection with one log line, never a traceback; so does a
request before log-in on a server with users (users that arrive while a connection serves, a
cluster's users copied from etcd, close it at its next request unless it logged in); before
log-in a frame may hold at most ``LOGIN_FRAME_LIMIT`` bytes, as on FMQ's port.
"""

from __future__ import annotations

import asyncio
import logging

from fmq.server.kafka.access import enforcing
from fmq.server.kafka.dispatch import answer
from fmq.server.kafka.framing import FrameError, read_body, read_size
from fmq.server.kafka.sasl import raw_token
from fmq.server.kafka.session import KafkaSession
from fmq.server.net.request_admission import LOGIN_FRAME_LIMIT

logger = logging.getLogger("fmq.server.kafka")


#: The answer writer has taken every answer queued so far: it waits for the next one.
_WAIT = object()
#: A request that failed: the connection closes once the answers before it are written.
_FAILED = object()


def _seconds(ms: int) -> float | None:
    return ms / 1000 if ms else None


class KafkaConnection:
    def __init__(self, session: KafkaSession, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.session = session
        self.reader = reader
        self.writer = writer
        config = session.ctx.config
        self.max_frame = config.max_frame_size
        self.idle_timeout = _seconds(config.idle_timeout_ms)
        self.read_timeout = _seconds(config.read_timeout_ms)
        self.budget = session.ctx.request_budget
        self.share = self.budget.share()
        self._answers: asyncio.Queue[asyncio.Future | None] = asyncio.Queue(
            config.max_in_flight)
        self._reading: asyncio.Future | None = None

    async def serve(self) -> None:
        """Read requests until the peer closes, a frame is bad or the server stops."""
        session = self.session
        writing = asyncio.ensure_future(self._write_answers())
        try:
            while not session.closing:
                self._reading = asyncio.ensure_future(self._next_frame())
                try:
                    frame = await self._reading
                except asyncio.CancelledError:
                    if self._reading.cancelled() and session.closing:
                        break  # stop(): the requests read so far are answered below
                    raise
                if frame is None:
                    break
                await self._answers.put(self._start(frame))
        except FrameError as exc:
            logger.warning("kafka connection %s closed: %s", session.peer, exc)
        except TimeoutError as exc:
            logger.info("kafka connection %s closed: %s", session.peer, exc)
        except (ConnectionError, OSError) as exc:
            logger.info("kafka connection %s lost: %s", session.peer, exc)
        finally:
            await self._answers.put(None)  # the requests read so far are still answered
            await writing
            self.close()

    def _frame_limit(self) -> int:
        """Before log-in on a server with users, FMQ's log-in limit: a connection that
        never logs in cannot make the server hold large frames."""
        if self.session.principal is None and enforcing(self.session):
            return min(self.max_frame, LOGIN_FRAME_LIMIT)
        return self.max_frame

    async def _next_frame(self) -> bytes | None:
        # asyncio.timeout rather than wait_for: wait_for runs the read as a task of its own,
        # two more tasks per request (a producer's pipelined requests pay them each).
        try:
            async with asyncio.timeout(self.idle_timeout):
                size = await read_size(self.reader, self._frame_limit())
        except TimeoutError:
            raise TimeoutError(f"idle for {self.idle_timeout:g} s (idle_timeout_ms)") from None
        if size is None:
            return None
        await self._take(size)
        try:
            async with asyncio.timeout(self.read_timeout):
                return await read_body(self.reader, size)
        except TimeoutError:
            self.budget.release(self.share, size)
            raise TimeoutError(f"a frame of {size} bytes did not arrive within "
                               f"{self.read_timeout:g} s (read_timeout_ms)") from None
        except BaseException:
            self.budget.release(self.share, size)
            raise

    async def _take(self, size: int) -> None:
        """Hold ``size`` request bytes of the budget (waiting, first come first served)."""
        if self.budget.try_take(self.share, size, size):
            return
        granted = asyncio.get_running_loop().create_future()
        waiter = self.budget.wait(self.share, size, size,
                                  lambda n: granted.done() or granted.set_result(n))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done():
                self.budget.release(self.share, size)
            else:
                self.budget.cancel(waiter)
            raise

    def _start(self, frame: bytes) -> asyncio.Future:
        ctx = self.session.ctx
        # After SaslHandshake v0 the client sends its SASL messages as bare frames: it
        # waited for the handshake's answer, so the flag is set by the time one arrives.
        step = (raw_token(self.session, frame) if self.session.sasl_raw
                else answer(self.session, frame))
        task = asyncio.ensure_future(step)
        ctx.all_tasks.add(task)
        task.add_done_callback(ctx.all_tasks.discard)
        task.add_done_callback(lambda _: self.budget.release(self.share, len(frame)))
        return task

    async def _write_answers(self) -> None:
        """Write the answers in request order; the answers already finished behind one go
        out with it in one write (one system call: a producer pipelining small Produce
        requests gets its answers in a few writes). A failed request closes the connection,
        after the answers before it."""
        task = await self._answers.get()
        while task is not None:
            out = []
            failed = False
            while True:
                data = await self._settled(task)
                if data is _FAILED:
                    failed = True
                elif data is not None:
                    out.append(data)
                if failed or self._answers.empty():
                    task = _WAIT
                    break
                task = self._answers.get_nowait()
                if task is None or not task.done():
                    break
            if out and not self.writer.is_closing():
                self.writer.write(out[0] if len(out) == 1 else b"".join(out))
                try:
                    await self.writer.drain()
                except (ConnectionError, OSError):
                    self.close()
            if failed:
                self.close()  # the reader stops at the closed socket
            if task is _WAIT:
                task = await self._answers.get()

    async def _settled(self, task: asyncio.Future) -> bytes | object | None:
        """A request's framed answer, None when it takes none, or _FAILED (logged)."""
        try:
            return await task
        except FrameError as exc:
            logger.warning("kafka connection %s closed: %s", self.session.peer, exc)
        except Exception:
            logger.exception("kafka connection %s: a request failed; closing it",
                             self.session.peer)
        return _FAILED

    def stop(self) -> None:
        """Read no more requests (the server stops): the ones running are answered, long
        polls at once, and then the connection closes."""
        session = self.session
        if not session.closing:
            session.closing = True
            session.ctx.wakeups.session_closed(session.id)
        if self._reading is not None:
            self._reading.cancel()

    def close(self) -> None:
        """Stop reading, wake this connection's long polls, close the socket."""
        self.stop()
        self.budget.cancel_share(self.share)
        if not self.writer.is_closing():
            self.writer.close()
