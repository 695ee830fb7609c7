"""The console's aiohttp application: routes, templates, static files and error pages.

Each page family is a module with a ``routes`` table (:mod:`.overview`, :mod:`.topics`,
:mod:`.groups`, :mod:`.messages`, :mod:`.transactions`); this module puts them together
with the templates and assets shipped in the package (no network, no build step).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from aiohttp import web

from fmq.console import groups, login, messages, overview, topics, transactions
from fmq.console.auth import COOKIE, ConsoleSessions, anonymous_login, csrf_matches
from fmq.console.gateway import ConsoleSession, ServerGateway
from fmq.console.rendering import (
    ANONYMOUS,
    GATEWAY,
    HERE,
    SECURE,
    SESSIONS,
    TEMPLATES,
    render,
    templates,
)
from fmq.errors import FMQError, InvalidArgument, SecurityError, UnknownTopic

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


#: The HTTP status of an error shown instead of a page.
_STATUS = ((SecurityError, 403), (UnknownTopic, 404), (InvalidArgument, 400))


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


def build_app(gateway: ServerGateway, secure: bool = False) -> web.Application:
    app = web.Application(middlewares=[error_pages, logged_in])
    app[GATEWAY] = gateway
    app[TEMPLATES] = templates()
    app[SESSIONS] = ConsoleSessions()
    app[ANONYMOUS] = anonymous_login()
    app[SECURE] = secure
    for family in (login, overview, topics, groups, messages, transactions):
        app.add_routes(family.routes)
    app.router.add_static("/static/", os.path.join(HERE, "static"))
    return app
