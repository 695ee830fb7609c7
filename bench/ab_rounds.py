"""What the A/B benchmark scripts (``bench/*_ab.py``) share: the checkouts to compare (this
one and ``--old``), rounds that alternate which side runs first, the medians and ranges
they print, a scratch directory that goes when the round ends and a process's CPU time.

The order alternates because a shared machine drifts during a run (another engineer's
benchmark starts, the page cache warms): a side that always ran first would carry the
drift as if it were its own. Each script keeps its own measurement and wording.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

#: This checkout: the "new" side, and the one whose load generator every side is measured with.
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

R = TypeVar("R")

#: Runs ``fmq`` of the checkout named first on its command line. PYTHONPATH alone gives the
#: checkout's ``fmq`` package but not its ``fmq.cli``: that is the repository's ``cli/``,
#: which the editable install maps to the installed checkout's, whatever PYTHONPATH says.
#: Nor is PYTHONPATH enough for the package: ``python -c`` puts the working directory first
#: on sys.path, so started from another checkout it imported that checkout's ``fmq`` (an
#: A/B run from the repository root compared this tree with itself). The checkout goes
#: first, and a ``fmq`` from elsewhere stops the run.
FMQ_OF_TREE = """
import importlib.util, os, runpy, sys
tree = os.path.abspath(sys.argv.pop(1))
sys.path.insert(0, tree)
import fmq
if os.path.dirname(os.path.dirname(os.path.abspath(fmq.__file__))) != tree:
    sys.exit(f"fmq of {tree} wanted, {fmq.__file__} imported")
cli = os.path.join(tree, "cli")
spec = importlib.util.spec_from_file_location(
    "fmq.cli", os.path.join(cli, "__init__.py"), submodule_search_locations=[cli])
sys.modules["fmq.cli"] = module = importlib.util.module_from_spec(spec)
fmq.cli = module
spec.loader.exec_module(module)
runpy.run_module("fmq.cli.main", run_name="__main__", alter_sys=True)
"""


def parser(doc: str, old: bool = True) -> argparse.ArgumentParser:
    """The script's argument parser (described by its docstring's first line), with
    ``--old`` when it compares checkouts."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    if old:
        ap.add_argument("--old", help="an older checkout to compare with (git worktree add)")
    return ap


def trees(old: str | None) -> dict[str, str]:
    """The checkouts to run by name: this one ("new") and, when given, ``old``."""
    found = {"new": HERE}
    if old:
        path = os.path.abspath(old)
        # Checked here: otherwise the first round fails deep in a child's import error.
        if not os.path.isdir(os.path.join(path, "fmq")):
            raise SystemExit(f"--old {old}: no fmq/ in it; make an older checkout with "
                             f"`git worktree add /tmp/ab-old REV`")
        found["old"] = path
    return found


def fmq_command(tree: str) -> list[str]:
    """The command line (to which ``fmq``'s arguments are added) that runs the ``fmq`` CLI
    of checkout ``tree``, its ``cli/`` with its ``fmq``; run it with PYTHONPATH=tree."""
    return [sys.executable, "-c", FMQ_OF_TREE, tree]


def alternate(names: Sequence[str], rounds: int, run: Callable[[str], R],
              show: Callable[[str, R], str]) -> dict[str, list[R]]:
    """``run(name)`` for every name in every round, in the order of ``names`` in odd rounds
    and reversed in even ones; prints ``round N `` and ``show(name, result)`` as each ends.
    Returns the results by name, in round order."""
    results: dict[str, list[R]] = {name: [] for name in names}
    for n in range(rounds):
        for name in names if n % 2 == 0 else names[::-1]:
            result = run(name)
            results[name].append(result)
            print(f"round {n + 1} {show(name, result)}", flush=True)
    return results


def median(rs: Sequence[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rs)


def spread(rs: Sequence[dict[str, Any]], key: str, spec: str, unit: str = "") -> str:
    """``key``'s median and range over the rounds ``rs`` as "median unit (min-max)", the
    numbers formatted with ``spec`` (".1f")."""
    values = [r[key] for r in rs]
    unit = f" {unit}" if unit else ""
    return (f"{statistics.median(values):{spec}}{unit} "
            f"({min(values):{spec}}-{max(values):{spec}})")


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` (its threads included), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def scratch(prefix: str) -> Iterator[str]:
    """A temporary directory, removed with what is in it when the block ends: servers
    preallocate segments, and left-over benchmark directories once filled the disk."""
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def killed_at_end(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """``proc``, killed and reaped when the block ends."""
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
