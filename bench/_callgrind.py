"""What the instruction-count benchmarks that dump between phases share: a three-line C
helper the measured process calls to make callgrind dump its counts (callgrind's own client
request), and one run of a script under ``valgrind --tool=callgrind`` whose dumps are read
back in order as instruction totals."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: The client requests the measuring process makes (callgrind's own header).
HELPER = """
#include <valgrind/callgrind.h>
void fmq_bench_dump(void) { CALLGRIND_DUMP_STATS; }
"""


def compile_dump_helper(scratch_dir: str) -> str:
    """The helper built as a shared library in ``scratch_dir``; its path (the measured
    script loads it with ctypes and calls ``fmq_bench_dump``)."""
    source = os.path.join(scratch_dir, "dump.c")
    helper = os.path.join(scratch_dir, "dump.so")
    with open(source, "w") as f:
        f.write(HELPER)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", helper, source], check=True)
    return helper


def _total(path: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise SystemExit(f"{path} has no instruction total")


def run_dumped(tree: str, script: str, args: list[str], scratch_dir: str,
               needed: int) -> tuple[str, list[int]]:
    """Run ``python -c script ARGS`` of checkout ``tree`` under callgrind: its standard
    output and the instruction total of each of its dumps, in order (at least ``needed``
    of them, or the run stops)."""
    prefix = os.path.join(scratch_dir, "cg.out")
    for name in os.listdir(scratch_dir):
        if name.startswith("cg.out"):
            os.remove(os.path.join(scratch_dir, name))
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={prefix}",
         sys.executable, "-c", script, *args],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=tree), cwd=tree)
    if out.returncode != 0:
        raise SystemExit(f"the measuring process failed:\n{out.stderr[-3000:]}")
    dumps = sorted((int(m.group(1)), os.path.join(scratch_dir, name))
                   for name in os.listdir(scratch_dir)
                   if (m := re.fullmatch(r"cg\.out\.(\d+)", name)))
    if len(dumps) < needed:
        raise SystemExit(f"callgrind wrote {len(dumps)} dumps, not {needed}:\n"
                         f"{out.stderr[-2000:]}")
    return out.stdout, [_total(path) for _, path in dumps]


@contextmanager
def collecting(pid: int) -> Iterator[None]:
    """Callgrind's counting on in the running server ``pid`` for the body, off after it
    (``callgrind_control -i``): the body's instructions only, not the server's start-up."""
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True,
                   capture_output=True)
    yield
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True,
                   capture_output=True)


def stop(proc: subprocess.Popen) -> str:
    """Stop a server running under callgrind; what it printed on its standard error."""
    proc.terminate()
    _out, err = proc.communicate(timeout=600)
    return err


def collected(err: str) -> int:
    """The instructions callgrind counted, from its summary on standard error."""
    found = re.search(r"Collected : (\d+)", err)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{err[-2000:]}")
    return int(found.group(1))
