"""SCOPE_DECISION over the wire: another broker group asks this primary whether it holds
a transaction scope's end mark, and the decision it carries (docs/transactions.md,
*Scopes*; :mod:`fmq.server.cluster.scope_decision_links` asks it)."""

from __future__ import annotations

import json

from fmq.message import check_label, check_name
from fmq.protocol import Op
from fmq.security import Operation
from fmq.server.context import RequestSession, ServerContext
from fmq.server.ops.operation import REFUSES, on_cluster, operation


@operation(Op.SCOPE_DECISION, access=on_cluster(Operation.ADMIN), hosted=None,
           follower=REFUSES)
async def _scope_decision(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    # A follower refuses (NotPrimary): only the primary's view is the group's now, and the
    # asker's links go to primaries anyway.
    group = check_name(req["producer_group"], "producer_group", allow_none=False)
    scope = check_label(req["scope"], "scope", allow_none=False)
    closed, body = await ctx.read(ctx.broker.transactions.scope_mark, group, scope)
    decision = body.decode("utf-8", "replace") if body is not None else None
    return {"json": json.dumps({"closed": closed, "decision": decision})}
