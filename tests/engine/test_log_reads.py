"""Pulls read neighbouring records with one read (the same bytes, the same messages, runs
that stop at segment ends and at large gaps, segments retention deleted) and share the
decode of records pulled lately."""

from __future__ import annotations

import random

import pytest

import fmq
from fmq import Message
from fmq.engine import log_reads
from fmq.engine import reads as reads_module
from fmq.engine.log_reads import read_records
from fmq.engine.reads import Kept
from fmq.engine.recent import ENTRY_OVERHEAD, RecentMessages
from fmq.errors import OffsetOutOfRange
from fmq.log.log import Log
from fmq.log.record import Record, RecordType


def _fill(log: Log, sizes: list[int]) -> list[tuple[int, int]]:
    places = []
    for size in sizes:
        rec = Record(RecordType.MESSAGE, topic="t", queue_id=0, queue_offset=0,
                     body=b"b" * size)
        with log.lock:
            log.append_locked(rec)
        places.append((rec.log_offset, rec.size))
    log.wait_durable(log.next_offset)
    return places


def test_runs_return_exactly_the_bytes_of_each_record(tmp_path, monkeypatch):
    monkeypatch.setattr(log_reads, "MAX_SPAN", 3000)  # some runs end at the span limit
    log = Log(str(tmp_path), 4096)
    log.start_at(0)
    rnd = random.Random(7)
    places = _fill(log, [rnd.randrange(1, 900) for _ in range(200)])
    assert len(log.segments) > 10  # runs meet segment ends
    for _ in range(50):
        picked = sorted(rnd.sample(places, rnd.randrange(1, 40)))
        got = read_records(log, picked)
        assert [bytes(g) for g in got] == [log.read(o, s) for o, s in picked]
    far = [places[0], places[-1]]  # further apart than MAX_GAP: two reads
    assert [bytes(g) for g in read_records(log, far)] == [log.read(o, s) for o, s in far]
    log.close()


def test_a_deleted_segment_reads_as_none_and_a_range_past_the_log_fails(tmp_path):
    log = Log(str(tmp_path), 4096)
    log.start_at(0)
    places = _fill(log, [500] * 30)
    first = log.segments[0]
    log.delete_segment(first)
    gone = [p for p in places if p[0] < first.end]
    kept = [p for p in places if p[0] >= first.end]
    got = read_records(log, gone + kept[:3])
    assert got[:len(gone)] == [None] * len(gone)
    assert [bytes(g) for g in got[len(gone):]] == [log.read(o, s) for o, s in kept[:3]]
    with pytest.raises(OffsetOutOfRange):
        read_records(log, [kept[0], (log.segments[-1].end + 100, 50)])
    log.close()


def test_pulls_of_interleaved_queues_across_segments(tmp_path):
    cfg = fmq.BrokerConfig(segment_size=16 * 1024, max_message_size=4096,
                           checkpoint_interval_ms=0, retention_interval_ms=0)
    with fmq.Broker.open(str(tmp_path / "data"), cfg) as b:
        sent: dict[int, list[bytes]] = {q: [] for q in range(4)}
        rnd = random.Random(3)
        for i in range(400):
            body = bytes([i % 251]) * rnd.randrange(1, 2000)
            q = b.send(Message("t", body, properties={"i": str(i)})).queue_id
            sent[q].append(body)
        assert b.wait_indexed()
        for q, bodies in sent.items():
            got, offset = [], 0
            while offset < len(bodies):
                batch = b.reads.pull("t", q, offset, 37, max_bytes=20_000)
                assert batch and batch[0].queue_offset == offset
                got += [m.body for m in batch]
                offset = batch[-1].queue_offset + 1
            assert got == bodies


def test_recent_messages_forget_the_oldest_past_their_byte_bound():
    each = 1000 + ENTRY_OVERHEAD
    recent = RecentMessages(max_bytes=3 * each)
    for offset in range(5):
        recent.put(offset * 1000, b"x", 1000)
    assert len(recent) == 3 and recent.get(0) is None and recent.get(4000) == b"x"
    recent.put(9000, b"big", 3 * each)  # larger than the bound with its overhead: not kept
    assert recent.get(9000) is None and len(recent) == 3


def test_messages_the_caller_kept_are_neither_read_nor_decoded(broker, monkeypatch):
    for i in range(20):
        broker.send(Message("t", f"m{i}".encode(), queue_id=0, properties={"i": str(i)}))
    assert broker.wait_indexed()
    plain = broker.reads.pull("t", 0, 0, 20)
    reads = []
    real = reads_module.read_records
    monkeypatch.setattr(reads_module, "read_records",
                        lambda log, places: reads.append(len(places)) or real(log, places))
    before = broker.reads.messages_out["t"], broker.reads.bytes_out["t"]
    answer = broker.reads.pull_answer(
        "t", 0, 0, 20, kept=lambda e: (f"form{e[0]}", 7) if e[0] % 2 == 0 else None)
    assert reads == [10]  # only the records of the entries not kept were read
    got = answer.messages
    assert [m.queue_offset for m in got] == list(range(20)) and answer.resume_offset == 20
    assert all(m == Kept(f"form{i}", i, 7) for i, m in enumerate(got) if i % 2 == 0)
    assert [m for i, m in enumerate(got) if i % 2] == plain[1::2]
    assert (broker.reads.messages_out["t"] - before[0], broker.reads.bytes_out["t"] - before[1]
            ) == (20, 10 * 7 + sum(len(m.body) for m in plain[1::2]))
    tagged = broker.reads.pull_answer("t", 0, 0, 20, tags="*", kept=lambda e: None)
    assert tagged.messages == plain  # "*" selects every message, as an untagged pull
