"""The invariants every fault test checks after the fault (issue 5):

* **I1** every acknowledged record is present and byte-identical (log and consumer view);
* **I2** the recovered log is a prefix of what was written: the record sequence equals the
  reference run's up to where it stops (no holes, duplicates or reordering);
* **I3** a durable COMMIT means every message of the transaction is consumable exactly
  once; no COMMIT (or a ROLLBACK) means none is; open transactions are back in the
  transaction manager with all their messages;
* **I4** (in the corruption tests) damage outside the unsynced tail raises CorruptLog naming
  segment and offset;
* **I5** recovering twice gives the same state; appending after recovery, then crashing
  again, stays correct;
* **I6** the index equals one rebuilt from nothing out of the log (consumer offsets
  included: they are derived from OFFSET records);
* **I7** (in the EIO/ENOSPC tests) nothing is acknowledged after a failed write or fsync.

Each check raises :class:`InvariantViolation` (an AssertionError) saying which invariant
failed and where. :func:`verify_recovery` runs I1, I2, I3 and I6 on a crashed data dir;
:func:`verify_crash` adds both halves of I5. I1 covers acknowledged consumer-offset commits
too (:func:`check_acked_offsets`): each queue's committed offset is the last acknowledged
commit's, or that of a later commit of the same queue the crash left unacknowledged.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from dataclasses import dataclass, field

import fmq
from fmq.admin.rebuild_index import rebuild_index
from fmq.datadir import INDEX_DIR, LOG_DIR
from fmq.index import keys as K
from fmq.index.store import IndexStore
from fmq.log.record import FORMAT_MAX_RECORD, Record, RecordType
from fmq.log.scanner import LogScanner
from tests.crashkit import read_acks
from tests.faults.workload import (
    TOPICS,
    ack_path,
    body_for,
    copy_dir,
    make_config,
    message_id,
    msg,
    plan_messages,
    recover_and_die,
    run_plan,
)


class InvariantViolation(AssertionError):
    pass


def fail(inv: str, what: str) -> None:
    raise InvariantViolation(f"{inv} violated: {what}")


# ---------------------------------------------------------------- reading the log


def log_records(data_dir: str, on_corruption: str = "raise") -> list[Record]:
    """Every valid record of the data dir's log, in order (fillers included)."""
    scanner = LogScanner(os.path.join(data_dir, LOG_DIR), on_corruption=on_corruption,
                         copy_body=True, max_record_size=FORMAT_MAX_RECORD)
    return list(scanner)


def write_reference(work: str, plan: list[dict], config: dict) -> tuple[str, list[tuple], list[dict]]:
    """Run ``plan`` to completion in a child into ``work/base``: the reference data dir, its
    record keys and the acknowledgements (module-scoped fixtures damage copies of it)."""
    data = os.path.join(work, "base")
    path = ack_path()
    res = run_plan(data, path, plan, config)
    assert res.returncode == 0, res.stderr[-3000:]
    return data, [record_key(r) for r in log_records(data)], read_acks(path)


def record_key(rec: Record) -> tuple:
    """What identifies a record's content (everything but the store time)."""
    return (RecordType(rec.type).name, rec.log_offset, rec.size, rec.topic, rec.queue_id,
            rec.queue_offset, rec.tx_id, rec.producer_group, rec.key, rec.tags,
            rec.ref_offset, rec.ref_size, bytes(rec.body))


def short(key: tuple) -> str:
    body = key[-1]
    return f"{key[0]}@{key[1]}(tx={key[6]!r}, q={key[4]}:{key[5]}, id={message_id(body) if body else ''})"


# ---------------------------------------------------------------- I2


def check_prefix(records: list[Record], reference: list[tuple]) -> None:
    """I2: ``records`` equal ``reference`` from the record at the log's first offset on,
    up to their own end (``reference`` is a full run's ``record_key`` sequence)."""
    keys = [record_key(r) for r in records]
    if not keys:
        return
    start = next((i for i, k in enumerate(reference) if k[1] == keys[0][1]), None)
    if start is None:
        fail("I2", f"the recovered log starts at {keys[0][1]}, where the reference has no record")
    ref = reference[start:]
    for i, k in enumerate(keys):
        if i < len(ref) and k == ref[i]:
            continue
        if is_recovery_rollback(records, i):
            continue  # recovery's own ROLLBACK of a prepare the crash cut short (I8)
        if i >= len(ref):
            fail("I2", f"record {short(k)} lies past the end of everything written")
        fail("I2", f"record #{i} of the recovered log is {short(k)}, the writer wrote "
                   f"{short(ref[i])} there (hole, duplicate, reordering or garbage)")


