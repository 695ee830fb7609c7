"""A real ``Server`` on 127.0.0.1 (a free port) over a real broker, run in a thread of the
test's own process on asyncio's loop or on uvloop: for the tests that change what the
server does from the test (a class attribute such as ``SessionRequests.plain_sends``, a
module's ``answer_writes.SEND_ANSWERS``, a method wrapped to count its calls) and compare or
count what it did. A server in a subprocess is ``tests.server.harness.ServerProcess``."""

from __future__ import annotations

import asyncio
import threading

from fmq import Broker
from fmq.server.config import ServerConfig
from fmq.server.event_loop import run_on_event_loop
from fmq.server.server import Server

try:
    import uvloop
except ImportError:  # the standard loop only
    uvloop = None

#: The event loops a server can run on here (uvloop where it is installed).
LOOPS = ["asyncio"] + (["uvloop"] if uvloop is not None else [])


class InProcessServer:
    """``broker`` served on 127.0.0.1 and a free port by a ``Server`` configured with
    ``server_config`` (host and port aside), on the event loop ``loop_name``, in a thread of
    this process; started when made, stopped by :meth:`stop` (or at the end of a ``with``).
    The server shuts the broker down with it."""

    def __init__(self, broker: Broker, loop_name: str = "asyncio",
                 **server_config: object) -> None:
        self.server = Server(broker, ServerConfig(host="127.0.0.1", port=0, **server_config))
        self.loop: asyncio.AbstractEventLoop | None = None
        self.started = threading.Event()
        self.thread = threading.Thread(target=run_on_event_loop,
                                       args=(self._serve(), loop_name), daemon=True)
        self.thread.start()
        assert self.started.wait(60), "the server did not start"

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.server.start()
        self.started.set()
        await self.server.ctx.stop_requested.wait()
        await self.server.shutdown()

    @property
    def port(self) -> int:
        return self.server.port

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.request_stop)
        self.thread.join(60)
        assert not self.thread.is_alive(), "the server did not stop"

    def __enter__(self) -> InProcessServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
