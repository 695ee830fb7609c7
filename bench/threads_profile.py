"""Where a server's time goes per message, by thread: user and system CPU of the whole
process (``/proc/PID/stat``), CPU and context switches of each thread grouped by its name
(``/proc/PID/task/*/stat`` and ``status``), and, when ``strace`` is installed, futex calls
per message, in all and per thread group with their mean duration (``strace -f -T -e
trace=futex``, in a window of its own after the others: tracing slows the server down, so
it never overlaps the CPU window; the interpreter lock's waits and hand-offs are futex
calls). A child process of the
server (the indexer process, ``index_writer = "process"``) counts as part of it: its threads
appear as ``child: NAME``.

The load is ``fmq bench produce`` (64 producers, 1 KiB, one message in flight each; with
``--batch N`` SEND_BATCH requests of N messages from one load process, compare.py row 2's
load) for ``--warmup + --seconds (+ --seconds with strace)``; messages are counted by the
server (the topic's next offsets) at both ends of each window.

With ``--old DIR`` (an older checkout: ``git worktree add /tmp/old REV``) each round runs
a fresh server of each checkout, alternating which goes first, and the medians of the rounds
are printed side by side. Run::

    python bench/threads_profile.py [--seconds 5] [--producers 64] [--no-strace]
    python bench/threads_profile.py --old /tmp/old --rounds 5 [--pure] [--batch 16]
    python bench/threads_profile.py --writers thread,process --rounds 3
    python bench/threads_profile.py --server 127.0.0.1:9876 --pid PID   # a running server
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ab_rounds import alternate, fmq_command, scratch, trees
from bench_network import free_port, wait_answering

from fmq.loadgen import BenchSpec, run_bench
from fmq.loadgen.probe import ServerProbe

TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class ThreadSample:
    name: str
    user_s: float
    system_s: float
    voluntary: int
    involuntary: int


@dataclass
class Sample:
    at: float
    user_s: float
    system_s: float
    threads: dict[int, ThreadSample] = field(default_factory=dict)


def _stat_times(path: str) -> tuple[float, float]:
    """utime and stime of a /proc stat file, in seconds (fields 14 and 15: the name in
    parentheses may hold spaces, so they are counted from its closing parenthesis)."""
    with open(path) as f:
        text = f.read()
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[11]) / TICK, int(rest[12]) / TICK


def _switches(path: str) -> tuple[int, int]:
    with open(path) as f:
        text = f.read()
    vol = int(re.search(r"^voluntary_ctxt_switches:\s*(\d+)", text, re.M).group(1))
    invol = int(re.search(r"^nonvoluntary_ctxt_switches:\s*(\d+)", text, re.M).group(1))
    return vol, invol


def child_processes(pid: int) -> list[int]:
    """The live children of ``pid`` (the indexer process with ``index_writer = "process"``)."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            continue
    return out


def sample(pid: int) -> Sample:
    """The process's and each live thread's counters now, its child processes' included
    (their threads named ``child: NAME``): the server's work done in a child counts."""
    user, system = _stat_times(f"/proc/{pid}/stat")
    out = Sample(time.monotonic(), user, system)
    _sample_threads(pid, out, "")
    for child in child_processes(pid):
        try:
            u, s = _stat_times(f"/proc/{child}/stat")
        except FileNotFoundError:
            continue
        out.user_s += u
        out.system_s += s
        _sample_threads(child, out, "child: ")
    return out


def _sample_threads(pid: int, out: Sample, prefix: str) -> None:
    for tid_name in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{tid_name}"
        try:
            with open(f"{base}/comm") as f:
                name = f.read().strip()
            u, s = _stat_times(f"{base}/stat")
            vol, invol = _switches(f"{base}/status")
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
        tid = int(tid_name)
        name = "event loop (main)" if tid == pid and not prefix else name
        out.threads[tid] = ThreadSample(prefix + name, u, s, vol, invol)


def _group(name: str) -> str:
    """Pool threads (fmq-worker_3) are reported as one group (fmq-worker_*)."""
    return re.sub(r"_\d+$", "_*", name)


