"""What the Kafka group tests share: a real ``fmq server --kafka-port`` process, topics and
messages made through the Kafka door, and group members in child processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.harness import ServerProcess, free_port

MEMBER_SCRIPT = os.path.join(os.path.dirname(__file__), "group_member.py")


class KafkaServer(ServerProcess):
    """A server process with the Kafka door on its own free port."""

    def __init__(self, data_dir: str) -> None:
        self.kafka_port = free_port()
        super().__init__(data_dir, extra_args=("--kafka-port", str(self.kafka_port)))
        self.bootstrap = f"127.0.0.1:{self.kafka_port}"

    def start(self, timeout: float = 30.0) -> KafkaServer:
        super().start(timeout)
        wait_for(lambda: _accepts(self.kafka_port), 30, "the Kafka port to accept")
        return self


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def wait_for(cond: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def make_topic(bootstrap: str, topic: str, partitions: int, per_partition: int) -> set[str]:
    """Create ``topic`` and put ``per_partition`` messages in each partition; their values."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions)]).values():
        future.result(30)
    return produce(bootstrap, topic, partitions, per_partition, "a")


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int,
            tag: str) -> set[str]:
    producer = Producer({"bootstrap.servers": bootstrap})
    values = set()
    for p in range(partitions):
        for i in range(per_partition):
            value = f"{tag}-{p}-{i}"
            producer.produce(topic, value=value.encode(), partition=p)
            values.add(value)
    assert producer.flush(30) == 0
    return values


class Member:
    """One group consumer process (group_member.py) and what it printed."""

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str = "range",
                 limit: int | None = None) -> None:
        self.done = False
        self.proc = subprocess.Popen(
            [sys.executable, MEMBER_SCRIPT, bootstrap, group, topic, strategy,
             *([str(limit)] if limit is not None else [])],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        self.assigned: list[int] = []
        self.messages: list[str] = []
        self.errors: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if "assigned" in event:
                self.assigned = event["assigned"]
            elif "done" in event:
                self.done = True
            elif "msg" in event:
                self.messages.append(event["msg"][2])
            else:
                self.errors.append(line.strip())

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no last commit; the coordinator must notice by itself."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close()

    def _close(self) -> None:
        self._reader.join(10)  # it ends at the closed pipe's end
        if self.proc.stdout is not None:
            self.proc.stdout.close()
