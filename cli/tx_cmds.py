"""``fmq tx list | resolve``: operators' view of open transactions.

With a DATA_DIR these work offline on a stopped broker's directory.
"""

from __future__ import annotations

import click
from fmq.cli.common import emit, fmq_errors, json_option


@click.group("tx")
def tx_group() -> None:
    """List and resolve open (undecided) transactions."""


@tx_group.command("list")
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False))
@json_option
@fmq_errors
def tx_list(data_dir: str, as_json: bool) -> None:
    """List the open transactions of a stopped broker's DATA_DIR, oldest first."""
    from fmq.tx.offline import open_transactions_in_log

    txs = open_transactions_in_log(data_dir)
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


@tx_group.command("resolve")
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False))
@click.argument("tx_id")
@click.argument("decision", type=click.Choice(["commit", "rollback"]))
@json_option
@fmq_errors
def tx_resolve(data_dir: str, tx_id: str, decision: str, as_json: bool) -> None:
    """Commit or roll back one open transaction of a stopped broker's DATA_DIR, as an
    operator who knows what the producer decided."""
    from fmq.broker import Broker

    with Broker.open(data_dir) as broker:
        state = broker.commit(tx_id) if decision == "commit" else broker.rollback(tx_id)
    emit({"tx_id": tx_id, "state": state.value}, as_json, f"{tx_id}: {state.value}")


def register(cli: click.Group) -> None:
    cli.add_command(tx_group)
