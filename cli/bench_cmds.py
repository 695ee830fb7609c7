"""``fmq bench produce|consume|tx``: the load generator (fmq.loadgen) against a running
server, with a human report or one JSON object (docs/performance.md)."""

from __future__ import annotations

import sys

import click
from fmq.cli.client_options import client_kwargs, security_options
from fmq.cli.common import emit, fmq_errors, json_option
from fmq.cli.net_cmds import server_address_option as server_option

from fmq.client.auth import resolve_credentials
from fmq.loadgen import BenchSpec, run_bench
from fmq.loadgen.runner import default_processes


@click.command("bench")
@click.argument("kind", type=click.Choice(["produce", "consume", "tx"]))
@server_option
@click.option("--producers", "-c", default=16, show_default=True,
              help="Connections (producers, or consumers for consume).")
@click.option("--size", default=1024, show_default=True, help="Message body size in bytes.")
@click.option("--duration", default=10.0, show_default=True, help="Seconds of load.")
@click.option("--pipeline", default=1, show_default=True,
              help="Requests in flight per connection.")
@click.option("--batch-linger", "batch_linger", default=0.0, show_default=True,
              help="produce: send SEND_BATCH requests of --batch messages, a batch waiting at "
                   "most this many ms for its messages (0: one SEND per message).")
@click.option("--batch", default=16, show_default=True,
              help="Messages per batch with --batch-linger.")
@click.option("--processes", default=0, show_default=True,
              help=f"Load processes (0: min(4, cores) = {default_processes()} here).")
@click.option("--topic", default="fmq-bench", show_default=True)
@click.option("--follow", is_flag=True,
              help="consume: read the messages that arrive during the run (long polls), "
                   "not the ones already stored.")
@click.option("--commit-with-next-prepare", "commit_with_next", is_flag=True,
              help="tx: write each transaction's COMMIT in one write with the connection's "
                   "next PREPARE (TransactionProducer.commit_with_next); a transaction "
                   "counts once its COMMIT is answered.")
@click.option("--loop", type=click.Choice(["auto", "asyncio", "uvloop"]), default="auto",
              show_default=True, help="Event loop of the load processes (auto: uvloop if "
                                      "installed).")
@security_options
@json_option
@fmq_errors
def bench(kind: str, server: str, producers: int, size: int, duration: float, pipeline: int,
          batch_linger: float, batch: int, processes: int, topic: str, follow: bool,
          commit_with_next: bool, loop: str, as_json: bool) -> None:
    """Load a running server and report msgs/s, MB/s, latency percentiles, errors, the
    server's CPU per message, and whether the broker holds what was acknowledged.

    Exit status 1 when any request failed or the count check does not match."""
    report = run_bench(BenchSpec(kind=kind, server=server, producers=producers, size=size,
                                 duration_s=duration, pipeline=pipeline,
                                 batch_linger_ms=batch_linger, batch=batch,
                                 processes=processes, topic=topic, loop=loop,
                                 follow=follow, commit_with_next=commit_with_next,
                                 **bench_access()))
    emit(report.to_dict(), as_json, report.text())
    if not report.ok:
        sys.exit(1)


def register(cli: click.Group) -> None:
    cli.add_command(bench)


def bench_access() -> dict:
    """The TLS options and the credentials of the command line, for every load process."""
    given = client_kwargs()
    credentials = resolve_credentials(given.get("user"), None, given.get("password_file"))
    return {"tls": given.get("tls"), "credentials": credentials}
