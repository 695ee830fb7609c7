"""Fault 16: the indexer process (``index_writer = "process"``) crashed for real under load.

A real ``fmq server`` (the CLI's; its broker runs tests/workloads/crashing_indexer.py as its
indexer process, through tests/workloads/indexer_crash_server.py) on 127.0.0.1, with
producers sending and consumers pulling, each a real client:

* the indexer SIGKILLed at an injected point of its writes (inside the LMDB write
  transaction with its items put, after the commit before its report, after its report
  before the next transaction), three times: the broker starts it again and serves on;
* the whole server (broker and indexer) SIGKILLed at those points and started again:
  recovery brings the index up from its checkpoint;
* EIO from the indexer's LMDB writes (strace's fault injection on the running process, on
  the index's data file only): the broker refuses sends meanwhile and the index resumes by
  itself once the disk works; EIO on the commit's meta-page write alone (an LD_PRELOAD
  library built here), after which LMDB refuses that process's environment: a new
  indexer takes over;
* the index directory deleted under a running server, then the indexer killed: a clear
  error, never a new empty index that leaves a gap; damaged at rest: rebuilt;
* the indexer killed ten times under load: the server keeps acknowledging sends between
  the kills, each restart waits its back-off, and the index lag recovers.

After each run, with the server stopped and its data directory opened: every
acknowledged send is in the index at the queue offset it was acknowledged with and the
consumers read it there; each queue's offsets are contiguous from 0 and each log record has
one queue entry (nothing indexed twice, nothing invented); the consumers' acknowledged
offset commits are kept (also across the server's crash); the index equals a rebuild from
the log (I6).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

import fmq
from fmq.client import Client, Producer
from fmq.datadir import INDEX_DATA_FILE, INDEX_DIR
from fmq.protocol import Op
from tests.crashkit import ROOT
from tests.faults.invariants import check_index_matches_rebuild
from tests.server.harness import broker_stats, free_port, wait_until_serving
from tests.workloads.crashing_indexer import PLAN_ENV, POINTS, kills_so_far

TOPIC = "orders"
GROUP = "billing"
QUEUES = 2
BODY = 200
#: Generous: the machine is shared.
DEADLINE = 90.0
BROKER_CONFIG = {"index_writer": "process", "queues_per_topic": QUEUES,
                 "segment_size": 256 * 1024, "max_message_size": 4096,
                 # small index transactions: many of them per second, so the injected
                 # points fall between and inside them under load
                 "dispatch_batch": 16, "checkpoint_interval_ms": 300,
                 "index_retry_initial_ms": 50, "index_retry_max_ms": 1000}
SERVER_CONFIG = {**BROKER_CONFIG, "server": {"shutdown_grace_ms": 10000}}


def wait_until(cond, what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def body_of(name: str) -> bytes:
    return name.encode().ljust(BODY, b".")


class CrashServer:
    """``fmq server`` whose indexer process dies as ``plan`` says (None: never)."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.config_path = os.path.join(os.path.dirname(data_dir), "server.json")
        with open(self.config_path, "w", encoding="utf-8") as f:
            json.dump(SERVER_CONFIG, f)
        self.log_path = os.path.join(os.path.dirname(data_dir), "server.log")
        self.proc: subprocess.Popen | None = None

    def start(self, plan: dict | None = None) -> None:
        env = dict(os.environ)
        env.pop(PLAN_ENV, None)
        if plan is not None:
            env[PLAN_ENV] = json.dumps(plan)
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write("---- start\n")
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.workloads.indexer_crash_server", "server",
                 "--data-dir", self.data_dir, "--host", "127.0.0.1", "--port", str(self.port),
                 "--config", self.config_path], stdout=log, stderr=log, env=env, cwd=ROOT)
        if not wait_until_serving(self.address, self.proc, DEADLINE):
            raise AssertionError(f"the server exited with {self.proc.returncode}:\n"
                                 f"{self.log()[-4000:]}")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8") as f:
            return f.read()

    def stats(self) -> dict:
        return broker_stats(self.address)

    def indexer_pid(self) -> int | None:
        """The running indexer process's id (None while there is none)."""
        for path in _task_children(self.proc.pid):
            try:
                with open(f"/proc/{path}/cmdline", "rb") as f:
                    if b"crashing_indexer" in f.read():
                        return path
            except FileNotFoundError:
                continue
        return None

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the server did not stop:\n{self.log()[-4000:]}") from None

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
        self.proc.wait(DEADLINE)