def per_message(before: Sample, after: Sample, messages: int) -> dict:
    """CPU microseconds and context switches per message, for the process and per thread
    group (threads alive in both samples; one that started in between counts from zero)."""
    n = max(messages, 1)
    groups: dict[str, list[float]] = {}
    for tid, a in after.threads.items():
        b = before.threads.get(tid, ThreadSample(a.name, 0.0, 0.0, 0, 0))
        g = groups.setdefault(_group(a.name), [0, 0.0, 0.0, 0, 0])
        g[0] += 1
        g[1] += a.user_s - b.user_s
        g[2] += a.system_s - b.system_s
        g[3] += a.voluntary - b.voluntary
        g[4] += a.involuntary - b.involuntary
    threads = {
        name: {"threads": int(g[0]), "user_us": g[1] / n * 1e6, "system_us": g[2] / n * 1e6,
               "voluntary_cs": g[3] / n, "involuntary_cs": g[4] / n}
        for name, g in groups.items()}
    return {
        "messages": messages, "seconds": after.at - before.at,
        "msgs_per_s": messages / (after.at - before.at),
        "user_us": (after.user_s - before.user_s) / n * 1e6,
        "system_us": (after.system_s - before.system_s) / n * 1e6,
        "voluntary_cs": sum(t["voluntary_cs"] for t in threads.values()),
        "involuntary_cs": sum(t["involuntary_cs"] for t in threads.values()),
        "threads": threads,
    }


