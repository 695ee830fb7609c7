"""The transaction writer's compiled twin (``fmq.tx._writer_c``, ``fmq/tx/writer.py``
compiled by Cython, chosen by ``fmq.tx.writers``) against the pure writer, each on a real
log of its own fed the same requests:

* a turn's PREPAREs and COMMITs, together and one at a time (``tests/native/
  test_tx_run_twins.py``'s scenarios: repeated ids, scopes, the open-transaction limit,
  copies and REFs, segment rolls);
* hostile requests on the general way: producer groups and ids that are not names,
  messages that fail their checks (topics, sizes, keys, properties, queue ids, objects
  that are not messages), empty and oversized transactions, retried PREPAREs with the same
  messages and with others, COMMITs and ROLLBACKs of open, ended and unknown ids;

the same outcomes (values, or the error's type and message), log bytes, index items, open
and finished transactions and queues.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.config import BrokerConfig
from fmq.engine import queues as seat
from fmq.log.log import Log
from fmq.message import Message
from fmq.tx import ids
from fmq.tx import writer as writer_py
from fmq.tx.manager import TxManager
from tests.native.test_tx_run_twins import (
    PLAIN_MESSAGES,
    _items_without_stamps,
    _log_bytes,
    _records_without_stamps,
    _transactions,
    _turns,
    log_with_items,
)
from tests.native.twins import compiled

PURE = writer_py.TxWriter
TEXT_ = st.text(max_size=6)
IDS = ["tx-0", "tx-1", "tx-2", "s", "s//1", "tx-3", "tx-4", "tx-5"]


def _twin() -> type:
    return compiled("fmq.tx._writer_c").TxWriter


def test_the_writer_the_broker_runs_is_the_chosen_one() -> None:
    from fmq import native
    from fmq.tx import writers

    assert writers.TxWriter is (PURE if native.no_extensions() else _twin())
    assert _twin() is not PURE


@settings(max_examples=60, deadline=None)
@given(requests=st.lists(st.tuples(st.lists(PLAIN_MESSAGES, min_size=1, max_size=3),
                                   st.sampled_from(IDS)), min_size=1, max_size=8),
       commits=st.lists(st.sampled_from(["tx-0", "tx-1", "tx-2", "s", "tx-3", "tx-9"]),
                        max_size=8),
       segment=st.sampled_from([4096, 1 << 16]), in_turns=st.booleans())
def test_a_turns_prepares_and_commits_are_the_pure_writers(requests, commits, segment,
                                                           in_turns) -> None:
    twin = _twin()
    assert (_turns(requests, commits, in_turns, segment, twin)
            == _turns(requests, commits, in_turns, segment, PURE))


@settings(max_examples=30, deadline=None)
@given(requests=st.lists(st.lists(PLAIN_MESSAGES, min_size=1, max_size=4), min_size=1,
                         max_size=6),
       commits=st.lists(st.booleans(), max_size=6), runs_hooked=st.booleans())
def test_transactions_one_by_one_are_the_pure_writers(requests, commits, runs_hooked) -> None:
    twin = _twin()
    assert (_transactions(requests, commits, runs_hooked, twin)
            == _transactions(requests, commits, runs_hooked, PURE))


# ---------------------------------------------------------------- hostile requests

NAMES = st.sampled_from(["g", "g", "h", "", "a" * 255, "a" * 256, "g\x00", "é", None, 5])
TX_IDS = st.sampled_from(["t1", "t1", "t2", "s", "s//1", "", "b" * 256, "x\n", None, 7])
BAD_MESSAGES = st.one_of(
    st.builds(Message, st.sampled_from(["a", "", "bad topic", "%RETRY%g", "a" * 200, 5]),
              st.sampled_from([b"", b"x", b"y" * 1501, "text"]),
              key=st.sampled_from([None, "k", "k\x00", "k" * 256]),
              tags=st.sampled_from([None, "t", "\n"]),
              properties=st.sampled_from([None, {}, {"%seq": "1"}, {"%x": "1"}, {"a": 5}]),
              queue_id=st.sampled_from([None, 0, 2, 3, -1, "0"])),
    st.sampled_from([None, b"raw", {"topic": "a"}]))
MESSAGE_LISTS = st.lists(PLAIN_MESSAGES | BAD_MESSAGES, max_size=5)
REQUESTS = st.lists(st.one_of(
    st.tuples(st.just("prepare"), MESSAGE_LISTS, NAMES, TX_IDS | st.none()),
    st.tuples(st.just("prepares"), st.lists(st.tuples(
        st.lists(PLAIN_MESSAGES, max_size=5), NAMES, TX_IDS | st.none()), max_size=4)),
    st.tuples(st.just("commit"), NAMES, TX_IDS),
    st.tuples(st.just("commits"), st.lists(st.tuples(NAMES, TX_IDS), max_size=4)),
    st.tuples(st.just("rollback"), NAMES, TX_IDS)), max_size=10)


def _said(value: object) -> object:
    """A request's outcome as the two writers must agree on it: the error's type and
    message, the id and offsets of a placed transaction, or the state."""
    if isinstance(value, BaseException):
        return type(value).__name__, str(value)
    if isinstance(value, tuple):
        tx, end = value
        return tx.tx_id, tx.prepare_offset, end
    return getattr(value, "value", value)


def _run(writer_class: type, requests: list[tuple]) -> tuple:
    counted = ids._tx_seq
    ids._tx_seq = itertools.count(1)  # the ids the broker makes: the same in both runs
    try:
        return _requests_on_a_log(writer_class, requests)
    finally:
        ids._tx_seq = counted


def _requests_on_a_log(writer_class: type, requests: list[tuple]) -> tuple:
    config = BrokerConfig(segment_size=4096, max_message_size=1500, tx_copy_threshold=300,
                          max_messages_per_transaction=4)
    with log_with_items(True, 4096) as (log_, items):
        queues = seat.Queues(3, {("a", 1): 40})
        txm = TxManager(max_open=4, finished_memory=100, check_after_ms=60_000,
                        check_max_interval_ms=60_000)
        writer = writer_class(log_, txm, config, queues, 4096, admit=lambda: None)
        said = [_ask(writer, log_, request) for request in requests]
        data = _log_bytes(log_)
        return (said, _records_without_stamps(data), _items_without_stamps(items),
                sorted((t.tx_id, t.producer_group, t.prepare_offset, t.prepared,
                        t.state.value, [(m.offset, m.queue_offset) for m in t.messages])
                       for t in txm.open.values()),
                sorted((g, i, s.value) for (g, i), s in txm.finished.items()),
                queues.messages_in, queues.bytes_in)


def _ask(writer, log_: Log, request: tuple) -> object:
    """One request, finished as the pipeline finishes it once its records are durable."""
    kind, *args = request
    try:
        if kind == "prepare":
            tx, end = writer.place_prepare(*args)
            log_.flush()
            return _said(writer.prepare_done(tx))
        if kind == "prepares":
            outcomes = writer.place_prepares(args[0])
            log_.flush()
            return [_said(writer.prepare_done(o[0])) if isinstance(o, tuple) else _said(o)
                    for o in outcomes]
        if kind == "commit":
            placed = writer.place_commit(*args)
            if isinstance(placed, tuple):
                log_.flush()
                writer.commit_done(placed[0])
            return _said(placed)
        if kind == "commits":
            outcomes = writer.place_commits(args[0])
            log_.flush()
            done = [o[0] for o in outcomes if isinstance(o, tuple)]
            writer.commits_done(done)
            return [_said(o) for o in outcomes]
        return _said(writer.rollback(*args))
    except Exception as exc:  # noqa: BLE001 - compared as an outcome
        return _said(exc)


@settings(max_examples=150, deadline=None)
@given(requests=REQUESTS)
def test_hostile_requests_end_as_with_the_pure_writer(requests) -> None:
    assert _run(_twin(), requests) == _run(PURE, requests)


# ---------------------------------------------------------------- the open transaction

def _open_classes() -> tuple[type, type]:
    twin = compiled("fmq.tx._open_transaction_c")
    return twin.OpenTransaction, twin.PreMessage


def test_the_manager_gives_the_chosen_classes() -> None:
    from fmq import native
    from fmq.tx import manager, open_transaction

    chosen = (open_transaction.OpenTransaction, open_transaction.PreMessage) \
        if native.no_extensions() else _open_classes()
    assert (manager.OpenTransaction, manager.PreMessage) == chosen


PRE = st.tuples(st.integers(0, 2**40), st.integers(0, 2**20), TEXT_, st.integers(-1, 9),
                st.none() | TEXT_, st.none() | TEXT_, st.integers(0, 2**20),
                st.integers(-1, 2**20))


def _pre_seen(m) -> tuple:
    return (m.offset, m.size, m.topic, m.queue_id, m.key, m.tags, m.body_size, m.queue_offset,
            repr(m), _hash_refused(m))


def _hash_refused(m) -> tuple:
    try:
        hash(m)
    except TypeError as exc:
        return "TypeError", str(exc)
    return ("hashed",)


def _tx_seen(t, now_ms: int) -> tuple:
    return (t.tx_id, t.producer_group, t.prepare_offset, t.store_time, t.expected_messages,
            t.prepared, t.state, t.checks, t.next_check_at, t.lease_until, t.lease_owner,
            t.key, t.complete, t.referenced, t.info(now_ms), repr(t),
            [_pre_seen(m) for m in t.messages], t.busy.acquire(False))


@settings(max_examples=100, deadline=None)
@given(fields=PRE, other=PRE, tx=st.tuples(TEXT_, TEXT_, st.integers(-1, 2**40),
                                         st.integers(0, 2**41), st.integers(0, 5),
                                         st.booleans()),
       now_ms=st.integers(0, 2**42))
def test_open_transactions_are_the_pure_ones(fields, other, tx, now_ms) -> None:
    from fmq.tx import open_transaction as pure

    seen = []
    for open_tx, pre in ((pure.OpenTransaction, pure.PreMessage), _open_classes()):
        m, n = pre(*fields), pre(*other[:7])
        made = open_tx(*tx[:4], messages=[m, n], expected_messages=tx[4], prepared=tx[5])
        bare = open_tx(*tx[:4])
        seen.append((_pre_seen(m), m == pre(*fields), m == n, m != n, m == fields,
                     _tx_seen(made, now_ms), _tx_seen(bare, now_ms),
                     made.registered_at <= bare.registered_at))
    assert seen[0] == seen[1]
