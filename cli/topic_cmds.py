"""``fmq topic create|describe|alter|delete|list``: topic administration on a running server
(docs/operations.md, "Topics"). Durations and sizes take units as the configuration does
(``7d``, ``512MiB``); ``alter`` takes ``default`` to give a setting back to the broker's."""

from __future__ import annotations

import click
from fmq.cli import output as out
from fmq.cli.client_options import client_kwargs
from fmq.cli.common import emit, fail, fmq_errors, json_option
from fmq.cli.net_cmds import server_option
from fmq.cli.route_place import (
    change_route,
    cluster_name_option,
    coordinator_option,
    render_route,
)
from fmq.cli.route_queues import (
    ROUTE_COLUMN,
    render_route_queues,
    route_here_text,
    route_queues,
)

from fmq.config import coerce_value, expected_form
from fmq.errors import ConfigError, UnknownTopic

#: What ``alter`` takes to put a setting back to the broker's (0 on the wire).
DEFAULT_WORD = "default"


def _value(text: str | None, kind: str, option: str, allow_default: bool) -> int | None:
    if text is None:
        return None
    if allow_default and text.strip().lower() == DEFAULT_WORD:
        return 0
    try:
        value = coerce_value(option, kind, text, option)
    except ConfigError:
        # click names the option already: the rule once, not the option three times.
        raise click.BadParameter(f"must be {expected_form(kind)}, not {text!r}",
                                 param_hint=option) from None
    if value < 1:
        raise click.BadParameter(f"must be at least 1, not {text!r}", param_hint=option)
    return value


def _client(server: str):
    from fmq.client import Client

    return Client(server, retries=1, node="primary", **client_kwargs())


def _settings_options(fn):
    allow = fn.__name__ == "alter"
    extra = f" ('{DEFAULT_WORD}': the broker's)" if allow else " [default: the broker's]"
    for decorator in reversed([
        click.option("--queues", type=click.IntRange(1, 65_535), default=None,
                     help="Queues of the topic (they only grow)"
                          + ("" if allow else " [default: queues_per_topic]") + "."),
        click.option("--retention", "retention", default=None, metavar="DURATION",
                     help="Messages older than this become unreadable, e.g. 7d, 12h"
                          + extra + "."),
        click.option("--retention-bytes", default=None, metavar="SIZE",
                     help="Per queue: the oldest messages beyond this many bytes become "
                          "unreadable, e.g. 1GiB" + extra + "."),
        click.option("--max-message-size", default=None, metavar="SIZE",
                     help="Largest message body the topic takes, e.g. 1MiB" + extra + "."),
    ]):
        fn = decorator(fn)
    return fn


def _parsed(retention: str | None, retention_bytes: str | None,
            max_message_size: str | None, allow_default: bool) -> tuple:
    return (_value(retention, "duration", "--retention", allow_default),
            _value(retention_bytes, "size", "--retention-bytes", allow_default),
            _value(max_message_size, "size", "--max-message-size", allow_default))


def render_topic(t: dict) -> str:
    eff = t.get("effective", {})
    pairs = [
        ("topic", t["name"]),
        ("queues", t["queues"]),
        ("created by", "a first send (auto_create_topics)" if t.get("auto_created")
         else "fmq topic create"),
        ("retention", out.duration_ms(t["retention_ms"]) if t["retention_ms"]
         else f"the broker's ({out.duration_ms(eff.get('retention_ms')) if eff.get('retention_ms') else 'none'})"),
        ("retention bytes", f"{out.size(t['retention_bytes'])} per queue"
         if t["retention_bytes"] else "none of its own"),
        ("max message size", out.size(t["max_message_size"]) if t["max_message_size"]
         else f"the broker's ({out.size(eff['max_message_size'])})"
         if eff.get("max_message_size") else "the broker's"),
    ]
    here = t.get("route_here")
    if here is not None:
        pairs.append(("broker group", route_here_text(here)))
    text = out.fields(pairs)
    if t.get("route"):
        return text + "\n" + render_route_queues(t["route"])
    if t.get("queue_ranges"):
        text += "\n" + out.table(t["queue_ranges"], [
            ("QUEUE", lambda q: q["queue_id"]), ("MIN OFFSET", lambda q: q["min_offset"]),
            ("NEXT OFFSET", lambda q: q["next_offset"]),
            ("MESSAGES", lambda q: q["next_offset"] - q["min_offset"])])
    return text


LIST_COLUMNS: list[out.Column] = [
    ("TOPIC", lambda t: t["name"]),
    ("QUEUES", lambda t: t["queues"]),
    ("RETENTION", lambda t: out.duration_ms(t["retention_ms"]) if t["retention_ms"] else None),
    ("RETENTION/QUEUE", lambda t: out.size(t["retention_bytes"]) if t["retention_bytes"]
     else None),
    ("MAX MESSAGE", lambda t: out.size(t["max_message_size"]) if t["max_message_size"]
     else None),
    ("CREATED BY", lambda t: "first send" if t["auto_created"] else "create"),
]


