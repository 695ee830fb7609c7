"""The FMQ network server: asyncio around one embedded :class:`fmq.Broker`.

* :mod:`fmq.server.lifecycle`: the process: bind, open, serve, reopen on a role change;
* :mod:`fmq.server.server`: the server: listening, accepting and refusing sessions,
  time-outs, graceful stop;
* :mod:`fmq.server.net.session`: one client's socket: framing, request ids, pipelined requests;
* :mod:`fmq.server.ops.table`: the operations, each declared once beside its handler;
* :mod:`fmq.server.context`: what handlers and sessions may use of the server;
* :mod:`fmq.server.ops.batcher`: the send pipeline (placed on the loop, acknowledged by a thread);
* :mod:`fmq.server.ops.wakeups`: pull long polls woken by writes to their queue;
* :mod:`fmq.server.net.request_admission`, :mod:`fmq.server.net.reply_account`: a session's request and
  reply bytes in the server's budgets;
* :mod:`fmq.server.ops.consumer_groups`: consumer-group membership and queue assignment;
* :mod:`fmq.server.config`: server limits and the ``--config`` file loader.

Start one with ``fmq server --data-dir DIR`` or :func:`run_server`.
"""

from fmq.server.config import ServerConfig, load_config
from fmq.server.lifecycle import run_server
from fmq.server.ops.consumer_groups import ConsumerGroupCoordinator
from fmq.server.server import Server

__all__ = ["ConsumerGroupCoordinator", "Server", "ServerConfig", "load_config", "run_server"]
