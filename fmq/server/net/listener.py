"""The client port: a socket bound before recovery starts, so a port clash is reported at
once and clients are refused (and retry) until the server serves."""

from __future__ import annotations

import socket

from fmq.errors import ConfigError


def bind_listener(host: str, port: int, *, serving: str = "listen",
                  option: str = "--port/--host") -> socket.socket:
    """A TCP socket bound to ``host:port``, not yet listening (connections are refused, so
    clients retry, until the server serves). Raises ConfigError when the address is taken,
    saying what could not be served (``serving``) and which setting chooses the port
    (``option``)."""
    sock: socket.socket | None = None
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise ConfigError(
            f"cannot {serving} on {host}:{port} ({exc.strerror or exc}); stop the process "
            f"using that port or choose another {option}") from None
    return sock
