"""Idempotent sends on the embedded broker: duplicates answered with the original's result,
the window rules (out of order, gaps, late sequences), message ids, and the window rebuilt
from the log by a reopen, after checkpoints, and by an index rebuild."""

from __future__ import annotations

import json
import struct
import time

import pytest

import fmq
from fmq import InvalidArgument, Message
from fmq.admin.rebuild_index import rebuild_index
from fmq.errors import OutOfOrderSequence
from fmq.log.record import crc32c
from fmq.message import MESSAGE_ID_PROPERTY, PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY
from fmq.recovery.dedup_file import DEDUP_WINDOW_FILE
from tests.crashkit import run_child


def idem(topic: str, body: bytes, producer: str, seq: int, **props: str) -> Message:
    return Message(topic, body, properties={PRODUCER_ID_PROPERTY: producer,
                                            SEQUENCE_PROPERTY: str(seq), **props})


def with_id(topic: str, body: bytes, message_id: str) -> Message:
    return Message(topic, body, properties={MESSAGE_ID_PROPERTY: message_id})


def stored(broker, topic: str) -> list[bytes]:
    broker.wait_indexed()
    return [m.body for q in broker.reads.all_messages([topic]).values() for m in q]


def test_a_resent_sequence_gets_the_original_result_and_is_stored_once(broker):
    first = broker.send(idem("t", b"a", "p1", 0))
    second = broker.send(idem("t", b"b", "p1", 1))
    assert broker.send(idem("t", b"a", "p1", 0)) == first
    assert broker.send(idem("t", b"b", "p1", 1)) == second
    # another producer's sequence 0 is its own
    other = broker.send(idem("t", b"c", "p2", 0))
    assert other != first
    assert sorted(stored(broker, "t")) == [b"a", b"b", b"c"]
    assert broker.stats()["duplicates_dropped"] == 2
    assert broker.stats()["dedup_producers"] == 2


def test_duplicates_inside_one_batch_and_mixed_with_plain_messages(broker):
    results = broker.send_batch([idem("t", b"x", "p", 5), Message("t", b"plain"),
                                 idem("t", b"x", "p", 5), Message("t", b"plain")])
    assert results[0] == results[2]
    assert len({results[0], results[1], results[3]}) == 3
    assert sorted(stored(broker, "t")) == [b"plain", b"plain", b"x"]


def test_window_rules_gaps_late_sequences_and_too_old(tmp_path, small_config):
    config = small_config.replace(dedup_window_messages=3)
    with fmq.Broker.open(str(tmp_path / "d"), config) as broker:
        res = {s: broker.send(idem("t", b"%d" % s, "p", s)) for s in range(10)}
        assert broker.send(idem("t", b"8", "p", 8)) == res[8]  # in the window
        with pytest.raises(OutOfOrderSequence) as caught:
            broker.send(idem("t", b"2", "p", 2))  # 2 <= 9 - 3 and forgotten
        assert (caught.value.producer, caught.value.sequence, caught.value.last,
                caught.value.window) == ("p", 2, 9, 3)
        res[12] = broker.send(idem("t", b"12", "p", 12))  # a gap is allowed
        # 11 lies in (12 - 3, 12] and was never stored: it is stored, late
        res[11] = broker.send(idem("t", b"11", "p", 11))
        assert broker.send(idem("t", b"11", "p", 11)) == res[11]
        with pytest.raises(OutOfOrderSequence):
            broker.send(idem("t", b"9", "p", 9))  # 9 <= 12 - 3: forgotten
        # a refused request stores nothing, also not its other messages
        with pytest.raises(OutOfOrderSequence):
            broker.send_batch([idem("t", b"13", "p", 13), idem("t", b"1", "p", 1)])
        assert sorted(stored(broker, "t"), key=int) == [b"%d" % s for s in
                                                          [*range(10), 11, 12]]


def test_message_ids_deduplicate_per_topic(broker):
    r = broker.send(with_id("t", b"one", "order-1"))
    assert broker.send(with_id("t", b"again", "order-1")) == r
    assert broker.send(with_id("u", b"other topic", "order-1")) != r
    # a new sequence carrying a known message id is still a duplicate
    assert broker.send(idem("t", b"x", "p", 0, **{MESSAGE_ID_PROPERTY: "order-1"})) == r
    assert sorted(stored(broker, "t")) == [b"one"]


