"""Errors of the wire: a malformed frame, a lost connection, a time-out, a busy server."""

from __future__ import annotations

from fmq.errors.base import FMQError


class ProtocolError(FMQError):
    """A frame that does not follow docs/protocol.md."""

    code = 60


class NotAnFMQServer(ProtocolError):
    """The peer at an address answered with bytes that are not FMQ frames: another kind of
    server listens there. Raised by the client, never sent by a server."""

    code = 64


class ConnectionLost(FMQError):
    """The connection to the server broke; the request may or may not have been applied."""

    code = 61
    retriable = True


class NotSent(ConnectionLost):
    """The connection had broken before the request was written: nothing of it reached the
    server, so it may go to another server or broker group. Raised by the client only
    (same code as ConnectionLost)."""


class RequestTimeout(FMQError):
    """The server did not answer in time; the request may or may not have been applied."""

    code = 62
    retriable = True


class ServerBusy(FMQError):
    """The server refused the request because a limit was reached; retry later."""

    code = 63
    retriable = True


class PrimaryNotFound(FMQError):
    """A client that needs the primary (writes, consumer groups) reached some of its
    servers, but none was the primary, and none named a primary that answers (a fail-over
    may be under way). Raised by the client, never sent by a server."""

    code = 91
    retriable = True


class DeliveryTimeout(RequestTimeout):
    """A producer kept retrying a request that failed with retriable errors until its
    ``delivery_timeout`` ran out; the message names the last error. Whether the request
    was applied is unknown (an idempotent producer may send it again safely). Raised by
    the client, never sent by a server."""

    code = 92

    def __init__(self, message: str, last_error: BaseException | None = None) -> None:
        super().__init__(message)
        self.last_error = last_error
