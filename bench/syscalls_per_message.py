"""System calls per message, by thread: for each checkout, a server under compare.py row 1's
load (64 producers, 1 KiB, one message in flight each; ``--consumers 16``: row 6's, that
many following consumers meanwhile) measured in two windows after a warm-up:

* a CPU window: user and system CPU and voluntary and involuntary context switches per
  message, per thread group (``bench/threads_profile.py``'s ``/proc`` sampling);
* a trace window after it (tracing slows the server, so it never overlaps the CPU window):
  ``perf trace -s`` counts every system call of every thread (kernel tracepoints, no ptrace
  stops: far cheaper than ``strace -f``), read back per thread and by name, per message.

Messages are counted by the server (the topic's next offsets) at both ends of each window.
With ``--old DIR`` (an older checkout, compiled modules included) rounds alternate which
checkout runs first, and the medians are printed side by side, so a before/after is one
command::

    python bench/syscalls_per_message.py --old /tmp/readpath-old --rounds 3
    python bench/syscalls_per_message.py --old /tmp/readpath-old --consumers 16
    python bench/syscalls_per_message.py --pure            # FMQ_NO_EXTENSIONS=1 servers

Needs ``perf`` (run as root, or with ``kernel.perf_event_paranoid`` at most 1); without it
the table has the CPU window only.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from ab_rounds import alternate, parser, scratch, trees
from bench_network import free_port
from threads_profile import per_message, sample, tree_server, under_load

from fmq.loadgen import BenchSpec
from fmq.loadgen.probe import ServerProbe

#: A thread's section in ``perf trace -s``: "NAME (TID), N events, P%".
_SECTION = re.compile(r"^\s*(.+?) \((\d+)\), \d+ events")
#: A system call's line in it: name, calls, errors, times...
_CALL = re.compile(r"^\s+([a-z_0-9]+)\s+(\d+)\s+(\d+)\s+[\d.]+")

#: Threads of one pool are one group: fmq-worker_3 -> fmq-worker_*.
_POOL = re.compile(r"_\d+$")


def parse_perf_summary(text: str, main_tid: int) -> dict[str, dict[str, int]]:
    """System calls by thread group and by name from ``perf trace -s``'s summary (the
    thread whose id is the process's is the event loop)."""
    out: dict[str, dict[str, int]] = {}
    calls: dict[str, int] | None = None
    for line in text.splitlines():
        m = _SECTION.match(line)
        if m:
            name = ("event loop (main)" if int(m.group(2)) == main_tid
                    else _POOL.sub("_*", m.group(1)))
            calls = out.setdefault(name, {})
            continue
        m = _CALL.match(line)
        if m and calls is not None:
            calls[m.group(1)] = calls.get(m.group(1), 0) + int(m.group(2))
    return out


