"""``/messages``: messages of a topic by key (``fmq message query``), or of one queue from an
offset or from a time, each with key, tags, properties, store time, log offset and body
(as text, pretty JSON or hex). Reading bodies needs the right to consume the topic, as a
query by key over the wire does."""

from __future__ import annotations

import bisect
import json
import os
from dataclasses import dataclass
from urllib.parse import urlencode

from aiohttp import web

from fmq.console.paging import link, page_number
from fmq.console.rendering import gateway_of, render, session_of
from fmq.datadir import LOG_DIR, format_segment_name, parse_segment_name
from fmq.errors import InvalidArgument
from fmq.message import StoredMessage, check_topic
from fmq.security import Operation, ResourceType

routes = web.RouteTableDef()

#: Messages one page shows at most.
PAGE_MESSAGES = 50
#: Messages with one key a search pages through at most (as a query by key answers).
MAX_KEY_MESSAGES = 1000
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


def _segment_bases(broker) -> list[int]:
    """Each segment file's base log offset, oldest first (a reader thread)."""
    # The segment files' names are their base offsets: the directory is the truth, and the
    # console needs no handle on the broker's log for it.
    names = os.listdir(os.path.join(broker.path, LOG_DIR))
    return sorted(base for base in map(parse_segment_name, names) if base is not None)


def _segment_of(bases: list[int], offset: int) -> str | None:
    """The name of the segment file holding log offset ``offset`` (None: deleted since)."""
    at = bisect.bisect_right(bases, offset) - 1
    return format_segment_name(bases[at]) if at >= 0 else None


@routes.get("/messages")
async def message_search(request: web.Request) -> web.Response:
    gateway, session = gateway_of(request), session_of(request)
    broker = gateway.ctx.broker
    q = request.query
    topic, key, view = q.get("topic", ""), q.get("key", ""), q.get("view", "auto")
    queue_id, offset, time_ms = _int(request, "queue"), _int(request, "offset"), \
        _int(request, "time")
    found: list[StoredMessage] | None = None
    previous = following = None
    if topic:
        check_topic(topic)
        need = (Operation.CONSUME, ResourceType.TOPIC, topic)
        if key:
            number = page_number(request)
            if number * PAGE_MESSAGES > MAX_KEY_MESSAGES:
                raise InvalidArgument(f"a search by key shows its first {MAX_KEY_MESSAGES} "
                                      f"messages; search by queue and offset for later ones")
            read = await gateway.read(session, need, "console QUERY_KEY",
                                      broker.reads.messages_by_key, topic, key,
                                      number * PAGE_MESSAGES + 1)
            found = read[(number - 1) * PAGE_MESSAGES:number * PAGE_MESSAGES]
            if number > 1:
                previous = link(request, page=number - 1)
            if len(read) > number * PAGE_MESSAGES:
                following = link(request, page=number + 1)
        elif queue_id is not None:
            if time_ms is not None:
                found = await gateway.read(session, need, "console PULL", _from_time, broker,
                                           topic, queue_id, time_ms, PAGE_MESSAGES)
            else:
                found = await gateway.read(session, need, "console PULL", broker.reads.pull, topic,
                                           queue_id, offset or 0, PAGE_MESSAGES)
            if len(found) == PAGE_MESSAGES:  # perhaps more: the next page starts after
                following = request.path + "?" + urlencode(
                    {"topic": topic, "queue": queue_id, "view": view,
                     "offset": found[-1].queue_offset + 1})
        else:
            raise InvalidArgument("give a key, or a queue (with an offset or a time)")
    bases = await gateway.read(session, None, "console segments", _segment_bases, broker) \
        if found else []
    shown = [(m, show_body(m.body, view), _segment_of(bases, m.offset)) for m in found or ()]
    return render(request, "messages.html", topic=topic, key=key, queue=queue_id,
                  offset=offset, time=time_ms, view=view, messages=shown,
                  searched=found is not None, previous=previous, following=following,
                  page_messages=PAGE_MESSAGES)