@click.group("topic")
def topic_group() -> None:
    """Topic administration on a running server: queues, retention and message size per
    topic. A setting shown as '-' is the broker's."""


@topic_group.command("create")
@click.argument("name")
@_settings_options
@click.option("--queues-per-group", type=click.IntRange(1, 65_535), default=None,
              help="In a cluster: the topic's queues in each broker group (its route in "
                   "etcd, docs/cluster.md) instead of one node's --queues.")
@click.option("--groups", default=None, metavar="G1,G2",
              help="With --queues-per-group: the broker groups [default: every group that "
                   "takes writes now].")
@coordinator_option
@cluster_name_option
@server_option
@json_option
@fmq_errors
def create(name: str, queues: int | None, retention: str | None, retention_bytes: str | None,
           max_message_size: str | None, queues_per_group: int | None, groups: str | None,
           coordinator: str | None, cluster_name: str, server: str, as_json: bool) -> None:
    """Create topic NAME, e.g. `fmq topic create orders --queues 8 --retention 7d`; in a
    cluster `fmq topic create orders --queues-per-group 4 --coordinator etcd://H:P`."""
    if queues_per_group is not None:
        _create_route(name, queues, (retention, retention_bytes, max_message_size),
                      queues_per_group, groups, coordinator, cluster_name, server, as_json)
        return
    if groups is not None or coordinator is not None:
        raise click.UsageError("--groups and --coordinator create a topic's route in a "
                               "cluster: give --queues-per-group too")
    with _client(server) as client:
        t = client.create_topic(name, queues, *_parsed(retention, retention_bytes,
                                                        max_message_size, False))
    emit(t, as_json, f"created topic {name}\n{render_topic(t)}")


def _create_route(name: str, queues: int | None, settings: tuple, queues_per_group: int,
                  groups: str | None, coordinator: str | None, cluster_name: str,
                  server: str, as_json: bool) -> None:
    if queues is not None or any(v is not None for v in settings):
        raise click.UsageError("--queues-per-group creates the topic's route in a cluster; "
                               "--queues and the retention and size settings are a node's "
                               "(fmq topic alter on each group's primary)")
    # --server's default address belongs to a node-local create; a route change is made
    # only where the operator said (--server, FMQ_SERVER or --coordinator).
    given = click.get_current_context().get_parameter_source("server")
    chosen = None if given == click.core.ParameterSource.DEFAULT else server
    request = {"action": "create", "topic": name, "queues_per_group": queues_per_group,
               "groups": None if groups is None else [g.strip() for g in groups.split(",")]}
    route = change_route(request, chosen, coordinator, cluster_name)
    emit(route, as_json, f"created the route of topic {name}\n{render_route(route)}")


@topic_group.command("alter")
@click.argument("name")
@_settings_options
@server_option
@json_option
@fmq_errors
def alter(name: str, queues: int | None, retention: str | None, retention_bytes: str | None,
          max_message_size: str | None, server: str, as_json: bool) -> None:
    """Change the settings given; the others stay. Queues only grow."""
    settings = _parsed(retention, retention_bytes, max_message_size, True)
    if queues is None and all(v is None for v in settings):
        raise click.UsageError("give at least one setting to change (--queues, --retention, "
                               "--retention-bytes, --max-message-size)")
    with _client(server) as client:
        t = client.alter_topic(name, queues, *settings)
    emit(t, as_json, f"altered topic {name}\n{render_topic(t)}")


@topic_group.command("describe")
@click.argument("name")
@server_option
@json_option
@fmq_errors
def describe(name: str, server: str, as_json: bool) -> None:
    """NAME's settings, the ones in force, and each queue's range."""
    with _client(server) as client:
        t = client.describe_topic(name)
        route = route_queues(client, name) if t.get("route_here") is not None else None
    if route is not None:
        t = {**t, "route": route}
    emit(t, as_json, render_topic(t))


@topic_group.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True,
              help="Delete even though consumer groups have not read everything.")
@server_option
@json_option
@fmq_errors
def delete(name: str, force: bool, server: str, as_json: bool) -> None:
    """Delete NAME: its messages become unreadable at once (their space comes back with the
    broker's retention). Refused while a consumer group has lag on it, unless --force."""
    with _client(server) as client:
        try:
            t = client.delete_topic(name, force)
        except UnknownTopic:
            # The server's message suggests creating the topic: no advice for a delete.
            fail(f"topic {name} does not exist (never created, or deleted already): "
                 f"nothing to delete; `fmq topic list` lists the topics")
    emit(t, as_json, f"deleted topic {name}")


@topic_group.command("list")
@server_option
@json_option
@fmq_errors
def list_topics(server: str, as_json: bool) -> None:
    """Every topic (that you may describe) with its settings."""
    with _client(server) as client:
        topics = client.list_topics()
    if as_json:
        for t in topics:
            emit(t, True)
    else:
        routed = any(t.get("route_here") is not None for t in topics)
        click.echo(out.table(topics, LIST_COLUMNS + ([ROUTE_COLUMN] if routed else []),
                             "no topics"))


def register(cli: click.Group) -> None:
    cli.add_command(topic_group)