def _task_children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except FileNotFoundError:
        pass
    return out


class Load:
    """Producers sending and one consumer per queue pulling and committing, reconnecting
    whenever the server goes away; what each was acknowledged is recorded."""

    def __init__(self, address: str, producers: int = 2) -> None:
        self.address = address
        self.lock = threading.Lock()
        #: body -> (queue id, queue offset) of each acknowledged send
        self.acked: dict[bytes, tuple[int, int]] = {}
        #: sends whose answer was lost with the connection: stored or not
        self.uncertain: set[bytes] = set()
        #: queue id -> {queue offset: body} as the consumers read them
        self.seen: list[dict[int, bytes]] = [{} for _ in range(QUEUES)]
        #: each queue's last acknowledged offset commit
        self.committed = [0] * QUEUES
        self.problems: list[str] = []
        self.refused = 0
        self._stop_sending = threading.Event()
        self._stop_reading = threading.Event()
        self._threads = [threading.Thread(target=self._produce, args=(n,), daemon=True)
                         for n in range(producers)]
        self._readers = [threading.Thread(target=self._consume, args=(q,), daemon=True)
                         for q in range(QUEUES)]

    def start(self) -> Load:
        for t in self._threads + self._readers:
            t.start()
        return self

    def acks(self) -> int:
        with self.lock:
            return len(self.acked)

    def wait_acks(self, more: int, what: str) -> None:
        """Wait until ``more`` sends more than now are acknowledged."""
        want = self.acks() + more
        wait_until(lambda: self.acks() >= want, f"{more} more acknowledged sends {what}")

    def _produce(self, n: int) -> None:
        producer = None
        i = 0
        while not self._stop_sending.is_set():
            name = f"p{n}-{i}"
            body, queue = body_of(name), i % QUEUES
            i += 1
            for _ in range(400):  # bounded: refused while the index lags or fails
                try:
                    if producer is None:
                        producer = Producer(self.address, retries=0, idempotent=False,
                                            linger_ms=0, request_timeout=20)
                    r = producer.send(TOPIC, body, queue_id=queue)
                    with self.lock:
                        self.acked[body] = (r.queue_id, r.queue_offset)
                    break
                except fmq.IndexUnavailable:  # retriable, nothing stored: send it again
                    self.refused += 1
                    time.sleep(0.05)
                except (fmq.FMQError, OSError):
                    with self.lock:
                        self.uncertain.add(body)
                    producer = _closed(producer)
                    time.sleep(0.1)
                    break
        _closed(producer)

    def _consume(self, q: int) -> None:
        client = None
        at = 0
        while not self._stop_reading.is_set():
            try:
                if client is None:
                    client = Client(self.address, retries=0, request_timeout=20)
                    stored = client.call(Op.FETCH_OFFSET, {"group": GROUP, "topic": TOPIC,
                                                           "queue_id": q})["offset"]
                    if max(stored, 0) < self.committed[q]:
                        self._problem(f"queue {q}: the committed offset went back from "
                                      f"{self.committed[q]} to {stored}")
                    at = max(stored, 0)
                got = client.call(Op.PULL, {"topic": TOPIC, "queue_id": q, "offset": at,
                                            "max_messages": 200, "wait_ms": 200})["messages"]
                for k, m in enumerate(got):
                    if m["queue_offset"] != at + k:
                        self._problem(f"queue {q}: a pull from {at} answered offsets "
                                      f"{[x['queue_offset'] for x in got][:10]}")
                        break
                    earlier = self.seen[q].setdefault(m["queue_offset"], m["body"])
                    if earlier != m["body"]:
                        self._problem(f"queue {q} offset {m['queue_offset']}: read "
                                      f"{m['body'][:12]!r}, earlier {earlier[:12]!r}")
                if got:
                    at = got[-1]["queue_offset"] + 1
                    client.call(Op.COMMIT_OFFSET, {"group": GROUP, "topic": TOPIC,
                                                   "queue_id": q, "next_offset": at})
                    self.committed[q] = at
            except (fmq.FMQError, OSError):
                client = _closed(client)
                time.sleep(0.1)
        _closed(client)

    def _problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)

    def finish(self) -> None:
        """Stop sending; let the consumers read every acknowledged send (bounded), then stop
        them. Fails when an acknowledged send never reaches its consumer."""
        self._stop_sending.set()
        for t in self._threads:
            t.join(DEADLINE)
        try:
            wait_until(lambda: not self.unread(), "the consumers to read every acknowledged "
                       "send")
        finally:
            self._stop_reading.set()
            for t in self._readers:
                t.join(DEADLINE)

    def stop_now(self) -> None:
        self._stop_sending.set()
        self._stop_reading.set()
        for t in self._threads + self._readers:
            t.join(DEADLINE)

    def unread(self) -> list[tuple[int, int]]:
        with self.lock:
            return sorted(place for place in self.acked.values()
                          if place[1] not in self.seen[place[0]])