def is_recovery_rollback(records: list[Record], i: int) -> bool:
    """Whether ``records[i]`` is a ROLLBACK that only recovery can have written: every
    record from ``i`` on is a ROLLBACK, each of a transaction whose PREPARE announced more
    PRE_MESSAGEs than the log holds before ``i`` (I8: an incomplete prepare is rolled
    back)."""
    announced: dict[str, int] = {}
    held: Counter = Counter()
    for r in records[:i]:
        if r.type == RecordType.PREPARE:
            announced[r.tx_id] = r.ref_size
            held[r.tx_id] = 0
        elif r.type == RecordType.PRE_MESSAGE:
            held[r.tx_id] += 1
    tail = records[i:]
    return all(r.type == RecordType.ROLLBACK and r.tx_id in announced
               and held[r.tx_id] < announced[r.tx_id] for r in tail)


# ---------------------------------------------------------------- I1 + I3


@dataclass
class TxView:
    prepare: int = -1
    pres: dict = field(default_factory=dict)  # offset -> message id
    refs: Counter = field(default_factory=Counter)  # PRE offset -> REF/TX records
    commit: bool = False
    rollback: bool = False
    #: A relocated copy being read: (its PREPARE offset, messages announced, its PREs).
    relocation: tuple[int, int, dict] | None = None


def consumable(broker) -> dict[str, list[tuple[str, int, int, bytes]]]:
    """message id -> every (topic, queue, queue offset, body) where a consumer sees it."""
    out: dict[str, list] = {}
    try:
        queues = broker.reads.all_messages(TOPICS)
    except fmq.FMQError as exc:  # an indexed message that cannot be read back
        fail("I1", f"reading the consumable messages failed: {exc!r}")
    for (topic, qid), msgs in queues.items():
        expect = None
        for m in msgs:
            if expect is not None and m.queue_offset != expect:
                fail("I2", f"queue {topic}:{qid} jumps from offset {expect - 1} to "
                           f"{m.queue_offset} (consume-queue offsets must be dense)")
            expect = m.queue_offset + 1
            out.setdefault(message_id(m.body), []).append(
                (topic, qid, m.queue_offset, bytes(m.body)))
    return out