def futex_calls(pid: int, seconds: float, count: callable, tool: str = "perf"
                ) -> dict | None:
    """Futex calls per message over ``seconds``, in all and per thread group (``threads``:
    calls per message and the mean microseconds a call took, which for a wait is the time
    the thread slept: the interpreter lock's hand-offs are futex calls). ``tool``: ``perf``
    (``perf trace -s``: the kernel's tracepoints, the threads run on) or ``strace`` (``-f
    -T``: every call stops its thread, which changes the timing it counts); None when the
    tool is missing or may not attach (ptrace_scope, perf_event_paranoid, no permission)."""
    if tool == "perf":
        return _futex_perf(pid, seconds, count)
    strace = shutil.which("strace")
    if strace is None:
        return None
    names = {tid: _group(t.name) for tid, t in sample(pid).threads.items()}
    with tempfile.NamedTemporaryFile(prefix="fmq-strace-", suffix=".txt") as out:
        pids = [arg for p in [pid, *child_processes(pid)] for arg in ("-p", str(p))]
        proc = subprocess.Popen([strace, "-f", "-T", "-e", "trace=futex", *pids,
                                 "-o", out.name], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # attaching to every thread
        first, begun = count(), os.path.getsize(out.name)
        time.sleep(seconds)
        last, ended = count(), os.path.getsize(out.name)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None
        with open(out.name, "rb") as f:  # the window's lines only
            f.seek(begun)
            text = f.read(ended - begun).decode(errors="replace")
    if last <= first:
        return None
    calls: dict[str, int] = {}
    slept: dict[str, float] = {}
    for line in text.splitlines()[1:-1]:  # the first and last may be cut
        tid, _, rest = line.partition(" ")
        group = names.get(int(tid), "other") if tid.isdigit() else "other"
        if rest.startswith("futex("):
            calls[group] = calls.get(group, 0) + 1
        took = re.search(r"<([\d.]+)>$", rest)
        if took and ("= " in rest) and not rest.endswith("<unfinished ...>"):
            slept[group] = slept.get(group, 0.0) + float(took.group(1))
    n = last - first
    return {"total": sum(calls.values()) / n,
            "threads": {g: {"calls": c / n, "mean_us": slept.get(g, 0.0) / c * 1e6}
                        for g, c in calls.items()}}


def _futex_perf(pid: int, seconds: float, count: callable) -> dict | None:
    """:func:`futex_calls` by ``perf trace -s -e futex`` (its per-thread summary)."""
    perf = shutil.which("perf")
    if perf is None:
        return None
    names = {tid: _group(t.name) for tid, t in sample(pid).threads.items()}
    with tempfile.NamedTemporaryFile(prefix="fmq-perf-", suffix=".txt") as out:
        pids = ",".join(str(p) for p in [pid, *child_processes(pid)])
        # perf counts from the moment it attached (well under a second after its start)
        # to its stop: the messages are counted over its whole run, so the count per
        # message is low by at most the attach's share of the window.
        first = count()
        proc = subprocess.Popen([perf, "trace", "-s", "-e", "futex", "-p", pids,
                                 "-o", out.name], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(seconds)
        last = count()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None
        with open(out.name) as f:
            text = f.read()
    if last <= first or proc.returncode not in (0, -signal.SIGINT, 130):
        return None
    calls: dict[str, int] = {}
    slept: dict[str, float] = {}
    group = None
    for line in text.splitlines():
        head = re.match(r"^\s*(.+?) \((\d+)\), \d+ events", line)
        if head:
            group = names.get(int(head.group(2)), "other")
            continue
        row = re.match(r"^\s*futex\s+(\d+)\s+\d+\s+([\d.]+)", line)
        if row and group is not None:
            calls[group] = calls.get(group, 0) + int(row.group(1))
            slept[group] = slept.get(group, 0.0) + float(row.group(2)) / 1e3
    if not calls:
        return None
    n = last - first
    return {"total": sum(calls.values()) / n,
            "threads": {g: {"calls": c / n, "mean_us": slept.get(g, 0.0) / c * 1e6}
                        for g, c in calls.items()}}


@contextlib.contextmanager
def under_load(spec: BenchSpec, consumers: int, count: Callable[[], int],
               warmup: float) -> Iterator[dict]:
    """Runs ``spec``'s load (and ``consumers`` ``fmq bench consume --follow`` connections
    on its topic) around the body, which starts once ``count()`` moved and ``warmup``
    seconds passed; afterwards checks both loads and puts the consumers' rate in the
    yielded dict (``consumed_per_s``)."""
    report: dict = {}
    loaded: dict = {}
    following = None
    if consumers:
        follow = BenchSpec(kind="consume", server=spec.server, producers=consumers,
                           follow=True, topic=spec.topic, duration_s=spec.duration_s + 3.0)
        following = threading.Thread(
            target=lambda: report.setdefault("consume", run_bench(follow)))
        following.start()
        time.sleep(2.0)  # the consumer processes start and connect
    load = threading.Thread(target=lambda: report.setdefault("bench", run_bench(spec)))
    load.start()
    try:
        deadline = time.monotonic() + 60
        while count() == 0 and time.monotonic() < deadline:  # load processes starting
            time.sleep(0.1)
        time.sleep(warmup)
        yield loaded
    finally:
        load.join()
        if following is not None:
            following.join()
    bench = report.get("bench")
    if bench is None or not bench.count_check.startswith("ok") or bench.errors:
        raise RuntimeError(f"fmq bench failed: {bench and (bench.count_check, bench.errors)}")
    if consumers:
        followed = report.get("consume")
        if followed is None or followed.errors:
            raise RuntimeError(f"the consumers failed: {followed and followed.errors}")
        loaded["consumed_per_s"] = followed.msgs_per_s


def profile(address: str, pid: int, producers: int, seconds: float, warmup: float,
            use_strace: bool, topic: str, batch: int = 0, kind: str = "produce",
            consumers: int = 0, futex_tool: str = "strace") -> dict:
    """Drive ``fmq bench produce`` (or ``kind``: ``tx``, transactions of one message) at
    ``address`` and measure the server ``pid``; ``batch``: SEND_BATCH requests of that
    many messages (``--batch-linger 1``, one load process: compare.py row 2's load)
    instead of single sends; ``consumers``: that many ``fmq bench consume --follow``
    connections read the topic meanwhile (compare.py row 6's load)."""
    probe = ServerProbe(address)
    count = lambda: probe.stored(topic)  # noqa: E731 - the server's count of the topic
    use_strace = use_strace and shutil.which(futex_tool) is not None
    spec = BenchSpec(kind=kind, server=address, producers=producers, size=1024,
                     duration_s=warmup + seconds * (2 if use_strace else 1) + 2.0,
                     topic=topic, **({"batch_linger_ms": 1.0, "batch": batch, "processes": 1}
                                     if batch else {}))
    with under_load(spec, consumers, count, warmup) as loaded:
        n0, f0, s0 = count(), probe.stats()["flushes"], sample(pid)
        time.sleep(seconds)
        n1, f1, s1 = count(), probe.stats()["flushes"], sample(pid)
        result = per_message(s0, s1, n1 - n0)
        result["msgs_per_flush"] = (n1 - n0) / max(f1 - f0, 1)
        futex = futex_calls(pid, seconds, count, futex_tool) if use_strace else None
        result["futex_per_msg"] = futex and futex["total"]
        for name, t in (futex or {}).get("threads", {}).items():
            result["threads"].setdefault(name, {"threads": 0, "user_us": 0.0, "system_us": 0.0,
                                                "voluntary_cs": 0.0, "involuntary_cs": 0.0})
            result["threads"][name].update(futex_calls=t["calls"], futex_us=t["mean_us"])
    probe.close()
    if consumers:
        result["consumed_per_s"] = loaded["consumed_per_s"]
    return result


def print_profile(r: dict) -> None:
    futex = r.get("futex_per_msg")
    print(f"{r['msgs_per_s']:,.0f} msgs/s over {r['seconds']:.1f} s ({r['messages']} "
          f"messages); per message: CPU {r['user_us'] + r['system_us']:.1f} us (user "
          f"{r['user_us']:.1f}, system {r['system_us']:.1f}), context switches "
          f"{r['voluntary_cs']:.3f} voluntary + {r['involuntary_cs']:.3f} involuntary, futex "
          + (f"{futex:.3f}" if futex is not None else "- (no strace)")
          + f"; {r['msgs_per_flush']:.1f} messages per group commit"
          + (f"; consumed {r['consumed_per_s']:,.0f} msgs/s" if "consumed_per_s" in r else ""))
    print_threads(r["threads"])


def print_threads(threads: dict) -> None:
    """A table of the thread groups; with the futex window's columns when it ran (futex
    calls per message and their mean duration, from the strace window)."""
    futex = any("futex_calls" in t for t in threads.values())
    print("| thread | n | user us/msg | system us/msg | vol cs/msg | invol cs/msg |"
          + (" futex/msg | futex mean us |" if futex else ""))
    print("|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if futex else ""))
    rows = sorted(threads.items(), key=lambda kv: -(kv[1]["user_us"] + kv[1]["system_us"]))
    for name, t in rows:
        print(f"| {name} | {t['threads']} | {t['user_us']:.1f} | {t['system_us']:.1f} | "
              f"{t['voluntary_cs']:.3f} | {t['involuntary_cs']:.3f} |"
              + (f" {t.get('futex_calls', 0):.3f} | {t.get('futex_us', 0):.1f} |"
                 if futex else ""))


def start_tree_server(tree: str, data_dir: str, port: int, pure: bool = False,
                      index_writer: str | None = None) -> subprocess.Popen:
    """``fmq server`` of checkout ``tree`` on 127.0.0.1:``port``, once it answers a ping;
    ``pure``: with every reference twin instead of the compiled code (FMQ_NO_EXTENSIONS=1);
    ``index_writer``: that setting (None: the server's default)."""
    env = dict(os.environ, PYTHONPATH=tree)
    if pure:
        env["FMQ_NO_EXTENSIONS"] = "1"
    config = []
    if index_writer is not None:
        path = os.path.join(os.path.dirname(data_dir), "config.json")
        with open(path, "w") as f:
            json.dump({"index_writer": index_writer}, f)
        config = ["--config", path]
    with open(os.path.join(os.path.dirname(data_dir), "server.log"), "a") as log:
        proc = subprocess.Popen([*fmq_command(tree), "server", "--data-dir", data_dir,
                                 "--port", str(port), "--log-level", "WARNING", *config],
                                env=env, stdout=log, stderr=log)
    wait_answering(proc, port, f"the server of {tree}")
    return proc



@contextlib.contextmanager
def tree_server(tree: str, data_dir: str, port: int, pure: bool = False,
                index_writer: str | None = None) -> Iterator[subprocess.Popen]:
    """:func:`start_tree_server` for the body, stopped after it (killed if it does not
    stop within 60 s)."""
    server = start_tree_server(tree, data_dir, port, pure, index_writer)
    try:
        yield server
    finally:
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

def one_round(tree: str, args: argparse.Namespace, index_writer: str | None) -> dict:
    with scratch("fmq-threads-") as tmp:
        port = free_port()
        with tree_server(tree, os.path.join(tmp, "data"), port, args.pure,
                         index_writer) as server:
            return profile(f"127.0.0.1:{port}", server.pid, args.producers, args.seconds,
                           args.warmup, not args.no_strace,
                           f"threads-{os.getpid()}-{int(time.time())}", args.batch,
                           args.kind, args.consumers, args.futex_tool)


def medians(rounds: list[dict]) -> dict:
    """The median of every figure over ``rounds``, per thread group too."""
    out: dict = {}
    for key in ("messages", "seconds", "msgs_per_s", "user_us", "system_us", "voluntary_cs",
                "involuntary_cs", "msgs_per_flush", "consumed_per_s"):
        if all(key in r for r in rounds):
            out[key] = statistics.median(r[key] for r in rounds)
    futex = [r["futex_per_msg"] for r in rounds if r.get("futex_per_msg") is not None]
    out["futex_per_msg"] = statistics.median(futex) if futex else None
    names = {name for r in rounds for name in r["threads"]}
    keys = ["threads", "user_us", "system_us", "voluntary_cs", "involuntary_cs"]
    if futex:
        keys += ["futex_calls", "futex_us"]
    out["threads"] = {
        name: {k: statistics.median(r["threads"].get(name, {}).get(k, 0) for r in rounds)
               for k in keys}
        for name in names}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", help="an older checkout to compare with (git worktree add)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5.0, help="per measuring window")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--producers", type=int, default=64)
    ap.add_argument("--batch", type=int, default=0,
                    help="SEND_BATCH requests of this many messages (1 ms linger, one load "
                         "process: compare.py row 2's load); 0: single sends")
    ap.add_argument("--tx", action="store_const", const="tx", default="produce", dest="kind",
                    help="transactions of one message (compare.py row 4's load) instead of "
                         "sends; per message is then per transaction")
    ap.add_argument("--consumers", type=int, default=0,
                    help="that many following consumers meanwhile (compare.py row 6's load: "
                         "16); per message stays per message sent")
    ap.add_argument("--no-strace", action="store_true", help="skip the futex window")
    ap.add_argument("--futex-tool", choices=("strace", "perf"), default="strace",
                    help="what counts the futex window's calls: strace -f -T (stops every "
                         "call) or perf trace -s (tracepoints: the threads' timing kept)")
    ap.add_argument("--pure", action="store_true",
                    help="servers without compiled code (FMQ_NO_EXTENSIONS=1)")
    ap.add_argument("--writers", help="instead of --old: this checkout with each of these "
                    "index_writer settings, e.g. thread,process")
    ap.add_argument("--server", help="a running server's address (with --pid)")
    ap.add_argument("--pid", type=int, help="its process id")
    args = ap.parse_args()
    if bool(args.server) != bool(args.pid):
        ap.error("--server and --pid go together")
    if args.server:
        topic = f"threads-{os.getpid()}-{int(time.time())}"
        print_profile(profile(args.server, args.pid, args.producers, args.seconds,
                              args.warmup, not args.no_strace, topic, args.batch,
                              args.kind, args.consumers, args.futex_tool))
        return
    if args.writers:
        writers = args.writers.split(",")
        checkouts = {f"index_writer={w}": trees(None)["new"] for w in writers}
        setting = dict(zip(checkouts, writers, strict=True))
    else:
        checkouts = trees(args.old)
        setting = dict.fromkeys(checkouts)
    results = alternate(list(checkouts), args.rounds,
                        lambda name: one_round(checkouts[name], args, setting[name]),
                        lambda name, r: f"{name}: {r['msgs_per_s']:,.0f} msgs/s, "
                        f"{r['user_us'] + r['system_us']:.1f} us/msg")
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}, "
          f"{'pure' if args.pure else 'compiled'} path, {args.producers} producers, "
          f"{args.rounds} rounds of {args.seconds:g} s; medians")
    for name, rounds in results.items():
        print(f"\n{name} ({checkouts[name]}):")
        print_profile(medians(rounds))


if __name__ == "__main__":
    main()
