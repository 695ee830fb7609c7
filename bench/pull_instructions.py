"""Instructions of a following consumer's pull on the server, counted by ``valgrind
--tool=callgrind`` (steady on a shared machine where seconds are not), for this checkout and
``--old``:

* ``wait``: one woken long poll (``PullWakeups.events``, a write's ``data_arrived``,
  ``PullWakeups.wait``) on uvloop;
* ``pull``: one pull of the last message of a queue (``pull_reads.pull_now`` on a real
  broker: the index read, the log read, the decode, the encode).

Each is run twice, ``--small`` and ``--large`` times, and the difference per call is
printed: imports and start-up cancel out. Run::

    python bench/pull_instructions.py --old /tmp/readpath-old
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

from ab_rounds import parser, trees

WAIT = """
import asyncio, sys, uvloop
from fmq.server.ops.wakeups import PullWakeups
async def main(n):
    w = PullWakeups()
    loop = asyncio.get_running_loop()
    for _ in range(n):
        events = w.events("t", 0, 1)
        loop.call_soon(w.data_arrived, {("t", 0)})
        assert await w.wait(events, 5.0)
uvloop.install()
asyncio.run(main(int(sys.argv[1])))
"""

PULL = """
import os, sys, tempfile
import fmq
from fmq.engine.recent import RecentMessages
from fmq.message import Message
from fmq.server.ops.pull_reads import pull_now
n = int(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    b = fmq.Broker.open(os.path.join(tmp, "d"), fmq.BrokerConfig(queues_per_topic=1))
    for _ in range(64):
        b.send(Message("t", b"x" * 1000, queue_id=0))
    assert b.wait_indexed()
    cache = RecentMessages(1 << 20)
    for _ in range(n):
        assert pull_now(b, cache, False, "t", 0, 63, 32, None, 1 << 20)[1] == 1
    b.close()
"""


def instructions(tree: str, program: str, n: int) -> int:
    """Instructions callgrind counts for ``program`` run with ``n``, on ``tree``'s fmq."""
    with tempfile.TemporaryDirectory(prefix="fmq-pull-cg-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        sys.executable, "-c", program, str(n)],
                       env=dict(os.environ, PYTHONPATH=tree), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            return int(re.search(r"^summary: (\d+)", f.read(), re.M).group(1))


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--small", type=int, default=500)
    ap.add_argument("--large", type=int, default=1500)
    args = ap.parse_args()
    print("| per call | " + " | ".join(trees(args.old)) + " |")
    print("|---|" + "---:|" * len(trees(args.old)))
    for name, program in (("woken long-poll wait", WAIT), ("following pull", PULL)):
        cells = []
        for tree in trees(args.old).values():
            small = instructions(tree, program, args.small)
            large = instructions(tree, program, args.large)
            cells.append(f"{(large - small) / (args.large - args.small):,.0f}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
