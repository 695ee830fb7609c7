"""Undoing ``fmq log repair`` (:mod:`fmq.admin.repair`): the kept tail written back, the
moved segments, the index and the checkpoint moved back, the repair directory removed.

An undo first writes ``DATA_DIR/repair-undo`` naming its repair directory (fsync'd): until
that file exists nothing has changed, and once it exists the undo goes forward only. Every
step after it can be run twice (a tail written again, a file moved back only when it is
still in the repair directory), so a killed undo is finished by running it again, and a
broker refuses to open the directory meanwhile (:func:`fmq.datadir.refuse_unfinished_undo`):
the directory is the repaired one, the restored one, or one that says which command ends
the undo, never a half-restored log a broker could write to. The file goes last.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field

from fmq.admin.repair import (
    CHUNK,
    DERIVED,
    MANIFEST_FILE,
    REPAIR_DIR_PREFIX,
    describe,
    kept_name,
    log_end,
    read_manifest,
    repair_dirs,
)
from fmq.datadir import LOG_DIR, UNDO_FILE, DataDirLock, require_data_dir
from fmq.errors import InvalidArgument, StorageError
from fmq.index.store import destroy
from fmq.log.fileio import OS_IO


@dataclass
class UndoResult:
    repair_dir: str
    offset: int  # where the cut was
    log_end: int  # where the log ends again
    restored: list[str]  # the segment files put back
    derived: list[str] = field(default_factory=list)  # the index, the checkpoint put back


def undo_repair(data_dir: str, repair_dir: str | None = None) -> UndoResult:
    """Put back what a repair cut and moved aside (the newest repair when ``repair_dir``
    is None), or finish an undo that was interrupted. Refused when the log changed since
    the repair: records written after the cut would be lost."""
    require_data_dir(data_dir)
    with DataDirLock(data_dir):
        unfinished = _unfinished_undo(data_dir)
        if unfinished is not None:
            if (repair_dir is not None
                    and os.path.abspath(repair_dir) != unfinished["repair_dir"]):
                raise InvalidArgument(
                    f"the undo of {unfinished['repair_dir']} was interrupted; finish it "
                    f"first (`fmq log repair {data_dir} --undo`), then undo {repair_dir}")
            return _finish_undo(data_dir, unfinished)
        if repair_dir is None:
            found = repair_dirs(data_dir)
            if not found:
                raise InvalidArgument(f"{data_dir} holds no repair to undo (no "
                                      f"{REPAIR_DIR_PREFIX}*/{MANIFEST_FILE})")
            repair_dir = found[-1]
        repair_dir = os.path.abspath(repair_dir)
        manifest = read_manifest(repair_dir)
        _check_undo(data_dir, repair_dir, manifest)
        undo = {"repair_dir": repair_dir, "cut_at": manifest["cut_at"],
                "log_end_before": manifest["log_end_before"]}
        # From here on the undo only goes forward (the module doc).
        OS_IO.write_file_atomically(os.path.join(data_dir, UNDO_FILE),
                                    json.dumps(undo).encode())
        return _finish_undo(data_dir, undo)


def _check_undo(data_dir: str, repair_dir: str, manifest: dict) -> None:
    """Raise unless the directory is as the repair in ``repair_dir`` left it (the broker
    may have rebuilt an index and written a checkpoint since: those are replaced)."""
    log_dir = os.path.join(data_dir, LOG_DIR)
    end = log_end(log_dir)
    if end != manifest["log_end_after"]:
        raise InvalidArgument(
            f"the log ends at {end}, not at {manifest['log_end_after']} where the repair "
            f"in {repair_dir} left it: records were written since, and undoing would "
            f"lose them; the cut bytes stay in {repair_dir}")
    for entry in manifest["files"]:
        _check_kept(repair_dir, entry)
        present = os.path.exists(os.path.join(log_dir, entry["name"]))
        if present != (entry["kept"] == "tail"):
            raise StorageError(
                f"{entry['name']} is {'back' if present else 'missing'} in {log_dir}, "
                f"not as the repair left it; nothing changed")
    for name in manifest.get("derived", []):
        if not os.path.lexists(os.path.join(repair_dir, name)):
            raise StorageError(f"{name} is missing from {repair_dir}, where the repair moved "
                               f"it; nothing changed")


def _check_kept(repair_dir: str, entry: dict) -> None:
    kept = os.path.join(repair_dir, kept_name(entry))
    found = describe(kept, entry["kept"])
    if (found["size"], found["sha256"]) != (entry["size"], entry["sha256"]):
        raise StorageError(f"{kept} is not the file the repair kept (its size or SHA-256 "
                           f"differs from {MANIFEST_FILE}); nothing changed")


def _finish_undo(data_dir: str, undo: dict) -> UndoResult:
    """Every step of the undo ``undo`` (what its ``repair-undo`` file says); each may have
    run before (a killed undo): a kept file still in the repair directory has not been put
    back, and tails are kept until the end, so writing one again is harmless."""
    repair_dir = undo["repair_dir"]
    done = UndoResult(repair_dir, undo["cut_at"], undo["log_end_before"], [])
    manifest_path = os.path.join(repair_dir, MANIFEST_FILE)
    if not os.path.exists(manifest_path):  # killed while removing the repair directory
        _remove_repair_dir(data_dir, repair_dir)
        return done
    manifest = read_manifest(repair_dir)
    log_dir = os.path.join(data_dir, LOG_DIR)
    for entry in manifest["files"]:
        kept = os.path.join(repair_dir, kept_name(entry))
        target = os.path.join(log_dir, entry["name"])
        if os.path.exists(kept):
            _check_kept(repair_dir, entry)
            if entry["kept"] == "tail":
                _put_tail_back(kept, target, entry["at"])
            else:
                OS_IO.rename(kept, target)
        elif not os.path.exists(target):
            raise StorageError(f"{entry['name']} is neither in {repair_dir} nor in {log_dir}: "
                               f"something removed it during the undo; restore it from a "
                               f"backup, then run the undo again")
        done.restored.append(entry["name"])
    OS_IO.fsync_dir(log_dir)
    derived = manifest.get("derived", [])
    for name in DERIVED:
        kept, target = os.path.join(repair_dir, name), os.path.join(data_dir, name)
        if name in derived and not os.path.lexists(kept):
            continue  # put back by the killed run
        _remove_derived(target)  # made since the repair, from the cut log
        if name in derived:
            OS_IO.rename(kept, target)
            done.derived.append(name)
    OS_IO.fsync_dir(data_dir)
    OS_IO.unlink(manifest_path)  # no longer a repair to undo
    OS_IO.fsync_dir(repair_dir)
    _remove_repair_dir(data_dir, repair_dir)
    return done


def _remove_repair_dir(data_dir: str, repair_dir: str) -> None:
    """Its bytes are back in the log: remove it, then the ``repair-undo`` file."""
    shutil.rmtree(repair_dir, ignore_errors=True)
    OS_IO.fsync_dir(data_dir)
    OS_IO.unlink(os.path.join(data_dir, UNDO_FILE))
    OS_IO.fsync_dir(data_dir)


def _unfinished_undo(data_dir: str) -> dict | None:
    """What the ``repair-undo`` file of an interrupted undo says, or None."""
    path = os.path.join(data_dir, UNDO_FILE)
    try:
        with open(path, "rb") as f:
            undo = json.loads(f.read())
        missing = {"repair_dir", "cut_at", "log_end_before"} - set(undo)
        if missing:
            raise ValueError(f"no {', '.join(sorted(missing))}")
        return undo
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise StorageError(f"{path} is damaged ({exc}); it is written whole (temp file and "
                           f"rename), so something else changed it; the {REPAIR_DIR_PREFIX}* "
                           f"directory beside it holds what is left to put back, each file "
                           f"named in its {MANIFEST_FILE}") from None


def _put_tail_back(kept: str, segment: str, at: int) -> None:
    with open(kept, "rb") as fin:
        fd = OS_IO.open(segment, os.O_WRONLY)
        try:
            position = at
            for chunk in iter(lambda: fin.read(CHUNK), b""):
                OS_IO.pwrite(fd, chunk, position)
                position += len(chunk)
            OS_IO.fsync(fd)
        finally:
            OS_IO.close(fd)


def _remove_derived(path: str) -> None:
    """Remove an index directory or a checkpoint file (both rebuilt from the log)."""
    if os.path.isdir(path) and not os.path.islink(path):
        destroy(path)
        return
    try:
        OS_IO.unlink(path)
    except FileNotFoundError:
        pass