def _closed(client):  # noqa: ANN001, ANN202 - a client or None
    if client is not None:
        try:
            client.close()
        except (fmq.FMQError, OSError):
            pass
    return None


def verify(data_dir: str, load: Load, workdir: str) -> None:
    """Open the stopped server's data directory and check the run (see the module's text)."""
    assert not load.problems, load.problems[:5]
    config = fmq.BrokerConfig(**BROKER_CONFIG)
    broker = fmq.Broker.open(data_dir, config)
    try:
        assert broker.wait_indexed(DEADLINE), broker.stats()
        stored: dict[bytes, tuple[int, int]] = {}
        sources: set[int] = set()
        for q in range(QUEUES):
            lo, hi = broker.reads.queue_range(TOPIC, q)
            entries = broker._index.queue_entries(TOPIC, q, 0, hi + 1)
            offsets = [e[0] for e in entries]
            assert lo == 0 and offsets == list(range(hi)), \
                f"queue {q}: range {lo}..{hi}, entries at {_runs(offsets)}"
            for e in entries:
                assert e[1] not in sources, f"queue {q}: log offset {e[1]} indexed twice"
                sources.add(e[1])
            for m in broker.reads.all_messages([TOPIC])[(TOPIC, q)]:
                assert m.body not in stored, f"{m.body[:12]!r} stored twice"
                stored[m.body] = (q, m.queue_offset)
            committed = broker.reads.committed_offset(GROUP, TOPIC, q)
            assert committed is not None and load.committed[q] <= committed <= hi, \
                f"queue {q}: committed offset {committed}, last acknowledged commit " \
                f"{load.committed[q]}, queue end {hi}"
        missing = [b[:12] for b, place in load.acked.items() if stored.get(b) != place]
        assert not missing, f"{len(missing)} of {len(load.acked)} acknowledged sends are not " \
                            f"where they were acknowledged, e.g. {missing[:3]}"
        invented = [b[:12] for b in stored if b not in load.acked and b not in load.uncertain]
        assert not invented, f"stored but never sent: {invented[:3]}"
        for q in range(QUEUES):
            for off, body in load.seen[q].items():
                assert stored.get(body) == (q, off), \
                    f"queue {q} offset {off}: the consumer read {body[:12]!r}, now not there"
    except BaseException:
        broker.close()
        raise
    check_index_matches_rebuild(broker, data_dir, config, workdir)  # closes it
    print(f"fault 16: {len(load.acked)} acknowledged, {len(load.uncertain)} uncertain, "
          f"{load.refused} refusals retried, {sum(map(len, load.seen))} read, commits "
          f"{load.committed}")


def _runs(offsets: list[int]) -> str:
    """Offsets as runs, for a failure message."""
    out, start = [], None
    for i, off in enumerate(offsets):
        if start is None:
            start = off
        if i + 1 == len(offsets) or offsets[i + 1] != off + 1:
            out.append(f"{start}..{off}")
            start = None
    return ", ".join(out[:6]) + (" ..." if len(out) > 6 else "")


def _plan(tmp_path, point: str, kills: int, whole: bool) -> dict:
    return {"point": point, "nth": 30, "kills": kills, "whole": whole,
            "state": str(tmp_path / "kills")}


