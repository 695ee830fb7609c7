"""``fmq``: the command line. Each command group lives in its own module."""

from __future__ import annotations

import click

from fmq import native
from fmq.version import __version__


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    # Which path runs is decided when asked, so that only --version pays for the imports.
    if not value or ctx.resilient_parsing:
        return
    click.echo(f"fmq, version {__version__} ({native.implementation()})")
    ctx.exit()


#: Where the root command keeps the words it was given (for errors before any option is
#: parsed into ``as_json``).
_ARGV = "fmq.argv"


class CommandLine(click.Group):
    """The root group: a mistaken command line given ``--json`` is told so in JSON too."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_ARGV] = list(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            if "--json" not in ctx.meta.get(_ARGV, ()):
                raise
            from fmq.cli.common import print_error

            print_error(exc.format_message(), "UsageError", True)
            ctx.exit(exc.exit_code)


@click.group(cls=CommandLine,
             context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "FMQ"})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version,
              help="Show the version and the path running (compiled or pure), and exit.")
def cli() -> None:
    """FMQ: a durable message store with transactional messages."""


def _register() -> None:
    from fmq.cli import (
        acl_cmds,
        checkpoint_cmds,
        config_cmds,
        demo_cmds,
        index_cmds,
        log_cmds,
        tx_cmds,
        user_cmds,
    )

    for module in (log_cmds, checkpoint_cmds, index_cmds, tx_cmds, demo_cmds, config_cmds,
                   user_cmds, acl_cmds):
        module.register(cli)
    try:  # the network commands (server, produce, consume, stats)
        from fmq.cli import net_cmds
    except ImportError:  # pragma: no cover - only before the network layer exists
        return
    net_cmds.register(cli)
    from fmq.cli import (
        bench_cmds,
        cluster_cmds,
        dlq_cmds,
        groups_cmds,
        message_cmds,
        replica_cmds,
        route_cmds,
        stats_cmds,
        topic_cmds,
    )

    for module in (bench_cmds, stats_cmds, groups_cmds, replica_cmds, dlq_cmds, message_cmds,
                   topic_cmds, route_cmds, cluster_cmds):
        module.register(cli)


_register()

if __name__ == "__main__":  # pragma: no cover
    cli()
