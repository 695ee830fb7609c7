"""What an executor's Python worker imports to run the rebuild's scan: each module costs
every new worker its import (CPU seconds of a fresh session's first job,
docs/spark.md, *The cold rebuild within 2x*), so none it does not use."""

from __future__ import annotations

import subprocess
import sys

#: Modules the scan never runs, with what importing them cost a worker.
NOT_ON_EXECUTORS = {
    "fmq.protocol": "0.14 CPU s (the wire codecs, reached through fmq.spark.errors)",
}


def test_the_scan_module_imports_nothing_the_executors_do_not_run():
    probe = ("import sys, fmq.spark.scan; "
             f"print(' '.join(m for m in {sorted(NOT_ON_EXECUTORS)!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=True)
    loaded = done.stdout.split()
    assert not loaded, {m: NOT_ON_EXECUTORS[m] for m in loaded}
