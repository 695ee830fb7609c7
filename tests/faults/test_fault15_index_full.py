"""Fault 15: the index cannot keep up: its disk fills, another process holds its writer lock,
or a flushed record it must read is damaged.

Acknowledged must keep meaning consumable once indexed. On a real full tmpfs (another file
fills it, the log's preallocated segment still takes writes, LMDB cannot grow its file):

* every send is either acknowledged, or refused with the retriable ``IndexUnavailable``;
* once the filler is removed the dispatcher resumes by itself (no restart): everything
  acknowledged while the disk was full becomes consumable, and new sends are acknowledged
  and consumable;
* after a restart every acknowledged message is consumable exactly once, nothing else is.

A second process holding the LMDB writer lock makes the index lag: sends are refused once the
lag passes ``index_max_lag_bytes`` and accepted again when the lock is released. A damaged
flushed record stops the dispatcher for good: sends are refused with ``IndexCorrupt``. A
consumer offset that cannot be stored on the full disk raises ``IndexUnavailable``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import fmq
from fmq.client import Client, Producer
from fmq.datadir import INDEX_DIR, LOG_DIR, TEMP_SUFFIX, format_segment_name
from fmq.log.record import HEADER_SIZE
from fmq.protocol import Op
from tests.crashkit import ROOT, reap
from tests.faults.tmpfs import fill_up, small_tmpfs
from tests.server.harness import ServerProcess

BODY = 1000
SEGMENT_SIZE = 4 << 20
TOPIC = "orders"
#: Generous: the machine is shared; the dispatcher retries every 200 ms at most here.
DEADLINE = 60.0


def body_of(name: str) -> bytes:
    return name.encode().ljust(BODY, b".")


def config(**changes) -> fmq.BrokerConfig:
    # One 4 MiB segment holds every message of a test (a roll on a full disk would fail the
    # log, which is fault 8's subject); the index starts with a 1 MiB map and must grow.
    base = dict(segment_size=SEGMENT_SIZE, max_message_size=64 * 1024, queues_per_topic=2,
                index_map_size=1 << 20,
                checkpoint_interval_ms=0, retention_interval_ms=0,
                index_retry_initial_ms=20, index_retry_max_ms=200)
    base.update(changes)
    return fmq.BrokerConfig(**base)


@pytest.fixture
def small_fs(tmp_path):
    with small_tmpfs(tmp_path / "small", "16m", "the full-disk test") as mnt:
        yield mnt



def wait_for_spare_segment(data: str) -> None:
    """Wait until the log has zero-filled its next segment in the background (it starts at
    open). Filling the disk while that runs races it: the preparation fails, removes its
    partial file, and the space it gives back lets the index grow after all."""
    spare = os.path.join(data, LOG_DIR, format_segment_name(SEGMENT_SIZE)) + TEMP_SUFFIX
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if os.path.exists(spare) and os.path.getsize(spare) == SEGMENT_SIZE:
            return
        time.sleep(0.02)
    raise AssertionError(f"the next segment {spare} was not prepared in {DEADLINE} s")


def fill_disk(directory: str) -> str:
    """Another program's file taking every free byte of the file system (after the log's
    background preparation of its next segment, see wait_for_spare_segment)."""
    wait_for_spare_segment(os.path.join(directory, "data"))
    path = filler_path(directory)
    fill_up(path)
    return path


def filler_path(directory: str) -> str:
    return os.path.join(directory, "filler")


def close_with_space(broker: fmq.Broker, directory: str) -> None:
    """Close after freeing the disk, also when an assertion failed while it was full (the
    closing checkpoint would fail and hide that assertion)."""
    if os.path.exists(filler_path(directory)):
        os.unlink(filler_path(directory))
    broker.close()


def send(broker: fmq.Broker, name: str, refused: list[fmq.FMQError]) -> fmq.SendResult | None:
    """Acknowledged (the result) or refused with the retriable IndexUnavailable (None)."""
    try:
        return broker.send(fmq.Message(TOPIC, body_of(name), queue_id=0))
    except fmq.IndexUnavailable as exc:
        assert exc.retriable and exc.code == 30
        refused.append(exc)
        return None


def send_while_full(broker: fmq.Broker, refused: list[fmq.FMQError],
                    count: int = 1500) -> dict[str, fmq.SendResult]:
    """Send ``count`` messages on the full disk; if none was refused yet (a loaded machine
    may not have scheduled the dispatcher's write), wait for the index to report its
    error, then send until one is refused (bounded). Returns what was acknowledged."""
    acked = {}
    for i in range(count + 500):
        if i == count and not refused:
            deadline = time.monotonic() + DEADLINE
            while broker.stats()["index_error"] is None and time.monotonic() < deadline:
                time.sleep(0.05)
        elif i >= count and refused:
            break
        r = send(broker, f"full{i}", refused)
        if r is not None:
            acked[f"full{i}"] = r
    return acked


def send_until_acknowledged(broker: fmq.Broker, name: str) -> fmq.SendResult:
    refused: list[fmq.FMQError] = []
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        r = send(broker, name, refused)
        if r is not None:
            return r
        time.sleep(0.02)
    raise AssertionError(f"{name} still refused after {DEADLINE} s: {refused[-1]}; "
                         f"{broker.stats()}")


def readable(broker: fmq.Broker, acked: dict[str, fmq.SendResult]) -> list[str]:
    """Names of the acknowledged messages a consumer reads at their acknowledged place."""
    out = []
    for name, r in acked.items():
        got = broker.reads.pull(TOPIC, r.queue_id, r.queue_offset, 1)
        if got and got[0].queue_offset == r.queue_offset and got[0].body == body_of(name):
            out.append(name)
    return out


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_full_disk_refuses_or_indexes_later_and_resumes_without_restart(small_fs, writer):
    data = os.path.join(small_fs, "data")
    acked: dict[str, fmq.SendResult] = {}
    refused: list[fmq.FMQError] = []
    broker = fmq.Broker.open(data, config(index_writer=writer))
    try:
        for i in range(20):
            acked[f"warm{i}"] = broker.send(fmq.Message(TOPIC, body_of(f"warm{i}"), queue_id=0))
        assert broker.wait_indexed(DEADLINE)
        filler = fill_disk(small_fs)

        # 1.5 MB of messages: the index must grow its file
        full = send_while_full(broker, refused)
        acked.update(full)
        while_full = list(full)
        stats = broker.stats()
        assert refused, f"the full disk never stopped the index: {stats}"
        assert stats["index_error"] and stats["dispatcher_error"] is None, stats
        assert "free disk space" in str(refused[0]), refused[0]
        offsets_refused = 0
        # A consumer offset is stored or refused, never a bare LMDB error. Commit only up to
        # the queue's end: how many sends queue 0 got before the refusal depends on timing.
        queue_end = max(r.queue_offset for r in acked.values() if r.queue_id == 0) + 1
        for i in range(min(50, queue_end + 1)):
            try:
                broker.offsets.commit("billing", [(TOPIC, 0, i)])
            except fmq.IndexUnavailable as exc:
                assert exc.retriable and "commit it again" in str(exc), exc
                offsets_refused += 1

        os.unlink(filler)
        after = [f"after{i}" for i in range(100)]
        for name in after:
            acked[name] = send_until_acknowledged(broker, name)
        assert broker.wait_indexed(DEADLINE), broker.stats()
        stats = broker.stats()
        assert stats["index_error"] is None and stats["index_retries"] > 0, stats
        got = set(readable(broker, acked))
        missing = sorted(set(acked) - got)
        assert not missing, (f"{len(missing)} of {len(acked)} acknowledged messages are not "
                             f"consumable without a restart, e.g. {missing[:5]}")
        broker.offsets.commit("billing", [(TOPIC, 0, 7)])
        assert broker.reads.committed_offset("billing", TOPIC, 0) == 7
        print(f"fault 15 (full disk): {len(while_full)} acknowledged and {len(refused)} refused "
              f"while full; after freeing space {len(after)} of {len(after)} acknowledged; "
              f"all {len(acked)} consumable without a restart "
              f"({stats['index_retries']} index retries); {offsets_refused} of 50 consumer "
              f"offsets refused while full")
    finally:
        close_with_space(broker, small_fs)

    with fmq.Broker.open(data, config(index_writer=writer)) as b:  # each acknowledged once
        assert b.wait_indexed(DEADLINE)
        seen = [m.body for msgs in b.reads.all_messages([TOPIC]).values() for m in msgs]
    assert sorted(seen) == sorted(body_of(name) for name in acked)


def test_index_limits_are_validated():
    with pytest.raises(fmq.ConfigError, match="index_max_lag_bytes"):
        config(index_max_lag_bytes=-1)
    with pytest.raises(fmq.ConfigError, match="index_retry_initial_ms"):
        config(index_retry_initial_ms=0)
    with pytest.raises(fmq.ConfigError, match="index_retry_max_ms"):
        config(index_retry_initial_ms=100, index_retry_max_ms=50)
    assert config(index_max_lag_bytes=0).index_max_lag_bytes == 0  # 0 = no limit


def hold_index_writer(data: str) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-m", "tests.workloads.index_writer_holder",
                               os.path.join(data, INDEX_DIR)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert holder.stdout.readline().strip() == "holding"
    return holder


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_lagging_index_refuses_sends_past_the_lag_bound(tmp_path, writer):
    data = str(tmp_path / "data")
    limit = 32 * 1024
    acked: dict[str, fmq.SendResult] = {}
    refused: list[fmq.FMQError] = []
    broker = fmq.Broker.open(data, config(index_max_lag_bytes=limit, index_writer=writer))
    holder = None
    try:
        acked["first"] = broker.send(fmq.Message(TOPIC, body_of("first"), queue_id=0))
        assert broker.wait_indexed(DEADLINE)
        holder = hold_index_writer(data)
        for i in range(500):  # 500 KB: far past the bound
            r = send(broker, f"lag{i}", refused)
            if r is None:
                break
            acked[f"lag{i}"] = r
        lag = broker.stats()["index_lag"]
        assert refused, f"500 sends acknowledged with the index {lag} bytes behind"
        assert "index_max_lag_bytes" in str(refused[0]), refused[0]
        record = HEADER_SIZE + BODY + len(TOPIC) + 64
        assert limit < lag <= limit + record, lag  # refused as soon as the bound is passed
        print(f"fault 15 (lagging index): refused after {len(acked) - 1} sends, "
              f"index lag {lag} bytes (bound {limit})")

        holder.stdin.close()  # the other writer lets go: the index catches up
        assert reap(holder, DEADLINE) == 0
        holder = None
        acked["after"] = send_until_acknowledged(broker, "after")
        assert broker.wait_indexed(DEADLINE)
        assert sorted(readable(broker, acked)) == sorted(acked)
    finally:
        if holder is not None:
            holder.kill()
            reap(holder)
        broker.close()


def test_server_answers_a_lagging_index_with_the_retriable_code_30(tmp_path):
    data = str(tmp_path / "data")
    srv = ServerProcess(data, {"index_max_lag_bytes": 32 * 1024, "checkpoint_interval_ms": 0})
    srv.start()
    holder = None
    try:
        with Producer(srv.address, retries=0) as producer:
            acked = [producer.send(TOPIC, body_of("first"), queue_id=0)]
            holder = hold_index_writer(data)
            refusal = None
            for i in range(500):
                try:
                    acked.append(producer.send(TOPIC, body_of(f"lag{i}"), queue_id=0))
                except fmq.IndexUnavailable as exc:
                    refusal = exc
                    break
            assert refusal is not None, "500 sends acknowledged while the index could not move"
            assert refusal.code == 30 and refusal.retriable, refusal
            assert producer.ping()  # the connection stays usable

            holder.stdin.close()
            assert reap(holder, DEADLINE) == 0
            holder = None
        with Producer(srv.address, retries=20, backoff_max=0.5) as producer:
            acked.append(producer.send(TOPIC, body_of("after"), queue_id=0))
        want = [r.queue_offset for r in acked]
        deadline = time.monotonic() + DEADLINE
        with Client(srv.address) as client:
            while True:  # bounded: the index catches up by itself once the lock is free
                got = client.call(Op.PULL, {"topic": TOPIC, "queue_id": 0, "offset": 0,
                                            "max_messages": 1000, "wait_ms": 500})
                offsets = [m["queue_offset"] for m in got["messages"]]
                if offsets == want or time.monotonic() > deadline:
                    break
        assert offsets == want
    finally:
        if holder is not None:
            holder.kill()
            reap(holder)
        srv.kill()


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_damaged_record_stops_the_index_and_sends_are_refused_as_corrupt(small_fs, writer):
    data = os.path.join(small_fs, "data")
    broker = fmq.Broker.open(data, config(index_writer=writer))
    try:
        broker.send(fmq.Message(TOPIC, body_of("warm"), queue_id=0))
        assert broker.wait_indexed(DEADLINE)
        filler = fill_disk(small_fs)
        refused: list[fmq.FMQError] = []
        send_while_full(broker, refused)
        assert refused, f"the full disk never stopped the index: {broker.stats()}"
        # The failing dispatcher retries by reading the log from its applied offset, where a
        # flushed record (the one whose indexing failed) waits. Damage it on disk. The offset
        # stored in the index: the indexer process may have committed past its last report.
        applied = max(broker._dispatcher.applied_offset, broker._index.applied_offset())
        assert broker._log.flushed_offset > applied
        segment = os.path.join(data, LOG_DIR, format_segment_name(0))
        fd = os.open(segment, os.O_RDWR)
        try:
            os.pwrite(fd, b"\xff\x00\xff\x00", applied + HEADER_SIZE + 20)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(filler)

        deadline = time.monotonic() + DEADLINE
        while broker.stats()["dispatcher_error"] is None and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = broker.stats()
        assert stats["dispatcher_error"], f"the damaged record did not stop the index: {stats}"
        with pytest.raises(fmq.IndexCorrupt, match="fmq index rebuild") as info:
            broker.send(fmq.Message(TOPIC, body_of("refused"), queue_id=0))
        assert not info.value.retriable
        with pytest.raises(fmq.IndexCorrupt):
            broker.transactions.prepare([fmq.Message(TOPIC, body_of("refused-tx"), queue_id=0)],
                                        "shop")
    finally:
        close_with_space(broker, small_fs)
