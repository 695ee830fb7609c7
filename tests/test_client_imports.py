"""A client application needs none of the server's storage libraries."""

from __future__ import annotations

import subprocess
import sys

STORAGE_MODULES = ("lmdb", "fmq.engine.broker", "fmq.index.store", "fmq.log.log")


def test_importing_the_client_loads_no_storage_module():
    probe = ("import sys, fmq.client; "
             f"print(','.join(m for m in {STORAGE_MODULES!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "", f"import fmq.client loaded {out.stdout.strip()}"


def test_the_broker_is_still_reachable_as_fmq_broker():
    probe = "from fmq import Broker; import fmq; print(Broker.__name__, fmq.Broker is Broker)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.split() == ["Broker", "True"]