def check_acked_and_transactions(broker, records: list[Record], plan: list[dict],
                                 acks: list[dict], retention: bool = False) -> dict:
    """I1 and I3 against the open broker; returns the consumable view."""
    # roll-forward records are written after the redo pass and indexed asynchronously
    if not broker.wait_indexed(30):
        fail("I3", f"the index did not catch up with the log: {broker.stats()}")
    msgs = plan_messages(plan)
    by_offset = {r.log_offset: r for r in records}
    log_start = records[0].log_offset if records else 0
    seen = consumable(broker)

    def expect_consumable_once(mid: str, inv: str, why: str) -> None:
        where = seen.get(mid, [])
        if len(where) != 1:
            fail(inv, f"message {mid} ({why}) is consumable {len(where)} times: {where[:3]}")
        m = msgs[mid]
        body = body_for(mid, m["size"])
        if where[0][3] != body or where[0][0] != m["topic"]:
            fail(inv, f"message {mid} ({why}) is consumable with other bytes or topic")

    # ---- I3 from the log itself
    txs: dict[str, TxView] = {}
    plain: list[str] = []
    referenced: list[str] = []  # ids REF/TX records make visible (committed, or rolled forward)
    for r in records:
        t = r.type
        if t == RecordType.MESSAGE:
            plain.append(message_id(r.body))
        elif t == RecordType.PREPARE:
            v = txs.setdefault(r.tx_id, TxView())
            if r.ref_offset >= 0 and r.ref_offset == v.prepare and not (v.commit or v.rollback):
                # retention relocated the open transaction: the copy counts once whole
                v.relocation = (r.log_offset, r.ref_size, {})
            else:
                v.prepare, v.pres, v.relocation = r.log_offset, {}, None
        elif t == RecordType.PRE_MESSAGE:
            v = txs.setdefault(r.tx_id, TxView())
            if v.relocation is None:
                v.pres[r.log_offset] = message_id(r.body)
            else:
                at, announced, copies = v.relocation
                copies[r.log_offset] = message_id(r.body)
                if len(copies) == announced:
                    if sorted(copies.values()) != sorted(v.pres.values()):
                        fail("I3", f"relocated {r.tx_id} holds other messages than the original")
                    v.prepare, v.pres, v.relocation = at, copies, None
        elif t in (RecordType.REF_MESSAGE, RecordType.TX_MESSAGE):
            v = txs.setdefault(r.tx_id, TxView())
            v.refs[r.ref_offset] += 1
            if t == RecordType.TX_MESSAGE:
                referenced.append(message_id(r.body))
            elif r.ref_offset in by_offset:
                referenced.append(message_id(by_offset[r.ref_offset].body))
            if t == RecordType.TX_MESSAGE and r.ref_offset in v.pres and \
                    message_id(r.body) != v.pres[r.ref_offset]:
                fail("I3", f"TX_MESSAGE at {r.log_offset} copies another body than its PRE_MESSAGE")
        elif t == RecordType.COMMIT:
            txs.setdefault(r.tx_id, TxView()).commit = True
        elif t == RecordType.ROLLBACK:
            txs.setdefault(r.tx_id, TxView()).rollback = True
    open_now = {t.tx_id: t for t in broker._tx.open.values()}
    expected_open = set()
    allowed = set(plain)
    for tx, v in txs.items():
        if v.commit and v.rollback:
            fail("I3", f"transaction {tx} has both COMMIT and ROLLBACK in the log")
        if v.prepare < 0:
            if not retention:
                fail("I2", f"records of transaction {tx} but no PREPARE in the log")
            continue  # its PREPARE was deleted by retention: checked through `referenced`
        if v.commit:
            for off, mid in v.pres.items():
                if v.refs[off] != 1:
                    fail("I3", f"committed {tx}: PRE_MESSAGE {mid}@{off} has {v.refs[off]} REF/TX records")
                expect_consumable_once(mid, "I3", f"of committed transaction {tx}")
                allowed.add(mid)
        elif v.rollback:
            if v.refs:
                fail("I3", f"rolled-back {tx} has REF/TX records")
            for mid in v.pres.values():
                if mid in seen:
                    fail("I3", f"message {mid} of rolled-back {tx} is consumable")
        else:
            if v.refs:
                fail("I3", f"{tx} has REF/TX records but no COMMIT after recovery (no roll-forward)")
            for mid in v.pres.values():
                if mid in seen:
                    fail("I3", f"message {mid} of undecided {tx} is consumable")
            expected_open.add(tx)
            got = open_now.get(tx)
            if got is None:
                fail("I3", f"undecided transaction {tx} is not back in the transaction manager")
            if sorted(m.offset for m in got.messages) != sorted(v.pres):
                fail("I3", f"open transaction {tx} came back with messages at "
                           f"{sorted(m.offset for m in got.messages)}, the log has {sorted(v.pres)}")
    listed = {t["tx_id"] for t in broker.transactions.open_transactions()}
    if listed != expected_open or set(open_now) != expected_open:
        fail("I3", f"open transactions {sorted(listed)}, the log says {sorted(expected_open)}")
    for mid in plain:
        expect_consumable_once(mid, "I1", "sent as a plain message")
    for mid in referenced:
        expect_consumable_once(mid, "I3", "made visible by a REF/TX record")
        allowed.add(mid)
    stray = set(seen) - allowed
    if stray:
        fail("I3", f"consumable messages {sorted(stray)} come from no MESSAGE or committed transaction")

    # ---- I1 from the acknowledgements
    for a in acks:
        op = a.get("op")
        if op == "send":
            for mid, (off, qid, qoff) in zip(a["ids"], a["results"], strict=True):
                if retention and off < log_start:
                    continue
                r = by_offset.get(off)
                m = msgs[mid]
                if r is None or r.type != RecordType.MESSAGE:
                    fail("I1", f"acknowledged message {mid} at log offset {off} is missing")
                if (bytes(r.body) != body_for(mid, m["size"]) or r.topic != m["topic"]
                        or r.queue_id != qid or r.queue_offset != qoff):
                    fail("I1", f"acknowledged message {mid} at {off} is not byte-identical")
                where = seen.get(mid, [])
                if len(where) != 1 or where[0][1:3] != (qid, qoff):
                    fail("I1", f"acknowledged message {mid} is consumable at {where}, "
                               f"acknowledged at {m['topic']}:{qid}:{qoff}")
        elif op in ("prepare", "commit", "rollback"):
            tx = a["tx"]
            v = txs.get(tx)
            if v is None or v.prepare < 0:
                if retention:
                    continue
                fail("I1", f"acknowledged {op} of {tx}: its PREPARE is not in the log")
            if op == "prepare" and not (v.commit or v.rollback or tx in open_now):
                fail("I1", f"acknowledged prepared {tx} is neither open nor ended")
            if op == "commit" and not v.commit:
                fail("I1", f"acknowledged commit of {tx}: no COMMIT record in the log")
            if op == "rollback" and not v.rollback:
                fail("I1", f"acknowledged rollback of {tx}: no ROLLBACK record in the log")
    return seen


