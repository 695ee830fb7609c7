"""One real local SparkSession (``local[2]``) for the whole test session, and one test log
built with the real embedded broker: plain and transactional messages (committed by
REF_MESSAGE and by TX_MESSAGE copies, rolled back, left open), rolled segments, segments
deleted by retention (one topic entirely) and a torn tail."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass

import pytest

import fmq
from fmq.datadir import INDEX_DIR, LOG_DIR
from fmq.index.store import IndexStore
from fmq.log.reader import list_segments
from fmq.log.scanner import LogScanner

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

SEGMENT = 16 * 1024
TOPICS = ("early", "orders", "payments", "audit", "later")


def small_config(**changes) -> fmq.BrokerConfig:
    cfg = fmq.BrokerConfig(segment_size=SEGMENT, max_message_size=4096,
                           checkpoint_interval_ms=0, retention_interval_ms=0,
                           tx_check_after_ms=100)
    return cfg.replace(**changes) if changes else cfg


@pytest.fixture(scope="session")
def spark():
    # Workers must run this interpreter (fmq is installed in it); binding to loopback
    # avoids a stall when the host name does not resolve.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from fmq.spark.source import register

    warehouse = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fmq-spark-wh-{os.getpid()}")
    session = (SparkSession.builder.master("local[2]").appName("fmq-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.warehouse.dir", warehouse)
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
    shutil.rmtree(warehouse, ignore_errors=True)


def _msg(topic: str, i: int, size: int) -> fmq.Message:
    return fmq.Message(topic, (f"{topic}-{i}-".encode() * (size // 8 + 1))[:size],
                       key=f"k{i % 7}" if i % 3 else None, tags="tagA" if i % 2 else None,
                       properties={"n": str(i)} if i % 4 == 0 else None)


@dataclass
class BuiltLog:
    """A stopped broker's data directory and what the broker knew when it closed."""

    path: str  # the data dir, torn tail included; tests copy it before changing it
    online_dump: dict  # IndexStore.dump() of the index the broker built online
    open_transactions: list[dict]
    pulls: dict  # (topic, queue) -> [(queue offset, body, key, tags, properties)]
    queues: dict
    consumers: dict
    deleted_segments: list[str]
    torn_offset: int
    log_end: int


def pulls_of(broker: fmq.Broker) -> dict:
    return {q: [(m.queue_offset, bytes(m.body), m.key, m.tags, m.properties) for m in msgs]
            for q, msgs in broker.reads.all_messages(TOPICS).items()}


#: Due time of the test log's scheduled messages: far enough that no broker delivers them.
TIMERS_DUE = 4_000_000_000_000


def build_log(path: str) -> BuiltLog:
    # Phase 1: a topic whose segments retention will delete entirely.
    with fmq.Broker.open(path, small_config()) as b:
        for i in range(40):
            b.send(_msg("early", i, 700))
        for i in range(30):
            b.send(_msg("orders", i, 300))
        b.wait_indexed()
        b.offsets.commit("g1", [("orders", 1, 3)])
        segments_before = len(list_segments(os.path.join(path, LOG_DIR)))
    # Phase 2: reopen with a size limit that drops the oldest segments.
    limit = (segments_before - 2) * SEGMENT - 1
    with fmq.Broker.open(path, small_config(retention_bytes=limit)) as b:
        deleted = b.enforce_retention()
        assert deleted, "retention deleted nothing: the test log is not what it claims"
        for round_ in range(6):
            for i in range(12):
                b.send(_msg("orders", 100 * round_ + i, 200 + 37 * i))
            # committed with TX_MESSAGE copies (bodies under tx_copy_threshold) ...
            tx = b.transactions.prepare([_msg("payments", round_ * 10 + j,
                                              40 + j) for j in range(3)],
                           producer_group="shop")
            b.transactions.commit(tx)
            # ... and with REF_MESSAGEs (bodies over it), across several topics
            tx = b.transactions.prepare([_msg("payments", round_ * 10 + 5, 900),
                            _msg("audit", round_, 1200)], producer_group="shop")
            b.transactions.commit(tx)
            tx = b.transactions.prepare([_msg("payments", round_ * 10 + 7, 500)],
                                        producer_group="shop")
            b.transactions.rollback(tx)
            # scheduled messages: the first rounds' are delivered below, the rest pend
            b._timers.schedule([_msg("orders", 500 + round_, 150), _msg("later", round_, 90)],
                              TIMERS_DUE + round_)
        # one application id in two producer groups: two transactions, ended each its way
        for group in ("shop", "billing"):
            b.transactions.prepare([_msg("payments", 980, 60 if group == "shop" else 70)],
                      producer_group=group, tx_id="same-id")
        b.transactions.rollback("same-id", "billing")
        b.transactions.commit("same-id", "shop")
        b.transactions.prepare([_msg("payments", 991, 800), _msg("audit", 992, 100)],
                  producer_group="shop", tx_id="open-1")
        b.send(_msg("orders", 999, 100))
        b.transactions.prepare([_msg("audit", 993, 2000)], producer_group="billing", tx_id="open-2")
        b.send(_msg("audit", 994, 64))
        b.offsets.commit("g2", [("payments", 0, 2)])
        assert b._timers.deliver_due(TIMERS_DUE + 2) == 6
        # as retention does: the oldest pending timers rewritten at the log head
        [(oldest, _size), _] = b._index.timers.stored_before(1 << 62, 2)
        assert b._timers.relocate_before(oldest + 1) == 1
        b.wait_indexed()
        open_txs = b.transactions.open_transactions()
        pulls = pulls_of(b)
        queues = b._index.all_queues()
        consumers = b._index.consumer_offsets()
    index = IndexStore(os.path.join(path, INDEX_DIR))
    online = index.dump()
    index.close()
    scanner = LogScanner(os.path.join(path, LOG_DIR))
    for _rec in scanner:
        pass
    end = scanner.end_offset
    # A torn tail: the start of a record that was never completely written, after the
    # last record of the active segment.
    last = os.path.join(path, LOG_DIR, f"{list_segments(os.path.join(path, LOG_DIR))[-1]:020d}.seg")
    base = int(os.path.basename(last)[:20])
    with open(last, "r+b") as f:
        f.seek(end - base)
        f.write((500).to_bytes(4, "little") + b"\x11" * 40)
    return BuiltLog(path, online, open_txs, pulls, queues, consumers, deleted, end, end)


@pytest.fixture(scope="session")
def built_log(tmp_path_factory) -> BuiltLog:
    return build_log(str(tmp_path_factory.mktemp("spark-log") / "data"))


@pytest.fixture
def log_copy(built_log, tmp_path) -> str:
    """A private copy of the test data directory (tests that write to it use this)."""
    dst = str(tmp_path / "data")
    shutil.copytree(built_log.path, dst)
    return dst
