"""Row 8's group of 4 librdkafka consumers against this checkout's server and an older one's,
side by side in one run.

One data directory is filled once (this checkout's embedded broker, the door's own decoder:
keyless 1 KiB records with their CreateTime, 64 to a Produce batch, over 4 queues, as row 7
leaves them). Each round starts the ``fmq server --kafka-port`` of one checkout on it (the
order alternates between rounds) and a new group of 4 (``bench/kafka_load.py``'s
``consume_group``) reads the topic whole; reported per round and as medians: msgs/s from
the group's first message to its last, the server process's CPU microseconds per
message over the whole read (joins included) and its minor page faults per message (fresh
memory the allocator maps for a fetch's buffers), and the four members' own CPU. Not part
of the test run::

    python bench/kafka_group_ab.py --old PATH_OF_AN_OLDER_CHECKOUT [--messages 200000] [--rounds 2]
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.ab_rounds import (  # noqa: E402
    alternate,
    fmq_command,
    killed_at_end,
    parser,
    process_cpu_seconds,
    scratch,
    spread,
    trees,
)
from bench.bench_network import free_port  # noqa: E402
from bench.kafka_load import consume_group  # noqa: E402

TOPIC, QUEUES, BATCH = "row8", 4, 64


def fill(data_dir: str, messages: int) -> None:
    """``messages`` door-made messages in TOPIC, indexed, the broker closed cleanly."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    import fmq
    from fmq.server.kafka.record_messages import messages_of_records

    cfg = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0,
                           queues_per_topic=QUEUES)
    with fmq.Broker.open(data_dir, cfg) as broker:
        for i in range(messages // BATCH):
            builder = DefaultRecordBatchBuilder(magic=2, compression_type=0,
                                                is_transactional=False, producer_id=-1,
                                                producer_epoch=-1, base_sequence=-1,
                                                batch_size=1 << 20)
            for j in range(BATCH):
                builder.append(j, timestamp=1_700_000_000_000 + i * 8 + j // 8, key=None,
                               value=b"x" * 1024, headers=[])
            broker.send_batch(messages_of_records(bytes(builder.build()), 1 << 24, TOPIC,
                                                  i % QUEUES))
        assert broker.wait_indexed(120)


def _listening(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


def minor_faults(pid: int) -> int:
    """The process's minor page faults so far (/proc/PID/stat, field 10)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def one_round(tree: str, data_dir: str, messages: int, group: str) -> dict:
    port, kafka_port = free_port(), free_port()
    log = open(os.path.join(os.path.dirname(data_dir), "server.log"), "a")  # noqa: SIM115
    proc = subprocess.Popen(
        [*fmq_command(tree), "server", "--data-dir", data_dir, "--port", str(port),
         "--kafka-port", str(kafka_port), "--log-level", "WARNING"],
        stdout=log, stderr=log, env=dict(os.environ, PYTHONPATH=tree))
    with killed_at_end(proc):
        if not _listening(kafka_port, 60):
            raise RuntimeError(f"the server of {tree} did not listen on its Kafka port")
        before, faults = process_cpu_seconds(proc.pid), minor_faults(proc.pid)
        r = consume_group(f"127.0.0.1:{kafka_port}", TOPIC, group, QUEUES, messages)
        r["server_us_per_msg"] = 1e6 * (process_cpu_seconds(proc.pid) - before) / messages
        r["faults_per_msg"] = (minor_faults(proc.pid) - faults) / messages
    log.close()
    return r


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    checkouts = trees(args.old)
    messages = args.messages // BATCH * BATCH
    with scratch("fmq-kafka-group-ab-") as tmp:
        data_dir = os.path.join(tmp, "data")
        fill(data_dir, messages)
        runs = iter(range(1_000_000))
        results = alternate(
            list(checkouts), args.rounds,
            lambda name: one_round(checkouts[name], data_dir, messages,
                                   f"g-{name}-{next(runs)}"),
            lambda name, r: (f"{name:4} {r['msgs_per_s']:9,.0f} msgs/s  server CPU "
                             f"{r['server_us_per_msg']:6.2f} us/msg  {r['faults_per_msg']:.3f} "
                             f"faults/msg  consumers' CPU {r['client_us_per_msg']:6.2f} us/msg"))
    for name, rs in results.items():
        print(f"{name:4} {spread(rs, 'msgs_per_s', ',.0f', 'msgs/s')}  server CPU "
              f"{spread(rs, 'server_us_per_msg', '.2f', 'us/msg')}  "
              f"{spread(rs, 'faults_per_msg', '.3f', 'faults/msg')}  consumers' CPU "
              f"{spread(rs, 'client_us_per_msg', '.2f', 'us/msg')}")


if __name__ == "__main__":
    main()
