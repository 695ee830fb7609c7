"""Instructions per message of the Kafka door's Produce and Fetch handling (callgrind), beside
FMQ's own SEND_BATCH, this checkout next to an older one.

Instruction counts hold steady on a shared, noisy machine where the wall clock does not.
One process per checkout runs under ``valgrind --tool=callgrind`` against an embedded
broker (a real log and index in a scratch directory), each phase once to warm up, then
measured between two callgrind dumps (a three-line C helper compiled here makes the
client requests), divided by its messages:

* ``produce``: Produce requests as one librdkafka producer sends them (``acks=all``, 64
  keyless 1 KiB records per batch, their CreateTimes a few per millisecond): the request
  decoded by kio, its records made messages (the door's decoder), checked as Produce
  checks them (``Broker.check_messages`` told the decoder's largest message; in older
  checkouts the door's own ``check_produced``, or ``Broker.check_messages`` alone), placed as the send pipeline does (``Broker.place_requests``), the answer written
  (Produce's own writer, or kio's in a checkout without one), then the log flushed and
  indexed;
* ``send_batch``: FMQ's own SEND_BATCH of 64 messages of 1 KiB, the same steps from the
  server's decode of the payload on (row 2's load of bench/compare.py);
* ``fetch``: what Fetch answers after the index has them: pulls of up to 1 MiB from each
  queue, each made a record batch (the door's encoder), the answer built and encoded by kio;
* ``decode`` and ``encode``: the door's codec alone: the produced batches made messages
  again (nothing placed), and pulls of 64 messages made record batches (nothing read).

The two produce paths place the same number of messages in the same queues, so what
differs between them is the decode, the checks of one property and the answer. Not part of
the test run::

    python bench/kafka_door_instructions.py [--old PATH_OF_AN_OLDER_CHECKOUT] [--messages 8192]
                                            [--steps]

``--steps`` cuts the produce and SEND_BATCH phases into their steps instead (kio's decode,
the door's decode, the checks, ``place_requests``, the answer, the flush and the index),
each step run over every request before the next: where Produce's instructions a message
go beside SEND_BATCH's. SEND_BATCH's checks are given twice: ``Broker.check_messages``
(what an embedded ``send_batch`` and a request that is not plain get) and the session's
(what a plain SEND_BATCH gets after its decoder found each message plain: the same
``Broker.check_messages``; in older checkouts ``Broker.check_plain_message`` of each
message).
"""

from __future__ import annotations

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._callgrind import compile_dump_helper, run_dumped  # noqa: E402
from bench.ab_rounds import parser, scratch, trees  # noqa: E402

