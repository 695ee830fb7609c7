"""The FMQ network server: asyncio around one embedded :class:`fmq.Broker`.

* :mod:`fmq.server.server`: the server: thread pools, send batching, long-poll wake-ups,
  graceful stop;
* :mod:`fmq.server.connection`: one socket: framing, request ids, pipelined tasks;
* :mod:`fmq.server.handlers`: what each operation does;
* :mod:`fmq.server.groups`: consumer-group membership and queue assignment;
* :mod:`fmq.server.config`: server limits and the ``--config`` file loader.

Start one with ``fmq server --data-dir DIR`` or :func:`run_server`.
"""

from fmq.server.config import ServerConfig, load_config
from fmq.server.groups import GroupCoordinator
from fmq.server.server import Server, run_server

__all__ = ["GroupCoordinator", "Server", "ServerConfig", "load_config", "run_server"]
