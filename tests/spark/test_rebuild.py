"""The Spark index rebuild: identical to the online index, the broker opens on it with
nothing to replay but the open transactions, corruption fails it, audits are right."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from fmq.cli.main import cli

import fmq
from fmq.datadir import CHECKPOINT_FILE, INDEX_DIR
from fmq.index.lmdb_env import DERIVED_DBS
from fmq.index.store import IndexStore
from fmq.recovery.checkpoint import read_checkpoint
from fmq.spark.rebuild import run_rebuild

from . import damage as D
from .conftest import pulls_of, small_config

# A rebuild is a dozen Spark jobs; on a loaded 2-core machine the first one (cold Python
# workers) has taken over 2 minutes. The limit is there to catch a hang, not to time it.
pytestmark = pytest.mark.timeout(600)


def _dump(index_dir: str) -> dict:
    store = IndexStore(index_dir)
    try:
        return store.dump()
    finally:
        store.close()


def _consumers(index_dir: str) -> dict:
    store = IndexStore(index_dir)
    try:
        return store.consumer_offsets()
    finally:
        store.close()


def assert_same_index(got: dict, online: dict) -> None:
    # Every database the index declares derived, key by key and value by value.
    assert sorted(got) == sorted(online) == sorted(n.decode() for n in DERIVED_DBS)
    for name in online:
        assert got[name] == online[name], f"database {name} differs"


def _open_tx_view(txs: list[dict]) -> list[tuple]:
    return sorted((t["tx_id"], t["producer_group"], t["state"], t["messages"],
                   t["prepare_offset"]) for t in txs)


def test_in_place_rebuild_equals_online_index_and_broker_serves_identical_pulls(
        spark, built_log, log_copy):
    # Run as an operator would (the CLI calls run_rebuild); it prints what it did.
    res = CliRunner().invoke(cli, ["index", "rebuild", log_copy, "--spark", "--master",
                                   "local[2]", "--json"])
    assert res.exit_code == 0, res.output
    result = json.loads(res.stdout.strip().splitlines()[-1])
    assert result["index_dir"] == os.path.join(os.path.abspath(log_copy), INDEX_DIR)
    assert result["queue_entries"] == len(built_log.online_dump["cq"]) > 100

    assert_same_index(_dump(os.path.join(log_copy, INDEX_DIR)), built_log.online_dump)
    assert _consumers(os.path.join(log_copy, INDEX_DIR)) == built_log.consumers
    assert result["consumer_offsets"] == len(built_log.consumers) == 2
    assert result["consumer_offsets_from_log"]
    # The retention-emptied topic's high-water marks survive (carried from the old index).
    assert result["queues_carried_over"] == sum(1 for t, _q in built_log.queues if t == "early")
    assert result["torn_tail"]["offset"] == built_log.torn_offset
    assert result["log_end"] == built_log.log_end

    # Open transactions, computed in Spark, are the broker's.
    assert _open_tx_view(result["open_transactions"]) == _open_tx_view(built_log.open_transactions)
    oldest = min(t["prepare_offset"] for t in built_log.open_transactions)
    cp = read_checkpoint(os.path.join(log_copy, CHECKPOINT_FILE))
    assert cp.recovery_offset == oldest == result["checkpoint"]["recovery_offset"]
    assert cp.applied_offset == built_log.log_end

    with fmq.Broker.open(log_copy, small_config()) as b:
        rep = b.recovery
        assert not rep.index_rebuilt
        # Only the open transactions' range is replayed (it holds them), and the torn
        # tail is cut.
        assert rep.start_offset == oldest
        assert rep.bytes_replayed == built_log.log_end - oldest
        assert rep.torn_tail is not None and rep.torn_tail["offset"] == built_log.torn_offset
        assert pulls_of(b) == built_log.pulls
        assert _open_tx_view(b.transactions.open_transactions()) == _open_tx_view(
            built_log.open_transactions)
        assert b._index.all_queues() == built_log.queues
        assert b.reads.committed_offset("g1", "orders", 1) == 3
        # Producing goes on at the right queue offsets, including in emptied queues.
        r = b.send(fmq.Message("early", b"after", queue_id=0))
        assert r.queue_offset == built_log.queues[("early", 0)][1]


def test_out_dir_leaves_data_dir_alone_and_writes_parquet_audit(spark, built_log, log_copy,
                                                                tmp_path):
    before = _dump(os.path.join(log_copy, INDEX_DIR))
    cp_before = pathlib.Path(log_copy, CHECKPOINT_FILE).read_bytes()
    out = str(tmp_path / "new-index")
    pq = str(tmp_path / "audit")
    result = run_rebuild(log_copy, master="local[2]", out_dir=out, parquet_dir=pq)

    assert_same_index(_dump(out), built_log.online_dump)
    assert _dump(os.path.join(log_copy, INDEX_DIR)) == before
    assert pathlib.Path(log_copy, CHECKPOINT_FILE).read_bytes() == cp_before
    assert read_checkpoint(os.path.join(out, CHECKPOINT_FILE)).recovery_offset == min(
        t["prepare_offset"] for t in built_log.open_transactions)

    records = spark.read.parquet(result["parquet"]["records"])
    assert records.where("damage IS NULL").count() == result["records"] == len(D.records(log_copy))
    summary = {(r["topic"], r["queue_id"]): r.asDict()
               for r in spark.read.parquet(result["parquet"]["summary"]).collect()}
    txs = {(r["producer_group"], r["tx_id"]): r["state"]
           for r in spark.read.parquet(result["parquet"]["transactions"]).collect()}
    expected_states = _tx_states(log_copy)
    assert {t: s for t, s in txs.items()} == expected_states
    for q, msgs in built_log.pulls.items():
        if not msgs:
            continue
        row = summary[q]
        assert row["messages"] == len(msgs), q
        assert row["bytes"] == sum(len(m[1]) for m in msgs), q
        assert row["min_queue_offset"] == msgs[0][0] and row["next_queue_offset"] == msgs[-1][0] + 1
    # Transactions per queue, from an independent walk of the log.
    per_queue = _tx_counts_per_queue(log_copy, expected_states)
    for q, counts in per_queue.items():
        row = summary[q]
        assert (row["committed_transactions"], row["rolled_back_transactions"],
                row["open_transactions"]) == counts, q
    assert sum(c[2] for c in per_queue.values()) == 3  # open-1 in two queues, open-2 in one
    assert sum(c[1] for c in per_queue.values()) == 7  # six rounds' and billing's same-id

    # Per topic: the per-queue rows added up.
    topics = {r["topic"]: r.asDict()
              for r in spark.read.parquet(result["parquet"]["topics"]).collect()}
    for topic in {t for t, _q in summary}:
        rows = [row for (t, _q), row in summary.items() if t == topic]
        assert topics[topic]["queues"] == len(rows)
        for col in ("messages", "bytes", "committed_transactions", "open_transactions"):
            assert topics[topic][col] == sum(row[col] for row in rows), (topic, col)
    _docs_queries_answer(spark, result["parquet"], log_copy)


def _docs_queries_answer(spark, parquet: dict, data_dir: str) -> None:
    """The three example queries of docs/spark.md, in plain Spark SQL over the audit."""
    recs = D.records(data_dir)
    per_hour = spark.sql(
        "SELECT topic, date_trunc('hour', timestamp_millis(store_time)) AS hour, "
        "count(*) AS messages FROM parquet.`{}` "
        "WHERE type IN ('MESSAGE', 'REF_MESSAGE', 'TX_MESSAGE') GROUP BY 1, 2"
        .format(parquet["records"])).collect()
    consumable = [r for r in recs if r.type.name in ("MESSAGE", "REF_MESSAGE", "TX_MESSAGE")]
    assert sum(r["messages"] for r in per_hour) == len(consumable)
    assert {r["topic"] for r in per_hour} == {r.topic for r in consumable}
    old_open = spark.sql(
        "SELECT tx_id FROM parquet.`{}` WHERE state IN ('open', 'committing', 'incomplete') "
        "AND prepare_time < unix_millis(current_timestamp()) - 1000"
        .format(parquet["transactions"])).collect()
    assert sorted(r["tx_id"] for r in old_open) == ["open-1", "open-2"]
    history = spark.sql(
        "SELECT offset, type FROM parquet.`{}` WHERE topic = 'orders' AND key = 'k1' "
        "ORDER BY offset".format(parquet["records"])).collect()
    expected = [(r.log_offset, r.type.name) for r in recs if r.topic == "orders" and r.key == "k1"]
    assert [(r["offset"], r["type"]) for r in history] == expected and expected


def _tx_states(data_dir: str) -> dict[tuple[str, str], str]:
    """The state of each transaction, by (producer group, id)."""
    state: dict[tuple[str, str], str] = {}
    for r in D.records(data_dir):
        name, key = r.type.name, (r.producer_group, r.tx_id)
        if name == "PREPARE":
            state[key] = "open"
        elif name in ("COMMIT", "ROLLBACK") and state.get(key) == "open":
            state[key] = "commit" if name == "COMMIT" else "rollback"
    return state


def _tx_counts_per_queue(data_dir: str, states: dict[str, str]) -> dict:
    seen: dict[tuple, set] = {}
    for r in D.records(data_dir):
        if r.type.name == "PRE_MESSAGE":
            seen.setdefault((r.topic, r.queue_id), set()).add((r.producer_group, r.tx_id))
    return {q: (sum(states[t] == "commit" for t in ids), sum(states[t] == "rollback" for t in ids),
                sum(states[t] == "open" for t in ids)) for q, ids in seen.items()}


def test_refuses_a_data_dir_a_broker_holds(log_copy):
    with fmq.Broker.open(log_copy, small_config()):
        with pytest.raises(fmq.DataDirLocked):
            run_rebuild(log_copy, master="local[2]")


def test_corruption_in_sealed_segment_fails_the_job_naming_segment_and_offset(
        spark, built_log, log_copy):
    before = _dump(os.path.join(log_copy, INDEX_DIR))
    segment, offset = D.flip_body_byte_in_sealed_segment(log_copy)
    with pytest.raises(fmq.CorruptLog) as info:
        run_rebuild(log_copy, master="local[2]")
    assert (info.value.segment, info.value.offset) == (segment, offset)
    assert "CRC-32C mismatch" in info.value.reason
    assert f"segment {segment} at log offset {offset}" in str(info.value)
    # The old index is untouched and no temporary directory is left behind.
    assert _dump(os.path.join(log_copy, INDEX_DIR)) == before
    assert sorted(os.listdir(log_copy)) == sorted(os.listdir(built_log.path))


def test_module_main_prints_what_it_did(spark, built_log, log_copy, tmp_path, capsys):
    from fmq.spark.rebuild import main

    out = str(tmp_path / "idx")
    assert main([log_copy, "--out", out]) == 0
    printed = capsys.readouterr().out
    lines = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip()
             for line in printed.splitlines()}
    assert lines["index"] == out
    assert lines["queue entries"].startswith(f"{len(built_log.online_dump['cq']):,} in ")
    # counts, not lists: the open transactions are one line however many there are
    assert "{'" not in printed and "[{" not in printed and "None" not in printed
    assert built_log.open_transactions
    assert lines["open transactions"] == f"{len(built_log.open_transactions)} (listed by --json)"
    assert_same_index(_dump(out), built_log.online_dump)
    # And an error is one line on stderr with exit status 1, no traceback.
    with fmq.Broker.open(log_copy, small_config()):
        assert main([log_copy]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: data directory") and "Traceback" not in err


def test_spark_submit_of_the_module(built_log, log_copy, tmp_path):
    """A separate JVM through the real spark-submit, as an operator would run it."""
    spark_submit = shutil.which("spark-submit", path=os.path.dirname(sys.executable))
    assert spark_submit, "spark-submit ships with pyspark and sits next to the interpreter"
    import fmq.spark.rebuild as module

    out = str(tmp_path / "idx")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run(
        [spark_submit, "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.ui.showConsoleProgress=false", module.__file__, log_copy,
         "--out", out, "--json"],
        capture_output=True, text=True, env=env, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["master"] == "local[1]"
    assert_same_index(_dump(out), built_log.online_dump)


def test_commit_cut_short_is_committing_and_the_broker_rolls_it_forward(spark, log_copy):
    """A crash between the REF/TX records and the COMMIT (stage S5 of docs/transactions.md): the rebuild
    reports the transaction as committing, keeps the checkpoint at its PREPARE, and the
    broker opening on the rebuilt index rolls it forward."""
    from fmq.admin.repair import cut_log

    recs = D.records(log_copy)
    commit = [r for r in recs if r.type.name == "COMMIT"][-1]
    prepare = next(r for r in recs if r.type.name == "PREPARE" and r.tx_id == commit.tx_id)
    copies = [r for r in recs if r.tx_id == commit.tx_id
              and r.type.name in ("REF_MESSAGE", "TX_MESSAGE")]
    assert copies
    cut_log(log_copy, commit.log_offset)

    result = run_rebuild(log_copy, master="local[2]")
    assert [(t["tx_id"], t["state"], t["prepare_offset"]) for t in result["open_transactions"]] \
        == [(commit.tx_id, "committing", prepare.log_offset)]
    assert result["checkpoint"]["recovery_offset"] == prepare.log_offset
    with fmq.Broker.open(log_copy, small_config()) as b:
        assert b.recovery.rolled_forward == [commit.tx_id]
        assert b.transactions.open_transactions() == []
        visible = {m.queue_offset for m in b.reads.all_messages(["payments", "audit"]).get(
            (copies[0].topic, copies[0].queue_id), [])}
        assert copies[0].queue_offset in visible


def test_without_the_old_index_retention_floors_keep_emptied_queues(spark, built_log, log_copy):
    """Nothing to carry over: the queues retention emptied come back from queue-floors
    (as recovery applies them), and the consumer offsets from the log's OFFSET records
    (one of them rewritten at the head when retention deleted its segment), so the index
    is still the online one."""
    shutil.rmtree(os.path.join(log_copy, INDEX_DIR))
    result = run_rebuild(log_copy, master="local[2]")
    assert result["queues_carried_over"] == 0
    assert result["consumer_offsets"] == 2 and result["consumer_offsets_from_log"]
    assert _consumers(os.path.join(log_copy, INDEX_DIR)) == built_log.consumers == {
        ("g1", "orders", 1): 3, ("g2", "payments", 0): 2}
    assert result["queue_floors_applied"] >= sum(1 for t, _q in built_log.queues if t == "early")
    assert_same_index(_dump(os.path.join(log_copy, INDEX_DIR)), built_log.online_dump)


def test_prepare_cut_short_is_incomplete_and_the_broker_rolls_it_back(spark, log_copy):
    """A crash inside a prepare's PRE_MESSAGEs: the rebuild reports the transaction as
    incomplete (fewer PRE_MESSAGEs than its PREPARE announced), keeps the checkpoint at its
    PREPARE, and the broker opening on the rebuilt index rolls it back."""
    from fmq.admin.repair import cut_log

    recs = D.records(log_copy)
    pres: dict[str, list] = {}
    for r in recs:
        if r.type.name == "PRE_MESSAGE":
            pres.setdefault(r.tx_id, []).append(r)
    prepare = [r for r in recs if r.type.name == "PREPARE" and len(pres.get(r.tx_id, [])) >= 2][-1]
    assert prepare.ref_size == len(pres[prepare.tx_id])
    cut_log(log_copy, pres[prepare.tx_id][1].log_offset)  # keep the PREPARE and one message

    result = run_rebuild(log_copy, master="local[2]")
    states = {t["tx_id"]: (t["state"], t["prepare_offset"]) for t in result["open_transactions"]}
    assert states[prepare.tx_id] == ("incomplete", prepare.log_offset)
    assert result["checkpoint"]["recovery_offset"] <= prepare.log_offset
    with fmq.Broker.open(log_copy, small_config()) as b:
        assert b.recovery.incomplete_prepares == [prepare.tx_id]
        assert prepare.tx_id not in {t["tx_id"] for t in b.transactions.open_transactions()}
        with pytest.raises(fmq.TransactionConflict):
            b.transactions.commit(prepare.tx_id)


def test_relocation_cut_short_keeps_the_original_and_the_checkpoint_before_it(spark, tmp_path):
    """A crash inside retention's relocation of an open transaction (its new PREPARE and
    part of the copies durable): the rebuild keeps the checkpoint at the *first* PREPARE,
    so the broker replays the whole original and keeps the transaction open and whole."""
    from fmq.admin.repair import cut_log

    data = str(tmp_path / "data")
    bodies = [f"r{i}-".encode().ljust(300, b"r") for i in range(3)]
    with fmq.Broker.open(data, small_config()) as b:
        b.transactions.prepare([fmq.Message("pay", body) for body in bodies], "shop", tx_id="reloc")
        b.send(fmq.Message("plain", b"after"))
        with b._tx.lock:
            tx = b._tx.open["shop", "reloc"]
        assert b._tx_relocator.relocate(tx)
    recs = D.records(data)
    prepares = [r for r in recs if r.type.name == "PREPARE" and r.tx_id == "reloc"]
    assert [p.ref_offset for p in prepares] == [-1, prepares[0].log_offset]
    copies = [r for r in recs if r.type.name == "PRE_MESSAGE" and r.log_offset > prepares[1].log_offset]
    cut_log(data, copies[1].log_offset)  # the new PREPARE and one of three copies survive

    result = run_rebuild(data, master="local[2]")
    assert [(t["tx_id"], t["state"]) for t in result["open_transactions"]] == [("reloc", "open")]
    assert result["checkpoint"]["recovery_offset"] <= prepares[0].log_offset
    with fmq.Broker.open(data, small_config()) as b:
        assert b.recovery.incomplete_prepares == []
        [info] = b.transactions.open_transactions()
        assert (info["tx_id"], info["messages"], info["prepare_offset"]) == (
            "reloc", 3, prepares[0].log_offset)
        assert b.transactions.commit("reloc") == fmq.TxState.COMMIT
        assert b.wait_indexed()
        got = sorted(bytes(m.body) for ms in b.reads.all_messages(["pay"]).values() for m in ms)
        assert got == sorted(bodies)
