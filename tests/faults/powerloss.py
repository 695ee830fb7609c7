"""A power-loss model as an I/O layer (SQLite's crash model, ALICE's directory rules).

:class:`PowerLossIO` passes every operation to the OS (the files then hold what the page
cache would hold) and remembers what is *not yet durable*:

* per file, the writes (and truncations) since its last fsync/fdatasync;
* per directory, the entries created, renamed or unlinked since its last directory fsync.

At operation ``cut_at`` the power goes out: that operation and every later one raises
:class:`PowerCut` (nothing more reaches the files). :meth:`PowerLossIO.apply_power_cut` then
rewrites the files as a disk could hold them after the cut: each file is its last durable
content plus each unsynced write **kept**, **dropped** or **garbled** (random bytes), and
each unsynced directory operation is kept or undone (a created file vanishes, a rename goes
back, an unlinked file comes back). ``policy="drop"`` drops and undoes everything unsynced,
``"random"`` decides each one with the given RNG, ``"ordered"`` keeps a random prefix of
each file's unsynced writes (write-back in file order; the next write may be torn).

``nosync=True`` turns ``fdatasync`` into a no-op that makes nothing durable (the negative
control, fault 12: the suite must then detect lost acknowledged data).

The LMDB index does its own I/O; the test decides what becomes of it (kept, deleted, or
the copy taken when the last checkpoint synced it, see :attr:`index_snapshot`).
"""

from __future__ import annotations

import os
import random
import shutil

import fmq
from fmq.log.fileio import FileIO


class PowerCut(BaseException):
    """The simulated power went out: nothing more reaches the disk."""


