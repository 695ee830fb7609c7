"""``fmq message get | find``: one message by where it sits, or the messages with a key, from
a running server (RocketMQ's ``queryMsgById`` / ``queryMsgByKey``; Kafka's console
consumer with ``--partition N --offset X``)."""

from __future__ import annotations

import click
from fmq.cli import output as out
from fmq.cli.client_options import client_kwargs
from fmq.cli.common import TIME_HELP, emit, fail, fmq_errors, json_option, parse_time_ms
from fmq.cli.key_search import RouteReader, find_in_route, segment_bases
from fmq.cli.net_cmds import _message_dict, server_option


@click.group("message")
def message_group() -> None:
    """Look up stored messages: by topic, queue and offset, or by key."""


def segment_of(offset: int, bases: list[int]) -> str | None:
    """The file name of the segment holding log ``offset``: the one with the largest base
    at or below it (None: retention deleted it since)."""
    from fmq.datadir import format_segment_name

    below = [b for b in bases if b <= offset]
    return format_segment_name(max(below)) if below else None


#: What a message's segment reads as when the user may not ask for segment names.
SEGMENT_UNKNOWN = "(not shown: naming it needs admin on the cluster)"


def as_dict(m, bases: list[int] | None, broker_group: str = "") -> dict:
    return {**_message_dict(m),
            "segment": segment_of(m.offset, bases) if bases is not None else None,
            "broker_group": broker_group or None}


def describe(m, bases: list[int] | None, broker_group: str = "", base: int = 0) -> str:
    """A stored message for people: where it is (its broker group in a cluster, queue
    offset, log offset and the segment file holding it), its key, tags, properties, store
    time and body (text, or its size when it is not UTF-8)."""
    try:
        body = repr(m.body.decode("utf-8"))
    except UnicodeDecodeError:
        body = f"<{out.size(len(m.body))}, not UTF-8; --json has it in base64>"
    props = ", ".join(f"{k}={v}" for k, v in sorted((m.properties or {}).items()))
    if bases is None:
        segment = SEGMENT_UNKNOWN
    else:
        segment = segment_of(m.offset, bases) or "(deleted by retention since)"
    where = ([("broker group", f"{broker_group} (its queue {m.queue_id} is the topic's "
                               f"queue {base + m.queue_id})")] if broker_group else [])
    return out.fields([
        ("message", f"{m.topic} queue {m.queue_id} offset {m.queue_offset}"),
        *where,
        ("key", m.key or "(none)"),
        ("tags", m.tags or "(none)"),
        ("properties", props or "(none)"),
        ("stored", out.date_ms(m.store_time)),
        ("log offset", f"{m.offset} (`fmq log dump DATA_DIR --from {m.offset}` shows "
                       f"its record)"),
        ("segment", segment),
        ("body", body),
    ])


@message_group.command("get")
@click.option("--topic", required=True, help="The topic.")
@click.option("--queue", "queue_id", type=click.IntRange(min=0), required=True,
              help="The queue id within the topic.")
@click.option("--offset", type=click.IntRange(min=0), required=True,
              help="The message's offset in its queue.")
@server_option
@json_option
@fmq_errors
def get(topic: str, queue_id: int, offset: int, server: str, as_json: bool) -> None:
    """The message at OFFSET of the queue (an error naming the offsets the queue holds when
    there is none)."""
    from fmq.client import Client
    from fmq.errors import FMQError, OffsetOutOfRange, UnknownTopic

    with Client(server, retries=1, **client_kwargs()) as client:
        try:
            m = client.get_message(topic, queue_id, offset)
        except OffsetOutOfRange:
            # An empty queue may be no queue at all: a topic never created (a typo) is
            # named as such, not as a queue that holds nothing yet.
            try:
                client.describe_topic(topic)
            except UnknownTopic:
                fail(f"topic {topic} does not exist (never created, or deleted): no "
                     f"message to get; `fmq topic list` lists the topics")
            except FMQError:
                pass  # may not describe it: the queue's own answer stands
            raise
        bases = segment_bases(client)
    emit(as_dict(m, bases), as_json, describe(m, bases))


@message_group.command("find")
@click.option("--key", required=True, help="The key the messages were sent with.")
@click.option("--topic", default=None,
              help="Only this topic [default: every topic, internal ones included].")
@click.option("--since", default=None, metavar="T",
              help=f"Only messages stored at or after T: {TIME_HELP}.")
@click.option("--limit", type=click.IntRange(1, 4096), default=32, show_default=True,
              help="At most this many messages per topic.")
@server_option
@json_option
@fmq_errors
def find(key: str, topic: str | None, since: str | None, limit: int, server: str,
         as_json: bool) -> None:
    """The messages stored with KEY, oldest first per topic, from every broker group of
    the topic's route. Exit 1 when none is found."""
    from fmq.client import Client

    since_ms = parse_time_ms(since, "--since") if since is not None else None
    found, bases = [], {}
    with Client(server, retries=1, **client_kwargs()) as client:
        if topic is not None:
            topics = [topic]
        else:
            # The cheap listing (names and settings), not TOPICS' walk of every entry.
            topics = sorted(t["name"] for t in client.list_topics())
        routes = RouteReader(client)
        for name in topics:
            here, group_bases = find_in_route(client, routes, name, key, limit, since_ms)
            found += sorted(here, key=lambda f: (f.message.store_time,
                                                 f.message.offset))[:limit]
            bases.update(group_bases)
    for f in found:
        b = bases.get(f.broker_group)
        emit(as_dict(f.message, b, f.broker_group), as_json,
             describe(f.message, b, f.broker_group, f.base) + "\n")
    if not found:
        where = f"topic {topic!r}" if topic is not None else f"any of {len(topics)} topic(s)"
        fail(f"no message with key {key!r} in {where}"
             + (f" stored since {out.date_ms(since_ms)}" if since_ms is not None else ""))


def register(cli: click.Group) -> None:
    cli.add_command(message_group)
