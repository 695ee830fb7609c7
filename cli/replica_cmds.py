"""``fmq replica status | bootstrap | promote | forget``: a broker group's primary and
followers (docs/replication.md)."""

from __future__ import annotations

import socket
import sys

import click
from fmq.cli import output as out
from fmq.cli.client_options import client_kwargs
from fmq.cli.common import emit, fmq_errors, json_option
from fmq.cli.net_cmds import server_option
from fmq.cli.replica_group import group_status, render_group
from fmq.cli.stats_cmds import call_json

from fmq.client.connection import parse_servers

FOLLOWER_COLUMNS: list[out.Column] = [
    ("FOLLOWER", lambda f: f["name"]),
    ("DURABLE OFFSET", lambda f: f["durable_offset"]),
    ("LAG", lambda f: out.size(f["lag_bytes"])),
    ("LAST REPORT", lambda f: out.duration_ms(f["last_report_ms"])),
    ("IN SYNC", lambda f: "yes" if f["in_sync"] else "no"),
]


def render_status(s: dict) -> str:
    if s["role"] == "follower":
        return out.fields([
            ("role", (f"follower of {s['primary']}" if s.get("primary") else
                      "follower waiting for an election")
                     + ("" if s.get("connected") else " (not connected)")),
            ("node, epoch", f"{s.get('node')}, {s.get('epoch', 0)}"),
            ("durable offset", s["durable_end"]),
            ("lag", f"{out.size(s.get('lag_bytes', 0))} behind the primary's "
                    f"{s.get('primary_end', 0)}"),
            ("rejected chunks", s.get("rejected_chunks", 0)),
            ("error", s.get("error")),
        ])
    head = out.fields([
        ("role", f"primary, ack_mode {s['ack_mode']}, min_insync {s['min_insync']}"),
        ("node, epoch", f"{s.get('node')}, {s.get('epoch', 0)}"),
        ("durable end", s["durable_end"]),
        ("in sync", ", ".join(s["in_sync"]) or out.NONE),
        ("refused (not enough replicas)", s["not_enough_replicas"]),
    ])
    return head + "\n\n" + out.table(s["followers"], FOLLOWER_COLUMNS, "no followers")


@click.group("replica")
def replica() -> None:
    """A broker group: one primary, followers copying its log (docs/replication.md)."""


@replica.command("status")
@server_option
@json_option
@fmq_errors
def status(server: str, as_json: bool) -> None:
    """The server's role; on a primary each follower's durable offset, lag and the in-sync
    set; on a follower how far its copy is. Given several addresses (a group), one line
    per node: role, epoch, durable end, lag behind the primary, in sync (--json: a list);
    exit status 1 when a node did not answer."""
    if len(parse_servers(server)) > 1:
        nodes = group_status(server)
        emit(nodes, as_json, render_group(nodes))
        if any("role" not in n for n in nodes):  # a node did not answer
            sys.exit(1)
        return
    data = call_json(server, "REPL_STATUS")
    emit(data, as_json, render_status(data))


@replica.command("bootstrap")
@click.argument("data_dir", type=click.Path(file_okay=False))
@click.option("--from", "primary", required=True, metavar="HOST:PORT",
              help="The primary to copy.")
@json_option
@fmq_errors
def bootstrap(data_dir: str, primary: str, as_json: bool) -> None:
    """Prepare an empty DATA_DIR to follow PRIMARY from the start of its log (after
    retention deleted its oldest segments); then run fmq server --follow PRIMARY on it."""
    from fmq.replication.bootstrap import bootstrap as prepare

    result = prepare(data_dir, primary)
    emit(result, as_json,
         f"{data_dir} follows {primary} from offset {result['first_offset']}: start it with "
         f"fmq server --data-dir {data_dir} --follow {primary}")


@replica.command("promote")
@click.argument("data_dir", required=False, type=click.Path(file_okay=False))
@server_option
@click.option("--node", default=None, metavar="NAME",
              help="The name the new term records [default: the server's address online, "
                   "this host's name offline].")
@click.option("--config", "config_file", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="Offline: the node's config file (its segment size).")
@json_option
@fmq_errors
def promote(data_dir: str | None, server: str, node: str | None, config_file: str | None,
            as_json: bool) -> None:
    """Make a follower the primary, without etcd: a new epoch (one above the highest its
    log knows) and its EPOCH record. Offline on a stopped follower's DATA_DIR (then start it
    without --follow), or online with --server (it stops following and serves as primary
    in place). Make sure the old primary is stopped first; point the other followers at
    the new one with --follow."""
    if data_dir is not None:
        from fmq.replication.promote import promote_offline
        from fmq.server import load_config

        broker_cfg, _ = load_config(config_file)
        result = promote_offline(data_dir, node or socket.gethostname(), broker_cfg)
        emit(result, as_json,
             f"{data_dir} starts epoch {result['epoch']} at log offset {result['offset']}: "
             f"start it without --follow, then point the followers at it")
        return
    from fmq.client import Client
    from fmq.replication.promote import promote_online

    with Client(server, retries=1, **client_kwargs()) as client:
        status = promote_online(client, node or "")
    emit(status, as_json, f"{server} is the primary of epoch {status['epoch']}")


@replica.command("forget")
@click.argument("node")
@click.option("--coordinator", required=True, metavar="etcd://HOST:PORT",
              help="The etcd the group elects through.")
@click.option("--group", default="default", show_default=True, help="The broker group.")
@fmq_errors
def forget(node: str, coordinator: str, group: str) -> None:
    """Remove NODE from the group's registry in etcd, for good (a node retired or replaced
    under another name). The election counts registered nodes: a dead node left there can
    block elections (docs/replication.md, *The election rule*)."""
    from fmq.coordination.broker_group import BrokerGroupRegistry
    from fmq.coordination.lease import LeaderLease

    registry = BrokerGroupRegistry(LeaderLease(coordinator, group, "fmq-cli", ""), 10)
    if not registry.forget(node):
        raise click.ClickException(f"{node} is not registered in group {group}; registered: "
                                   f"{', '.join(sorted(registry.nodes())) or 'none'}")
    click.echo(f"{node} is no longer a member of group {group}")


def register(cli: click.Group) -> None:
    cli.add_command(replica)