def test_the_time_window_forgets(tmp_path, small_config):
    config = small_config.replace(dedup_window_ms=1)
    with fmq.Broker.open(str(tmp_path / "d"), config) as broker:
        broker.send(idem("t", b"a", "p", 0))
        broker.send(with_id("t", b"b", "k"))
        time.sleep(0.01)  # longer than the window: both are forgotten
        broker.send(idem("t", b"a", "p", 0))
        broker.send(with_id("t", b"b", "k"))
        assert sorted(stored(broker, "t")) == [b"a", b"a", b"b", b"b"]


@pytest.mark.parametrize("props", [
    {PRODUCER_ID_PROPERTY: "p"},
    {SEQUENCE_PROPERTY: "1"},
    {PRODUCER_ID_PROPERTY: "p", SEQUENCE_PROPERTY: "-1"},
    {PRODUCER_ID_PROPERTY: "p", SEQUENCE_PROPERTY: "1e3"},
    {PRODUCER_ID_PROPERTY: "p", SEQUENCE_PROPERTY: str(1 << 63)},
    {PRODUCER_ID_PROPERTY: "p\n", SEQUENCE_PROPERTY: "1"},
    {PRODUCER_ID_PROPERTY: "p" * 65, SEQUENCE_PROPERTY: "1"},
    {MESSAGE_ID_PROPERTY: "a\x00b"},
    {MESSAGE_ID_PROPERTY: ""},
    {PRODUCER_ID_PROPERTY: "", SEQUENCE_PROPERTY: "1"},
])
def test_bad_idempotence_properties_are_refused(broker, props):
    with pytest.raises(InvalidArgument):
        broker.send(Message("t", b"x", properties=props))
    assert stored(broker, "t") == []


def test_the_window_survives_a_reopen_after_checkpoints(tmp_path, small_config):
    path = str(tmp_path / "d")
    with fmq.Broker.open(path, small_config) as broker:
        early = broker.send(idem("t", b"early", "p", 0))
        early_id = broker.send(with_id("t", b"keyed", "k-1"))
        for i in range(200):  # several segments of other traffic after them
            broker.send(Message("t", b"filler %d" % i))
        broker.wait_indexed()
        cp = broker.checkpoint()
        # the checkpoint keeps recovery at or before the oldest record remembered
        assert cp.recovery_offset <= early.offset < cp.applied_offset
        live = broker._idempotence.window.snapshot()
    with fmq.Broker.open(path, small_config) as broker:
        assert broker._idempotence.window.snapshot() == live
        assert broker.send(idem("t", b"early", "p", 0)) == early
        assert broker.send(with_id("t", b"keyed", "k-1")) == early_id
        assert stored(broker, "t").count(b"early") == 1


def test_an_index_rebuild_reproduces_the_window(tmp_path, small_config):
    path = str(tmp_path / "d")
    with fmq.Broker.open(path, small_config.replace(dedup_window_messages=4)) as broker:
        for s in [0, 1, 2, 7, 5, 9, 10]:
            broker.send(idem("t", b"%d" % s, "p", s))
            broker.send(idem("t", b"q%d" % s, "q", s))
            broker.send(with_id("u", b"%d" % s, f"id-{s}"))
        broker.checkpoint()
        live = broker._idempotence.window.snapshot()
    rebuild_index(path, small_config.replace(dedup_window_messages=4))
    with fmq.Broker.open(path, small_config.replace(dedup_window_messages=4)) as broker:
        assert broker._idempotence.window.snapshot() == live


def test_transactional_messages_are_not_deduplicated(broker):
    msg = idem("t", b"tx", "p", 0)
    for _ in range(2):
        broker.transactions.commit(broker.transactions.prepare([msg], "group"))
    assert stored(broker, "t") == [b"tx", b"tx"]
    assert broker.stats()["dedup_producers"] == 0


