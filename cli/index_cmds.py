"""``fmq index rebuild``: rebuild the LMDB index from the log, in process or on Spark."""

from __future__ import annotations

import click
from fmq.cli import output as out
from fmq.cli.common import data_dir_argument, emit, fmq_errors, json_option
from fmq.cli.progress import Progress, log_bytes

from fmq.spark.summary import summary_text


@click.group("index")
def index_group() -> None:
    """Manage the index (derived from the log; deleting it loses nothing)."""


@index_group.command("rebuild")
@data_dir_argument
@click.option("--spark", is_flag=True, help="Run the rebuild as a Spark job (fmq[spark]).")
@click.option("--master", default=None, help="With --spark: Spark master URL [default: local[*]].")
@click.option("--out", "out_dir", default=None,
              help="With --spark: write the index here instead of DATA_DIR/index.")
@click.option("--parquet", "parquet_dir", default=None,
              help="With --spark: also write the record table and a summary as Parquet.")
@json_option
@fmq_errors
def rebuild(data_dir: str, spark: bool, master: str, out_dir: str | None,
            parquet_dir: str | None, as_json: bool) -> None:
    """Rebuild the index of a stopped broker from its log."""
    if not spark and master is not None:
        raise click.UsageError("--master needs --spark (the in-process rebuild uses no Spark)")
    if spark:
        run_rebuild = _spark_rebuild()
        result = run_rebuild(data_dir, master=master or "local[*]", out_dir=out_dir,
                             parquet_dir=parquet_dir)
        emit(result, as_json, summary_text(result))
        return
    if out_dir or parquet_dir:
        raise click.UsageError("--out and --parquet need --spark")
    from fmq.admin.rebuild_index import rebuild_index

    first, end = log_bytes(data_dir)  # until recovery says how much it replays
    with Progress("rebuilding index", end - first) as progress:
        report = rebuild_index(data_dir, progress=progress.update)
    emit(report, as_json,
         f"rebuilt the index: {out.plural(report['records_replayed'], 'record')} "
         f"({out.size(report['bytes_replayed'])}), "
         f"{out.plural(report['entries_indexed'], 'queue entry', 'queue entries')}, "
         f"{out.plural(report['open_transactions'], 'open transaction')}, "
         f"in {out.duration_ms(report['seconds'] * 1000)}")


def _spark_rebuild():
    """The Spark rebuild, or a clear error when the spark extra is not installed."""
    try:  # pyarrow and pandas are imported by Spark only once the job runs: check them now
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401

        from fmq.spark.rebuild import run_rebuild
    except ImportError as exc:
        raise click.ClickException(
            f"--spark needs the spark extra ({exc.name or exc} is not installed): "
            f"pip install 'fmq[spark]' (and Java 17 for a local Spark)") from None
    return run_rebuild


def register(cli: click.Group) -> None:
    cli.add_command(index_group)
