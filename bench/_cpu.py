"""CPU seconds as the rebuild benchmarks read them: this process's (``getrusage``), and a
whole process tree's from ``/proc`` (a Spark job's JVM is no reaped child, so ``getrusage``
of the children misses it). ``bench_spark_scan.py``'s child processes import this module
too (the bench directory on their ``sys.path``)."""

from __future__ import annotations

import os
import resource

TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(who: int = resource.RUSAGE_SELF) -> float:
    """User + system CPU seconds of this process (``RUSAGE_CHILDREN``: its reaped
    children)."""
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def tree_cpu() -> dict[str, float]:
    """CPU seconds of this process's tree, by part: ``driver`` (this process), ``jvm``
    (descendants named java), ``workers`` (every other descendant: Spark's Python daemon
    and workers) and ``reaped`` (children of any of them that ended and were reaped: the
    Python processes that plan a data source, workers that exited)."""
    # utime + stime are fields 14-15 of /proc/PID/stat, cutime + cstime 16-17.
    parent, cpu, reaped, comm = {}, {}, {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                head, _, rest = f.read().rpartition(")")
        except OSError:
            continue
        fields = rest.split()
        pid = int(name)
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(v) for v in fields[11:13]) / TICK
        reaped[pid] = sum(int(v) for v in fields[13:15]) / TICK
        comm[pid] = head.partition("(")[2]
    me = os.getpid()
    mine = {me}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                grew = True
    out = {"driver": cpu[me], "jvm": 0.0, "workers": 0.0,
           "reaped": sum(reaped[p] for p in mine)}
    for pid in mine - {me}:
        out["jvm" if comm[pid] == "java" else "workers"] += cpu[pid]
    return out


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """``after - before`` of two :func:`tree_cpu` readings, part by part."""
    return {k: round(after[k] - before[k], 2) for k in before}