@pytest.mark.parametrize("point", POINTS)
def test_indexer_killed_at_a_point_is_restarted_and_loses_nothing(tmp_path, point):
    plan = _plan(tmp_path, point, kills=3, whole=False)
    srv = CrashServer(str(tmp_path / "data"))
    srv.start(plan)
    load = Load(srv.address).start()
    try:
        wait_until(lambda: kills_so_far(plan["state"]) >= 3 or not srv.alive,
                   "three indexer kills")
        assert srv.alive, f"the server died with its indexer:\n{srv.log()[-4000:]}"
        load.wait_acks(200, "after the third kill")
        load.finish()
        stats = srv.stats()
        assert stats["dispatcher_error"] is None, stats
        assert srv.stop() == 0
    finally:
        load.stop_now()
        srv.kill()
    assert srv.log().count("ended with status -9") == 3
    verify(srv.data_dir, load, str(tmp_path))


@pytest.mark.parametrize("point", POINTS)
def test_server_killed_with_its_indexer_recovers_the_index(tmp_path, point):
    plan = _plan(tmp_path, point, kills=1, whole=True)
    srv = CrashServer(str(tmp_path / "data"))
    srv.start(plan)
    load = Load(srv.address).start()
    try:
        wait_until(lambda: not srv.alive, "the injected kill of the server")
        assert kills_so_far(plan["state"]) == 1
        assert srv.proc.returncode == -signal.SIGKILL
        srv.start(plan)  # spent: its indexer runs unharmed now
        load.wait_acks(200, "after the restart")
        load.finish()
        assert srv.stop() == 0
    finally:
        load.stop_now()
        srv.kill()
    verify(srv.data_dir, load, str(tmp_path))


def _strace_eio(pid: int, data_file: str, log_path: str) -> subprocess.Popen:
    """Make every write of process ``pid`` to ``data_file`` fail with EIO (strace's fault
    injection, attached to the running process) until the returned strace ends."""
    with open(log_path, "w", encoding="utf-8") as log:
        return subprocess.Popen(
            ["strace", "-qq", "-f", "-o", "/dev/null", "-p", str(pid), "-P", data_file,
             "-e", "trace=write,pwrite64,writev,pwritev,pwritev2",
             "-e", "inject=write,pwrite64,writev,pwritev,pwritev2:error=EIO"],
            stdout=subprocess.DEVNULL, stderr=log)


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_eio_in_the_indexers_lmdb_writes_refuses_sends_then_resumes(tmp_path):
    srv = CrashServer(str(tmp_path / "data"))
    srv.start()
    load = Load(srv.address).start()
    strace = None
    try:
        load.wait_acks(100, "before the disk fails")
        data_file = os.path.join(srv.data_dir, INDEX_DIR, INDEX_DATA_FILE)
        strace_log = str(tmp_path / "strace.log")
        for _ in range(3):
            # Bounded: attached between a commit's page writes and its meta-page write, the
            # first failing write is the meta page's, and a new indexer, not traced, takes
            # over (test_eio_writing_lmdbs_meta_page_starts_a_new_indexer): trace that one.
            wait_until(lambda: srv.indexer_pid() is not None, "an indexer")
            pid = srv.indexer_pid()
            strace = _strace_eio(pid, data_file, strace_log)
            wait_until(lambda pid=pid: "Input/output error" in (srv.stats()["index_error"]
                                                                or "")
                       or srv.indexer_pid() != pid, "the indexer to report the failing writes")
            if srv.indexer_pid() == pid:
                break
            strace.terminate()
            strace.wait(DEADLINE)
            strace = None
        else:
            raise AssertionError("three indexers in a row ended at their first failing write")
        refused = load.refused
        wait_until(lambda: load.refused > refused, "a send refused while the index fails")
        failing = srv.stats()
        strace.terminate()  # detaches: the disk works again
        with open(strace_log, encoding="utf-8") as f:
            assert strace.wait(DEADLINE) in (0, -signal.SIGTERM), f.read()
        strace = None
        assert failing["dispatcher_error"] is None, failing
        assert "Input/output error" in failing["index_error"], failing
        wait_until(lambda: srv.stats()["index_error"] is None, "the index to work again")
        load.wait_acks(200, "after the disk works again")
        load.finish()
        stats = srv.stats()
        assert stats["dispatcher_error"] is None and stats["index_retries"] > 0, stats
        assert srv.indexer_pid() == pid, "the indexer was restarted, not retried"
        assert srv.stop() == 0
    finally:
        if strace is not None:
            strace.kill()
            strace.wait()
        load.stop_now()
        srv.kill()
    verify(srv.data_dir, load, str(tmp_path))


