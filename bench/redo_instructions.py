"""Instructions per record of recovery's redo (callgrind), this checkout next to an older one.

Instruction counts hold steady on a shared, noisy machine where the wall clock does not.
Writes two logs of 1 KiB messages (``--records`` and twice as many) once, then per checkout
opens an index-less copy of each under ``valgrind --tool=callgrind`` and prints the
difference divided by the extra records: imports, start-up and the index's creation cancel
out, what is left is the redo's cost per record. Not part of the test run::

    python bench/redo_instructions.py [--old PATH_OF_AN_OLDER_CHECKOUT] [--records 10240]
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.ab_rounds import HERE, parser, scratch, trees  # noqa: E402
from bench.bench_redo_ab import WRITE, index_less_copy  # noqa: E402

OPEN = """
import sys, fmq
cfg = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0)
b = fmq.Broker.open(sys.argv[1], cfg)
print(b.recovery.records_replayed)
b.close()
"""


def instructions(tree: str, written: str, scratch_dir: str) -> tuple[int, int]:
    """(records replayed, instructions) of opening an index-less copy of ``written``."""
    copy = index_less_copy(written, scratch_dir)
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch_dir}/cg.out",
         sys.executable, "-c", OPEN, copy],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=tree), cwd=tree,
        check=True)
    collected = re.search(r"Collected : (\d+)", out.stderr)
    if collected is None:
        raise SystemExit(f"callgrind printed no count:\n{out.stderr[-2000:]}")
    return int(out.stdout.split()[-1]), int(collected.group(1))


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--records", type=int, default=10240,
                    help="records of the smaller log, a multiple of 256 (the larger has "
                         "twice as many)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    with scratch("fmq-redo-instr-") as tmp:
        logs = {}
        for n in (args.records, 2 * args.records):
            logs[n] = os.path.join(tmp, f"log-{n}")
            # bench_redo_ab's writer sends batches of 256 messages of 1 KiB
            subprocess.run([sys.executable, "-c", WRITE, logs[n], str(n // 256)],
                           check=True, cwd=HERE)
        for name, tree in trees(args.old).items():
            (small, a), (large, b) = (instructions(tree, logs[n], tmp) for n in sorted(logs))
            print(f"{name}: {(b - a) / (large - small):,.0f} instructions per redone record "
                  f"({large - small} records between the two logs)")


if __name__ == "__main__":
    main()