def test_a_clean_close_saves_the_window_and_replays_nothing(tmp_path, small_config):
    path = str(tmp_path / "d")
    with fmq.Broker.open(path, small_config) as broker:
        first = broker.send(idem("t", b"a", "p", 0))
        keyed = broker.send(with_id("t", b"k", "id-1"))
        broker.send(Message("t", b"plain"))
        live = broker._idempotence.window.snapshot()
    with fmq.Broker.open(path, small_config) as broker:
        assert broker.recovery.records_replayed == 0  # the checkpoint sits at the log end
        assert broker._idempotence.window.snapshot() == live
        assert broker.send(idem("t", b"a", "p", 0)) == first
        assert broker.send(with_id("t", b"k", "id-1")) == keyed
        broker.send(idem("t", b"b", "p", 1))
        live = broker._idempotence.window.snapshot()
    # once more, and then with the saved window damaged: the whole log is replayed
    with fmq.Broker.open(path, small_config) as broker:
        assert broker._idempotence.window.snapshot() == live
    window_file = tmp_path / "d" / DEDUP_WINDOW_FILE
    saved = window_file.read_bytes()
    window_file.write_bytes(saved[:-1] + bytes([saved[-1] ^ 0xFF]))  # surely damaged
    with fmq.Broker.open(path, small_config) as broker:
        assert broker.recovery.start_offset == 0
        assert broker._idempotence.window.snapshot() == live
    # a close with nothing to remember removes the saved window
    with fmq.Broker.open(path, small_config.replace(dedup_window_ms=1)) as broker:
        time.sleep(0.01)
    assert not window_file.exists()


def test_a_crash_after_a_checkpoint_replays_from_the_oldest_record_remembered(tmp_path):
    data = str(tmp_path / "d")
    config = {"segment_size": 16 * 1024, "max_message_size": 4096,
              "checkpoint_interval_ms": 0, "retention_interval_ms": 0}
    child = run_child("dedup_checkpoint_then_die", data, str(tmp_path / "acks"),
                      config=config)
    assert child.killed, child.stderr
    seqs = [a for a in child.acks if a["kind"] == "seq"]
    [keyed] = [a for a in child.acks if a["kind"] == "id"]
    [cp] = [a for a in child.acks if a["kind"] == "checkpoint"]
    assert 0 < cp["recovery_offset"] == seqs[0]["offset"]  # pinned by the window
    with fmq.Broker.open(data, fmq.BrokerConfig(**config)) as broker:
        assert broker.recovery.start_offset == seqs[0]["offset"]
        for a in seqs:
            r = broker.send(idem("t", b"idem %d" % a["seq"], "p", a["seq"]))
            assert (r.offset, r.queue_id, r.queue_offset) == (
                a["offset"], a["queue_id"], a["queue_offset"])
        r = broker.send(with_id("t", b"keyed", "k"))
        assert (r.offset, r.queue_id, r.queue_offset) == (
            keyed["offset"], keyed["queue_id"], keyed["queue_offset"])
        assert broker.stats()["duplicates_dropped"] == 4


def test_a_window_saved_before_principals_is_still_read(tmp_path, small_config):
    """A ``dedup-window`` file of format 1 (keys without a principal) seeds the window with
    the sends of no principal, as the records it was saved from have."""
    path = str(tmp_path / "d")
    with fmq.Broker.open(path, small_config) as broker:
        first = broker.send(idem("t", b"a", "p", 0))
        keyed = broker.send(with_id("t", b"k", "id-1"))
        live = broker._idempotence.window.snapshot()
    window_file = tmp_path / "d" / DEDUP_WINDOW_FILE
    doc = json.loads(window_file.read_bytes()[:-4])
    assert doc["format"] == 2
    window = doc["window"]
    doc = {"format": 1, "log_offset": doc["log_offset"], "window": {
        "producers": {producer: rest for _principal, producer, *rest in window["producers"]},
        "message_ids": [entry[1:] for entry in window["message_ids"]]}}
    body = json.dumps(doc).encode()
    window_file.write_bytes(body + struct.pack("<I", crc32c(body)))
    with fmq.Broker.open(path, small_config) as broker:
        assert broker.recovery.records_replayed == 0  # the file was used, not the log
        assert broker._idempotence.window.snapshot() == live
        assert broker.send(idem("t", b"a", "p", 0)) == first
        assert broker.send(with_id("t", b"k", "id-1")) == keyed


@pytest.mark.parametrize("name", ["%RECONSUME_TIMES", "%ORIGIN_TOPIC", "%principal", "%x"])
def test_broker_owned_properties_are_refused_in_an_embedded_send(broker, name):
    with pytest.raises(InvalidArgument, match=f"'{name}' is reserved"):
        broker.send(Message("t", b"x", properties={name: "99"}))
    with pytest.raises(InvalidArgument, match=f"'{name}' is reserved"):
        broker._timers.schedule([Message("t", b"x", properties={name: "99"})], 0)
    assert stored(broker, "t") == []