# ---------------------------------------------------------------- I1 for offsets


def check_acked_offsets(broker, plan: list[dict], acks: list[dict]) -> None:
    """I1 for consumer offsets: for each (group, topic, queue) the plan commits, the broker's
    committed offset is that of the last acknowledged commit or of a later one of the same
    queue (unacknowledged: it may or may not have become durable); None only when none
    was acknowledged."""
    acked = {a["i"] for a in acks if a.get("op") == "offset"}
    commits: dict[tuple, list[tuple[int, int]]] = {}
    for i, op in enumerate(plan):
        if op["op"] == "offset":
            commits.setdefault((op["group"], op["topic"], op["queue_id"]), []).append(
                (i, op["offset"]))
    for (group, topic, qid), steps in commits.items():
        got = broker.reads.committed_offset(group, topic, qid)
        last = max((n for n, (i, _o) in enumerate(steps) if i in acked), default=None)
        allowed = {o for n, (_i, o) in enumerate(steps) if last is None or n >= last}
        if got is None and last is None:
            continue
        if got not in allowed:
            fail("I1", f"consumer offset of {group}/{topic}/{qid} is {got}; the last "
                       f"acknowledged commit set {steps[last][1] if last is not None else None}"
                       f" (allowed: {sorted(allowed)})")


# ---------------------------------------------------------------- I6


def check_index_matches_rebuild(broker, data_dir: str, config, workdir: str) -> dict:
    """I6: the live index equals one rebuilt from the log. Closes ``broker``."""
    if not broker.wait_indexed(30):
        fail("I6", f"the dispatcher did not catch up: {broker.stats()}")
    live = broker._index.dump()
    broker.close()
    copy = copy_dir(data_dir, os.path.join(workdir, "i6-rebuild"))
    rebuild_index(copy, config)
    store = IndexStore(os.path.join(copy, INDEX_DIR))
    try:
        rebuilt = store.dump()
    finally:
        store.close()
    shutil.rmtree(copy, ignore_errors=True)
    for name in sorted(set(live) | set(rebuilt)):
        a, b = live.get(name, []), rebuilt.get(name, [])
        if a != b:
            only_live = sorted(set(a) - set(b))[:3]
            only_rebuilt = sorted(set(b) - set(a))[:3]
            fail("I6", f"index database {name!r} differs from a rebuild: live-only "
                       f"{only_live}, rebuild-only {only_rebuilt}")
    return live


# ---------------------------------------------------------------- whole-state checks


def without_store_times(dump: dict) -> dict:
    """An index dump with store times zeroed: records a roll-forward writes get the time
    of the recovery that wrote them, which legitimately differs between two recoveries."""
    out = dict(dump)
    if "cq" in out:
        cq = []
        for k, v in out["cq"]:
            f = list(K.CQ_VALUE.unpack(v))
            f[3] = 0
            cq.append((k, K.CQ_VALUE.pack(*f)))
        out["cq"] = cq
    if "time" in out:
        keys = []
        for k, v in out["time"]:
            nul = k.index(0)
            qid, _t, qoff = K.QID_TIME_QOFF.unpack_from(k, nul + 1)
            keys.append((k[:nul], qid, qoff, v))
        out["time"] = sorted(keys)
    return out


def state_of(broker, data_dir: str) -> dict:
    """Everything recovery restores, in comparable form (I5; store times left out)."""
    broker.wait_indexed(30)
    return {
        "log": [record_key(r) for r in log_records(data_dir)],
        "index": without_store_times(broker._index.dump()),
        "open": sorted((t.tx_id, str(t.state), tuple(m.offset for m in t.messages))
                       for t in broker._tx.open.values()),
        "consumable": sorted((mid, tuple(w[:3] for w in where))
                             for mid, where in consumable(broker).items()),
    }


def compare_states(a: dict, b: dict, what: str) -> None:
    for part in ("log", "open", "consumable", "index"):
        if a[part] != b[part]:
            if part == "log":
                la, lb = a["log"], b["log"]
                i = next((i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y),
                         min(len(la), len(lb)))
                detail = (f"first difference at record #{i}: "
                          f"{short(la[i]) if i < len(la) else 'end'} vs "
                          f"{short(lb[i]) if i < len(lb) else 'end'}")
            else:
                detail = f"{str(a[part])[:300]} vs {str(b[part])[:300]}"
            fail("I5", f"{what}: {part} differs; {detail}")