class PowerLossIO(FileIO):
    def __init__(self, cut_at: int | None = None, nosync: bool = False,
                 snapshot_dir: str | None = None) -> None:
        self.cut_at = cut_at
        self.nosync = nosync
        self.ops = 0
        self.dead = False
        self._fid_of_fd: dict[int, int] = {}
        self._path: dict[int, str | None] = {}
        self._durable: dict[int, bytes | None] = {}
        self._pending: dict[int, list[tuple]] = {}
        self._dirops: dict[str, list[tuple]] = {}
        self._next = 0
        #: Where a copy of the index is kept each time a checkpoint is written (the index
        #: was synced just before): what survives a power cut at the least.
        self.snapshot_dir = snapshot_dir
        self.index_snapshot: str | None = None

    # ------------------------------------------------------------------ bookkeeping

    def _tick(self) -> None:
        if self.dead:
            raise PowerCut()
        self.ops += 1
        if self.cut_at is not None and self.ops >= self.cut_at:
            self.dead = True
            raise PowerCut()

    def _fid_for_path(self, path: str) -> int | None:
        path = os.path.abspath(path)
        for fid, p in self._path.items():
            if p == path:
                return fid
        if not os.path.exists(path):
            return None
        return self._track(path, _read(path))

    def _track(self, path: str | None, durable: bytes | None) -> int:
        fid = self._next
        self._next += 1
        self._path[fid] = os.path.abspath(path) if path else None
        self._durable[fid] = durable
        self._pending[fid] = []
        return fid

    @staticmethod
    def _dir(path: str) -> str:
        return os.path.dirname(os.path.abspath(path))

    # ------------------------------------------------------------------ operations

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        existed = os.path.exists(path)
        if flags & os.O_CREAT and not existed:
            self._tick()
        fd = super().open(path, flags, mode)
        fid = self._fid_for_path(path) if existed else None
        if fid is None:
            fid = self._track(path, None)
            self._dirops.setdefault(self._dir(path), []).append(("create", fid, os.path.abspath(path)))
        elif flags & os.O_TRUNC:
            self._pending[fid].append(("t", 0))
        self._fid_of_fd[fd] = fid
        return fd

    def close(self, fd: int) -> None:
        self._fid_of_fd.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd: int, data, position: int) -> int:
        self._tick()
        n = super().pwrite(fd, data, position)
        self._pending[self._fid_of_fd[fd]].append(("w", position, bytes(data)))
        return n

    def ftruncate(self, fd: int, size: int) -> None:
        self._tick()
        super().ftruncate(fd, size)
        self._pending[self._fid_of_fd[fd]].append(("t", size))

    def _synced(self, fd: int) -> None:
        fid = self._fid_of_fd[fd]
        self._durable[fid] = _read(f"/proc/self/fd/{fd}")  # the fd may be write-only
        self._pending[fid] = []

    def fdatasync(self, fd: int) -> None:
        self._tick()
        if self.nosync:
            return  # the negative control: acknowledged, never durable
        super().fdatasync(fd)
        self._synced(fd)

    def fsync(self, fd: int) -> None:
        self._tick()
        super().fsync(fd)
        self._synced(fd)

    def rename(self, src: str, dst: str) -> None:
        self._tick()
        fid = self._fid_for_path(src)
        replaced = self._fid_for_path(dst)
        super().rename(src, dst)
        if replaced is not None:
            self._path[replaced] = None
        self._path[fid] = os.path.abspath(dst)
        self._dirops.setdefault(self._dir(dst), []).append(
            ("rename", fid, os.path.abspath(src), os.path.abspath(dst), replaced))

    def unlink(self, path: str) -> None:
        self._tick()
        fid = self._fid_for_path(path)
        super().unlink(path)
        if fid is not None:
            self._path[fid] = None
            self._dirops.setdefault(self._dir(path), []).append(("unlink", fid, os.path.abspath(path)))

    def fsync_dir(self, path: str) -> None:
        self._tick()
        super().fsync_dir(path)
        self._dirops[os.path.abspath(path)] = []

    def write_file_atomically(self, path: str, data: bytes) -> None:
        if self.snapshot_dir is not None and not self.dead:
            index = os.path.join(os.path.dirname(os.path.abspath(path)), "index")
            if os.path.isdir(index):  # the checkpoint synced it just before
                snap = os.path.join(self.snapshot_dir, f"index-{self.ops}")
                shutil.copytree(index, snap)
                self.index_snapshot = snap
        super().write_file_atomically(path, data)

    # ------------------------------------------------------------------ the cut

    def unsynced_counts(self) -> tuple[int, int]:
        return (sum(len(p) for p in self._pending.values()),
                sum(len(o) for o in self._dirops.values()))

    def apply_power_cut(self, rng: random.Random, policy: str = "random") -> dict:
        """Rewrite the files as they could be after the cut (call once every fd the broker
        held is closed). Returns what was decided, for the failure message."""
        assert policy in ("drop", "random", "keep", "ordered")
        self.dead = True

        def choose(options, weights):
            if policy == "drop":
                return options[-1]
            if policy == "keep":
                return options[0]
            return rng.choices(options, weights)[0]

        decided = {"kept": 0, "dropped": 0, "garbled": 0, "undone": 0}
        images: dict[int, bytes] = {}
        for fid, pending in self._pending.items():
            image = bytearray(self._durable[fid] or b"")
            # "ordered": the file's unsynced writes reach the disk in order (write-back by
            # increasing page of an appended file): a random prefix is kept, the next one
            # may be torn (garbled), the rest are lost
            prefix = rng.randint(0, len(pending)) if policy == "ordered" else -1
            for k, op in enumerate(pending):
                if policy == "ordered":
                    what = "keep" if k < prefix else (
                        rng.choice(["garble", "drop"]) if k == prefix else "drop")
                else:
                    what = choose(["keep", "garble", "drop"], [4, 1, 4])
                if what == "drop":
                    decided["dropped"] += 1
                    continue
                decided["kept" if what == "keep" else "garbled"] += 1
                if op[0] == "t":
                    del image[op[1]:]
                    image += bytes(max(0, op[1] - len(image)))
                else:
                    _, pos, data = op
                    if what == "garble":
                        data = rng.randbytes(len(data))
                    if len(image) < pos:
                        image += bytes(pos - len(image))
                    image[pos : pos + len(data)] = data
            images[fid] = bytes(image)
        where = dict(self._path)
        for ops in self._dirops.values():
            undo_last = rng.randint(0, len(ops)) if policy == "ordered" else -1
            for k, op in enumerate(reversed(ops)):
                if policy == "ordered":  # a journal: a suffix of the operations is lost
                    if k >= undo_last:
                        continue
                elif choose(["keep", "undo"], [1, 1]) == "keep":
                    continue
                decided["undone"] += 1
                if op[0] == "create":
                    where[op[1]] = None
                elif op[0] == "rename":
                    _, fid, src, dst, replaced = op
                    where[fid] = src
                    if replaced is not None:
                        where[replaced] = dst
                elif op[0] == "unlink":
                    where[op[1]] = op[2]
        # remove every tracked file, then write each surviving one at its final path
        for p in set(self._path.values()) | {p for p in where.values() if p}:
            if p and os.path.exists(p):
                os.unlink(p)
        for fid, p in where.items():
            if p is not None:
                with open(p, "wb") as f:
                    f.write(images.get(fid, self._durable[fid] or b""))
        return decided


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def run_until_power_cut(data: str, config: fmq.BrokerConfig, plan: list[dict],
                        io: PowerLossIO) -> list[dict]:
    """Run ``plan`` on a broker whose I/O goes through ``io`` until the power cut (or an
    FMQ error it causes); returns the acknowledgements it got before that."""
    from tests.faults.workload import execute

    acks: list[dict] = []
    broker = None
    try:
        broker = fmq.Broker.open(data, config, io=io)
        execute(broker, plan, lambda **e: acks.append(e))
    except (PowerCut, fmq.FMQError):
        pass
    finally:
        if broker is not None:
            try:
                broker.close()
            except (PowerCut, fmq.FMQError):
                pass
    return acks
