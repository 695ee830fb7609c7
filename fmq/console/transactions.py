"""``/transactions``: open transactions, oldest first (``fmq tx list``): full id, producer
group, age, check-backs so far, message count. Administrators only, as LIST_TX is."""

from __future__ import annotations

from aiohttp import web

from fmq.console.rendering import gateway_of, render, session_of
from fmq.protocol import Op

routes = web.RouteTableDef()


@routes.get("/transactions")
async def transaction_list(request: web.Request) -> web.Response:
    answer = await gateway_of(request).call(session_of(request), Op.LIST_TX, {})
    return render(request, "transactions.html", transactions=answer["transactions"])
