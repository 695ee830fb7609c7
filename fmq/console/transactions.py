"""``/transactions``: open transactions, oldest first (``fmq tx list``): full id, producer
group, age, check-backs so far, message count; and resolving one (``fmq tx resolve``), an
administrator's action that asks for confirmation first. Both need ADMIN on the cluster,
as LIST_TX and RESOLVE_TX do."""

from __future__ import annotations

from aiohttp import web

from fmq.console.paging import paged
from fmq.console.rendering import gateway_of, render, session_of
from fmq.errors import InvalidArgument
from fmq.protocol import Op

routes = web.RouteTableDef()

DECISIONS = ("commit", "rollback")


@routes.get("/transactions")
async def transaction_list(request: web.Request) -> web.Response:
    answer = await gateway_of(request).call(session_of(request), Op.LIST_TX, {})
    page = paged(request, answer["transactions"])
    return render(request, "transactions.html", transactions=page.rows, page=page)


@routes.get("/transactions/resolve")
async def confirm_resolve(request: web.Request) -> web.Response:
    """The confirmation: what the transaction holds, and a button per decision."""
    group, tx_id = request.query.get("group", ""), request.query.get("tx", "")
    answer = await gateway_of(request).call(session_of(request), Op.LIST_TX, {})
    found = [t for t in answer["transactions"]
             if t["tx_id"] == tx_id and t["producer_group"] == group]
    if not found:
        raise InvalidArgument(f"transaction {tx_id!r} of producer group {group!r} is not "
                              f"open (it ended, or the id is wrong): see /transactions")
    return render(request, "resolve.html", tx=found[0])


@routes.post("/transactions/resolve")
async def resolve(request: web.Request) -> web.Response:
    form = await request.post()
    decision = str(form.get("decision", ""))
    if decision not in DECISIONS:
        raise InvalidArgument(f"decision must be commit or rollback, not {decision!r}")
    req = {"producer_group": str(form.get("group", "")), "tx_id": str(form.get("tx", "")),
           "decision": decision}
    answer = await gateway_of(request).call(session_of(request), Op.RESOLVE_TX, req)
    return render(request, "resolved.html", group=req["producer_group"], tx_id=req["tx_id"],
                  state=answer["state"])
