"""How the console asks the server: through the handlers the wire protocol runs.

A console page is a view over the same operations ``fmq topics``, ``fmq groups``, ``fmq tx``
and ``fmq stats`` send over the wire: :meth:`ServerGateway.call` runs the operation's
handler on the server's event loop (which owns the consumer groups and hands blocking reads
to its reader threads), after the same access check a client's request passes. The console's
own loop only waits for the answer, at most ``timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass
from typing import Any

from fmq.errors import ServerBusy
from fmq.protocol import Op
from fmq.security import Operation, ResourceType
from fmq.security.acl import allowed
from fmq.server.authz import denial, refusal
from fmq.server.context import ServerContext
from fmq.server.ops.table import OPERATIONS

#: Console sessions are numbered apart from the server's connections in the server's log.
_ids = itertools.count(1_000_000_001)


@dataclass
class ConsoleSession:
    """A logged-in person as the handlers see a session (fmq.server.context.RequestSession).

    ``principal`` is None on a server without users: every operation is open, as it is to a
    client there."""

    principal: str | None
    peer: str
    id: int = 0
    closing: bool = False
    lost: bool = False
    leases_taken: bool = False
    scram: Any = None
    auth_failures: int = 0

    def __post_init__(self) -> None:
        self.id = next(_ids)

    async def reserve_reply(self, want: int, minimum: int) -> int:
        return want  # answers go into a page, not into a connection's reply budget

    def unreserve_reply(self, n: int) -> None:
        pass


class ServerGateway:
    """Runs the server's operations for the console (from the console's own thread)."""

    def __init__(self, ctx: ServerContext, timeout: float = 10.0) -> None:
        self.ctx = ctx
        self.timeout = timeout

    @property
    def has_users(self) -> bool:
        return self.ctx.authenticator.store.has_users

    def user_exists(self, user: str) -> bool:
        """Whether ``user`` is (still) one of the server's users."""
        return self.ctx.authenticator.store.credential(user) is not None

    def may(self, session: ConsoleSession, operation: Operation, rtype: ResourceType,
            name: str) -> bool:
        """Whether the session's user may do ``operation`` on the resource (always, without
        users). A refusal is not counted: the console asks this to decide what to show."""
        if session.principal is None:
            return True
        return allowed(self.ctx.authenticator.store.rules, session.principal, operation,
                       rtype, name)

    async def call(self, session: ConsoleSession, op: Op, req: dict) -> dict:
        """The answer of operation ``op`` to ``req``, as a client gets it (FMQError as
        raised by the handler or the access check)."""
        return await self._on_server_loop(self._run(session, op, req))

    async def call_json(self, session: ConsoleSession, op: Op, req: dict) -> Any:
        """:meth:`call` for the operator's operations, whose answer is JSON text."""
        return json.loads((await self.call(session, op, req))["json"])

    async def read(self, session: ConsoleSession,
                   need: tuple[Operation, ResourceType, str] | None,
                   why: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` in the server's reader threads, for a read the wire has no request
        for (a queue read by offset), once the user passes the access check ``need`` (a
        refusal counted and logged as a client's, with ``why`` for the request; None: the
        caller shows only what the user may see of the answer)."""
        async def read() -> Any:
            if session.principal is not None and need is not None:
                denied = denial(self.ctx, session, *need, why)
                if denied is not None:
                    raise denied
            return await self.ctx.read(fn, *args)
        return await self._on_server_loop(read())

    async def read_unchecked(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` in the server's reader threads for the console's own figures
        (sampling, counting): no user asked, so the pages filter what each one sees."""
        async def read() -> Any:
            return await self.ctx.read(fn, *args)
        return await self._on_server_loop(read())

    async def internal(self, op: Op, req: dict) -> dict:
        """The answer of ``op`` for the console's own sampling (no user, no access check:
        the pages show the sampled figures only to those who may see them)."""
        return await self._on_server_loop(
            OPERATIONS[op].handler(self.ctx, ConsoleSession(None, "console"), req))

    async def _run(self, session: ConsoleSession, op: Op, req: dict) -> dict:
        declared = OPERATIONS[op]
        if session.principal is not None or self.has_users:
            why = refusal(self.ctx, session, declared, req)
            if why is not None:
                raise why
        return await declared.handler(self.ctx, session, req)

    async def _on_server_loop(self, coro: Any) -> Any:
        loop = self.ctx.loop
        if loop is None or self.ctx.stopping:
            coro.close()
            raise ServerBusy("the server is stopping; reload the page once it is back")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout)
        except TimeoutError:
            future.cancel()
            raise ServerBusy(f"the server did not answer within {self.timeout:g} s; "
                             f"reload the page") from None
