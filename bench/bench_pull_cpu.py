"""The server's CPU per pulled message, without the network: what a PULL costs in its
reader thread (index read, log read, decode, fitting the budget) plus its answer's
encoding, on an embedded broker holding 80,000 1 KiB messages in four queues. Thread CPU
time (not the wall clock: other processes on a shared machine barely move it), best of
five repetitions of 30 pulls each, for one reader of each message and for four readers of
the same messages one after the other (consumers of four groups following one queue).

Runs this tree and, with ``--old``, an older checkout, each in a process of its own,
alternating. Not part of the test run. Run::

    python bench/bench_pull_cpu.py [--old PATH_OF_AN_OLDER_CHECKOUT] [--rounds 3]
"""

from __future__ import annotations

import argparse
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pull_encoder(broker, shared: bool):  # noqa: ANN001, ANN202 - either tree's handlers
    """A function (offset, n) -> answer bytes for queue 0 of topic "t", for this tree's
    pull_now (which changed its place and signature over time) and a fresh cache per call;
    ``shared``: the queue has several readers (the server keeps what it decodes)."""
    from fmq.protocol import Op
    from fmq.protocol.frame import encode_response
    from fmq.protocol.values import stored_to_wire
    try:
        from fmq.server.ops import handlers
    except ImportError:  # a checkout from before fmq/server/ops/
        from fmq.server import handlers

    try:
        from fmq.server.pull_reads import pull_now
    except ImportError:  # before pulls were read on the event loop
        pull_now = handlers._pull_now
    params = inspect.signature(pull_now).parameters
    if "encoded" in params:
        from fmq.server.pull_answers import encoded_cache  # the old trees that have _pull_now
        cache = encoded_cache()
        keep = (shared,) if "keep" in params else ()

        def pull(offset: int, n: int) -> bytes:
            items, _count, lo, hi, _size, _resume = pull_now(
                broker, cache, *keep, "t", 0, offset, n, None, 1 << 22)
            return encode_response(Op.PULL, 1, {"messages": items, "min_offset": lo,
                                                "next_offset": hi})
        return pull
    extra = (False,) if "catch_up" in params else ()

    def pull_old(offset: int, n: int) -> bytes:
        msgs, lo, hi, _size, _resume = pull_now(broker, "t", 0, offset, n, None, *extra,
                                                 1 << 22)
        return encode_response(Op.PULL, 1, {"messages": [stored_to_wire(m) for m in msgs],
                                            "min_offset": lo, "next_offset": hi})
    return pull_old


def measure() -> str:
    """In the child process: the per-message CPU of each case."""
    from fmq.engine.broker import Broker
    from fmq.message import Message

    scratch = tempfile.mkdtemp(prefix="fmq-pull-cpu-")
    try:
        broker = Broker.open(os.path.join(scratch, "data"))
        body = b"x" * 1024
        for _ in range(0, 80_000, 64):
            broker.send_batch([Message("t", body, queue_id=j % 4) for j in range(64)])
        broker.wait_indexed()
        out = []
        for readers in (1, 4):
            for n in (16, 64):
                offset = 0  # 5 x 30 x 64 pulled: within the 20,000 messages of a queue
                best = float("inf")
                for _rep in range(5):
                    # trees before the one cache of pulled messages kept decoded records too
                    reader = getattr(broker, "_reader", None)
                    if hasattr(reader, "recent"):  # a cold start for every rep
                        from fmq.engine.recent import RecentMessages
                        reader.recent = RecentMessages(8 << 20)
                    pull = _pull_encoder(broker, readers > 1)
                    t0, pulled = time.thread_time(), 0
                    for _ in range(30):
                        for _r in range(readers):
                            pull(offset, n)
                            pulled += n
                        offset += n
                    best = min(best, (time.thread_time() - t0) / pulled)
                out.append(f"{readers} reader(s), {n} a pull: {best * 1e6:.2f} us/msg")
        broker.close()
        return "; ".join(out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.path.insert(0, sys.argv[2])
        print(measure())
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", help="an older checkout to compare with (git worktree add)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    trees = {"new": HERE}
    if args.old:
        trees["old"] = os.path.abspath(args.old)
    names = list(trees)
    for n in range(args.rounds):
        for name in names if n % 2 == 0 else names[::-1]:
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                  trees[name]], capture_output=True, text=True, check=True,
                                 env=dict(os.environ, PYTHONPATH=trees[name]))
            print(f"round {n + 1} {name}: {out.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
