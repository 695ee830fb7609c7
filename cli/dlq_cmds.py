"""``fmq dlq list|show|redrive GROUP``: a consumer group's dead letters on a running server.

A group's dead letters are the messages of its dead-letter topic (``%DLQ%GROUP``) after the
group's own committed offset in that topic, which ``redrive`` advances (docs/operations.md).
"""

from __future__ import annotations

import click
from fmq.cli import output as out
from fmq.cli.common import emit, fmq_errors, json_option
from fmq.cli.net_cmds import _message_dict, server_option


def _dead_letters(client, group: str, limit: int) -> list:
    """Up to ``limit`` dead letters of ``group`` not yet redriven, queue by queue."""

    from fmq.message import dlq_topic
    from fmq.protocol import Op
    from fmq.protocol.values import stored_from_wire

    topic = dlq_topic(group)
    # The cheap listing (names and settings), not TOPICS' walk of every entry.
    queues = next((t["queues"] for t in client.list_topics() if t["name"] == topic), 0)
    found = []
    for qid in range(queues):
        done = client.call(Op.FETCH_OFFSET, {"group": group, "topic": topic,
                                             "queue_id": qid})["offset"]
        rng = client.call(Op.QUEUE_RANGE, {"topic": topic, "queue_id": qid})
        offset = max(rng["min_offset"], done)
        while offset < rng["next_offset"] and len(found) < limit:
            resp = client.call(Op.PULL, {"topic": topic, "queue_id": qid, "offset": offset,
                                         "max_messages": min(256, limit - len(found)),
                                         "wait_ms": 0})
            msgs = [stored_from_wire(m) for m in resp["messages"]]
            if not msgs:
                break
            found += msgs
            offset = msgs[-1].queue_offset + 1
    return found


def _dead_letter_dict(m) -> dict:
    return {**_message_dict(m), "origin_topic": m.origin_topic,
            "reconsume_times": m.reconsume_times}


LIST_COLUMNS: list[out.Column] = [
    ("QUEUE", lambda d: d["queue_id"]),
    ("OFFSET", lambda d: d["queue_offset"]),
    ("FROM TOPIC", lambda d: d["origin_topic"]),
    ("RETRIES", lambda d: d["reconsume_times"]),
    ("KEY", lambda d: d["key"]),
    ("STORED", lambda d: out.date_ms(d["store_time"])),
    ("BODY", lambda d: (d.get("body") or "<binary>")[:40]),
]


@click.group("dlq")
def dlq() -> None:
    """A consumer group's dead letters: messages it failed max_reconsume_times + 1 times."""


@dlq.command("list")
@click.argument("group")
@server_option
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True,
              help="List at most this many.")
@json_option
@fmq_errors
def list_(group: str, server: str, limit: int, as_json: bool) -> None:
    """The dead letters of GROUP not yet redriven (with --json: one object a line)."""
    from fmq.client import Client

    with Client(server, retries=1, node="primary") as client:
        found = [_dead_letter_dict(m) for m in _dead_letters(client, group, limit)]
    if as_json:
        for d in found:
            emit(d, True)
    else:
        click.echo(out.table(found, LIST_COLUMNS, f"group {group} has no dead letters"))


@dlq.command("show")
@click.argument("group")
@click.argument("queue_id", type=click.IntRange(min=0))
@click.argument("queue_offset", type=click.IntRange(min=0))
@server_option
@json_option
@fmq_errors
def show(group: str, queue_id: int, queue_offset: int, server: str, as_json: bool) -> None:
    """One dead letter of GROUP in full (QUEUE_ID and QUEUE_OFFSET from `fmq dlq list`)."""
    from fmq.client import Client
    from fmq.message import dlq_topic
    from fmq.protocol import Op
    from fmq.protocol.values import stored_from_wire

    with Client(server, retries=1, node="primary") as client:
        resp = client.call(Op.PULL, {"topic": dlq_topic(group), "queue_id": queue_id,
                                     "offset": queue_offset, "max_messages": 1, "wait_ms": 0})
    msgs = [stored_from_wire(m) for m in resp["messages"]]
    if not msgs or msgs[0].queue_offset != queue_offset:
        raise click.ClickException(f"no dead letter of group {group} at queue {queue_id} "
                                   f"offset {queue_offset}; see `fmq dlq list {group}`")
    d = _dead_letter_dict(msgs[0])
    emit(d, as_json, render_dead_letter(d))


def render_dead_letter(d: dict) -> str:
    """One dead letter as aligned fields: its date as a date, its properties as
    ``name=value`` pairs, absent key or tags as ``-``."""
    props = d.get("properties") or {}
    body = d["body"] if "body" in d else f"<binary, base64> {d['body_base64']}"
    return out.fields([
        ("topic", f"{d['topic']}/{d['queue_id']} offset {out.count(d['queue_offset'])} "
                  f"(log {out.count(d['offset'])})"),
        ("from topic", d["origin_topic"]),
        ("retries", d["reconsume_times"]),
        ("key", d["key"]),
        ("tags", d["tags"]),
        ("stored", out.date_ms(d["store_time"])),
        ("properties", ", ".join(f"{k}={v}" for k, v in sorted(props.items())) or None),
        ("body", body),
    ])


@dlq.command("redrive")
@click.argument("group")
@server_option
@click.option("--max", "max_messages", type=click.IntRange(1, 100_000), default=10_000,
              show_default=True, help="Redrive at most this many.")
@json_option
@fmq_errors
def redrive(group: str, server: str, max_messages: int, as_json: bool) -> None:
    """Send GROUP's dead letters back to it: consumable again at once, through its retry
    topic, with their redelivery count reset."""
    from fmq.client import Client
    from fmq.protocol import Op

    with Client(server, retries=0, node="primary") as client:
        moved = client.call(Op.DLQ_REDRIVE, {"group": group,
                                             "max_messages": max_messages})["redriven"]
    emit({"group": group, "redriven": moved}, as_json,
         f"redrove {out.plural(moved, 'dead letter')} of group {group}")


def register(cli: click.Group) -> None:
    cli.add_command(dlq)
