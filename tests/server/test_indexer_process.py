"""A server with ``index_writer = "process"``: its indexer process never outlives it, and a
restart after kill -9 recovers an index equal to a rebuild from the log."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import time

import fmq
from fmq.client import Producer
from fmq.datadir import INDEX_DIR

from .conftest import FAST

DEADLINE = 60.0


def children(pid: int) -> list[int]:
    out = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        with open(path) as f:
            out += [int(c) for c in f.read().split()]
    return out


def exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def indexer_of(server_pid: int) -> int:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        for pid in children(server_pid):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"fmq.index.indexer_process" in f.read():
                    return pid
        time.sleep(0.05)
    raise AssertionError("the server started no indexer process")


def test_kill_9_of_the_server_ends_its_indexer_and_a_restart_recovers(start_server):
    cfg = {**FAST, "index_writer": "process", "segment_size": 64 * 1024,
           "max_message_size": 4096}
    srv = start_server(cfg)
    indexer = indexer_of(srv.proc.pid)
    with Producer(srv.address) as p:
        for i in range(300):
            p.send("t", f"m-{i}".encode() * 20)
    srv.kill()
    deadline = time.monotonic() + DEADLINE
    while not exited(indexer):
        assert time.monotonic() < deadline, "the indexer outlived its server"
        time.sleep(0.05)
    srv.start()
    assert indexer_of(srv.proc.pid) != indexer
    with Producer(srv.address) as p:
        p.send("t", b"after the restart")
    assert srv.stop() == 0
    config = fmq.BrokerConfig(**{k: v for k, v in cfg.items() if k != "server"})
    with fmq.Broker.open(srv.data_dir, config) as b:
        got = sorted(m.body for v in b.reads.all_messages(["t"]).values() for m in v)
        online = b._index.dump()
    assert got == sorted([f"m-{i}".encode() * 20 for i in range(300)] + [b"after the restart"])
    shutil.rmtree(f"{srv.data_dir}/{INDEX_DIR}")
    with fmq.Broker.open(srv.data_dir, config) as b:
        assert b._index.dump() == online


def test_a_blocked_indexer_dies_with_its_killed_server(start_server):
    # An indexer that is not reading its command pipe (stopped here; busy with a long write
    # or blocked on LMDB's writer lock elsewhere) outlived its kill -9'd server with the log
    # and the index open: a file system it used could not be unmounted (fault 5).
    srv = start_server({**FAST, "index_writer": "process"})
    indexer = indexer_of(srv.proc.pid)
    with Producer(srv.address) as p:
        p.send("t", b"before the kill")
    os.kill(indexer, signal.SIGSTOP)
    try:
        srv.kill()
        deadline = time.monotonic() + DEADLINE
        while not exited(indexer) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert exited(indexer), "the stopped indexer outlived its killed server"
    finally:
        if not exited(indexer):
            os.kill(indexer, signal.SIGCONT)  # it ends once it reads its pipe's end
