"""The console's aiohttp application: routes, templates, static files and error pages.

Each page family is a module with a ``routes`` table (:mod:`.overview`, :mod:`.topics`,
:mod:`.groups`, :mod:`.messages`, :mod:`.transactions`); this module puts them together
with the templates and assets shipped in the package (no network, no build step).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlencode

from aiohttp import web

from fmq.console import (
    cluster,
    group_admin,
    groups,
    login,
    messages,
    overview,
    topic_admin,
    topics,
    transactions,
    users,
)
from fmq.console.auth import COOKIE, ConsoleSessions, anonymous_login, csrf_matches
from fmq.console.gateway import ConsoleSession, ServerGateway
from fmq.console.pacing import Pacer
from fmq.console.rendering import (
    ANONYMOUS,
    GATEWAY,
    HERE,
    PACER,
    SAMPLER,
    SECURE,
    SESSIONS,
    TEMPLATES,
    TOPIC_SIZES,
    render,
    templates,
)
from fmq.console.sampler import Sampler
from fmq.console.topic_sizes import TopicSizes
from fmq.errors import FMQError, InvalidArgument, SecurityError, TopicExists, UnknownTopic

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


#: The HTTP status of an error shown instead of a page.
_STATUS = ((SecurityError, 403), (UnknownTopic, 404), (TopicExists, 409),
           (InvalidArgument, 400))


@web.middleware
async def paced(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every request waits its turn (fmq.console.pacing): the console never takes more
    than its share of the server's interpreter lock, however fast a script asks."""
    wait = request.app[PACER].delay()
    if wait is None:
        raise web.HTTPServiceUnavailable(
            text="the console is answering as fast as it may (a page a moment); "
                 "ask again in a few seconds", headers={"Retry-After": "5"})
    if wait:
        await asyncio.sleep(wait)
    return await handler(request)


@web.middleware
async def error_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    """An FMQError becomes a page saying what it says to a client, with its status."""
    try:
        return await handler(request)
    except FMQError as exc:
        status = next((code for cls, code in _STATUS if isinstance(exc, cls)), 503)
        return render(request, "error.html", status=status, error=exc,
                      kind=type(exc).__name__)


@web.middleware
async def logged_in(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Who is asking: everyone on a server without users (the console is on loopback
    only); else the person whose session cookie this is, or nobody, who is sent to the
    log-in page. A POST (but a log-in) must carry the CSRF token of the page it came from:
    the session's, or without users the console's own."""
    gateway, peer = request.app[GATEWAY], request.remote or ""
    request["login"] = None
    request["session"] = ConsoleSession(None, peer)
    request["csrf"] = request.app[ANONYMOUS].csrf
    if request.path.startswith("/static/"):
        return await handler(request)
    login = request.app[ANONYMOUS]
    if gateway.has_users:
        login = request.app[SESSIONS].find(request.cookies.get(COOKIE))
        if login is not None and not gateway.user_exists(login.user):
            # Removed (by the console, the CLI or another node): her session ends too.
            request.app[SESSIONS].close(request.cookies.get(COOKIE))
            login = None
        if login is None:
            if request.path == "/login":
                return await handler(request)
            raise web.HTTPSeeOther("/login?" + urlencode({"next": request.path_qs}))
        request["login"] = login
        request["session"] = ConsoleSession(login.user, peer)
        request["csrf"] = login.csrf
    if request.method == "POST":
        form = await request.post()
        if not csrf_matches(login, form.get("csrf")):
            return render(request, "error.html", status=403, kind="Refused",
                          error="this form did not carry this page's CSRF token: reload "
                                "the page and submit it again from there")
    return await handler(request)


async def sampling(app: web.Application) -> AsyncIterator[None]:
    """The sampler runs while the console serves."""
    task = asyncio.ensure_future(app[SAMPLER].run())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def build_app(gateway: ServerGateway, secure: bool = False,
              sample_s: float = 5.0) -> web.Application:
    app = web.Application(middlewares=[paced, error_pages, logged_in])
    app[PACER] = Pacer()
    app[SAMPLER] = Sampler(gateway, sample_s)
    app[TOPIC_SIZES] = TopicSizes(lambda: gateway.ctx.broker.inventory,
                                  gateway.read_unchecked, sample_s)
    app.cleanup_ctx.append(sampling)
    app[GATEWAY] = gateway
    app[TEMPLATES] = templates()
    app[SESSIONS] = ConsoleSessions()
    app[ANONYMOUS] = anonymous_login()
    app[SECURE] = secure
    for family in (login, overview, cluster, topic_admin, topics, group_admin, groups, messages,
                   transactions, users):
        app.add_routes(family.routes)
    app.router.add_static("/static/", os.path.join(HERE, "static"))
    return app
