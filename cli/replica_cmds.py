"""``fmq replica status | bootstrap``: a broker group's primary and followers
(docs/replication.md)."""

from __future__ import annotations

import click
from fmq.cli import output as out
from fmq.cli.common import emit, fmq_errors, json_option
from fmq.cli.net_cmds import server_option
from fmq.cli.stats_cmds import call_json

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
            ("role", f"follower of {s.get('primary')}"
                     + ("" if s.get("connected") else " (not connected)")),
            ("durable offset", s["durable_end"]),
            ("lag", f"{out.size(s.get('lag_bytes', 0))} behind the primary's "
                    f"{s.get('primary_end', 0)}"),
            ("rejected chunks", s.get("rejected_chunks", 0)),
            ("error", s.get("error")),
        ])
    head = out.fields([
        ("role", f"primary, ack_mode {s['ack_mode']}, min_insync {s['min_insync']}"),
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
    set; on a follower how far its copy is."""
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


def register(cli: click.Group) -> None:
    cli.add_command(replica)
