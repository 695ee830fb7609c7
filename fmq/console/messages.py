"""``/messages``: messages of a topic by key (``fmq message query``), or of one queue from an
offset or from a time, each with key, tags, properties, store time, log offset and body
(as text, pretty JSON or hex). Reading bodies needs the right to consume the topic, as a
query by key over the wire does."""

from __future__ import annotations

import json
from dataclasses import dataclass

from aiohttp import web

from fmq.console.rendering import gateway_of, render, session_of
from fmq.errors import InvalidArgument
from fmq.message import StoredMessage, check_topic
from fmq.security import Operation, ResourceType

routes = web.RouteTableDef()

#: Messages one page shows at most.
PAGE_MESSAGES = 50
#: Body bytes shown per message (the rest is cut, and the page says so).
BODY_SHOWN = 64 * 1024


@dataclass
class ShownBody:
    """A body as the page shows it: ``kind`` is json, text or hex."""

    kind: str
    text: str
    size: int
    cut: bool


def show_body(body: bytes, view: str) -> ShownBody:
    """``body`` as asked (``view`` json, text or hex; auto: JSON if it parses, else text if
    it is UTF-8, else hex)."""
    part, cut = body[:BODY_SHOWN], len(body) > BODY_SHOWN
    if view in ("auto", "json", "text"):
        try:
            text = part.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and view != "text" and not cut:
            try:
                return ShownBody("json", json.dumps(json.loads(text), indent=2,
                                                    ensure_ascii=False), len(body), cut)
            except ValueError:
                pass
        if text is not None and view != "hex":
            return ShownBody("text", text, len(body), cut)
    return ShownBody("hex", " ".join(f"{b:02x}" for b in part), len(body), cut)


def _int(request: web.Request, name: str) -> int | None:
    value = request.query.get(name, "")
    if value == "":
        return None
    try:
        n = int(value)
    except ValueError:
        raise InvalidArgument(f"{name} must be a whole number, not {value!r}") from None
    if n < 0:
        raise InvalidArgument(f"{name} must be >= 0, not {n}")
    return n


def _from_time(broker, topic: str, queue_id: int, ms: int, limit: int) -> list[StoredMessage]:
    reads = broker.reads
    return reads.pull(topic, queue_id, reads.offset_for_time(topic, queue_id, ms), limit)


@routes.get("/messages")
async def message_search(request: web.Request) -> web.Response:
    gateway, session = gateway_of(request), session_of(request)
    broker = gateway.ctx.broker
    q = request.query
    topic, key, view = q.get("topic", ""), q.get("key", ""), q.get("view", "auto")
    queue_id, offset, time_ms = _int(request, "queue"), _int(request, "offset"), \
        _int(request, "time")
    found: list[StoredMessage] | None = None
    if topic:
        check_topic(topic)
        need = (Operation.CONSUME, ResourceType.TOPIC, topic)
        if key:
            found = await gateway.read(session, need, "console QUERY_KEY",
                                       broker.reads.messages_by_key, topic, key, PAGE_MESSAGES)
        elif queue_id is not None and time_ms is not None:
            found = await gateway.read(session, need, "console PULL", _from_time, broker,
                                       topic, queue_id, time_ms, PAGE_MESSAGES)
        elif queue_id is not None:
            found = await gateway.read(session, need, "console PULL", broker.reads.pull, topic,
                                       queue_id, offset or 0, PAGE_MESSAGES)
        else:
            raise InvalidArgument("give a key, or a queue (with an offset or a time)")
    shown = [(m, show_body(m.body, view)) for m in found or ()]
    return render(request, "messages.html", topic=topic, key=key, queue=queue_id,
                  offset=offset, time=time_ms, view=view, messages=shown,
                  searched=found is not None)