#: An LD_PRELOAD library: while the file named by FMQ_TEST_EIO_META exists, the indexer
#: process's writes of less than a page to the index's data file fail with EIO. LMDB
#: writes whole pages but for its meta page (120 bytes): exactly the commit's last write.
EIO_META_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/types.h>

static int failing(int fd, size_t count) {
    const char *trigger = getenv("FMQ_TEST_EIO_META");
    char link[64], path[4096], comm[32] = {0};
    FILE *f;
    ssize_t n;
    if (!trigger || count >= 4096 || access(trigger, F_OK) != 0) return 0;
    f = fopen("/proc/self/comm", "r");
    if (!f) return 0;
    if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
    fclose(f);
    if (strncmp(comm, "fmq-indexer", 11) != 0) return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return n >= 8 && strcmp(path + n - 8, "data.mdb") == 0;
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = dlsym(RTLD_NEXT, "pwrite64");
    if (failing(fd, count)) { errno = EIO; return -1; }
    return real(fd, buf, count, offset);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    return pwrite64(fd, buf, count, offset);
}
"""


@pytest.fixture
def eio_on_meta_writes(tmp_path, monkeypatch):
    """The trigger file of EIO_META_SHIM, preloaded into the indexer processes the test's
    brokers start (they inherit the environment)."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the EIO library")
    source, library = tmp_path / "eio_meta.c", tmp_path / "eio_meta.so"
    source.write_text(EIO_META_SHIM)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl"],
                   check=True)
    trigger = tmp_path / "eio-on"
    monkeypatch.setenv("LD_PRELOAD", str(library))
    monkeypatch.setenv("FMQ_TEST_EIO_META", str(trigger))
    return trigger


def test_eio_writing_lmdbs_meta_page_starts_a_new_indexer(tmp_path, eio_on_meta_writes):
    # One EIO on the commit's meta-page write makes LMDB refuse every later transaction of
    # that process's environment (MDB_PANIC), though the index is intact (LMDB writes the
    # old meta back). The indexer reported it as an error it cannot retry: the broker
    # stopped indexing for good and refused sends until someone rebuilt the index.
    data = str(tmp_path / "data")
    acked: dict[bytes, fmq.SendResult] = {}
    config = fmq.BrokerConfig(**BROKER_CONFIG)
    broker = fmq.Broker.open(data, config)
    try:
        for i in range(20):
            acked[body_of(f"before{i}")] = broker.send(fmq.Message(TOPIC, body_of(f"before{i}")))
        assert broker.wait_indexed(DEADLINE)
        eio_on_meta_writes.touch()
        refused = None
        for i in range(2000):  # bounded: refused once the indexer reports the failure
            try:
                acked[body_of(f"eio{i}")] = broker.send(fmq.Message(TOPIC, body_of(f"eio{i}")))
            except fmq.IndexUnavailable as exc:
                refused = exc
                break
            time.sleep(0.01)
        assert refused is not None, broker.stats()
        assert broker.stats()["dispatcher_error"] is None, broker.stats()
        eio_on_meta_writes.unlink()
        deadline = time.monotonic() + DEADLINE
        while body_of("after") not in acked:
            assert time.monotonic() < deadline, f"sends still refused: {broker.stats()}"
            try:
                acked[body_of("after")] = broker.send(fmq.Message(TOPIC, body_of("after")))
            except fmq.IndexUnavailable:
                time.sleep(0.05)
        assert broker.wait_indexed(DEADLINE)
        stats = broker.stats()
        assert stats["dispatcher_error"] is None and stats["index_error"] is None, stats
        assert broker._dispatcher.restarts >= 1
        got = {m.body: (m.queue_id, m.queue_offset)
               for msgs in broker.reads.all_messages([TOPIC]).values() for m in msgs}
        assert got == {b: (r.queue_id, r.queue_offset) for b, r in acked.items()}
    except BaseException:
        broker.close()
        raise
    check_index_matches_rebuild(broker, data, config, str(tmp_path))  # closes it


