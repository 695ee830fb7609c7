"""``fmq demo``: a short embedded session against a local data directory."""

from __future__ import annotations

import click


@click.command("demo")
@click.option("--data-dir", default="./fmq-data", show_default=True)
def demo(data_dir: str) -> None:
    """Send messages and a transaction through an embedded broker, then read them back."""
    import fmq

    with fmq.Broker.open(data_dir) as broker:
        for i in range(3):
            r = broker.send(fmq.Message("demo", f"hello {i}".encode(), key=f"k{i}"))
            click.echo(f"sent to queue {r.queue_id} offset {r.queue_offset} (log {r.offset})")
        tx = broker.prepare([fmq.Message("demo", b"in a transaction", key="tx")], "demo-group")
        click.echo(f"prepared {tx}: {broker.commit(tx).value}")
        broker.wait_indexed()
        for qid in range(broker.config.queues_per_topic):
            lo, hi = broker.queue_range("demo", qid)
            for m in broker.pull("demo", qid, max(lo, hi - 4)):
                click.echo(f"queue {qid}@{m.queue_offset}: {m.body.decode()!r} key={m.key}")
        click.echo(f"stats: {broker.stats()}")


def register(cli: click.Group) -> None:
    cli.add_command(demo)
