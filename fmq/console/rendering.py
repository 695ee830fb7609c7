"""What every console page uses: the templates (with the filters that show dates, sizes and
durations as a person reads them), the request's session and the gateway to the server."""

from __future__ import annotations

import datetime
import os
from typing import Any

import jinja2
from aiohttp import web

from fmq.console.auth import ConsoleSessions, LoginSession
from fmq.console.gateway import ConsoleSession, ServerGateway
from fmq.console.pacing import Pacer
from fmq.console.sampler import Sampler
from fmq.console.topic_sizes import TopicSizes
from fmq.version import __version__

HERE = os.path.dirname(__file__)
GATEWAY = web.AppKey("gateway", ServerGateway)
TEMPLATES = web.AppKey("templates", jinja2.Environment)
SESSIONS = web.AppKey("sessions", ConsoleSessions)
ANONYMOUS = web.AppKey("anonymous", LoginSession)  # without users: everyone's CSRF token
SECURE = web.AppKey("secure", bool)  # served over HTTPS: cookies are Secure
SAMPLER = web.AppKey("sampler", Sampler)
PACER = web.AppKey("pacer", Pacer)
TOPIC_SIZES = web.AppKey("topic_sizes", TopicSizes)


def _when(ms: int | None) -> str:
    """A store time (ms since the epoch) as a UTC date a person reads."""
    if not ms:
        return "-"
    when = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _duration(ms: int | float | None) -> str:
    if ms is None:
        return "-"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def templates() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(HERE, "templates")),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters.update(when=_when, size=_bytes, duration=_duration)
    env.globals["version"] = __version__
    return env


def session_of(request: web.Request) -> ConsoleSession:
    return request["session"]


def gateway_of(request: web.Request) -> ServerGateway:
    return request.app[GATEWAY]


def sampler_of(request: web.Request) -> Sampler:
    return request.app[SAMPLER]


def topic_sizes_of(request: web.Request) -> TopicSizes:
    return request.app[TOPIC_SIZES]


def render(request: web.Request, template: str, status: int = 200, **values: Any
           ) -> web.Response:
    page = request.app[TEMPLATES].get_template(template).render(
        request=request, user=session_of(request).principal, login=request.get("login"),
        csrf=request.get("csrf", ""), sample_s=f"{request.app[SAMPLER].every_s:g}",
        **values)
    return web.Response(text=page, status=status, content_type="text/html")


