"""Leader epochs in the log: the EPOCH record, the epoch history derived from it (and
rebuilt from the log), where an epoch ends, and the divergence point of a follower."""

from __future__ import annotations

import os
import shutil

import pytest

from fmq import Broker
from fmq.admin.repair import cut_log
from fmq.config import BrokerConfig
from fmq.datadir import INDEX_DIR
from fmq.index.entries import EpochEntry
from fmq.index.epochs import epoch_end
from fmq.log.record import RecordType
from fmq.log.scanner import LogScanner
from fmq.message import Message
from fmq.replication.promote import promote_offline
from fmq.replication.term import current_epoch, divergence_point, open_as_primary, start_term

HISTORY = [EpochEntry(2, 100, "a"), EpochEntry(5, 400, "b"), EpochEntry(7, 900, "c")]


@pytest.mark.parametrize("asked,expected", [
    (0, (0, 100)),  # before the first term: epoch 0 ends where epoch 2 starts
    (1, (0, 100)),
    (2, (2, 400)),
    (4, (2, 400)),  # unknown here: the largest epoch below it
    (5, (5, 900)),
    (7, (7, 1200)),  # the newest epoch ends at the log end
    (9, (7, 1200)),
])
def test_epoch_end(asked, expected):
    assert epoch_end(HISTORY, asked, 1200) == expected


def test_epoch_end_of_a_log_without_terms_is_its_end():
    assert epoch_end([], 0, 777) == (0, 777)


def primary_answers(history: list[EpochEntry], end: int):
    """A primary's EPOCH_END answers, as its server gives them."""
    return lambda epoch: epoch_end(history, epoch, end)


def test_divergence_point():
    mine = [EpochEntry(2, 100, "a"), EpochEntry(3, 500, "old")]
    # The primary knows epoch 2 only up to 450 (it never had epoch 3): cut at 450.
    theirs = [EpochEntry(2, 100, "a"), EpochEntry(4, 450, "b")]
    assert divergence_point(mine, 800, primary_answers(theirs, 900)) == 450
    # The primary's epoch 2 went on past our epoch 3's start: cut at our epoch 3.
    theirs = [EpochEntry(2, 100, "a"), EpochEntry(4, 600, "b")]
    assert divergence_point(mine, 800, primary_answers(theirs, 900)) == 500
    # Same epoch, the primary holds more: nothing to cut.
    theirs = [*mine, EpochEntry(4, 1000, "b")]
    assert divergence_point(mine, 800, primary_answers(theirs, 1100)) == 800


def test_epoch_history_is_derived_from_the_log(tmp_path):
    path = str(tmp_path / "d")
    with Broker.open(path) as b:
        b.send(Message("t", b"before"))
        assert current_epoch(b) == 0
        first = start_term(b, 3, "node-a")
        b.send(Message("t", b"after"))
        with pytest.raises(ValueError):
            start_term(b, 3, "node-b")  # an epoch never repeats
        assert b._index.epoch_history() == [first]
    second = promote_offline(path, "node-b")
    assert second["epoch"] == 4
    records = [r for r in LogScanner(os.path.join(path, "log")) if r.type == RecordType.EPOCH]
    assert [(r.log_offset, r.queue_offset, r.producer_group) for r in records] == [
        (first.start, 3, "node-a"), (second["offset"], 4, "node-b")]
    shutil.rmtree(os.path.join(path, INDEX_DIR))  # deleting the index loses nothing
    with Broker.open(path) as b:
        assert b._index.epoch_history() == [first, EpochEntry(4, second["offset"], "node-b")]
        bodies = sorted(bytes(m.body) for q in range(4) for m in b.reads.pull("t", q, 0))
        assert bodies == [b"after", b"before"]
    # A cut before a term's EPOCH record removes the term from the history.
    cut_log(path, second["offset"])
    with Broker.open(path) as b:
        assert b._index.epoch_history() == [first]


def test_epoch_record_may_roll_a_segment(tmp_path):
    path = str(tmp_path / "d")
    cfg = BrokerConfig(segment_size=64 * 1024, max_message_size=32 * 1024)
    with Broker.open(path, cfg) as b:
        b.send(Message("t", b"x" * 30_000))
        b.send(Message("t", b"x" * 30_000))
        entry = start_term(b, 1, "n")
        assert entry.start >= 0
        assert b._index.epoch_history() == [entry]


