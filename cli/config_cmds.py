"""``fmq config show``: the configuration ``fmq server`` would run with, and where each
value came from (default, config file, command line or environment)."""

from __future__ import annotations

import click
from click.core import ParameterSource
from fmq.cli import output as out
from fmq.cli.common import emit, fmq_errors, json_option


def _server_env(name: str) -> str:
    """The environment variable `fmq server` reads for its option ``--name`` (the command
    line's FMQ_ prefix): show reads the same ones, so it shows what the server would run."""
    return f"FMQ_SERVER_{name.upper()}"


@click.group("config")
def config_group() -> None:
    """Inspect the server's configuration."""


@config_group.command("show")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              default=None, envvar=_server_env("config"),
              help="The file `fmq server --config` would read (TOML or JSON).")
@click.option("--host", default=None, envvar=_server_env("host"), help="As `fmq server --host`.")
@click.option("--port", type=click.IntRange(0, 65535), default=None, envvar=_server_env("port"),
              help="As `fmq server --port`.")
@json_option
@click.pass_context
@fmq_errors
def show(ctx: click.Context, config_file: str | None, host: str | None, port: int | None,
         as_json: bool) -> None:
    """Print every broker and server setting with its value and where it came from. Give the
    same --config, --host and --port as to `fmq server`."""
    from fmq.server.config import effective_config

    overrides = {}
    for name, value in (("host", host), ("port", port)):
        if value is not None:
            from_env = ctx.get_parameter_source(name) is ParameterSource.ENVIRONMENT
            overrides[name] = (value, f"environment {_server_env(name)}" if from_env
                               else f"command line --{name}")
    rows = effective_config(config_file, overrides)
    if as_json:
        for row in rows:
            emit(row, True)
        return
    width = max(len(r["key"]) for r in rows)
    for row in rows:
        click.echo(f"{row['section']:<6} {row['key']:<{width}}  "
                   f"{human_value(row['key'], row['value']):<16}  ({row['source']})")


#: Settings whose 0 is no amount but a rule (fmq/config.py, fmq/server/config.py say so).
ZERO_MEANS = {
    "retention_ms": "keep forever",
    "retention_bytes": "no limit",
    "retention_interval_ms": "only when called",
    "checkpoint_interval_ms": "only at close",
    "index_max_lag_bytes": "no limit",
    "tx_timeout_ms": "never",
    "metrics_port": "no endpoint",
    "read_timeout_ms": "no limit",
    "write_timeout_ms": "no limit",
    "idle_timeout_ms": "never",
}


def human_value(key: str, value: object) -> str:
    """A setting as people write it: sizes with a unit (``16.0 MiB``, not ``16777216``),
    durations in ms/s/min/h, ports and counts as plain integers, switches as true/false, an
    empty string as ``""``."""
    from fmq.config import value_kind

    kind = value_kind(key, type(value))
    if isinstance(value, bool):  # as a config file writes it
        return "true" if value else "false"
    if not isinstance(value, int | str):
        return str(value)
    if value == 0 and key in ZERO_MEANS:  # "0 ms" of a retention would read as "at once"
        return f"0 ({ZERO_MEANS[key]})"
    if kind == "size" and isinstance(value, int):
        return out.size(value)
    if kind == "duration" and isinstance(value, int):
        return out.duration_ms(value)
    return '""' if value == "" else str(value)


def register(cli: click.Group) -> None:
    cli.add_command(config_group)
