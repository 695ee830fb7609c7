"""Deterministic workloads for the fault tests: a *plan* (a list of JSON-able operations)
run by a child process (:mod:`tests.workloads.plan_writer`) against a real broker,
acknowledging each completed operation to an fsync'd side file
(:class:`tests.crashkit.AckLog`).

Every message carries a unique id at the start of its body (``body_for``), so the
checker can tell each message apart wherever it ends up (a MESSAGE, a PRE_MESSAGE, the
TX_MESSAGE copy a commit wrote, or the body a REF_MESSAGE points to).

Operations:

=============  ===================================================================
``send``       ``msgs``: one or more messages, sent with ``send_batch``; ack: their results
``prepare``    ``tx``, ``group``, ``msgs``; ack once PREPARE + PRE_MESSAGEs are durable
``commit``     ``tx``; ack once the COMMIT is durable
``rollback``   ``tx``; ack once the ROLLBACK is durable
``checkpoint`` write a checkpoint
``retention``  run retention (the config must set a retention limit)
``offset``     ``group``, ``topic``, ``queue_id``, ``offset``: commit a consumer offset
               (the plan keeps it within the queue); ack once it is durable
=============  ===================================================================

A message is ``{"id": str, "size": int, "topic": str, "key": str|None, "queue_id": int}``.
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import os
import random
import shutil
import tempfile

from tests.crashkit import ChildResult, run_child

TOPICS = ("orders", "pay")
GROUP = "shop"
#: The index writer the fault tests' brokers use (``FMQ_INDEX_WRITER=process`` runs the
#: suite against the indexer process; CI runs a subset so, see ``PROCESS_WRITER``).
INDEX_WRITER = os.environ.get("FMQ_INDEX_WRITER", "thread")


def body_for(mid: str, size: int) -> bytes:
    """The deterministic body of message ``mid``: its id, a bar, then pseudo-random bytes."""
    head = mid.encode() + b"|"
    block = hashlib.blake2b(mid.encode(), digest_size=16).digest()
    out = bytearray(head)
    while len(out) < size:
        block = hashlib.blake2b(block, digest_size=64).digest()
        out += block
    return bytes(out[: max(size, len(head))])


def message_id(body: bytes) -> str:
    return bytes(body).split(b"|", 1)[0].decode()


def config_kwargs(**overrides) -> dict:
    """The small configuration the exhaustive tests use (16 KiB segments: rolls happen)."""
    cfg = dict(segment_size=16 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
               retention_interval_ms=0, tx_check_after_ms=100, queues_per_topic=2,
               dispatch_batch=8, index_writer=INDEX_WRITER)
    cfg.update(overrides)
    return cfg


def make_config(kwargs: dict):
    import fmq

    return fmq.BrokerConfig(**kwargs)


def msg(mid: str, size: int, topic: str = "orders", key: str | None = None,
        queue_id: int | None = None) -> dict:
    return {"id": mid, "size": size, "topic": topic, "key": key, "queue_id": queue_id}


def small_plan() -> list[dict]:
    """Plain sends and transactions (commit, rollback, one left open, one committed from
    an older segment), a checkpoint, and enough bytes for a segment roll at 16 KiB."""
    return [
        {"op": "send", "msgs": [msg("m0", 1500, key="k0"), msg("m1", 900, "pay")]},
        {"op": "prepare", "tx": "tx1", "group": GROUP,
         "msgs": [msg("t1a", 100), msg("t1b", 700, "pay", key="kt")]},
        {"op": "send", "msgs": [msg("m2", 1200, queue_id=1)]},
        {"op": "commit", "tx": "tx1"},
        {"op": "prepare", "tx": "tx2", "group": GROUP, "msgs": [msg("t2a", 500)]},
        {"op": "rollback", "tx": "tx2"},
        {"op": "prepare", "tx": "tx3", "group": GROUP,
         "msgs": [msg("t3a", 800), msg("t3b", 50, "pay")]},
        {"op": "checkpoint"},
        {"op": "send", "msgs": [msg("m3", 2500), msg("m4", 2000, "pay", key="k4")]},
        {"op": "send", "msgs": [msg("m5", 3000)]},
        {"op": "send", "msgs": [msg("m6", 2200, queue_id=0)]},
        {"op": "commit", "tx": "tx3"},  # its PRE_MESSAGEs lie in the previous segment
        {"op": "prepare", "tx": "tx4", "group": GROUP, "msgs": [msg("t4a", 400)]},
        {"op": "send", "msgs": [msg("m7", 300), msg("m8", 300, "pay")]},
        {"op": "checkpoint"},
        {"op": "prepare", "tx": "tx5", "group": GROUP, "msgs": [msg("t5a", 600)]},
    ]


def offsets_plan(rounds: int = 6) -> list[dict]:
    """Sends to fixed queues and, after each round, consumer-offset commits of two groups
    (each queue's offset rising), checkpoints, and a segment roll at 16 KiB."""
    plan: list[dict] = []
    for r in range(rounds):
        plan.append({"op": "send", "msgs": [msg(f"o{r}.{q}", 900, "orders", queue_id=q)
                                            for q in (0, 1)]})
        for group in ("billing", "audit"):
            for q in (0, 1):
                plan.append({"op": "offset", "group": group, "topic": "orders",
                             "queue_id": q, "offset": r + 1 - (group == "audit")})
        if r % 3 == 2:
            plan.append({"op": "checkpoint"})
    return plan


def random_plan(rng: random.Random, n_ops: int, prefix: str = "", max_size: int = 3000,
                retention: bool = False) -> list[dict]:
    """A random plan of ``n_ops`` operations; ids start with ``prefix`` (unique per run)."""
    plan: list[dict] = []
    open_txs: list[str] = []
    counter = 0

    def new_msg() -> dict:
        nonlocal counter
        counter += 1
        return msg(f"{prefix}m{counter}", rng.randint(10, max_size), rng.choice(TOPICS),
                   key=rng.choice([None, None, "ka", "kb"]),
                   queue_id=rng.choice([None, None, 0, 1]))

    for i in range(n_ops):
        r = rng.random()
        if r < 0.45:
            plan.append({"op": "send", "msgs": [new_msg() for _ in range(rng.randint(1, 3))]})
        elif r < 0.65 and len(open_txs) < 4:
            tx = f"{prefix}tx{i}"
            open_txs.append(tx)
            plan.append({"op": "prepare", "tx": tx, "group": GROUP,
                         "msgs": [new_msg() for _ in range(rng.randint(1, 3))]})
        elif r < 0.85 and open_txs:
            tx = open_txs.pop(rng.randrange(len(open_txs)))
            plan.append({"op": rng.choice(["commit", "commit", "rollback"]), "tx": tx})
        elif r < 0.93:
            plan.append({"op": "checkpoint"})
        elif retention:
            plan.append({"op": "retention"})
        else:
            plan.append({"op": "checkpoint"})
    return plan


def bulk_messages(producers: int, per_producer: int, transactions: int
                  ) -> tuple[dict[int, list[dict]], dict[str, list[dict]]]:
    """Deterministic messages for threaded writers: per producer, and per transaction."""
    sends = {p: [msg(f"p{p}.{k}", 200 + (p * 37 + k * 11) % 900, TOPICS[p % 2])
                 for k in range(per_producer)] for p in range(producers)}
    txs = {f"x.{k}": [msg(f"x.{k}.{j}", 120 + 40 * j, "pay") for j in range(2)]
           for k in range(transactions)}
    return sends, txs


def plan_messages(plan: list[dict]) -> dict[str, dict]:
    """Every message of the plan by id."""
    out = {}
    for op in plan:
        for m in op.get("msgs", ()):
            out[m["id"]] = m
    return out


def to_message(m: dict):
    import fmq

    return fmq.Message(m["topic"], body_for(m["id"], m["size"]), key=m["key"],
                       queue_id=m["queue_id"])


def execute(broker, plan: list[dict], ack, start: int = 0, ack_early: bool = False) -> None:
    """Run ``plan[start:]`` on ``broker``; ``ack(**event)`` after each acknowledged step.

    ``ack_early`` (a deliberately broken writer, for control tests): each send is
    acknowledged *before* the broker is asked to store it, as a broker acknowledging
    before its fsync would."""
    for i, op in enumerate(plan[start:], start):
        kind = op["op"]
        if kind == "send" and ack_early:
            head = broker._log.next_offset
            ack(i=i, op="send", ids=[op["msgs"][0]["id"]],
                results=[[head, op["msgs"][0]["queue_id"] or 0, -1]])
            broker.send_batch([to_message(m) for m in op["msgs"]])
        elif kind == "send":
            results = broker.send_batch([to_message(m) for m in op["msgs"]])
            ack(i=i, op="send", ids=[m["id"] for m in op["msgs"]],
                results=[[r.offset, r.queue_id, r.queue_offset] for r in results])
        elif kind == "prepare":
            broker.transactions.prepare([to_message(m) for m in op["msgs"]], op["group"],
                                        tx_id=op["tx"])
            ack(i=i, op="prepare", tx=op["tx"])
        elif kind == "commit":
            state = broker.transactions.commit(op["tx"])
            ack(i=i, op="commit", tx=op["tx"], state=str(state))
        elif kind == "rollback":
            state = broker.transactions.rollback(op["tx"])
            ack(i=i, op="rollback", tx=op["tx"], state=str(state))
        elif kind == "checkpoint":
            broker.checkpoint()
            ack(i=i, op="checkpoint")
        elif kind == "retention":
            deleted = broker.enforce_retention()
            ack(i=i, op="retention", deleted=deleted)
        elif kind == "offset":
            broker.offsets.commit(op["group"], [(op["topic"], op["queue_id"], op["offset"])])
            ack(i=i, op="offset")
        else:
            raise ValueError(f"unknown plan operation {kind}")


def run_plan(data_dir: str, ack_path: str, plan: list[dict], config: dict,
             arm: dict | None = None, **extra) -> ChildResult:
    """Run ``plan`` in a child process (armed to crash at ``arm``, see CrashingIO.arm);
    ``extra`` are the other parameters of :mod:`tests.workloads.plan_writer`."""
    return run_child("plan_writer", data_dir, ack_path, plan=plan, config=config, arm=arm,
                     **extra)


def recover_and_die(data_dir: str, ack_path: str, config: dict) -> ChildResult:
    """Recover ``data_dir`` in a child that SIGKILLs itself once the index caught up
    (:mod:`tests.workloads.recover_and_die`)."""
    return run_child("recover_and_die", data_dir, ack_path, config=config)


_ACK_DIR: str | None = None
_ACK_SEQ = itertools.count()


def ack_path(name: str = "acks") -> str:
    """A fresh path for a child's acknowledgement file, on /dev/shm when there is one.

    The child fsyncs every line (the harness's contract); on tmpfs that costs nothing, and
    a SIGKILL keeps the lines either way. The data dirs stay on the real disk.
    """
    global _ACK_DIR
    if _ACK_DIR is None:
        root = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        _ACK_DIR = tempfile.mkdtemp(prefix="fmq-acks-", dir=root)
        atexit.register(shutil.rmtree, _ACK_DIR, True)
    return os.path.join(_ACK_DIR, f"{next(_ACK_SEQ)}-{name}")


def copy_dir(src: str, dst: str) -> str:
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    return dst