def test_index_deleted_under_the_server_is_a_clear_error_not_a_gap(tmp_path):
    srv = CrashServer(str(tmp_path / "data"))
    srv.start()
    load = Load(srv.address).start()
    try:
        load.wait_acks(300, "before the index is deleted")
        shutil.rmtree(os.path.join(srv.data_dir, INDEX_DIR))
        os.kill(srv.indexer_pid(), signal.SIGKILL)  # its successor must not make a new one
        wait_until(lambda: srv.stats()["dispatcher_error"] is not None,
                   "the broker to stop indexing")
        error = srv.stats()["dispatcher_error"]
        assert "Restart the broker" in error and INDEX_DIR in error, error
        with Producer(srv.address, retries=0) as producer, \
                pytest.raises(fmq.IndexCorrupt, match="fmq index rebuild"):
            producer.send(TOPIC, body_of("refused"), queue_id=0)
        assert not os.path.exists(os.path.join(srv.data_dir, INDEX_DIR)), \
            "the indexer process made a new index"
        load.stop_now()
        srv.stop()
        srv.start()  # its open rebuilds the index from the log
        load = _continued(load, srv.address)
        load.wait_acks(100, "after the restart")
        load.finish()
        assert srv.stop() == 0
    finally:
        load.stop_now()
        srv.kill()
    verify(srv.data_dir, load, str(tmp_path))


def _continued(old: Load, address: str) -> Load:
    """A new load that goes on where ``old`` stopped (its records kept)."""
    new = Load(address)
    new.acked, new.uncertain, new.seen = old.acked, old.uncertain, old.seen
    new.committed, new.problems = old.committed, old.problems
    new._threads = [threading.Thread(target=new._produce, args=(n + 10,), daemon=True)
                    for n in range(2)]
    return new.start()


@pytest.mark.parametrize("how", ["garbage", "truncated-half"])
def test_index_damaged_at_rest_is_rebuilt_with_the_indexer_process(tmp_path, how):
    srv = CrashServer(str(tmp_path / "data"))
    srv.start()
    load = Load(srv.address).start()
    try:
        load.wait_acks(300, "before the crash")
        srv.kill()
        path = os.path.join(srv.data_dir, INDEX_DIR, INDEX_DATA_FILE)
        size = os.path.getsize(path)
        if how == "garbage":
            with open(path, "r+b") as f:
                f.write(random.Random(how).randbytes(size))
        else:
            os.truncate(path, size // 2)
        srv.start()
        load.wait_acks(100, "after the restart")
        load.finish()
        assert srv.stop() == 0
    finally:
        load.stop_now()
        srv.kill()
    verify(srv.data_dir, load, str(tmp_path))


def test_indexer_killed_ten_times_under_load(tmp_path):
    srv = CrashServer(str(tmp_path / "data"))
    srv.start()
    load = Load(srv.address).start()
    killed: list[int] = []
    try:
        for _ in range(10):
            applied = srv.stats()["applied_offset"]
            wait_until(lambda: srv.indexer_pid() not in (None, *killed), "a new indexer")
            wait_until(lambda applied=applied: srv.stats()["applied_offset"] > applied,
                       "the new indexer to index")
            load.wait_acks(20, "between kills")  # the server keeps serving
            pid = srv.indexer_pid()
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        wait_until(lambda: srv.indexer_pid() not in (None, *killed), "the last indexer")
        load.wait_acks(200, "after the last kill")
        wait_until(lambda: srv.stats()["index_lag"] < 256 * 1024, "the index lag to recover")
        load.finish()
        wait_until(lambda: srv.stats()["index_lag"] == 0, "the index to catch up")
        assert srv.stats()["dispatcher_error"] is None
        assert srv.stop() == 0
    finally:
        load.stop_now()
        srv.kill()
    assert srv.log().count("ended with status -9") == 10
    # Each restart waited (the back-off), the longest no more than index_retry_max_ms.
    delays = [float(d) for d in re.findall(r"starting the indexer process again in "
                                           r"([0-9.]+) s", srv.log())]
    assert len(delays) == 10 and all(0.05 <= d <= 1.0 for d in delays), delays
    verify(srv.data_dir, load, str(tmp_path))
