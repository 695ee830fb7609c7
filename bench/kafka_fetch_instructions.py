"""Instructions per message of the Kafka door's Fetch (callgrind), beside FMQ's own PULL of
the same messages, this checkout next to an older one.

Instruction counts hold steady on a shared, noisy machine where the wall clock does not.
One process per checkout runs under ``valgrind --tool=callgrind`` against an embedded
broker (a real log and index in a scratch directory) holding messages produced through the
door (keyless 1 KiB records with their CreateTime, 64 to a Produce batch, spread over 4
queues, as row 7 of docs/performance.md leaves them). Each phase runs once to warm up, then
is measured between two callgrind dumps (a three-line C helper compiled here makes the
client requests) and divided by the messages it read:

* ``fetch``: what row 8's group of 4 makes the server do once the index has the records:
  each member fetches its own partition from offset 0 to the end, as librdkafka does
  (``max.partition.fetch.bytes`` 1 MiB, ``fetch.max.bytes`` 50 MiB): the door's read of
  the partition (``fetch._read_all``, the batch included) and the answer written as the
  server sends it (Fetch's own writer, or kio's in a checkout without one);
* ``fetch_again``: a second group reading the same records the same way (what it costs
  when the records were fetched a moment before);
* ``pull``: FMQ's own consumers reading the same messages: the server's PULL read and
  encoding (``pull_reads.pull_now``, 1 MiB answers, nothing kept between readers).

Not part of the test run::

    python bench/kafka_fetch_instructions.py [--old PATH_OF_AN_OLDER_CHECKOUT] [--messages 8192]
"""

from __future__ import annotations

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._callgrind import compile_dump_helper, run_dumped  # noqa: E402
from bench.ab_rounds import parser, scratch, trees  # noqa: E402

SCRIPT = r"""
import ctypes, json, sys
import fmq
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.index import load_response_schema
from fmq.server.kafka.entities import build
from fmq.server.kafka.fetch import PartitionRead, _answer, _read_all
from fmq.server.kafka.framing import encode_response
from fmq.server.kafka.record_messages import messages_of_records
from fmq.server.ops.pull_answers import encoded_cache
from fmq.server.ops.pull_reads import pull_now

n, data_dir, helper = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dump = ctypes.CDLL(helper).fmq_bench_dump
LIMIT, BATCH, QUEUES = 1 << 24, 64, 4
PARTITION_BYTES, FETCH_BYTES = 1 << 20, 50 << 20
FETCH_ANSWER = load_response_schema(1, 11)
try:  # this checkout's writer of Fetch's answers
    from fmq.server.kafka.fetch_answer import fetch_answer
except ImportError:  # before it: kio's, as for every API
    def fetch_answer(correlation_id, version, values):
        return encode_response(correlation_id, build(FETCH_ANSWER, values))

class Request:  # what _answer reads of a Fetch request
    pass

def produced(topic, queue, first_ts):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i in range(BATCH):
        builder.append(i, timestamp=first_ts + i // 8, key=None, value=b"x" * 1024,
                       headers=[])
    return messages_of_records(bytes(builder.build()), LIMIT, topic, queue)

def fetch_group(broker, topic):
    # each member's fetches of its partition, from offset 0 to the end
    read = 0
    for queue in range(QUEUES):
        offset = 0
        while True:
            r = PartitionRead(topic, queue, offset, PARTITION_BYTES, queue=queue,
                              leader_epoch=0)
            _read_all(broker, [r], FETCH_BYTES)
            if not r.records:
                break
            fetch_answer(1, 11, {
                "throttle_time": 0, "error_code": 0, "session_id": 0,
                "responses": _answer(Request(), [r])})
            count = int.from_bytes(r.records[57:61], "big")
            last = int.from_bytes(r.records[:8], "big") + int.from_bytes(r.records[23:27], "big")
            read += count
            offset = last + 1
    return read

def pull_all(broker, topic):
    read = 0
    cache = encoded_cache()
    for queue in range(QUEUES):
        offset = 0
        while True:
            _items, count, _lo, _hi, _size, resume = pull_now(
                broker, cache, False, topic, queue, offset, 4096, None, PARTITION_BYTES)
            if not count:
                break
            read += count
            offset = resume
    return read

cfg = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0,
                       queues_per_topic=QUEUES)
with fmq.Broker.open(data_dir, cfg) as broker:
    for rnd, count in (("warm", 2 * BATCH * QUEUES), ("measured", n)):
        topic = f"k-{rnd}"
        for i in range(count // BATCH):
            broker.send_batch(produced(topic, i % QUEUES, 1_700_000_000_000 + i * 8))
        assert broker.wait_indexed(60)
        dump()
        read = [fetch_group(broker, topic)]
        dump()
        read.append(fetch_group(broker, topic))
        dump()
        read.append(pull_all(broker, topic))
        dump()
        assert read == [count] * 3, (read, count)
print(json.dumps({"messages": n}))
"""

PHASES = ("fetch", "fetch_again", "pull")


def instructions(tree: str, messages: int, helper: str, scratch_dir: str) -> dict[str, float]:
    """Instructions per message of each phase of ``tree``."""
    data = os.path.join(scratch_dir, "data")
    shutil.rmtree(data, ignore_errors=True)
    # Dumps 1-4 are the warm-up's (1: start-up and producing), 5-8 the measured round's:
    # 6, 7 and 8 end fetch, fetch_again and pull.
    _, totals = run_dumped(tree, SCRIPT, [str(messages), data, helper], scratch_dir, 8)
    measured = [totals[i] for i in (5, 6, 7)]
    return {phase: ir / messages for phase, ir in zip(PHASES, measured, strict=True)}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--messages", type=int, default=8192,
                    help="messages measured per phase, a multiple of 256")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    if args.messages % 256:
        ap.error("--messages must be a multiple of 256 (4 queues, batches of 64)")
    with scratch("fmq-kafka-fetch-instr-") as tmp:
        helper = compile_dump_helper(tmp)
        results = {}
        for name, tree in trees(args.old).items():
            per = instructions(tree, args.messages, helper, tmp)
            results[name] = per
            print(f"{name}: " + ", ".join(f"{phase} {per[phase]:,.0f}" for phase in PHASES)
                  + f" instructions per message; fetch / pull "
                    f"{per['fetch'] / per['pull']:.2f}", flush=True)
        if "old" in results:
            new, old = results["new"], results["old"]
            print("new / old: " + ", ".join(f"{phase} {new[phase] / old[phase]:.2f}"
                                            for phase in PHASES))


if __name__ == "__main__":
    main()
