"""A Kafka group consumer in its own process (confluent-kafka), for the group tests: it
subscribes, prints its assignment as a JSON line after every rebalance, and prints each
message only after committing past it (synchronously), so what it printed is committed.

    python group_member.py BOOTSTRAP GROUP TOPIC STRATEGY [LIMIT]

With LIMIT it stops reading after that many messages (all committed), says so, and waits
to be killed: a crash with nothing in flight.
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

RUN_FOR_S = 120  # bounded: the test kills or outlives it long before


def say(**line: object) -> None:
    print(json.dumps(line), flush=True)


def main() -> None:
    bootstrap, group, topic, strategy = sys.argv[1:5]
    limit = int(sys.argv[5]) if len(sys.argv) > 5 else None
    read = 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         "partition.assignment.strategy": strategy})
    owned: set[int] = set()

    def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
        owned.update(p.partition for p in parts)
        say(assigned=sorted(owned))

    def on_revoke(c: Consumer, parts: list[TopicPartition]) -> None:
        owned.difference_update(p.partition for p in parts)
        say(assigned=sorted(owned))

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    deadline = time.monotonic() + RUN_FOR_S
    while time.monotonic() < deadline:
        if read == limit:
            say(done=read)
            time.sleep(RUN_FOR_S)  # heartbeats go on in librdkafka's threads
            break
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            say(error=msg.error().name())
            continue
        try:
            consumer.commit(offsets=[TopicPartition(topic, msg.partition(), msg.offset() + 1)],
                            asynchronous=False)
        except KafkaException as exc:
            say(commit_failed=exc.args[0].name())
            continue  # not committed: it will come again, so it is not reported
        read += 1
        say(msg=[msg.partition(), msg.offset(), msg.value().decode()])
    consumer.close()


if __name__ == "__main__":
    main()
