"""The console's HTTP server: its own thread and event loop beside the broker's.

The server's event loop runs the send path; a page render, a slow browser or a burst of
reloads must never take turns from it, so the console's aiohttp app gets a loop of its own
in a thread of its own and reaches the broker only through :class:`~.gateway.ServerGateway`.
It serves HTTPS with the server's own certificate when the server has TLS, and listens on
loopback only while the data directory has no users (as the server does).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading

from aiohttp import web

from fmq.console.app import build_app
from fmq.console.gateway import ServerGateway
from fmq.errors import ConfigError
from fmq.server.context import ServerContext
from fmq.server.net.exposure import is_loopback
from fmq.threadname import name_os_thread

logger = logging.getLogger("fmq.console")

#: Longest :meth:`ConsoleServer.start` waits for the console to listen.
START_TIMEOUT = 10.0


def console_tls(ctx: ServerContext) -> ssl.SSLContext | None:
    """The server's certificate for HTTPS (None: the server has no TLS). Browsers do not
    present client certificates here, so mutual TLS does not carry over: log-in does."""
    cfg = ctx.config
    if not cfg.tls_cert_file:
        return None
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file or None)
    return tls


class ConsoleServer:
    """Serves the console on ``config.console_port`` until :meth:`close`."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.gateway = ServerGateway(ctx)
        cfg = ctx.config
        has_users = ctx.authenticator.store.has_users
        #: Without users anyone reaching the port could do anything: loopback only.
        self.host = cfg.host if has_users or is_loopback(cfg.host) else "127.0.0.1"
        self.port = cfg.console_port
        self.scheme = "http"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    def start(self) -> None:
        """Listen (blocking until the console accepts connections, or raise why not)."""
        self._thread = threading.Thread(target=self._run, name="fmq-console", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise ConfigError(f"the console did not start within {START_TIMEOUT:g} s")
        if self._failure is not None:
            raise ConfigError(f"cannot serve the console on {self.host}:{self.port}: "
                              f"{self._failure}; choose another --console-port") \
                from self._failure
        logger.info("console on %s://%s:%d/", self.scheme, self.host, self.port)

    def _run(self) -> None:
        name_os_thread()
        loop = self._loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._listen())
        except (OSError, ssl.SSLError) as exc:
            self._failure = exc
        self._ready.set()
        if self._failure is None:
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
        loop.close()

    async def _listen(self) -> None:
        tls = console_tls(self.ctx)
        self.scheme = "http" if tls is None else "https"
        app = build_app(self.gateway, secure=tls is not None,
                        sample_s=self.ctx.config.console_sample_ms / 1000)
        self._runner = web.AppRunner(app,
                                     access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=tls,
                           reuse_address=True)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def close(self) -> None:
        """Stop serving (from any thread); pages being rendered are cut off."""
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