def open_broker(data_dir: str, config):
    try:
        return fmq.Broker.open(data_dir, config)
    except fmq.CorruptLog as exc:
        fail("I4/I1", f"recovery refused a crashed (not damaged) log: {exc}")


def verify_recovery(data_dir: str, plan: list[dict], acks: list[dict], config,
                    workdir: str, reference: list[tuple] | None = None,
                    retention: bool = False, rebuild: bool = True) -> dict:
    """Recover ``data_dir`` and check I1, I2, I3 and I6; returns the recovered state.
    The broker is closed afterwards (cleanly: flush, checkpoint)."""
    broker = open_broker(data_dir, config)
    try:
        records = log_records(data_dir)
        if reference is not None:
            check_prefix(records, reference)
        check_acked_and_transactions(broker, records, plan, acks, retention)
        check_acked_offsets(broker, plan, acks)
        state = state_of(broker, data_dir)
        if rebuild:
            check_index_matches_rebuild(broker, data_dir, config, workdir)
    finally:
        broker.close()
    return state


AFTER_PLAN = [
    {"op": "send", "msgs": [msg("after-a", 700), msg("after-b", 300, "pay")]},
    {"op": "prepare", "tx": "after-tx", "group": "shop", "msgs": [msg("after-t", 400)]},
    {"op": "commit", "tx": "after-tx"},
    {"op": "send", "msgs": [msg("after-c", 2500)]},
    {"op": "send", "msgs": [msg("after-d", 900)]},
]


def verify_crash(data_dir: str, plan: list[dict], acks: list[dict], config_kw: dict,
                 workdir: str, reference: list[tuple] | None = None, *,
                 retention: bool = False, twice: bool = True, append_after: bool = True,
                 after_crash_at: int = 4) -> dict:
    """Everything after a crash: I1, I2, I3, I6 on the crashed dir, then I5 (recovering a
    copy twice, the first time killed right after open, gives the same state; appending
    after recovery, crashing mid-write and recovering again keeps everything)."""
    config = make_config(config_kw)
    raw = copy_dir(data_dir, os.path.join(workdir, "raw")) if twice else None
    state = verify_recovery(data_dir, plan, acks, config, workdir, reference, retention)
    if twice:
        res = recover_and_die(raw, ack_path("twice"), config_kw)
        if not res.killed:
            fail("I5", f"the recover-and-die child did not die as planned: {res.stderr[-2000:]}")
        b = open_broker(raw, config)
        try:
            again = state_of(b, raw)
        finally:
            b.close()
        compare_states(state, again, "recovering twice (the first killed after open)")
        shutil.rmtree(raw, ignore_errors=True)
    if append_after:
        after_path = ack_path("after")
        res = run_plan(data_dir, after_path, AFTER_PLAN, config_kw,
                       arm={"op": "pwrite", "nth": after_crash_at, "mode": "records",
                            "records": 0, "extra": 40})
        if res.returncode not in (0, -9):
            fail("I5", f"appending after recovery failed: {res.stderr[-3000:]}")
        after_acks = read_acks(after_path)
        broker = open_broker(data_dir, config)
        try:
            records = log_records(data_dir)
            keys = [record_key(r) for r in records]
            if keys[: len(state["log"])] != state["log"]:
                fail("I5", "appending after recovery and crashing again changed the "
                           "recovered records")
            check_acked_and_transactions(broker, records, plan + AFTER_PLAN,
                                         acks + after_acks, retention)
            check_index_matches_rebuild(broker, data_dir, config, workdir)
        finally:
            broker.close()
    return state


def reference_run(workdir: str, plan: list[dict], config_kw: dict) -> tuple[list[tuple], int]:
    """Run ``plan`` to completion without a fault; returns its record keys and the number of
    I/O operations CrashingIO counted (with tmp-file writes)."""
    d = os.path.join(workdir, "reference")
    shutil.rmtree(d, ignore_errors=True)
    ref_acks = ack_path("reference")
    res = run_plan(d, ref_acks, plan, config_kw,
                   arm={"op": "none", "nth": 1 << 30, "segments_only": False,
                        "include_tmp": True})
    acks = read_acks(ref_acks)
    if res.returncode != 0 or not acks or acks[-1]["op"] != "closed":
        raise RuntimeError(f"the reference run failed: {res.stderr[-3000:]}")
    keys = [record_key(r) for r in log_records(d)]
    shutil.rmtree(d, ignore_errors=True)
    return keys, acks[-1]["ops"]
