"""The server, replication and the tools reach the engine through Broker's operations and
its named parts (transactions, reads, deliveries, topics, replica, offsets, inventory),
never through its collaborators, and Broker forwards nothing its parts do."""

from __future__ import annotations

import pathlib
import re

from fmq import Message
from fmq.message import PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY
from tests.crashkit import ROOT

#: The engine's collaborators, which only the engine itself uses.
_INTERNALS = re.compile(
    r"broker\.(tx_writer|tx|log|index|dispatcher|timers|idempotence|visibility|_\w+)\b")
_CALLERS = ("fmq/server", "fmq/replication", "fmq/admin", "fmq/spark", "cli")
#: Reach-throughs still to switch, each with the operation that replaces it.
_PENDING: dict[tuple[str, str], str] = {}


def test_callers_use_the_facade_not_the_engines_collaborators():
    found = []
    for top in _CALLERS:
        for path in sorted((pathlib.Path(ROOT) / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for n, line in enumerate(path.read_text().splitlines(), 1):
                for m in _INTERNALS.finditer(line):
                    if (rel, m.group(1)) not in _PENDING:
                        found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "use Broker's operations instead:\n" + "\n".join(found)


def test_broker_names_its_parts_instead_of_forwarding_to_them():
    from fmq.engine.broker import Broker

    forwarded = {"prepare", "commit", "rollback", "poll_uncertain", "answer_uncertain",
                 "release_feedback_leases", "open_transactions", "pull", "queue_range",
                 "messages_by_key", "offset_for_time", "committed_offset", "all_messages",
                 "commit_offset", "queue_count", "schedule"}
    assert not forwarded & set(dir(Broker))


def test_place_requests_decides_the_send_path_once(broker):
    plain = [Message("t", b"a"), Message("t", b"b")]
    idem = [Message("t", b"c", properties={PRODUCER_ID_PROPERTY: "p1",
                                           SEQUENCE_PROPERTY: "0"})]
    results, end, refused = broker.place_requests(plain + idem, (2, 1))
    broker.wait_durable(end)
    assert refused == {} and len(results) == 3
    again, end2, refused2 = broker.place_requests(idem, (1,))  # a resend: the original's
    assert refused2 == {} and again == results[2:] and end2 <= broker.replica.flushed_offset
    assert broker.duplicates_by_topic() == {"t": 1}


def test_transactions_facade_prepares_and_commits_in_two_halves(broker):
    tx, end = broker.transactions.place_prepare([Message("t", b"x")], "pg")
    broker.wait_durable(end)
    tx_id = broker.transactions.prepare_done(tx)
    assert [t["tx_id"] for t in broker.transactions.open_transactions()] == [tx_id]
    placed = broker.transactions.place_commit("pg", tx_id)
    tx, end = placed
    broker.wait_durable(end)
    broker.transactions.commit_done(tx)
    assert broker.transactions.open_transactions() == []
    assert broker.transactions.commit(tx_id, "pg").name == "COMMIT"


def test_replica_facade_appends_a_term_and_reports_log_ends(broker):
    assert broker.replica.epoch_history() == []
    flushed = []
    broker.replica.add_flush_listener(flushed.append)
    entry = broker.replica.append_epoch(3, "node-a", 10.0)
    assert (entry.epoch, entry.node) == (3, "node-a")
    assert [e.epoch for e in broker.replica.epoch_history()] == [3]
    assert flushed and flushed[-1] == broker.replica.flushed_offset
    assert broker.replica.first_offset == 0 and broker.replica.first_segment_size > 0
    assert broker.replica.visible_end is None  # not gated: the whole durable log
    broker.replica.gate_visibility()
    r = broker.send(Message("t", b"hidden"))
    broker.wait_indexed()
    assert broker.reads.pull("t", r.queue_id, r.queue_offset) == []
    woken = []
    broker.on_consumable(woken.append)
    broker.replica.advance_visible(broker.replica.flushed_offset)
    assert [m.body for m in broker.reads.pull("t", r.queue_id, r.queue_offset)] == [b"hidden"]
    assert ("t", r.queue_id) in set().union(*woken)


def _layer_of(module: str) -> int:
    text = (pathlib.Path(ROOT) / "docs" / "design.md").read_text()
    block = text.split("```layers", 1)[1].split("```", 1)[0]
    layers = [line.split("#")[0].split() for line in block.splitlines()
              if line.strip() and not line.startswith("#") and "may import" not in line]
    # the layer of the longest name that is the module or a package holding it
    return max((len(n), i) for i, names in enumerate(layers) for n in names
               if module == n or module.startswith(n + "."))[1]


def test_the_live_dedup_window_is_the_engines_and_recovery_only_feeds_it():
    from fmq.engine.idempotence import DedupWindow

    assert _layer_of(DedupWindow.__module__) < _layer_of("fmq.recovery")
    for path in sorted((pathlib.Path(ROOT) / "fmq" / "recovery").rglob("*.py")):
        text = path.read_text()
        assert "DedupWindow(" not in text and "DedupWindow.for_config" not in text, path
