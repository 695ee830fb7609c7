"""Crash harness: run a workload in a child process and SIGKILL it at an injected point.

The child opens a real broker on a real data directory with :class:`CrashingIO`, a
:class:`fmq.log.fileio.FileIO` that counts operations and, once *armed*, kills its own
process with SIGKILL at the chosen operation:

* ``before``: before the operation runs;
* ``after``: right after it (for ``fdatasync``: the data is durable, the ack never left);
* ``records=R[,extra=B]`` (pwrite only): write the first R whole records of the buffer
  (plus B bytes of the next one), then die, so the page cache holds a torn batch.

Each workload is a module of ``tests.workloads`` (run with ``python -m`` from the repository
root, so that ``tests`` is importable); :func:`child_context` gives it its arguments.
The child writes every acknowledgement to a side file, one JSON line each, fsync'd before
it goes on: what the parent finds there was acknowledged before the crash.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass

from fmq.log.fileio import FileIO
from fmq.log.record import record_length

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class CrashingIO(FileIO):
    """Counts operations by kind; kills the process at the armed one."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.plan: dict | None = None
        #: Count (and allow crashing on) writes to ``*.tmp`` files; see :meth:`arm`.
        self.include_tmp = False
        #: Every counted operation in order, as (kind, path), once set to a list.
        self.trace: list[tuple[str, str]] | None = None

    @property
    def total(self) -> int:
        """Operations counted so far, all kinds together."""
        return sum(self.counts.values())

    def arm(self, op: str, nth: int = 1, mode: str = "before", records: int = 0,
            extra: int = 0, segments_only: bool = True, include_tmp: bool = False) -> None:
        """Crash at the ``nth`` ``op`` from now on (``op`` = "pwrite", "fdatasync",
        "fsync", "rename", "fsync_dir", "unlink", or "any").

        ``segments_only`` (pwrite): only writes to ``*.seg`` files count towards ``nth``.
        ``include_tmp``: writes to ``*.tmp`` files (segment zero-fill, checkpoint body)
        count too; by default they are neither counted nor crashed on.
        Mode ``"torn"``: for a pwrite, write the first half of the buffer and die; for
        any other operation the same as ``"before"``."""
        self.plan = {"op": op, "left": nth, "mode": mode, "records": records, "extra": extra,
                     "segments_only": segments_only, "include_tmp": include_tmp}
        self.include_tmp = include_tmp

    def _hit(self, op: str, path_hint: str = "") -> dict | None:
        self.counts[op] = self.counts.get(op, 0) + 1
        if self.trace is not None:
            self.trace.append((op, os.path.basename(path_hint)))
        plan = self.plan
        if plan is None or plan["op"] not in (op, "any"):
            return None
        if plan["segments_only"] and op == "pwrite" and not path_hint.endswith(".seg"):
            return None
        plan["left"] -= 1
        return plan if plan["left"] == 0 else None

    def pwrite(self, fd: int, data, position: int) -> int:
        path = os.readlink(f"/proc/self/fd/{fd}")
        zero_fill = path.endswith(".tmp") and not self.include_tmp  # segment creation
        plan = None if zero_fill else self._hit("pwrite", path)
        if plan is None:
            return super().pwrite(fd, data, position)
        if plan["mode"] == "before":
            die()
        if plan["mode"] == "torn":
            view = memoryview(data)
            super().pwrite(fd, view[: len(view) // 2], position)
            die()
        if plan["mode"] == "records":
            view = memoryview(data)
            cut = 0
            for _ in range(plan["records"]):
                n = record_length(view, cut)
                if n == 0:
                    break
                cut += n
            cut = min(len(view), cut + plan["extra"])
            super().pwrite(fd, view[:cut], position)
            die()
        super().pwrite(fd, data, position)
        die()
        return 0

    def _simple(self, op: str, fn, *args):
        plan = self._hit(op, str(args[0]) if args and isinstance(args[0], str) else "")
        if plan is not None and plan["mode"] in ("before", "torn"):
            die()
        result = fn(*args)
        if plan is not None:
            die()
        return result

    def fdatasync(self, fd: int) -> None:
        self._simple("fdatasync", super().fdatasync, fd)

    def fsync(self, fd: int) -> None:
        self._simple("fsync", super().fsync, fd)

    def rename(self, src: str, dst: str) -> None:
        self._simple("rename", super().rename, src, dst)

    def fsync_dir(self, path: str) -> None:
        self._simple("fsync_dir", super().fsync_dir, path)

    def unlink(self, path: str) -> None:
        self._simple("unlink", super().unlink, path)


class AckLog:
    """The child's record of what it got acknowledged (fsync'd line by line; safe to call
    from several producer threads)."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives for the child
        self.lock = threading.Lock()

    def __call__(self, **event) -> None:
        line = json.dumps(event) + "\n"
        with self.lock:
            self.f.write(line)
            self.f.flush()
            os.fsync(self.f.fileno())


def read_acks(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.endswith("\n"):
                out.append(json.loads(line))
    return out


@dataclass
class ChildResult:
    returncode: int
    acks: list[dict]
    stderr: str

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL


def workload_command(workload: str, data_dir: str, ack_path: str, **params) -> list[str]:
    """The command line that runs ``tests.workloads.<workload>`` on ``data_dir``, acknowledging
    to ``ack_path``, with ``params`` as one JSON argument (see :func:`child_context`)."""
    return [sys.executable, "-m", f"tests.workloads.{workload}", data_dir, ack_path,
            json.dumps(params)]


def run_child(workload: str, data_dir: str, ack_path: str, timeout: float = 120.0,
              **params) -> ChildResult:
    """Run the workload module ``tests.workloads.<workload>`` in a fresh interpreter and
    wait for it (it reads its arguments with :func:`child_context`)."""
    proc = subprocess.run(workload_command(workload, data_dir, ack_path, **params),
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return ChildResult(proc.returncode, read_acks(ack_path), proc.stderr)


def start_child(workload: str, data_dir: str, ack_path: str, wrapper: tuple[str, ...] = (),
                **params) -> subprocess.Popen:
    """Like :func:`run_child`, but return at once with the running process (for faults
    injected from outside, e.g. a file system shut down while the child writes).
    ``wrapper`` prefixes the command (e.g. ``("eatmydata",)``)."""
    return subprocess.Popen([*wrapper, *workload_command(workload, data_dir, ack_path, **params)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)


def reap(proc: subprocess.Popen, timeout: float | None = None) -> int:
    """Wait for ``proc`` to exit and close the pipes the test holds to it (a pipe left open
    is a ResourceWarning when the Popen object is collected); returns the exit status."""
    try:
        return proc.wait(timeout)
    finally:
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


@dataclass
class ChildContext:
    """What a crash-harness workload starts with: the data dir, its parameters, the
    (unarmed) crashing I/O and the acknowledgement log."""

    broker_dir: str
    params: dict
    io: CrashingIO
    ack: AckLog


def child_context(argv: list[str]) -> ChildContext:
    """Parse ``DATA_DIR ACK_PATH PARAMS_JSON`` (the arguments :func:`workload_command`
    passes) in the child."""
    broker_dir, ack_path, params_json = argv
    return ChildContext(broker_dir, json.loads(params_json), CrashingIO(), AckLog(ack_path))
