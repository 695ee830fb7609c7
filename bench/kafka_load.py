"""Kafka clients as load for bench/compare.py's Kafka rows (docs/performance.md): a
librdkafka producer and a librdkafka consumer group (confluent-kafka), each in processes of
their own so that the bench process's interpreter never paces them.

* :func:`produce`: one ``Producer`` as a Kafka user runs it, with librdkafka's own
  batching: ``acks=all`` and librdkafka's defaults otherwise (``linger.ms`` 5,
  ``batch.size`` 1,000,000 bytes, ``batch.num.messages`` 10,000, no compression), keyless
  1 KiB values (librdkafka's sticky partitioner fills one partition's batch at a time).
  ``--batch-size`` sets ``batch.size`` instead (the rows before 2026-11-29's fifth pass
  ran 64 KiB). It produces as fast as
  librdkafka takes messages for ``seconds`` (a closed loop: a full local queue waits for
  deliveries), then flushes. Reported: delivered msgs/s over the whole run, flush included,
  and the p99 of librdkafka's own produce-to-delivery latency (``Message.latency()``).
* :func:`consume_group`: ``members`` consumers of one group subscribe to a topic that
  already holds ``expected`` messages and read until the group has them all (``auto.offset
  .reset=earliest``, auto-commit on, librdkafka's defaults otherwise). The rate counts from
  the group's first message to its last: the join and rebalance before are not reading.
  Also reported: the members' own CPU (their librdkafka threads included) per message, so
  a run can tell when the clients, which share the machine with the server, pace it.

Run alone (prints one JSON line)::

    python bench/kafka_load.py produce --bootstrap 127.0.0.1:9092 --topic t --seconds 5
    python bench/kafka_load.py consume --bootstrap 127.0.0.1:9092 --topic t --expected N
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue
import statistics
import time

#: The producer's settings: acks=all, and librdkafka's own batching (its defaults).
PRODUCER_CONFIG = {"acks": "all"}
#: How long a consumer waits with nothing to read, once it has read, before it stops.
CONSUMER_IDLE_S = 3.0
#: The longest a run may take beyond its own length (joins, flush) before it is a failure.
SLACK_S = 120.0


def _producer(bootstrap: str, topic: str, seconds: float, size: int, batch_size: int | None,
              out: mp.Queue) -> None:
    from confluent_kafka import KafkaException, Producer

    latencies: list[float] = []
    errors: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            latencies.append(msg.latency())

    settings = dict(PRODUCER_CONFIG)
    if batch_size is not None:
        settings["batch.size"] = batch_size
    producer = Producer({"bootstrap.servers": bootstrap, **settings})
    value = b"x" * size
    producer.list_topics(topic, timeout=30)  # connected, topic known: the clock starts here
    produced = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        try:
            producer.produce(topic, value, on_delivery=delivered)
            produced += 1
        except BufferError:  # librdkafka's queue is full: wait for deliveries
            producer.poll(0.001)
            continue
        if produced % 1000 == 0:
            producer.poll(0)
    left = producer.flush(SLACK_S)
    elapsed = time.perf_counter() - start
    if left:
        raise KafkaException(f"{left} messages were not delivered within {SLACK_S:.0f} s")
    latencies.sort()
    out.put({"produced": produced, "delivered": len(latencies), "errors": len(errors),
             "first_error": errors[0] if errors else None, "elapsed_s": elapsed,
             "msgs_per_s": len(latencies) / elapsed,
             "p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1e3 if latencies else 0.0})


def _consumer(bootstrap: str, topic: str, group: str, expected: int, go: mp.Event,
              out: mp.Queue) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    go.wait(SLACK_S)
    cpu = time.process_time()  # the member's own CPU (librdkafka's threads included)
    count, first, last = 0, None, None
    seen: set[tuple[int, int]] = set()
    deadline = time.monotonic() + SLACK_S
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        msgs = consumer.consume(1000, 0.2)
        now = time.perf_counter()
        if not msgs:
            if count and time.monotonic() - idle_since > CONSUMER_IDLE_S:
                break
            continue
        idle_since = time.monotonic()
        first = first if first is not None else now
        last = now
        for m in msgs:
            if m.error() is None:
                count += 1
                seen.add((m.partition(), m.offset()))
        if count >= expected:
            break
    consumer.close()
    out.put({"count": count, "distinct": sorted(seen), "first": first, "last": last,
             "cpu_s": time.process_time() - cpu})


def produce(bootstrap: str, topic: str, seconds: float, size: int = 1024,
            batch_size: int | None = None) -> dict:
    """One librdkafka producer (a process of its own) for ``seconds``; its report.
    ``batch_size``: librdkafka's ``batch.size`` (None: its default)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_producer, args=(bootstrap, topic, seconds, size, batch_size, out),
                       daemon=True)
    proc.start()
    try:
        return out.get(timeout=seconds + SLACK_S)
    except queue.Empty:
        raise RuntimeError(f"the librdkafka producer did not report (exit code {proc.exitcode}); see its output") from None
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def consume_group(bootstrap: str, topic: str, group: str, members: int, expected: int
                  ) -> dict:
    """A group of ``members`` librdkafka consumers reads ``expected`` messages of
    ``topic``; msgs/s from the group's first message to its last."""
    ctx = mp.get_context("spawn")
    out, go = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_consumer, args=(bootstrap, topic, group, expected, go, out),
                         daemon=True) for _ in range(members)]
    for p in procs:
        p.start()
    go.set()
    try:
        parts = [out.get(timeout=SLACK_S + 60) for _ in procs]
    except queue.Empty:
        raise RuntimeError("a consumer of the group did not report") from None
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    distinct = set()
    for part in parts:
        distinct.update(map(tuple, part["distinct"]))
    read = [p for p in parts if p["first"] is not None]
    if len(distinct) != expected:
        raise RuntimeError(f"the group read {len(distinct)} distinct messages, not the "
                           f"{expected} the topic holds")
    span = max(p["last"] for p in read) - min(p["first"] for p in read)
    return {"msgs_per_s": expected / span if span > 0 else 0.0, "members_reading": len(read),
            "read": sum(p["count"] for p in parts),
            "per_member": statistics.median(p["count"] for p in parts),
            "client_us_per_msg": 1e6 * sum(p["cpu_s"] for p in parts) / expected}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["produce", "consume"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=None,
                    help="the producer's batch.size (default: librdkafka's)")
    ap.add_argument("--group", default="bench-group")
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--expected", type=int, default=0)
    args = ap.parse_args()
    if args.kind == "produce":
        print(json.dumps(produce(args.bootstrap, args.topic, args.seconds, args.size,
                                 args.batch_size)))
    else:
        print(json.dumps(consume_group(args.bootstrap, args.topic, args.group, args.members,
                                       args.expected)))


if __name__ == "__main__":
    main()
