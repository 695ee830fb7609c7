"""``fmq demo``: a short embedded session against a data directory of its own."""

from __future__ import annotations

import shutil
import tempfile

import click
from fmq.cli.common import data_dir_to_create, fmq_errors
from fmq.cli.output import fields, section

from fmq import units


@click.command("demo")
@data_dir_to_create(None, "Keep the demo's data here (the same as DATA_DIR) [default: a "
                          "temporary directory, deleted afterwards].")
@fmq_errors
def demo(data_dir: str | None) -> None:
    """Send messages and a transaction through an embedded broker, then read them back.
    Without DATA_DIR it works in a temporary directory, so it never touches a server's data."""
    if data_dir is not None:
        _run_demo(data_dir)
        return
    scratch = tempfile.mkdtemp(prefix="fmq-demo-")
    try:
        click.echo(f"demo data in {scratch} (deleted at the end; keep it with --data-dir)")
        _run_demo(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_demo(data_dir: str) -> None:
    import fmq

    with fmq.Broker.open(data_dir) as broker:
        for i in range(3):
            r = broker.send(fmq.Message("demo", f"hello {i}".encode(), key=f"k{i}"))
            click.echo(f"sent to queue {r.queue_id} offset {r.queue_offset} (log {r.offset})")
        tx = broker.transactions.prepare([fmq.Message("demo", b"in a transaction", key="tx")],
                                         "demo-group")
        click.echo(f"prepared {tx}: {broker.transactions.commit(tx).value}")
        broker.wait_indexed()
        for qid in range(broker.config.queues_per_topic):
            lo, hi = broker.reads.queue_range("demo", qid)
            for m in broker.reads.pull("demo", qid, max(lo, hi - 4)):
                key = f" key={m.key}" if m.key else ""
                click.echo(f"queue {qid}@{m.queue_offset}{key}: {m.body.decode()}")
        s = broker.stats()
        click.echo(section("broker", fields([
            ("log", f"{units.size(s['log_end'] - s['log_start'])} in "
                    f"{units.plural(s['segments'], 'segment')}"),
            ("flushes (group commits)", units.count(s["flushes"])),
            ("index lag", units.size(s["index_lag"])),
            ("open transactions", s["open_transactions"]),
        ])))


def register(cli: click.Group) -> None:
    cli.add_command(demo)
