"""pytest-benchmark micro-benchmarks of the hot pure paths: the record codec, the frame
codec, CRC-32C, applying index entries to LMDB, and recovery redo.

Not collected by the test run (pytest's testpaths is tests/, and benchmarks are disabled
by default there). Run::

    python -m pytest bench/test_micro.py --benchmark-enable
"""

from __future__ import annotations

import os
import shutil

import pytest

import fmq
from fmq.index.entries import QueueEntry
from fmq.index.store import IndexStore
from fmq.log.record import Record, RecordType, crc32c, decode, encode
from fmq.protocol import FrameDecoder, Op, decode_request, encode_request

BODY = b"x" * 1024


def _record(offset: int = 0) -> Record:
    return Record(RecordType.MESSAGE, log_offset=offset, store_time=1_700_000_000_000,
                  queue_id=1, queue_offset=offset, topic="orders", key="order-1",
                  tags="paid", properties={"source": "web"}, body=BODY)


def _wire_message() -> dict:
    return {"topic": "orders", "body": BODY, "key": "order-1", "tags": "paid",
            "properties": {"source": "web"}, "queue_id": -1}


def test_record_encode_1k(benchmark):
    record = _record()
    assert len(benchmark(encode, record)) > len(BODY)


def test_record_decode_1k(benchmark):
    data = encode(_record())
    assert bytes(benchmark(decode, data).body) == BODY


def test_frame_encode_send_1k(benchmark):
    fields = {"message": _wire_message()}
    assert len(benchmark(encode_request, Op.SEND, 7, fields)) > len(BODY)


def test_frame_decode_send_1k(benchmark):
    data = encode_request(Op.SEND, 7, {"message": _wire_message()})

    def parse():
        return decode_request(FrameDecoder().feed(data)[0])

    assert benchmark(parse)["message"]["body"] == BODY


@pytest.mark.parametrize("size", [1024, 65536])
def test_crc32c(benchmark, size):
    data = os.urandom(size)
    assert benchmark(crc32c, data) == crc32c(data)


def test_index_apply_256_entries(benchmark, tmp_path):
    store = IndexStore(str(tmp_path / "index"))
    state = {"next": 0}

    def apply_batch():
        start = state["next"]
        entries = [QueueEntry("orders", i % 4, start + i, (start + i) * 1200, 1200, 0,
                              1_700_000_000_000, f"k{i % 50}", (start + i) * 1200)
                   for i in range(256)]
        state["next"] = start + 256
        store.apply(entries, (start + 256) * 1200)

    benchmark(apply_batch)
    store.close()


@pytest.fixture(scope="module")
def written_log(tmp_path_factory):
    """A data directory holding about 20 MB of 1 KiB messages."""
    path = str(tmp_path_factory.mktemp("replay") / "data")
    cfg = fmq.BrokerConfig(flush_mode="async", checkpoint_interval_ms=0,
                           retention_interval_ms=0)
    with fmq.Broker.open(path, cfg) as b:
        batch = [fmq.Message("bench", BODY, key=f"k{i % 100}") for i in range(256)]
        for _ in range(80):
            b.send_batch(batch)
    return path


def test_replay_20mb_without_index(benchmark, written_log, tmp_path):
    copy = str(tmp_path / "copy")
    cfg = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0)

    def setup():
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(written_log, copy)
        shutil.rmtree(os.path.join(copy, "index"))
        if os.path.exists(os.path.join(copy, "checkpoint")):
            os.unlink(os.path.join(copy, "checkpoint"))

    def reopen():
        with fmq.Broker.open(copy, cfg) as b:
            return b.recovery.bytes_replayed

    replayed = benchmark.pedantic(reopen, setup=setup, rounds=3)
    assert replayed > 20_000_000
