"""Instructions per message of the send path's checks alone (callgrind), this checkout next
to an older one.

One process per checkout runs under ``valgrind --tool=callgrind`` against an embedded broker
(a real log and index in a scratch directory; its topics created), and each way of checking
runs over the same ``--batches`` batches of 64 messages of 1 KiB between two callgrind dumps,
divided by the messages (an empty loop over the batches is subtracted):

* ``check_messages``: ``Broker.check_messages`` of a SEND_BATCH's messages as the server
  decodes them (what an embedded ``send_batch``, timers, and since issue 41's batch check
  also the session's plain SEND_BATCH run);
* ``each``: the per-message reference (``check_messages_each``; ``check_messages`` in a
  checkout without it);
* ``plain each``: ``Broker.check_plain_message`` of each message (a plain SEND's checks;
  before the batch check, also a plain SEND_BATCH's);
* ``kafka``: a Produce partition's 64 messages as the Kafka door checks them (the engine's
  check told the decoder's largest message; the door's own ``check_produced`` in a checkout
  that had it);
* ``kafka, no hint``: the same messages through ``Broker.check_messages`` alone.

``FMQ_NO_EXTENSIONS=1`` in front measures the pure path. Not part of the test run::

    python bench/check_instructions.py [--old PATH_OF_AN_OLDER_CHECKOUT] [--batches 100]
"""

from __future__ import annotations

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._callgrind import compile_dump_helper, run_dumped  # noqa: E402
from bench.ab_rounds import parser, scratch, trees  # noqa: E402

SCRIPT = r"""
import ctypes, sys
import fmq
from kafka.record.default_records import DefaultRecordBatchBuilder
from fmq.engine import queues as seat
from fmq.protocol import Op, encode_request
from fmq.protocol.message_requests import MESSAGE_DECODERS
from fmq.protocol.values import message_to_wire
from fmq.server.kafka.record_messages import plain_messages_of_records

data_dir, dump, n = sys.argv[1], ctypes.CDLL(sys.argv[2]).fmq_bench_dump, int(sys.argv[3])
wire = [message_to_wire(fmq.Message("own", b"x" * 1024)) for _ in range(64)]
payload = encode_request(Op.SEND_BATCH, 1, {"messages": wire})[16:]
batches = [MESSAGE_DECODERS[Op.SEND_BATCH](payload)["messages"] for _ in range(n)]
builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                    producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                    batch_size=1 << 20)
for i in range(64):
    builder.append(i, timestamp=1_700_000_000_000 + i // 8, key=None, value=b"x" * 1024,
                   headers=[])
records = bytes(builder.build())
partitions = [plain_messages_of_records(records, 1 << 24, "k", 1) for _ in range(n)]
try:  # the Kafka door's own checks of a partition (before the engine's batch check)
    from fmq.server.kafka.produce_checks import check_produced
except ImportError:
    def check_produced(broker, messages, largest):
        broker.check_messages(messages, largest)
each = getattr(seat, "check_messages_each", seat.check_messages)
cfg = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0, queues_per_topic=4)
with fmq.Broker.open(data_dir, cfg) as broker:
    broker.topics.create("own")
    broker.topics.create("k")
    queues = broker._queues
    for messages in batches[:2]:  # warm
        broker.check_messages(messages)
    dump()
    for messages in batches:
        pass
    dump()
    for messages in batches:
        broker.check_messages(messages)
    dump()
    for messages in batches:
        each(messages, cfg, queues)
    dump()
    for messages in batches:
        for message in messages:
            broker.check_plain_message(message)
    dump()
    for messages, largest in partitions:
        check_produced(broker, messages, largest)
    dump()
    for messages, _largest in partitions:
        broker.check_messages(messages)
    dump()
"""
WAYS = ("check_messages", "each", "plain each", "kafka", "kafka, no hint")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--batches", type=int, default=100, help="batches of 64 messages")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    with scratch("fmq-check-instr-") as tmp:
        helper = compile_dump_helper(tmp)
        for name, tree in trees(args.old).items():
            shutil.rmtree(os.path.join(tmp, "data"), ignore_errors=True)
            _out, totals = run_dumped(tree, SCRIPT, [os.path.join(tmp, "data"), helper,
                                                     str(args.batches)], tmp, 2 + len(WAYS))
            loop, counted = totals[1], 64 * args.batches
            print(f"{name}: " + ", ".join(
                f"{way} {(ir - loop) / counted:,.0f}"
                for way, ir in zip(WAYS, totals[2:], strict=True))
                + " instructions per message", flush=True)


if __name__ == "__main__":
    main()
