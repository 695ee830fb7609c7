"""Reaching a secured server from the load processes: TLS and the SCRAM log-in on a lane's
own connection, before the lane's protocol takes the transport over (docs/security.md)."""

from __future__ import annotations

import asyncio
from typing import Any

from fmq.client.auth import Credentials, login_steps
from fmq.client.connection import outcome_of
from fmq.client.tls import TLSOptions
from fmq.errors import ConnectionLost
from fmq.protocol import FrameDecoder, decode_response, encode_request

LOGIN_TIMEOUT_S = 30.0


class LoginProtocol(asyncio.Protocol):
    """Runs the log-in on a new connection, then hands the transport to ``then`` (its
    ``connection_made`` is called) and resolves :attr:`done` with it."""

    def __init__(self, credentials: Credentials, then: asyncio.Protocol) -> None:
        self.then = then
        self.done: asyncio.Future[asyncio.Protocol] = asyncio.get_running_loop().create_future()
        self._steps = login_steps(credentials)
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._send(next(self._steps))

    def _send(self, step: tuple[Any, dict[str, Any]]) -> None:
        op, fields = step
        self._transport.write(encode_request(op, 1, fields))

    def data_received(self, data: bytes) -> None:
        for frame in self._decoder.feed(data):
            answer = outcome_of(frame, decode_response)
            try:
                if isinstance(answer, BaseException):
                    raise answer
                step = self._steps.send(answer)
            except StopIteration:  # logged in: the lane takes over this connection
                self._transport.set_protocol(self.then)
                self.then.connection_made(self._transport)
                self.done.set_result(self.then)
                return
            except Exception as exc:  # noqa: BLE001 - refused: the run reports it
                self._fail(exc)
                return
            self._send(step)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionLost(f"the server closed the connection during the log-in "
                                  f"({exc or 'no error given'})"))

    def _fail(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)
            if self._transport is not None:
                self._transport.close()


async def open_protocol(host: str, port: int, protocol: asyncio.Protocol,
                        tls: TLSOptions | None, credentials: Credentials | None
                        ) -> asyncio.Protocol:
    """A connection to ``host:port`` driven by ``protocol``, over TLS when ``tls`` is
    given and logged in first when ``credentials`` are."""
    loop = asyncio.get_running_loop()
    tls_args = {} if tls is None else {"ssl": tls.context(), "server_hostname": host}
    if credentials is None:
        await loop.create_connection(lambda: protocol, host, port, **tls_args)
        return protocol
    login = LoginProtocol(credentials, protocol)
    await loop.create_connection(lambda: login, host, port, **tls_args)
    return await asyncio.wait_for(login.done, LOGIN_TIMEOUT_S)