PRELUDE = r"""
import ctypes, datetime, json, sys, time
import fmq
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.index import load_request_schema, load_response_schema
from fmq.protocol import Op, encode_request
from fmq.protocol.message_requests import MESSAGE_DECODERS
from fmq.protocol.values import message_to_wire
from fmq.server.kafka.entities import build
from fmq.server.kafka.framing import encode_response, read_request

n, data_dir, helper = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dump = ctypes.CDLL(helper).fmq_bench_dump
LIMIT, BATCH, QUEUES = 1 << 24, 64, 4
try:  # this checkout's door
    from fmq.server.kafka.record_messages import batch_of_messages, messages_of_records
    def door_messages(records, topic, queue):
        return messages_of_records(records, LIMIT, topic, queue)
    def door_batch(messages):
        return batch_of_messages(messages, 0)
    door = "record_messages"
except ImportError:  # before it: decoded, then mapped
    from fmq.server.kafka.mapping import to_record
    from fmq.server.kafka.produce import _messages
    from fmq.server.kafka.records import decode_batches, encode_batch
    def door_messages(records, topic, queue):
        return _messages(topic, queue, decode_batches(records, LIMIT))
    def door_batch(messages):
        base = messages[0].queue_offset
        return encode_batch(base, [(m.queue_offset - base, to_record(m)) for m in messages])
    door = "records+mapping"
try:  # this checkout's decoder, which tells which message is the largest when all are plain
    from fmq.server.kafka.record_messages import plain_messages_of_records
    def door_plain(records, topic, queue):
        return plain_messages_of_records(records, LIMIT, topic, queue)
except ImportError:  # before it: the messages alone
    def door_plain(records, topic, queue):
        return door_messages(records, topic, queue), -1
import inspect
try:  # the door's own checks of a partition (issue 39 item 8, before the engine's)
    from fmq.server.kafka.produce_checks import check_produced
    def door_check(broker, decoded):
        check_produced(broker, *decoded)
except ImportError:
    if "largest" in inspect.signature(fmq.Broker.check_messages).parameters:
        def door_check(broker, decoded):  # the engine's batch check, told the decoder's
            broker.check_messages(*decoded)
    else:  # before both: the send path's checks of every message
        def door_check(broker, decoded):
            broker.check_messages(decoded[0])
try:  # the engine's batch check: the session's plain SEND_BATCH makes it (fmq/server/ops)
    from fmq.engine.queues import check_messages_each
    def session_checks(broker, messages):
        broker.check_messages(messages)
except ImportError:  # before it: each message's topic and record size
    def session_checks(broker, messages):
        for message in messages:
            broker.check_plain_message(message)

def produce_frame(topic, queue, first_ts):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i in range(BATCH):
        builder.append(i, timestamp=first_ts + i // 8, key=None, value=b"x" * 1024,
                       headers=[])
    cls = load_request_schema(0, 9)
    module = sys.modules[cls.__module__]
    request = cls(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
                  topic_data=(module.TopicProduceData(name=topic, partition_data=(
                      module.PartitionProduceData(index=queue, records=bytes(builder.build())),
                  )),))
    from kio.serial import entity_writer
    import io
    out = io.BytesIO()
    header = cls.__header_schema__
    entity_writer(header)(out, header(request_api_key=0, request_api_version=9,
                                      correlation_id=1, client_id="rdkafka"))
    entity_writer(cls)(out, request)
    return out.getvalue()

PRODUCE, PRODUCE_ANSWER = load_request_schema(0, 9), load_response_schema(0, 9)
try:  # this checkout's writer of Produce's answers
    from fmq.server.kafka.produce_answer import produce_answer
except ImportError:  # before it: kio's, as for every API
    def produce_answer(correlation_id, version, values):
        return encode_response(correlation_id, build(PRODUCE_ANSWER, values))
FETCH_ANSWER = load_response_schema(1, 11)

"""

