"""Instructions of a following consumer's pull on the server, counted by ``valgrind
--tool=callgrind`` (steady on a shared machine where seconds are not), for this checkout and
``--old``, per call, in one run per checkout that dumps its counts between phases
(start-up and each phase's warm-up are dumped apart and left out):

* ``wait``: one woken long poll (``PullWakeups.events``, a write's ``data_arrived``,
  ``PullWakeups.wait``) on uvloop;
* ``pull``: a follower's pull of the last message of its queue, written after the
  follower's previous pull (``pull_reads.pull_now`` on a real broker: the index read, the
  log read, the decode, the encode);
* ``kept pull``: the same pull by a second group's consumer, the message kept encoded by
  the first one's (rows 6's four groups per queue);
* ``pull of 16``, ``pull of 256``: a pull of 16 and of 256 messages of 1 KiB (a consumer
  that fell behind), one consumer's (nothing kept).

Run::

    python bench/pull_instructions.py --old /tmp/readpath-old
"""

from __future__ import annotations

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._callgrind import compile_dump_helper, run_dumped  # noqa: E402
from bench.ab_rounds import parser, scratch, trees  # noqa: E402

SCRIPT = r"""
import asyncio, ctypes, os, sys, uvloop
import fmq
from fmq.engine.recent import RecentMessages
from fmq.message import Message
from fmq.server.ops.pull_reads import pull_now
from fmq.server.ops.wakeups import PullWakeups
n, warm, data_dir, helper = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dump = ctypes.CDLL(helper).fmq_bench_dump

async def waits(count):
    w = PullWakeups()
    loop = asyncio.get_running_loop()
    for _ in range(count):
        events = w.events("t", 0, 1)
        loop.call_soon(w.data_arrived, {("t", 0)})
        assert await w.wait(events, 5.0)

b = fmq.Broker.open(data_dir, fmq.BrokerConfig(queues_per_topic=1))
for _ in range(64):
    b.send(Message("t", b"x" * 1000, queue_id=0))
assert b.wait_indexed()
alone = RecentMessages(1 << 20)
assert pull_now(b, alone, False, "t", 0, 0, 64, None, 1 << 20)[1] == 64  # caught up
for _ in range(64):  # what the follower's next pull finds
    b.send(Message("t", b"x" * 1000, queue_id=0))
assert b.wait_indexed()
shared = RecentMessages(1 << 20)
assert pull_now(b, shared, True, "t", 0, 127, 32, None, 1 << 20)[1] == 1  # the first group's
for _ in range(256):
    b.send(Message("u", b"y" * 1000, queue_id=0))
assert b.wait_indexed()
uvloop.install()
dump()
asyncio.run(waits(warm))
dump()
asyncio.run(waits(n))
dump()
for _ in range(warm):
    assert pull_now(b, alone, False, "t", 0, 127, 32, None, 1 << 20)[1] == 1
dump()
for _ in range(n):
    pull_now(b, alone, False, "t", 0, 127, 32, None, 1 << 20)
dump()
for _ in range(warm):
    assert pull_now(b, shared, False, "t", 0, 127, 32, None, 1 << 20)[1] == 1
dump()
for _ in range(n):
    pull_now(b, shared, False, "t", 0, 127, 32, None, 1 << 20)
dump()
for many in (16, 256):
    for _ in range(warm):
        assert pull_now(b, alone, False, "u", 0, 0, many, None, 1 << 20)[1] == many
    dump()
    for _ in range(max(n * 16 // many, 10)):
        pull_now(b, alone, False, "u", 0, 0, many, None, 1 << 20)
    dump()
b.close()
"""

PHASES = ("woken long-poll wait", "following pull", "kept pull (a second group's)",
          "pull of 16 messages", "pull of 256 messages")


def instructions(tree: str, calls: int, helper: str, scratch_dir: str) -> list[float]:
    """Instructions per call of each phase of ``tree``."""
    data = os.path.join(scratch_dir, "data")
    shutil.rmtree(data, ignore_errors=True)
    # Dump 1 is the start-up's; then each phase's warm-up and its measured calls.
    _, totals = run_dumped(tree, SCRIPT, [str(calls), "50", data, helper], scratch_dir, 11)
    return [totals[i] / calls for i in (2, 4, 6)] + [
        totals[i] / max(calls * 16 // many, 10) for i, many in ((8, 16), (10, 256))]


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--calls", type=int, default=1000, help="calls measured per phase")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    with scratch("fmq-pull-instr-") as tmp:
        helper = compile_dump_helper(tmp)
        results = {name: instructions(tree, args.calls, helper, tmp)
                   for name, tree in trees(args.old).items()}
    names = list(results)
    print("| per call | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for i, phase in enumerate(PHASES):
        print(f"| {phase} | " + " | ".join(f"{results[n][i]:,.0f}" for n in names) + " |")


if __name__ == "__main__":
    main()
