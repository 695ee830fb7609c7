"""``fmq log verify | dump | repair``: offline tools on a data directory's log."""

from __future__ import annotations

import os
import sys

import click
from fmq.cli import output as out
from fmq.cli.common import data_dir_argument, emit, fmq_errors, json_option
from fmq.cli.progress import Progress, log_bytes

from fmq.admin.log_position import check_record_start
from fmq.datadir import LOG_DIR
from fmq.log.reader import OnCorruption
from fmq.log.record import RecordType
from fmq.log.scanner import LogScanner
from fmq.units import timestamp_ms


def _log_dir(data_dir: str) -> str:
    return os.path.join(data_dir, LOG_DIR)


@click.group("log")
def log_group() -> None:
    """Inspect, verify and repair the log of a data directory."""


@log_group.command("verify")
@data_dir_argument
@json_option
@fmq_errors
def verify(data_dir: str, as_json: bool) -> None:
    """Check every record's CRC and fields. Exit 0 when clean (a torn tail is reported: the
    broker cuts it on open), 3 when corruption lies before valid records."""
    scanner = LogScanner(_log_dir(data_dir), on_corruption=OnCorruption.SKIP, copy_body=False)
    counts: dict[str, int] = {}
    first, end = log_bytes(data_dir)
    with Progress("verifying", end - first) as progress:
        for rec in scanner:
            name = RecordType(rec.type).name
            counts[name] = counts.get(name, 0) + 1
            progress.update(rec.log_offset - first)
    result = {
        "ok": not scanner.damages,
        "segments": len(scanner.bases),
        "records": counts,
        "end_offset": scanner.end_offset,
        "torn_tail": scanner.torn.to_dict() if scanner.torn else None,
        "corruption": [d.to_dict() for d in scanner.damages],
    }
    if as_json:
        emit(result, True)
    else:
        click.echo(out.fields([
            ("segments", result["segments"]),
            ("records", sum(counts.values())),
            ("valid log ends at", scanner.end_offset),
        ]))
        click.echo(out.table(sorted(counts.items()), [("TYPE", lambda c: c[0]),
                                                      ("RECORDS", lambda c: c[1])],
                             "no records"))
        if scanner.torn:
            click.echo(f"torn tail at {scanner.torn.offset} in {scanner.torn.segment}: "
                       f"{scanner.torn.reason} (cut on the next open)")
        for d in scanner.damages:
            click.echo(f"CORRUPT: segment {d.segment} offset {d.offset}: {d.reason}")
        click.echo("OK" if result["ok"] else "CORRUPTION FOUND")
    if scanner.damages:
        sys.exit(3)


@log_group.command("dump")
@data_dir_argument
@click.option("--from", "start", type=click.IntRange(min=0), default=None,
              help="Log offset of the first record (a record boundary).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most N records.")
@click.option("--body/--no-body", default=False, help="Include bodies (as UTF-8 text).")
@json_option
@fmq_errors
def dump(data_dir: str, start: int | None, limit: int | None, body: bool, as_json: bool) -> None:
    """Print records, one per line (fillers included)."""
    if start is not None:
        check_record_start(data_dir, start)
    scanner = LogScanner(_log_dir(data_dir), start_offset=start, on_corruption=OnCorruption.RAISE,
                         copy_body=body)
    n = 0
    first, end = log_bytes(data_dir)
    first = max(first, start or 0)
    # Progress only when the records go to a file or a pipe: on a terminal they show it.
    with Progress("dumping", end - first,
                  enabled=sys.stderr.isatty() and not sys.stdout.isatty()) as progress:
        for rec in scanner:
            if limit is not None and n >= limit:
                break
            n += 1
            d = rec.to_dict(with_body=body)
            if as_json:
                emit(d, True)
            else:
                click.echo(dump_line(d))
            progress.update(rec.log_offset - first)


def dump_line(d: dict) -> str:
    """One record of ``fmq log dump``: offset, type, then ``key=value`` for every field it
    has; its store time as a UTC timestamp, its properties as ``name:value`` pairs."""
    def shown(k: str, v: object) -> str:
        if k == "store_time":
            return timestamp_ms(v)
        if isinstance(v, dict):
            return ",".join(f"{name}:{value}" for name, value in sorted(v.items()))
        return str(v)

    fields = " ".join(f"{k}={shown(k, v)}" for k, v in d.items()
                      if v not in (None, {}) and k not in ("offset", "type"))
    return f"{d['offset']:>12} {d['type']:<11} {fields}"


@log_group.command("repair")
@data_dir_argument
@click.option("--cut-at", "cut_at", type=click.IntRange(min=0), default=None,
              help="Log offset to cut at: every record from here on is removed from the "
                   "log (kept in DATA_DIR/repair-<time>/ for --undo).")
@click.option("--undo", "undo", is_flag=True,
              help="Put back what the last repair cut (or the one --repair-dir names).")
@click.option("--repair-dir", "repair_dir", type=click.Path(file_okay=False), default=None,
              help="With --undo: the repair directory to put back.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@fmq_errors
def repair(data_dir: str, cut_at: int | None, undo: bool, repair_dir: str | None,
           yes: bool) -> None:
    """Explicitly cut the log at an offset (after `log verify` named corruption there), or
    undo such a cut. The cut records leave the log but are kept, with a manifest, in a
    repair directory, with the index and the checkpoint; the index is rebuilt on the next
    open. An undo puts all of it back, and an undo that was interrupted is finished by
    running it again."""
    from fmq.admin.repair import cut_log, plan_cut
    from fmq.admin.repair_undo import undo_repair
    from fmq.units import size

    if undo == (cut_at is not None):
        raise click.UsageError("give either --cut-at OFFSET or --undo")
    if repair_dir is not None and not undo:
        raise click.UsageError("--repair-dir goes with --undo")
    if undo:
        if not yes:
            click.confirm("Put back the log as it was before the last repair?", abort=True)
        done = undo_repair(data_dir, repair_dir)
        derived = (f" and the {' and the '.join(done.derived)} it moved aside"
                   if done.derived else "")
        rebuilt = ("" if "index" in done.derived
                   else "; the index will be rebuilt on the next open")
        click.echo(f"put back {out.plural(len(done.restored), 'segment file')}{derived} "
                   f"from {done.repair_dir}; the log ends at {done.log_end} again{rebuilt}")
        return
    # Check everything first (a live broker, an offset that is no record start), then ask.
    plan = plan_cut(data_dir, cut_at)
    if not yes:
        click.confirm(f"Cut the log at offset {cut_at}, removing {size(plan.bytes_cut)} of "
                      f"records (kept in a repair directory for --undo)?", abort=True)
    result = cut_log(data_dir, cut_at)
    moved = ", ".join(plan.moved + result.derived) or "none"
    click.echo(f"cut the log at {cut_at}; the cut bytes are kept in {result.repair_dir} "
               f"(moved there: {moved}); undo with `fmq log repair {data_dir} "
               f"--undo`; the index will be rebuilt on the next open")


def register(cli: click.Group) -> None:
    cli.add_command(log_group)
