"""``/login`` and ``/logout``: a person logs in with an FMQ user and password."""

from __future__ import annotations

from aiohttp import web

from fmq.console.auth import COOKIE, SESSION_SECONDS, check_password
from fmq.console.rendering import SECURE, SESSIONS, gateway_of, render
from fmq.errors import AuthenticationFailed

routes = web.RouteTableDef()


def _local(target: str) -> str:
    """Where to go after the log-in: a path on this console, never another site."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


@routes.get("/login")
async def login_form(request: web.Request) -> web.Response:
    return render(request, "login.html", next=_local(request.query.get("next", "/")),
                  failed=None)


@routes.post("/login")
async def login(request: web.Request) -> web.Response:
    form = await request.post()
    target = _local(str(form.get("next", "/")))
    user = str(form.get("user", ""))
    try:
        user = await check_password(gateway_of(request), user, str(form.get("password", "")),
                                    request.remote or "")
    except AuthenticationFailed as exc:
        return render(request, "login.html", status=401, next=target, failed=str(exc))
    sid, _ = request.app[SESSIONS].open(user)
    answer = web.HTTPSeeOther(target)
    answer.set_cookie(COOKIE, sid, max_age=SESSION_SECONDS, httponly=True, samesite="Strict",
                      secure=request.app[SECURE], path="/")
    raise answer


@routes.post("/logout")
async def logout(request: web.Request) -> web.Response:
    request.app[SESSIONS].close(request.cookies.get(COOKIE))
    answer = web.HTTPSeeOther("/login")
    answer.del_cookie(COOKIE, path="/")
    raise answer
