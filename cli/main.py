"""``fmq``: the command line. Each command group lives in its own module."""

from __future__ import annotations

import click

from fmq.version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "FMQ"})
@click.version_option(__version__, prog_name="fmq")
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
        dlq_cmds,
        groups_cmds,
        message_cmds,
        replica_cmds,
        stats_cmds,
        topic_cmds,
    )

    for module in (bench_cmds, stats_cmds, groups_cmds, replica_cmds, dlq_cmds, message_cmds,
                   topic_cmds):
        module.register(cli)


_register()

if __name__ == "__main__":  # pragma: no cover
    cli()
