"""``fmq groups [GROUP]`` (like ``kafka-consumer-groups --describe``) and ``fmq groups
reset-offsets``."""

from __future__ import annotations

import click
from fmq.cli import output as out
from fmq.cli.common import TIME_HELP, emit, fail, fmq_errors, json_option, parse_time_ms
from fmq.cli.net_cmds import server_option
from fmq.cli.stats_cmds import OFFSET_COLUMNS, call_json

from fmq.errors import FMQError, UnknownTopic


class UnknownGroup(FMQError):
    """``fmq groups GROUP`` named a group with no committed offsets and no live members."""

    def __init__(self, group: str) -> None:
        super().__init__(f"unknown consumer group {group!r}: it has no committed offsets and "
                         f"no live members; `fmq groups` lists the groups there are")


class GroupsCommand(click.Group):
    """``fmq groups [GROUP]`` describes; a first word that is not a subcommand is a group."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return ["[GROUP] [--server HOST:PORT] [--json]  |  reset-offsets GROUP ..."]

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help")):
            args = ["describe", *args]
        return super().parse_args(ctx, args)


@click.group("groups", cls=GroupsCommand)
def groups_group() -> None:
    """Consumer groups of a running server: `fmq groups [GROUP]` shows members, committed
    offsets and lag per queue; `fmq groups reset-offsets GROUP ...` moves the offsets."""


def render_groups(groups: list[dict]) -> str:
    if not groups:
        return "no consumer groups"
    blocks = []
    for g in groups:
        members = ", ".join(f"{mid} ({out.plural(len(q), 'queue')})"
                            for mid, q in sorted(g["members"].items()))
        head = (f"group {g['group']}: {out.plural(len(g['members']), 'member')}"
                + (f" (generation {g['generation']}): {members}" if g["members"] else ""))
        blocks.append(head + "\n" + out.table(g["offsets"], OFFSET_COLUMNS[1:],
                                              "no committed offsets"))
    return "\n\n".join(blocks)


@groups_group.command("describe", hidden=True)
@click.argument("group", required=False)
@server_option
@json_option
@fmq_errors
def describe(group: str | None, server: str, as_json: bool) -> None:
    """Members, committed offsets and lag of every group, or of GROUP."""
    data = call_json(server, "GROUPS", {"group": group}, node="primary")
    if group is not None and not data["groups"]:
        # A mistyped name must not read as an empty, healthy group.
        raise UnknownGroup(group)
    if as_json:
        for g in data["groups"]:
            emit(g, True)
    else:
        click.echo(render_groups(data["groups"]))


@groups_group.command("reset-offsets")
@click.argument("group")
@click.option("--topic", default=None, help="Only this topic [default: every topic the "
                                            "group committed in].")
@click.option("--queue", "queue_id", type=click.IntRange(min=0), default=None,
              help="Only this queue of --topic.")
@click.option("--to-earliest", is_flag=True, help="The first stored message.")
@click.option("--to-latest", is_flag=True, help="Past the last message.")
@click.option("--to-time", "to_time", default=None, metavar="T",
              help=f"The first message stored at or after T: {TIME_HELP}.")
@click.option("--to-offset", "to_offset", type=click.IntRange(min=0), default=None,
              metavar="N", help="Queue offset N (clamped to what is stored).")
@click.option("--force", is_flag=True, help="Reset even while the group has live members.")
@click.option("--execute", is_flag=True,
              help="Move the offsets. Without it: only show the plan (each queue's old and "
                   "new offset) and change nothing.")
@server_option
@json_option
@fmq_errors
def reset_offsets(group: str, topic: str | None, queue_id: int | None, to_earliest: bool,
                  to_latest: bool, to_time: str | None, to_offset: int | None, force: bool, execute: bool,
                  server: str, as_json: bool) -> None:
    """Show how GROUP's committed offsets would move; with --execute move them (logged by
    the server). Without --topic: every topic the group committed in but its retry and
    dead-letter topics (%RETRY%GROUP, %DLQ%GROUP), which move only when named. Refused
    while the group has live members, unless --force: stop its consumers first."""
    # Two flags of one option would let the last one win silently: each is its own.
    chosen = [name for name, given in (("--to-earliest", to_earliest),
                                       ("--to-latest", to_latest),
                                       ("--to-time", to_time is not None),
                                       ("--to-offset", to_offset is not None)) if given]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-time, "
                               "--to-offset" + (f" (not {' and '.join(chosen)})"
                                                if chosen else ""))
    to, value = ("earliest" if to_earliest else "latest"), -1
    if to_time is not None:
        to, value = "time", parse_time_ms(to_time, "--to-time")
    elif to_offset is not None:
        to, value = "offset", to_offset
    try:
        data = call_json(server, "RESET_OFFSETS", {
            "group": group, "topic": topic, "queue_id": -1 if queue_id is None else queue_id,
            "to": to, "value": value, "force": force,
            # Executing leaves the field out, so it works with servers older than plans too;
            # a plan sent to one is refused (a payload longer than it reads), never executed.
            "mode": None if execute else {"execute": False}}, node="primary")
    except UnknownTopic:
        fail(f"topic {topic} does not exist and group {group} has no offsets in it: "
             f"nothing to reset; `fmq topic list` lists the topics")
    if as_json:
        for c in data["changes"]:
            emit({**c, "executed": execute}, True)
        return
    click.echo(out.table(data["changes"], [
        ("TOPIC", lambda c: c["topic"]), ("QUEUE", lambda c: c["queue_id"]),
        ("OLD", lambda c: c["old"]), ("NEW", lambda c: c["new"])], "nothing to reset"))
    if data["changes"]:
        click.echo(f"moved the offsets of {out.plural(len(data['changes']), 'queue')}"
                   if execute else
                   "a plan: nothing changed; add --execute to move the offsets")


def register(cli: click.Group) -> None:
    cli.add_command(groups_group)
