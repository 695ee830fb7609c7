"""``fmq topic expand | drain | reopen | remove-group``: a topic's route over a cluster's
broker groups, changed in etcd (``--coordinator``) or through any node (``--server``);
docs/cluster.md. No data moves: a group's queues are added, made read-only, writable again,
or left out of the route once its consumers have read them."""

from __future__ import annotations

import click
from fmq.cli.common import emit, fmq_errors, json_option
from fmq.cli.route_place import change_route, place_options, render_route
from fmq.cli.topic_cmds import topic_group

group_option = click.option("--group", "group", required=True, metavar="GROUP",
                            help="The broker group.")


def _run(request: dict, done: str, server: str | None, coordinator: str | None,
         cluster_name: str, as_json: bool) -> None:
    route = change_route(request, server, coordinator, cluster_name)
    emit(route, as_json, f"{done}\n{render_route(route)}")


@topic_group.command("expand")
@click.argument("name")
@group_option
@click.option("--queues", type=click.IntRange(1, 65_535), default=None,
              help="Queues of the topic in GROUP [default: as many as its first group].")
@place_options
@json_option
@fmq_errors
def expand(name: str, group: str, queues: int | None, server: str | None,
           coordinator: str | None, cluster_name: str, as_json: bool) -> None:
    """Add broker group GROUP to topic NAME's route: its queues get fresh global indices
    and take writes once producers read the route again. Keys are remapped."""
    _run({"action": "expand", "topic": name, "group": group, "queues_per_group": queues},
         f"topic {name} expanded to broker group {group}", server, coordinator,
         cluster_name, as_json)


@topic_group.command("drain")
@click.argument("name")
@group_option
@place_options
@json_option
@fmq_errors
def drain(name: str, group: str, server: str | None, coordinator: str | None,
          cluster_name: str, as_json: bool) -> None:
    """Make GROUP's queues of topic NAME read-only: no new writes, consumers finish them.
    Refused for the topic's last writable group."""
    _run({"action": "drain", "topic": name, "group": group},
         f"broker group {group} of topic {name} is read-only", server, coordinator,
         cluster_name, as_json)


@topic_group.command("reopen")
@click.argument("name")
@group_option
@place_options
@json_option
@fmq_errors
def reopen(name: str, group: str, server: str | None, coordinator: str | None,
           cluster_name: str, as_json: bool) -> None:
    """Make GROUP's queues of topic NAME writable again (a drain undone)."""
    _run({"action": "reopen", "topic": name, "group": group},
         f"broker group {group} of topic {name} takes writes again", server, coordinator,
         cluster_name, as_json)


@topic_group.command("remove-group")
@click.argument("name")
@group_option
@click.option("--force", is_flag=True,
              help="Remove it even though it takes writes, consumer groups have not read "
                   "everything there, or its primary cannot be asked.")
@place_options
@json_option
@fmq_errors
def remove_group(name: str, group: str, force: bool, server: str | None,
                 coordinator: str | None, cluster_name: str, as_json: bool) -> None:
    """Take drained broker group GROUP out of topic NAME's route. Refused while a consumer
    group has unread messages there (its primary is asked), unless --force. The messages
    stay in GROUP's log until its retention removes them."""
    _run({"action": "remove-group", "topic": name, "group": group, "force": force},
         f"broker group {group} removed from topic {name}", server, coordinator,
         cluster_name, as_json)


def register(cli: click.Group) -> None:
    """The commands join ``fmq topic`` (registered by topic_cmds)."""
