"""``fmq tx list | resolve``: operators' view of open transactions.

With ``--server HOST:PORT`` they ask a running server; with a DATA_DIR they work offline on
a stopped broker's directory.
"""

from __future__ import annotations

import os

import click
from fmq.cli.client_options import client_kwargs, security_options
from fmq.cli.common import emit, fmq_errors, json_option, optional_data_dir_argument
from fmq.cli.net_cmds import DEFAULT_SERVER
from fmq.cli.progress import Progress, log_bytes

from fmq.datadir import require_data_dir

_server_address = click.option(
    "--server", default=None, metavar="HOST:PORT",
    help="Ask this running server instead of reading a stopped broker's DATA_DIR "
         "[default without DATA_DIR: env FMQ_SERVER, else 127.0.0.1:9876].")


def server_option(fn):
    """``--server`` and the TLS options (used with a server only)."""
    return security_options(_server_address(fn))


def _choose_server(data_dir: str | None, server: str | None) -> str | None:
    """The server to ask, or None to work on ``data_dir``. FMQ_SERVER counts only when no
    directory is named: `fmq tx resolve DIR ...` must never go to a server instead."""
    if data_dir is not None and server is not None:
        raise click.UsageError("give either DATA_DIR (offline) or --server HOST:PORT, not both")
    if data_dir is None and server is None:
        # Like every other network command: FMQ_SERVER, else the local server.
        server = os.environ.get("FMQ_SERVER") or DEFAULT_SERVER
    return server


@click.group("tx")
def tx_group() -> None:
    """List and resolve open (undecided) transactions."""


def _print_txs(txs: list[dict], as_json: bool) -> None:
    if as_json:
        for t in txs:
            emit(t, True)
        return
    if not txs:
        click.echo("no open transactions")
    for t in txs:
        click.echo(f"{t['tx_id']}  group={t['producer_group']} state={t['state']} "
                   f"messages={t['messages']} age={t['age_ms'] / 1000:.1f}s "
                   f"prepare_offset={t['prepare_offset']}")


@tx_group.command("list")
@optional_data_dir_argument
@server_option
@json_option
@fmq_errors
def tx_list(data_dir: str | None, server: str | None, as_json: bool) -> None:
    """List open transactions, oldest first: of a running server (--server) or of a
    stopped broker's DATA_DIR."""
    server = _choose_server(data_dir, server)
    if server is not None:
        from fmq.client import Client
        from fmq.protocol import Op

        with Client(server, retries=1, node="primary", **client_kwargs()) as client:
            txs = client.call(Op.LIST_TX, {})["transactions"]
    else:
        from fmq.admin.transactions import open_transactions_in_log

        first, end = log_bytes(data_dir)
        with Progress("reading the log", end - first) as progress:
            txs = open_transactions_in_log(
                data_dir, progress=lambda offset: progress.update(offset - first))
    _print_txs(txs, as_json)


@tx_group.command("resolve")
@click.argument("args", nargs=-1, required=True, metavar="[DATA_DIR] TXID commit|rollback")
@click.option("--data-dir", "data_dir", default=None,
              type=click.Path(exists=True, file_okay=False),
              help="The stopped broker's directory (the same as DATA_DIR).")
@click.option("--group", "producer_group", default=None,
              help="The transaction's producer group (`fmq tx list` shows it): required "
                   "with --server; offline, the one group that used TXID by default.")
@server_option
@json_option
@fmq_errors
def tx_resolve(args: tuple[str, ...], data_dir: str | None, producer_group: str | None,
               server: str | None, as_json: bool) -> None:
    """Commit or roll back one open transaction, as an operator who knows what the producer
    decided: on a running server (--server HOST:PORT --group GROUP TXID DECISION) or
    offline on a stopped broker's directory (DATA_DIR TXID DECISION). A transaction is
    its producer group and id: the same id in two groups is two transactions."""
    if len(args) == 3:
        if data_dir is not None and data_dir != args[0]:
            raise click.UsageError(f"two data directories given ({args[0]} and --data-dir "
                                   f"{data_dir}); give one")
        data_dir = args[0]
    elif len(args) != 2:
        raise click.UsageError("usage: fmq tx resolve --server HOST:PORT --group GROUP TXID "
                               "commit|rollback"
                               " | fmq tx resolve DATA_DIR TXID commit|rollback")
    server = _choose_server(data_dir, server)
    tx_id, decision = args[-2], args[-1]
    if decision not in ("commit", "rollback"):
        raise click.UsageError(f"DECISION must be commit or rollback, not {decision!r}")
    if server is not None:
        from fmq.client import Client
        from fmq.protocol import Op

        if not producer_group:
            # Without DATA_DIR the server is asked even when --server is not given
            # (FMQ_SERVER or the local default): say which one, and the offline way.
            raise click.UsageError(f"--group GROUP is required to resolve on a server (here "
                                   f"{server}): name the transaction's producer group "
                                   f"(`fmq tx list` shows it), or give a stopped broker's "
                                   f"DATA_DIR to resolve offline")
        with Client(server, retries=1, node="primary", **client_kwargs()) as client:
            state = client.call(Op.RESOLVE_TX, {"producer_group": producer_group,
                                                "tx_id": tx_id, "decision": decision})["state"]
    else:
        from fmq.admin.transactions import resolve_transaction

        require_data_dir(data_dir)
        state = resolve_transaction(data_dir, tx_id, decision, producer_group).value
    emit({"tx_id": tx_id, "state": state}, as_json, f"{tx_id}: {state}")


def register(cli: click.Group) -> None:
    cli.add_command(tx_group)
