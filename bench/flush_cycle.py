"""Where a durable send's round trip goes: the parts of the server's group-commit cycle,
timed inside a real ``fmq server`` under row 1's load (64 producers, one message in flight
each, 1 KiB, every answer after fdatasync).

With one request in flight per producer, the rate is the producers over the round trip, and
the round trip is made of the flush cycle: the acknowledger thread writes and fdatasyncs
what the event loop placed, hands the flush back to the loop, the loop answers it, the
clients send again, the loop reads and places, and the acknowledger takes the next flush.
This script starts the server with timestamps around those steps (a wrapper per function,
``time.perf_counter_ns``, kept in memory and written out at the end) and prints, per flush,
the median and mean of each part::

    python bench/flush_cycle.py [--seconds 6] [--producers 64] [--rounds 3] [--old DIR]
        [--loop-flush]

The parts:

* ``pwrite`` and ``fdatasync``: the acknowledger's write and sync of one flush (each with
  the interpreter lock taken back after the call), or both in one call
  (``FileIO.write_then_sync``, the usual flush since it exists); where the event loop leads
  the flushes (``fmq.server.ops.loop_flush``), from the loop handing the flush to its
  flusher thread to the thread's sync returning (the flusher's own clock, ``ended_ns``);
* ``after the sync, to the hand-back``: the acknowledger's own Python after its fdatasync
  (statistics, waking the index writer, taking the flushed batches); where the loop leads,
  from the sync's return to the loop taking the flush's outcome (the eventfd's wake-up);
* ``hand-back, to the answers``: from the acknowledger's hand-back to the event loop
  starting to answer that flush (where the loop leads: the group commit's bookkeeping);
* ``answering``: the loop making and sending one flush's answers;
* ``placement, to the pwrite``: when the acknowledger waited for work, from the loop's
  hand-over of a placed batch to its write starting (its wake-up and the lock);
* ``cycle``: from one fdatasync's start to the next.

The wrappers cost time themselves (a few microseconds a flush): compare trees with each
other in one run (``--old``), not with a server without them.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import signal
import statistics
import subprocess
import sys
import time

from ab_rounds import FMQ_OF_TREE, alternate, parser, scratch, trees
from bench_network import free_port, wait_answering

from fmq.loadgen import BenchSpec, run_bench

#: (name, what it measures) in the order printed.
PARTS = (
    ("pwrite", "pwrite of a flush"),
    ("fdatasync", "fdatasync of a flush"),
    ("write_then_sync", "pwrite and fdatasync of a flush in one call"),
    ("sync_to_hand_back", "after the sync, to the hand-back (acknowledger)"),
    ("hand_back_to_answers", "hand-back, to the answers starting (event loop)"),
    ("answering", "answering one flush (event loop)"),
    ("placement_to_pwrite", "placement, to the pwrite (acknowledger waited)"),
    ("cycle", "cycle: one fdatasync's start to the next"),
)


def install_timestamps(out_path: str) -> None:
    """In the server process: wrap the steps of the cycle, and write what they recorded to
    ``out_path`` on SIGUSR1."""
    from fmq.log import fileio
    from fmq.server.ops import batcher
    try:  # trees where the event loop leads the flushes
        from fmq.server.ops import loop_flush  # noqa: F401 - found through sys.modules
    except ImportError:
        pass

    events: list[tuple] = []
    now = time.perf_counter_ns
    io = fileio.FileIO
    batcher_class = batcher.SendBatcher

    def timed(kind, method):
        def wrapper(*args):
            start = now()
            result = method(*args)
            events.append((kind, start, now()))
            return result
        return wrapper

    io.pwrite = timed("pwrite", io.pwrite)
    io.fdatasync = timed("fdatasync", io.fdatasync)
    if hasattr(io, "write_then_sync"):  # the usual flush in one call
        io.write_then_sync = timed("write_then_sync", io.write_then_sync)
    hand_over, hand_back = batcher_class._hand_over, batcher_class._hand_back

    def hand_over_stamped(self, placed):
        flushing = getattr(self, "_loop_flush", None)
        idle = (self._acker_waiting if flushing is None
                else flushing._flush is None and not flushing._thread_flush.busy())
        events.append(("hand_over", now(), idle))
        return hand_over(self, placed)

    def hand_back_stamped(self, done, failure, durable=False):
        events.append(("hand_back", now(), 0))
        return hand_back(self, done, failure, durable)

    batcher_class._hand_over = hand_over_stamped
    loop_flush = getattr(sys.modules.get("fmq.server.ops.loop_flush"), "LoopFlush", None)
    if loop_flush is not None:  # the event loop leads the flushes: its flusher thread's
        write, end = loop_flush._write, loop_flush._end  # write is timed by its own clock

        def write_stamped(self, flush):
            self._stamp_started = now()
            return write(self, flush)

        def end_stamped(self, flush):
            # perf_counter_ns and the flusher's monotonic_ns read one clock on Linux.
            events.append(("write_then_sync", self._stamp_started, self._flusher.ended_ns))
            events.append(("hand_back", now(), 0))  # the loop takes the flush's outcome
            return end(self, flush)
        loop_flush._write, loop_flush._end = write_stamped, end_stamped
    batcher_class._hand_back = hand_back_stamped
    if hasattr(batcher_class, "answer_handed_back"):  # answered at the loop's next look
        answer = batcher_class.answer_handed_back

        def answer_stamped(self):
            if self.handed_back:
                start = now()
                answer(self)
                events.append(("answer", start, now()))
        batcher_class.answer_handed_back = answer_stamped
    else:  # answered by the hand-back's own callback
        batcher_class._answer_placed = timed("answer", batcher_class._answer_placed)

    def dump(*_args):
        with open(out_path, "w") as f:
            json.dump(events, f)
    signal.signal(signal.SIGUSR1, dump)


def parts(events: list[list]) -> dict[str, list[float]]:
    """Each part's durations in microseconds, one per flush (the middle 70 % of the run)."""
    events.sort(key=lambda e: e[1])
    first, last = events[0][1], events[-1][1]
    span = last - first
    events = [e for e in events if first + span * 0.2 < e[1] < first + span * 0.9]
    by_kind: dict[str, list] = {}
    for e in events:
        by_kind.setdefault(e[0], []).append(e)
    fused = by_kind.get("write_then_sync", [])
    syncs = sorted(by_kind.get("fdatasync", []) + fused, key=lambda e: e[1])
    writes = sorted(by_kind.get("pwrite", []) + fused, key=lambda e: e[1])
    backs, answers = by_kind.get("hand_back", []), by_kind.get("answer", [])
    overs = by_kind.get("hand_over", [])

    def after(times: list[int], t: int) -> int | None:
        i = bisect.bisect(times, t)
        return times[i] if i < len(times) else None

    def gaps(froms, to_times):
        return [(t - f) / 1000 for f in froms if (t := after(to_times, f)) is not None]

    back_times = [e[1] for e in backs]
    return {
        "pwrite": [(e[2] - e[1]) / 1000 for e in by_kind.get("pwrite", [])],
        "fdatasync": [(e[2] - e[1]) / 1000 for e in by_kind.get("fdatasync", [])],
        "write_then_sync": [(e[2] - e[1]) / 1000 for e in fused],
        "sync_to_hand_back": gaps([e[2] for e in syncs], back_times),
        "hand_back_to_answers": gaps(back_times, [e[1] for e in answers]),
        "answering": [(e[2] - e[1]) / 1000 for e in answers],
        "placement_to_pwrite": gaps([e[1] for e in overs if e[2]], [e[1] for e in writes]),
        "cycle": [(b[1] - a[1]) / 1000 for a, b in zip(syncs, syncs[1:], strict=False)],
        "_window_s": [(events[-1][1] - events[0][1]) / 1e9],
        "_flushes": [len(syncs)],
    }


