"""kafkajs (Node's Kafka client, from npm) against ``fmq server --kafka-port``: it creates a
topic, produces records with binary keys and headers, a null value and an empty one
(acks=all), and reads them back through a consumer group that commits
(tests/kafka/kafkajs/roundtrip.js). Every byte is checked here, and a confluent-kafka
consumer reads the same records, so two clients nobody here wrote agree on them.

kafkajs is installed with ``npm install --no-save`` into this run's temporary directory
(npm's own cache makes later runs quick). The test is skipped only when ``node`` or ``npm``
is missing or npm cannot reach its registry (``npm ping`` fails), with npm's reason; any
other failure of the install fails the test."""

from __future__ import annotations

import base64
import json
import pathlib
import shutil
import subprocess

import pytest
from confluent_kafka import Consumer, TopicPartition

SCRIPT_DIR = pathlib.Path(__file__).parent / "kafkajs"
#: What roundtrip.js produces to partition 0, in order: key, value, headers.
EXPECTED = [
    (b"order-1", b"paid", {"bin": b"\x00\xff\x01", "text": "çé".encode()}),
    (None, b"no key", {}),
    (b"tombstone", None, {}),
    (b"empty", b"", {"h": b""}),
    (b"big", b"\x07" * 70000, {}),
]


def _npm(args: list[str], cwd: pathlib.Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["npm", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def kafkajs_dir(tmp_path_factory) -> pathlib.Path:
    """A directory holding roundtrip.js with kafkajs installed beside it."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed (apt-get install nodejs npm): kafkajs "
                    "cannot run")
    work = tmp_path_factory.mktemp("kafkajs")
    for name in ("package.json", "roundtrip.js"):
        shutil.copy(SCRIPT_DIR / name, work / name)
    install = _npm(["install", "--no-save", "--no-package-lock", "--no-audit", "--no-fund",
                    "--loglevel=error"], work, 300)
    if install.returncode != 0:
        ping = _npm(["ping"], work, 60)
        if ping.returncode != 0:
            lines = (ping.stderr or ping.stdout).strip().splitlines()
            reason = "; ".join(line for line in lines if "complete log" not in line)[:300]
            print(f"npm cannot reach its registry: {reason}")
            pytest.skip(f"npm cannot reach its registry ({reason}): kafkajs cannot be "
                        f"installed")
        pytest.fail(f"npm install of kafkajs failed although the registry answers:\n"
                    f"{install.stderr[-3000:]}")
    return work


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def test_kafkajs_produces_and_consumes_through_a_group(kafka_server, kafkajs_dir):
    srv = kafka_server()
    run = subprocess.run(["node", "roundtrip.js", srv.bootstrap, "js-orders", "js-group"],
                         cwd=kafkajs_dir, capture_output=True, text=True, timeout=180,
                         check=False)
    assert run.returncode == 0, f"roundtrip.js failed:\n{run.stderr[-4000:]}"
    report = json.loads(run.stdout.strip().splitlines()[-1])

    assert report["sent"] == [{"partition": 0, "baseOffset": 0}]
    read = sorted(report["read"], key=lambda r: (r["partition"], r["offset"]))
    assert [(r["partition"], r["offset"]) for r in read] == [(0, i) for i in range(5)]
    got = [(_bytes(r["key"]), _bytes(r["value"]),
            {name: _bytes(v) for name, v in r["headers"].items()}) for r in read]
    assert got == EXPECTED
    # The group committed where it stopped: FMQ's consumer group of that name holds it.
    assert {"partition": 0, "offset": 5} in report["committed"]

    # librdkafka reads kafkajs's records byte for byte the same.
    consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("js-orders", 0, 0)])
    seen = []
    try:
        for _ in range(200):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append((msg.key(), msg.value(), dict(msg.headers() or [])))
            if len(seen) == len(EXPECTED):
                break
    finally:
        consumer.close()
    assert seen == EXPECTED
