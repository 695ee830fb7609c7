"""``fmq checkpoint show``."""

from __future__ import annotations

import os

import click
from fmq.cli import output as out
from fmq.cli.common import data_dir_argument, emit, fmq_errors, json_option

from fmq.datadir import CHECKPOINT_FILE
from fmq.recovery.checkpoint import read_checkpoint


@click.group("checkpoint")
def checkpoint_group() -> None:
    """Inspect the checkpoint (where recovery starts replaying)."""


@checkpoint_group.command("show")
@data_dir_argument
@json_option
@fmq_errors
def show(data_dir: str, as_json: bool) -> None:
    """Print the checkpoint: recovery offset, applied offset, log end, time written."""
    cp = read_checkpoint(os.path.join(data_dir, CHECKPOINT_FILE))
    if cp is None:
        emit({"checkpoint": None}, as_json, "no checkpoint: recovery replays the whole log")
        return
    emit(cp.to_dict(), as_json, out.fields([
        ("recovery offset", f"{out.count(cp.recovery_offset)} (replay starts here)"),
        ("applied offset", f"{out.count(cp.applied_offset)} (indexed up to here)"),
        ("log end", out.count(cp.log_end)),
        ("written at", out.date_s(cp.written_at)),
    ]))


def register(cli: click.Group) -> None:
    cli.add_command(checkpoint_group)