def one_round(tree: str, args: argparse.Namespace) -> dict:
    with scratch("fmq-flush-cycle-") as tmp:
        port = free_port()
        stamps = os.path.join(tmp, "stamps.json")
        env = dict(os.environ, PYTHONPATH=tree)
        server = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve", tree, stamps,
             "--loop-flush" if args.loop_flush else "--",
             "server", "--data-dir", os.path.join(tmp, "data"), "--port", str(port),
             "--log-level", "WARNING"], env=env, stdout=subprocess.DEVNULL)
        try:
            wait_answering(server, port)
            spec = BenchSpec(kind="produce", server=f"127.0.0.1:{port}",
                             producers=args.producers, size=1024, duration_s=args.seconds,
                             topic=f"cycle-{os.getpid()}-{int(time.time())}")
            report = run_bench(spec)
            if not report.count_check.startswith("ok") or report.errors:
                raise RuntimeError(f"fmq bench failed: {report.count_check} {report.errors}")
            server.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 30
            while not os.path.exists(stamps) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)  # the dump is written whole before the next read
            with open(stamps) as f:
                found = parts(json.load(f))
        finally:
            server.terminate()
            server.wait(60)
    msgs_per_s = report.messages / report.elapsed_s
    flushes_per_s = found["_flushes"][0] / found["_window_s"][0]
    return {"msgs_per_s": msgs_per_s, "round_trip_us": args.producers / msgs_per_s * 1e6,
            "msgs_per_flush": msgs_per_s / flushes_per_s,
            **{name: (statistics.median(v) if v else 0.0, statistics.fmean(v) if v else 0.0)
               for name, v in found.items() if not name.startswith("_")}}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":  # the server process itself
        tree, out_path = sys.argv[2], sys.argv[3]
        sys.path.insert(0, tree)
        install_timestamps(out_path)
        if sys.argv[4] == "--loop-flush":  # the loop leads the flushes, where the tree can
            from fmq.server.ops import batcher
            if hasattr(batcher.SendBatcher, "LOOP_FLUSH"):
                batcher.SendBatcher.LOOP_FLUSH = True
        sys.argv = [sys.argv[0], tree, *sys.argv[5:]]
        exec(FMQ_OF_TREE, {"__name__": "__fmq__"})  # noqa: S102 - the tree's own fmq CLI
        return
    ap = parser(__doc__)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--producers", type=int, default=64)
    ap.add_argument("--loop-flush", action="store_true",
                    help="switch on the event loop's flushes (SendBatcher.LOOP_FLUSH) in "
                         "every tree that has them")
    args = ap.parse_args()
    checkouts = trees(args.old)
    results = alternate(list(checkouts), args.rounds,
                        lambda name: one_round(checkouts[name], args),
                        lambda name, r: f"{name}: {r['msgs_per_s']:,.0f} msgs/s, round trip "
                                        f"{r['round_trip_us']:,.0f} us")
    names = list(checkouts)
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
          f"{os.getloadavg()[0]:.1f}, {args.producers} producers, {args.rounds} rounds of "
          f"{args.seconds:g} s; medians over the rounds of each round's median (mean) per "
          f"flush, microseconds\n")
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))

    def med(name, key, i=None):
        values = [r[key] if i is None else r[key][i] for r in results[name]]
        return statistics.median(values)
    print("| msgs/s | " + " | ".join(f"{med(n, 'msgs_per_s'):,.0f}" for n in names) + " |")
    print("| round trip (producers / rate) | "
          + " | ".join(f"{med(n, 'round_trip_us'):,.0f}" for n in names) + " |")
    print("| messages per flush | "
          + " | ".join(f"{med(n, 'msgs_per_flush'):.1f}" for n in names) + " |")
    for key, label in PARTS:
        print(f"| {label} | " + " | ".join(f"{med(n, key, 0):,.0f} ({med(n, key, 1):,.0f})"
                                         for n in names) + " |")


if __name__ == "__main__":
    main()
