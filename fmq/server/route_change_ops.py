"""ROUTE_CHANGE: an administrator's route change (create, expand, drain, reopen,
remove-group) made through any node of a cluster, which writes it to etcd on the client's
behalf (docs/cluster.md). A node outside a cluster has no routes to change.
"""

from __future__ import annotations

from fmq.errors import ConfigError
from fmq.protocol import Op
from fmq.server.context import RequestSession, ServerContext
from fmq.server.handlers import handles


@handles(Op.ROUTE_CHANGE)
async def _route_change(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    raise ConfigError("this node is not part of a cluster, so it has no routes to change: "
                      "start the cluster's nodes with --coordinator etcd://HOST:PORT and "
                      "--cluster-name NAME (docs/cluster.md)")
