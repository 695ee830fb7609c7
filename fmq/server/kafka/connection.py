"""One Kafka client's socket: frames in, answers out in request order.

Requests are read as they come and run at once (a client pipelines up to its
``max.in.flight``; the Produce requests of every connection share a group commit), and their
answers are written in the order the requests came, as the protocol requires. At most
``max_in_flight`` requests run per connection; past that, reading waits. A frame that cannot
be a request closes the connection with one log line, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging

from fmq.server.kafka.dispatch import answer
from fmq.server.kafka.framing import FrameError, read_frame
from fmq.server.kafka.session import KafkaSession

logger = logging.getLogger("fmq.server.kafka")


class KafkaConnection:
    def __init__(self, session: KafkaSession, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.session = session
        self.reader = reader
        self.writer = writer
        config = session.ctx.config
        self.max_frame = config.max_frame_size
        self._answers: asyncio.Queue[asyncio.Future | None] = asyncio.Queue(
            config.max_in_flight)
        self._reading: asyncio.Future | None = None

    async def serve(self) -> None:
        """Read requests until the peer closes, a frame is bad or the server stops."""
        ctx, session = self.session.ctx, self.session
        writing = asyncio.ensure_future(self._write_answers())
        try:
            while not session.closing:
                self._reading = asyncio.ensure_future(read_frame(self.reader, self.max_frame))
                try:
                    frame = await self._reading
                except asyncio.CancelledError:
                    if self._reading.cancelled() and session.closing:
                        break  # stop(): the requests read so far are answered below
                    raise
                if frame is None:
                    break
                task = asyncio.ensure_future(answer(session, frame))
                ctx.all_tasks.add(task)
                task.add_done_callback(ctx.all_tasks.discard)
                await self._answers.put(task)
        except FrameError as exc:
            logger.warning("kafka connection %s closed: %s", session.peer, exc)
        except (ConnectionError, OSError) as exc:
            logger.info("kafka connection %s lost: %s", session.peer, exc)
        finally:
            await self._answers.put(None)  # the requests read so far are still answered
            await writing
            self.close()

    async def _write_answers(self) -> None:
        session = self.session
        while (task := await self._answers.get()) is not None:
            try:
                data = await task
            except FrameError as exc:
                logger.warning("kafka connection %s closed: %s", session.peer, exc)
                self.close()
                continue  # the reader stops at the closed socket
            except Exception:
                logger.exception("kafka connection %s: a request failed; closing it",
                                 session.peer)
                self.close()
                continue
            if data is None or self.writer.is_closing():
                continue
            self.writer.write(data)
            try:
                await self.writer.drain()
            except (ConnectionError, OSError):
                self.close()

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
        session = self.session
        if not session.closing:
            session.closing = True
            session.ctx.wakeups.session_closed(session.id)
        if not self.writer.is_closing():
            self.writer.close()