SCRIPT = PRELUDE + r"""
def produce(broker, topic, frames):
    for frame in frames:
        request = read_request(frame, PRODUCE)
        answers = []
        for t in request.topic_data:
            parts = []
            for p in t.partition_data:
                decoded = door_plain(p.records, t.name, p.index)
                door_check(broker, decoded)
                messages = decoded[0]
                results, end, _ = broker.place_requests(messages, [len(messages)], packed=True)
                parts.append({"index": p.index, "error_code": 0,
                              "base_offset": results[0].queue_offset, "log_append_time": None,
                              "log_start_offset": -1, "record_errors": [],
                              "error_message": None})
            answers.append({"name": t.name, "partition_responses": parts})
        produce_answer(1, 9, {"responses": answers, "throttle_time": 0})
    broker.wait_durable(end)
    broker.wait_indexed(60)

def send_batch(broker, payloads):
    decode = MESSAGE_DECODERS[Op.SEND_BATCH]
    for payload in payloads:
        messages = decode(payload)["messages"]
        broker.check_messages(messages)
        results, end, _ = broker.place_requests(messages, [len(messages)], packed=True)
    broker.wait_durable(end)
    broker.wait_indexed(60)

def fetch(broker, topic):
    read = 0
    for queue in range(QUEUES):
        offset = 0
        while True:
            messages = broker.reads.pull(topic, queue, offset, 4096, 1 << 20)
            if not messages:
                break
            records = door_batch(messages)
            offset = messages[-1].queue_offset + 1
            read += len(messages)
            encode_response(1, build(FETCH_ANSWER, {
                "throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
                    {"topic": topic, "partitions": [{
                        "partition_index": queue, "error_code": 0, "high_watermark": offset,
                        "last_stable_offset": offset, "log_start_offset": 0,
                        "aborted_transactions": None, "preferred_read_replica": -1,
                        "records": records}]}]}))
    return read

cfg = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0,
                       queues_per_topic=QUEUES)
counts = {}
with fmq.Broker.open(data_dir, cfg) as broker:
    wire = [message_to_wire(fmq.Message("own", b"x" * 1024)) for _ in range(BATCH)]
    payload = encode_request(Op.SEND_BATCH, 1, {"messages": wire})[16:]
    for rnd, count in (("warm", 2 * BATCH * QUEUES), ("measured", n)):
        topic = f"k-{rnd}"
        frames = [produce_frame(topic, i % QUEUES, 1_700_000_000_000 + i * 8)
                  for i in range(count // BATCH)]
        payloads = [payload] * (count // BATCH)
        dump()
        produce(broker, topic, frames)
        dump()
        send_batch(broker, payloads)
        dump()
        read = fetch(broker, topic)
        dump()
        assert read == count, (read, count)
        records = [read_request(f, PRODUCE).topic_data[0].partition_data[0].records
                   for f in frames]
        dump()
        for data in records:  # the door's decode alone
            door_messages(data, topic, 0)
        dump()
        pulls = [broker.reads.pull(topic, q, o, BATCH) for q in range(QUEUES)
                 for o in range(0, count // QUEUES, BATCH)]
        dump()
        for messages in pulls:  # the door's encode alone
            door_batch(messages)
        dump()
        counts[rnd] = count
print(json.dumps({"door": door, "messages": n}))
"""

#: ``--steps``: the produce and SEND_BATCH phases cut into their steps, each step run over
#: every request before the next one starts (the index thread's work lands in the steps it
#: overlaps, so "place" and "durable" are best read together), the garbage collector off
#: while they run (a collection over the messages the steps hold would land in any one).
STEPS_BODY = r"""
import gc
cfg = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0,
                       queues_per_topic=QUEUES)
send_decode = MESSAGE_DECODERS[Op.SEND_BATCH]
with fmq.Broker.open(data_dir, cfg) as broker:
    wire = [message_to_wire(fmq.Message("own", b"x" * 1024)) for _ in range(BATCH)]
    payload = encode_request(Op.SEND_BATCH, 1, {"messages": wire})[16:]
    for rnd, count in (("warm", 2 * BATCH * QUEUES), ("measured", n)):
        topic = f"k-{rnd}"
        frames = [produce_frame(topic, i % QUEUES, 1_700_000_000_000 + i * 8)
                  for i in range(count // BATCH)]
        payloads = [payload] * (count // BATCH)
        gc.collect()
        gc.disable()  # a collection over the messages held lands in no step
        dump()
        requests = [read_request(f, PRODUCE) for f in frames]
        dump()
        batches = [(p.index, door_plain(p.records, t.name, p.index))
                   for r in requests for t in r.topic_data for p in t.partition_data]
        dump()
        for _, decoded in batches:
            door_check(broker, decoded)
        dump()
        placed = [broker.place_requests(decoded[0], [len(decoded[0])], packed=True)
                  for _, decoded in batches]
        dump()
        for (index, _), (results, end, _) in zip(batches, placed):
            produce_answer(1, 9, {"responses": [
                {"name": topic, "partition_responses": [{
                    "index": index, "error_code": 0, "base_offset": results[0].queue_offset,
                    "log_append_time": None, "log_start_offset": -1, "record_errors": [],
                    "error_message": None}]}], "throttle_time": 0})
        dump()
        broker.wait_durable(end)
        broker.wait_indexed(60)
        dump()
        decoded = [send_decode(p)["messages"] for p in payloads]
        dump()
        for messages in decoded:
            broker.check_messages(messages)
        dump()
        for messages in decoded:  # what the session's plain SEND_BATCH checks instead
            session_checks(broker, messages)
        dump()
        placed = [broker.place_requests(messages, [len(messages)], packed=True)
                  for messages in decoded]
        dump()
        broker.wait_durable(placed[-1][1])
        broker.wait_indexed(60)
        dump()
        gc.enable()
print(json.dumps({"door": door, "messages": n}))
"""
#: The steps of ``--steps``, in the order STEPS_BODY dumps after them.
STEPS = ("produce: kio's request decode", "produce: the door's decode",
         "produce: the checks", "produce: place_requests", "produce: the answer",
         "produce: durable and indexed", "send_batch: decode", "send_batch: check_messages",
         "send_batch: the session's checks", "send_batch: place_requests",
         "send_batch: durable and indexed")