def test_a_new_primary_starts_its_term_before_recovery_writes(tmp_path):
    """Found by the Jepsen fail-over test: the old primary died while its follower held
    only the first record of a two-message prepare. Promoted, the follower's recovery
    rolled that prepare back with a ROLLBACK written *before* its EPOCH record, so its
    history said the old term ended after that ROLLBACK, in the middle of the old
    primary's next record: the returning old primary could not be cut there and never
    rejoined. The EPOCH record must come first."""
    old, new = str(tmp_path / "old"), str(tmp_path / "new")
    with Broker.open(old) as b:
        start_term(b, 1, "n-old")
        b.send(Message("t", b"acknowledged"))
        b.transactions.prepare([Message("t", b"one"), Message("t", b"two")], "shop", "tx-1")
    records = list(LogScanner(os.path.join(old, "log")))
    second = [r for r in records if r.type == RecordType.PRE_MESSAGE][1]
    shutil.copytree(old, new)
    cut_log(new, second.log_offset)  # what the follower had copied when the primary died

    broker, entry = open_as_primary(new, BrokerConfig(), 2, "n-new")
    broker.close()
    assert (entry.epoch, entry.start) == (2, second.log_offset)
    written = [r.type for r in LogScanner(os.path.join(new, "log"))
               if r.log_offset >= second.log_offset]
    assert written == [RecordType.EPOCH, RecordType.ROLLBACK]

    # The old primary returns: where its epoch 1 ends in the new primary's log is a record
    # boundary of its own log, so it can be cut there and follow.
    with Broker.open(new, BrokerConfig(follow="127.0.0.1:1")) as b:
        new_history, new_end = b._index.epoch_history(), b.replica.flushed_offset
    with Broker.open(old, BrokerConfig(follow="127.0.0.1:1")) as b:
        old_history, old_end = b._index.epoch_history(), b.replica.flushed_offset
    point = divergence_point(old_history, old_end, primary_answers(new_history, new_end))
    assert point == second.log_offset
    cut_log(old, point)
    with Broker.open(old, BrokerConfig(follow="127.0.0.1:1")) as b:
        assert b.replica.flushed_offset == point


def test_promote_offline_writes_the_epoch_record_first(tmp_path):
    path = str(tmp_path / "d")
    with Broker.open(path) as b:
        b.transactions.prepare([Message("t", b"one"), Message("t", b"two")], "shop", "tx-1")
    second = [r for r in LogScanner(os.path.join(path, "log"))
              if r.type == RecordType.PRE_MESSAGE][1]
    cut_log(path, second.log_offset)
    promoted = promote_offline(path, "n")
    assert promoted["offset"] == second.log_offset
    written = [r.type for r in LogScanner(os.path.join(path, "log"))
               if r.log_offset >= second.log_offset]
    assert written == [RecordType.EPOCH, RecordType.ROLLBACK]


def test_a_divergence_point_inside_a_record_stops_the_node_with_the_way_out(tmp_path):
    """Logs that differ before where the node's term ends in its primary's log (written by
    a version with the defect above) cannot be reconciled by a cut: the node stops, its
    log untouched, and the error says how to resync it."""
    from fmq.errors import ReplicationError
    from fmq.server.cluster.replica_role import RoleChange
    from fmq.server.lifecycle import open_in_role

    path = str(tmp_path / "d")
    with Broker.open(path) as b:
        b.send(Message("t", b"one"))
        b.send(Message("t", b"two"))
    before = [(r.log_offset, r.size) for r in LogScanner(os.path.join(path, "log"))]
    inside = before[-1][0] + 5
    with pytest.raises(ReplicationError, match="move its data directory aside"):
        open_in_role(path, BrokerConfig(follow="127.0.0.1:1"),
                     RoleChange("127.0.0.1:1", cut_at=inside))
    assert [(r.log_offset, r.size) for r in LogScanner(os.path.join(path, "log"))] == before