def traced_calls(pid: int, seconds: float, count) -> tuple[dict[str, dict[str, float]], int]:
    """System calls per message by thread group and name over ``seconds`` under ``perf
    trace -s -p``, and the messages counted meanwhile ({} without perf).

    perf takes most of a second to attach before it runs its workload, and tracing lasts
    as long as the workload: a ``sleep`` that writes the clock when it starts and ends. The
    server's message count, sampled every 50 ms meanwhile, is interpolated at those two
    instants, so the calls and the messages cover the same window."""
    perf = shutil.which("perf")
    if perf is None:
        return {}, 0
    with tempfile.TemporaryDirectory(prefix="fmq-perf-trace-") as tmp:
        out, marks = os.path.join(tmp, "summary.txt"), os.path.join(tmp, "marks")
        clock = f"date +%s.%N >> {marks}"
        proc = subprocess.Popen(
            [perf, "trace", "-s", "-p", str(pid), "-o", out, "--",
             "sh", "-c", f"{clock}; sleep {seconds}; {clock}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        counts: list[tuple[float, int]] = []
        deadline = time.monotonic() + seconds + 60
        while proc.poll() is None and time.monotonic() < deadline:
            counts.append((time.time(), count()))
            time.sleep(0.05)
        counts.append((time.time(), count()))
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            return {}, 0
        with open(out) as f:
            text = f.read()
        with open(marks) as f:
            t0, t1 = (float(line) for line in f.read().split())
    messages = max(round(_count_at(counts, t1) - _count_at(counts, t0)), 1)
    by_thread = parse_perf_summary(text, pid)
    return ({name: {call: n / messages for call, n in calls.items()}
             for name, calls in by_thread.items()}, messages)


def _count_at(counts: list[tuple[float, int]], at: float) -> float:
    """The message count at time ``at``, interpolated between the samples around it."""
    for (ta, na), (tb, nb) in zip(counts, counts[1:], strict=False):
        if ta <= at <= tb:
            return na + (nb - na) * (at - ta) / max(tb - ta, 1e-9)
    return counts[0][1] if at < counts[0][0] else counts[-1][1]


def measure(address: str, pid: int, producers: int, consumers: int, seconds: float,
            warmup: float, topic: str) -> dict:
    """Row 1's load (and ``consumers`` following consumers) at ``address``; the server
    ``pid`` measured in a CPU window, then a trace window."""
    probe = ServerProbe(address)
    count = lambda: probe.stored(topic)  # noqa: E731 - the server's count of the topic
    spec = BenchSpec(kind="produce", server=address, producers=producers, size=1024,
                     duration_s=warmup + 2 * seconds + 4.0, topic=topic)
    with under_load(spec, consumers, count, warmup) as loaded:
        n0, s0 = count(), sample(pid)
        time.sleep(seconds)
        n1, s1 = count(), sample(pid)
        result = per_message(s0, s1, n1 - n0)
        result["calls"], result["traced_messages"] = traced_calls(pid, seconds, count)
    probe.close()
    if consumers:
        result["consumed_per_s"] = loaded["consumed_per_s"]
    return result


def one_round(tree: str, args) -> dict:
    with scratch("fmq-syscalls-") as tmp:
        port = free_port()
        with tree_server(tree, os.path.join(tmp, "data"), port, args.pure) as server:
            return measure(f"127.0.0.1:{port}", server.pid, args.producers, args.consumers,
                           args.seconds, args.warmup,
                           f"syscalls-{os.getpid()}-{int(time.time())}")


def medians(rounds: list[dict]) -> dict:
    """The median of every figure over ``rounds``, per thread group and call too."""
    out: dict = {}
    for key in ("msgs_per_s", "user_us", "system_us", "voluntary_cs", "involuntary_cs",
                "consumed_per_s", "traced_messages"):
        if all(key in r for r in rounds):
            out[key] = statistics.median(r[key] for r in rounds)
    names = {name for r in rounds for name in r["threads"]}
    out["threads"] = {
        name: {k: statistics.median(r["threads"].get(name, {}).get(k, 0) for r in rounds)
               for k in ("threads", "user_us", "system_us", "voluntary_cs", "involuntary_cs")}
        for name in names}
    groups = {name for r in rounds for name in r["calls"]}
    out["calls"] = {
        name: {call: statistics.median(r["calls"].get(name, {}).get(call, 0.0)
                                       for r in rounds)
               for call in {c for r in rounds for c in r["calls"].get(name, {})}}
        for name in groups}
    return out


def print_table(r: dict, top: int) -> None:
    print(f"{r['msgs_per_s']:,.0f} msgs/s; per message: CPU "
          f"{r['user_us'] + r['system_us']:.1f} us (user {r['user_us']:.1f}, system "
          f"{r['system_us']:.1f}), context switches {r['voluntary_cs']:.3f} voluntary + "
          f"{r['involuntary_cs']:.3f} involuntary"
          + (f"; consumed {r['consumed_per_s']:,.0f} msgs/s" if "consumed_per_s" in r else "")
          + (f"; {r['traced_messages']:,.0f} messages traced" if r.get("calls") else ""))
    print("| thread | user us/msg | system us/msg | vol cs/msg | invol cs/msg "
          "| syscalls/msg | top calls per message |")
    print("|---|---:|---:|---:|---:|---:|---|")
    names = sorted(set(r["threads"]) | set(r.get("calls", {})),
                   key=lambda n: -(r["threads"].get(n, {}).get("user_us", 0)
                                   + r["threads"].get(n, {}).get("system_us", 0)))
    total_calls = 0.0
    for name in names:
        t = r["threads"].get(name, {})
        calls = r.get("calls", {}).get(name, {})
        n_calls = sum(calls.values())
        total_calls += n_calls
        if not t.get("user_us", 0) + t.get("system_us", 0) and n_calls < 0.01:
            continue
        shown = ", ".join(f"{c} {n:.2f}" for c, n in
                          sorted(calls.items(), key=lambda kv: -kv[1])[:top] if n >= 0.005)
        print(f"| {name} | {t.get('user_us', 0):.1f} | {t.get('system_us', 0):.1f} | "
              f"{t.get('voluntary_cs', 0):.3f} | {t.get('involuntary_cs', 0):.3f} | "
              f"{n_calls:.2f} | {shown} |")
    print(f"| server | {r['user_us']:.1f} | {r['system_us']:.1f} | {r['voluntary_cs']:.3f} | "
          f"{r['involuntary_cs']:.3f} | {total_calls:.2f} | |")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=4.0, help="per measuring window")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--producers", type=int, default=64)
    ap.add_argument("--consumers", type=int, default=0,
                    help="that many following consumers meanwhile (compare.py row 6: 16)")
    ap.add_argument("--pure", action="store_true",
                    help="servers without compiled code (FMQ_NO_EXTENSIONS=1)")
    ap.add_argument("--top", type=int, default=6, help="system calls named per thread")
    args = ap.parse_args()
    checkouts = trees(args.old)
    results = alternate(list(checkouts), args.rounds,
                        lambda name: one_round(checkouts[name], args),
                        lambda name, r: f"{name}: {r['msgs_per_s']:,.0f} msgs/s, "
                        f"{r['user_us'] + r['system_us']:.1f} us/msg, "
                        f"{sum(sum(c.values()) for c in r['calls'].values()):.1f} calls/msg")
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}, "
          f"{'pure' if args.pure else 'compiled'} path, {args.producers} producers, "
          f"{args.consumers} consumers, {args.rounds} rounds of {args.seconds:g} s; medians")
    for name, rounds in results.items():
        print(f"\n{name} ({checkouts[name]}):")
        print_table(medians(rounds), args.top)


if __name__ == "__main__":
    main()
