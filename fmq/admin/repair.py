"""The explicit repair step: cut the log at an offset an operator chose, keeping what it
cuts so that the cut can be undone.

Recovery never cuts anything but a torn tail; after ``fmq log verify`` names corruption,
an operator may decide to cut there and lose what follows. Nothing is thrown away: before
the log changes, the tail of the segment the cut falls in is copied (from the cut to its
last non-zero byte: the rest of a preallocated segment is zeros), and the segments after it
are moved (not deleted), into ``DATA_DIR/repair-<UTC time>/`` with a ``manifest.json``
naming each file, its size and SHA-256, the cut offset and the log's end before and after.
The index and the checkpoint go there too (moved, listed under ``derived``): they describe
the log before the cut, so the next open rebuilds them from what remains, and an undo puts
them back, because a log with damage before its checkpoint opens only with that
checkpoint (recovery replays from it and never reads the damage). An undo
(:mod:`fmq.admin.repair_undo`) puts everything back, as long as nothing was written to the
log since, and survives a kill.

The order of the steps makes an interrupted repair harmless: the copy and the manifest
are fsync'd before anything moves, the index and the checkpoint move before the log
changes, and the moves are fsync'd before the tail is zeroed; a repair stopped at any point
can be run again, or undone.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field

from fmq.datadir import (
    CHECKPOINT_FILE,
    INDEX_DIR,
    LOG_DIR,
    DataDirLock,
    format_segment_name,
    parse_segment_name,
    require_data_dir,
)
from fmq.errors import InvalidArgument, StorageError
from fmq.log.fileio import OS_IO
from fmq.log.log import Log
from fmq.log.reader import OnCorruption
from fmq.log.record import FORMAT_MAX_RECORD
from fmq.log.scanner import LogScanner

REPAIR_DIR_PREFIX = "repair-"
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = 1
#: The state derived from the log that a cut moves into its repair directory (when it
#: exists) and an undo puts back: a directory and a file of the data directory.
DERIVED = (INDEX_DIR, CHECKPOINT_FILE)


@dataclass
class CutPlan:
    """What a cut at ``offset`` would change, found without changing anything."""

    data_dir: str
    offset: int
    log_end: int  # where the log ends now
    copied: str | None  # the segment the cut falls inside (its tail is zeroed)
    moved: list[str] = field(default_factory=list)  # whole segments at or after the cut

    @property
    def bytes_cut(self) -> int:
        return max(0, self.log_end - self.offset)


@dataclass
class CutResult:
    plan: CutPlan
    repair_dir: str  # where the cut bytes are kept
    derived: list[str] = field(default_factory=list)  # the index, the checkpoint moved there


def plan_cut(data_dir: str, offset: int) -> CutPlan:
    """Check that ``data_dir`` is a stopped broker's data directory and that ``offset`` is
    where a record (or damage, or the end) starts; say what a cut there would change.
    Raises before anything is asked or changed."""
    require_data_dir(data_dir)
    with DataDirLock(data_dir):
        return _plan(data_dir, offset)


def cut_log(data_dir: str, offset: int) -> CutResult:
    """Cut the log of a stopped broker at ``offset`` (a record boundary), keeping the cut
    bytes in a new repair directory (see the module doc)."""
    require_data_dir(data_dir)
    with DataDirLock(data_dir):
        plan = _plan(data_dir, offset)
        log_dir = os.path.join(data_dir, LOG_DIR)
        repair_dir = _new_repair_dir(data_dir)
        files = []
        if plan.copied is not None:
            files.append(_keep_tail(os.path.join(log_dir, plan.copied),
                                    offset - parse_segment_name(plan.copied), repair_dir))
        files += [describe(os.path.join(log_dir, name), "moved") for name in plan.moved]
        derived = [name for name in DERIVED if os.path.lexists(os.path.join(data_dir, name))]
        _write_manifest(repair_dir, {
            "format": MANIFEST_FORMAT, "cut_at": offset, "log_end_before": plan.log_end,
            "log_end_after": offset, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                              time.gmtime()),
            "files": files, "derived": derived})
        for name in derived:  # before the log changes: never a cut log with them
            OS_IO.rename(os.path.join(data_dir, name), os.path.join(repair_dir, name))
        if derived:
            OS_IO.fsync_dir(repair_dir)
            OS_IO.fsync_dir(data_dir)
        for name in plan.moved:
            OS_IO.rename(os.path.join(log_dir, name), os.path.join(repair_dir, name))
        if plan.moved:
            OS_IO.fsync_dir(repair_dir)
            OS_IO.fsync_dir(log_dir)
        log = Log(log_dir, 1 << 20)
        try:
            log.truncate(offset)
        finally:
            log.close()
        return CutResult(plan, repair_dir, derived)


def repair_dirs(data_dir: str) -> list[str]:
    """The repair directories of ``data_dir`` that hold a manifest, oldest first."""
    names = sorted(n for n in os.listdir(data_dir) if n.startswith(REPAIR_DIR_PREFIX))
    return [os.path.join(data_dir, n) for n in names
            if os.path.exists(os.path.join(data_dir, n, MANIFEST_FILE))]


# ---------------------------------------------------------------------------- helpers

def _plan(data_dir: str, offset: int) -> CutPlan:
    scanner = _scan(os.path.join(data_dir, LOG_DIR))
    boundaries = {rec.log_offset for rec in scanner}
    boundaries.update(d.offset for d in scanner.damages)
    end = scanner.end_offset
    if offset not in boundaries and offset != end:
        raise InvalidArgument(
            f"{offset} is not the offset of a record or of damage; use an offset "
            f"printed by `fmq log verify` or `fmq log dump`")
    plan = CutPlan(data_dir, offset, end, None)
    bases = scanner.bases
    for i, base in enumerate(bases):
        name = format_segment_name(base)
        if base > offset or (base == offset and i > 0):
            plan.moved.append(name)
        elif i + 1 == len(bases) or offset < bases[i + 1]:
            plan.copied = name  # the cut falls inside it: its tail will be zeroed
    return plan


def log_end(log_dir: str) -> int:
    scanner = _scan(log_dir)
    for _rec in scanner:
        pass
    return scanner.end_offset


def _scan(log_dir: str) -> LogScanner:
    """The one scanner a repair reads the log with: past damage, bodies not copied."""
    return LogScanner(log_dir, on_corruption=OnCorruption.SKIP, copy_body=False,
                      max_record_size=FORMAT_MAX_RECORD)


def _new_repair_dir(data_dir: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = os.path.join(data_dir, REPAIR_DIR_PREFIX + stamp)
    n = 1
    while os.path.exists(path):
        n += 1
        path = os.path.join(data_dir, f"{REPAIR_DIR_PREFIX}{stamp}-{n}")
    os.mkdir(path)
    OS_IO.fsync_dir(data_dir)
    return path


CHUNK = 1 << 20


def kept_name(entry: dict) -> str:
    return entry["name"] + ".tail" if entry["kept"] == "tail" else entry["name"]


def _keep_tail(segment: str, at: int, repair_dir: str) -> dict:
    """Copy a segment's bytes from ``at`` to its last non-zero byte (a segment is
    preallocated with zeros, and the cut zeroes the rest: those need no copy) into
    ``repair_dir``, fsync'd; the manifest entry for it."""
    name = os.path.basename(segment)
    kept = os.path.join(repair_dir, name + ".tail")
    with open(segment, "rb") as fin, open(kept, "wb") as fout:
        fin.seek(at)
        written = last_nonzero = 0
        for chunk in iter(lambda: fin.read(CHUNK), b""):
            fout.write(chunk)
            stripped = len(chunk.rstrip(b"\0"))
            if stripped:
                last_nonzero = written + stripped
            written += len(chunk)
        fout.truncate(last_nonzero)
        fout.flush()
        os.fsync(fout.fileno())
    OS_IO.fsync_dir(repair_dir)
    entry = describe(kept, "tail")
    entry["name"] = name
    entry["at"] = at
    return entry


def describe(path: str, kept: str) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return {"name": os.path.basename(path), "kept": kept, "size": os.path.getsize(path),
            "sha256": digest.hexdigest()}


def _write_manifest(repair_dir: str, manifest: dict) -> None:
    OS_IO.write_file_atomically(os.path.join(repair_dir, MANIFEST_FILE),
                                json.dumps(manifest, indent=1).encode())


def read_manifest(repair_dir: str) -> dict:
    path = os.path.join(repair_dir, MANIFEST_FILE)
    try:
        with open(path, "rb") as f:
            manifest = json.loads(f.read())
    except FileNotFoundError:
        raise InvalidArgument(f"{repair_dir} is not a repair directory (no "
                              f"{MANIFEST_FILE})") from None
    except ValueError as exc:
        raise StorageError(f"{path} is damaged ({exc}); the kept segments beside it are "
                           f"intact and can be copied back by hand") from None
    if manifest.get("format") != MANIFEST_FORMAT:
        raise StorageError(f"{path} has format {manifest.get('format')!r}; this FMQ reads "
                           f"format {MANIFEST_FORMAT}")
    return manifest