STEPS_SCRIPT = PRELUDE + STEPS_BODY

PHASES = ("produce", "send_batch", "fetch", "decode", "encode")


def instructions(tree: str, messages: int, helper: str, scratch_dir: str,
                 steps: bool = False) -> tuple[str, dict[str, float]]:
    """(the door's decoder, instructions per message of each phase, or of each step with
    ``steps``) of ``tree``."""
    data = os.path.join(scratch_dir, "data")
    shutil.rmtree(data, ignore_errors=True)
    # Each round dumps once before its first phase and once after each one: the warm-up's
    # are 1..per_round (1: start-up too), the measured round's the next per_round, and
    # its phase k (from 1) ends at dump per_round + 1 + k (index per_round + k here).
    names = STEPS if steps else PHASES
    per_round = len(STEPS) + 1 if steps else 8
    ends = range(1, len(STEPS) + 1) if steps else (1, 2, 3, 5, 7)
    stdout, totals = run_dumped(tree, STEPS_SCRIPT if steps else SCRIPT,
                                [str(messages), data, helper], scratch_dir, 2 * per_round)
    door = json.loads(stdout.strip().splitlines()[-1])["door"]
    measured = [totals[per_round + k] for k in ends]
    return door, {name: ir / messages for name, ir in zip(names, measured, strict=True)}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--messages", type=int, default=8192,
                    help="messages measured per phase, a multiple of 256")
    ap.add_argument("--steps", action="store_true",
                    help="the produce and SEND_BATCH phases step by step instead")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    if args.messages % 256:
        ap.error("--messages must be a multiple of 256 (4 queues, batches of 64)")
    with scratch("fmq-kafka-door-instr-") as tmp:
        helper = compile_dump_helper(tmp)
        results = {}
        for name, tree in trees(args.old).items():
            door, per = instructions(tree, args.messages, helper, tmp, args.steps)
            results[name] = per
            if args.steps:
                print(f"{name} ({door}), instructions per message:", flush=True)
                for step, ir in per.items():
                    print(f"  {step:<36} {ir:>9,.0f}", flush=True)
                continue
            print(f"{name} ({door}): " + ", ".join(
                f"{phase} {per[phase]:,.0f}" for phase in PHASES)
                + f" instructions per message; produce / send_batch "
                  f"{per['produce'] / per['send_batch']:.2f}", flush=True)
        if "old" in results and args.steps:
            print("new / old: " + ", ".join(f"{step} {results['new'][step] / ir:.2f}"
                                            for step, ir in results["old"].items()))
        elif "old" in results:
            new, old = results["new"], results["old"]
            print("new / old: " + ", ".join(f"{phase} {new[phase] / old[phase]:.2f}"
                                            for phase in PHASES))


if __name__ == "__main__":
    main()
