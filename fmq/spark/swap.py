"""Putting a freshly built index in place of the old one: renames made durable with a
directory fsync, through :class:`~fmq.log.fileio.FileIO` like every other durable step."""

from __future__ import annotations

import os
import shutil

from fmq.log.fileio import OS_IO, FileIO


def swap_in(tmp: str, target: str, io: FileIO = OS_IO) -> None:
    """Replace ``target`` by ``tmp`` (rename, fsync the parent). A crash between the two
    renames leaves no index: the broker then rebuilds it from the log on open."""
    parent = os.path.dirname(target) or "."
    old = None
    if os.path.exists(target):
        old = f"{target}.old-{os.getpid()}"
        io.rename(target, old)
    io.rename(tmp, target)
    io.fsync_dir(parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
