"""A client application needs none of the server's storage libraries."""

from __future__ import annotations

import subprocess
import sys

from tests.crashkit import ROOT

STORAGE_MODULES = ("lmdb", "fmq.engine.broker", "fmq.index.store", "fmq.log.log")


def test_importing_the_client_loads_no_storage_module():
    out = subprocess.run([sys.executable, "-m", "tests.workloads.import_probe", "fmq.client",
                          *STORAGE_MODULES], capture_output=True, text=True, timeout=60,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "", f"import fmq.client loaded {out.stdout.strip()}"


def test_the_broker_is_still_reachable_as_fmq_broker():
    out = subprocess.run([sys.executable, "-m", "tests.workloads.broker_by_name"],
                         capture_output=True, text=True, timeout=60, check=True, cwd=ROOT)
    assert out.stdout.split() == ["Broker", "True"]
