"""Sarama (Go's Kafka client, a protocol implementation of its own, as Debian packages it)
against ``fmq server --kafka-port``: it creates a topic, produces records with binary keys
and headers, a null value, an empty one and a 70 000-byte one through an idempotent producer
(acks=all), reads them back through a consumer group that commits, and reads the committed
offsets back (tests/kafka/sarama/roundtrip.go). Every byte is checked here, and FMQ's own
SDK reads the same messages, so a client in another language and FMQ agree on them.

The program is built with ``go build`` from Debian's packages (``golang-go`` and
``golang-github-shopify-sarama-dev``, which .ci/run installs); the test is skipped, saying
so, only where they are not installed. Debian's sarama (1.22) asks for the protocol
versions of Kafka 2.1 without ApiVersions, older ones than the other clients here use; its
compression codecs are Go's own (tests/kafka/sarama/codecs.go)."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import shutil
import subprocess
import time

import pytest

from fmq.client import Consumer

SOURCES = pathlib.Path(__file__).parent / "sarama"
GOPATH = "/usr/share/gocode"
SARAMA = pathlib.Path(GOPATH) / "src" / "github.com" / "Shopify" / "sarama"
#: What roundtrip.go produces to partition 0, in order: key, value, headers.
EXPECTED = [
    (b"order-1", b"paid", {"bin": b"\x00\xff\x01", "text": "çé".encode()}),
    (None, b"no key", {}),
    (b"tombstone", None, {}),
    (b"empty", b"", {"h": b""}),
    (b"big", b"\x07" * 70000, {}),
]


@pytest.fixture(scope="module")
def sarama_programs(tmp_path_factory) -> pathlib.Path:
    """The directory holding roundtrip and codecs, built from tests/kafka/sarama/."""
    if shutil.which("go") is None or not SARAMA.is_dir():
        pytest.skip("go or Debian's sarama is not installed (apt-get install golang-go "
                    "golang-github-shopify-sarama-dev): the Go client cannot be built")
    work = tmp_path_factory.mktemp("sarama")
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": GOPATH,
           "GOCACHE": str(work / "cache"), "GOFLAGS": ""}
    for name in ("roundtrip", "codecs"):
        build = subprocess.run(["go", "build", "-o", str(work / name),
                                str(SOURCES / f"{name}.go")],
                               env=env, capture_output=True, text=True, timeout=600,
                               check=False)
        assert build.returncode == 0, f"go build of {name}.go failed:\n{build.stderr[-4000:]}"
    return work


def _run(program: pathlib.Path, *args: str) -> dict:
    run = subprocess.run([str(program), *args], capture_output=True, text=True, timeout=180,
                         check=False)
    assert run.returncode == 0, f"{program.name} failed:\n{run.stderr[-4000:]}"
    return json.loads(run.stdout.strip().splitlines()[-1])


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def test_sarama_produces_and_consumes_through_a_committing_group(kafka_server,
                                                                sarama_programs):
    srv = kafka_server()
    report = _run(sarama_programs / "roundtrip", srv.bootstrap, "go-orders", "go-group")

    assert report["sent"] == [{"partition": 0, "offset": i} for i in range(5)]
    read = sorted(report["read"], key=lambda r: (r["partition"], r["offset"]))
    assert [(r["partition"], r["offset"]) for r in read] == [(0, i) for i in range(5)]
    got = [(_bytes(r["key"]), _bytes(r["value"]),
            {name: _bytes(v) for name, v in r["headers"].items()}) for r in read]
    assert got == EXPECTED
    # The group committed where it stopped, in FMQ's consumer group of that name.
    assert report["committed"] == {"0": 5, "1": -1}
    # FMQ's own consumer reads what the Go client wrote: keys, bodies, text headers as
    # properties.
    got = []
    with Consumer(srv.address, "go-check", ["go-orders"], start="earliest") as consumer:
        deadline = time.monotonic() + 30
        while len(got) < len(EXPECTED) and time.monotonic() < deadline:
            got += consumer.poll(timeout=0.5)
    assert [(m.queue_id, m.queue_offset, m.key) for m in got] == [
        (0, i, None if k is None else k.decode()) for i, (k, _, _) in enumerate(EXPECTED)]
    assert [m.body for m in got] == [v or b"" for _, v, _ in EXPECTED]
    assert got[0].properties["text"] == "çé"


def test_sarama_s_own_codecs_are_read_back_whole(kafka_server, sarama_programs):
    """Batches compressed by sarama's libraries (Go's gzip, its snappy, lz4 and zstd
    packages, not librdkafka's) are checked, stored and read back record by record."""
    srv = kafka_server()
    report = _run(sarama_programs / "codecs", srv.bootstrap, "go-codecs")
    assert sorted(report) == ["gzip", "lz4", "none", "snappy", "zstd"]
    for codec, records in report.items():
        assert records == [{"offset": i, "value": f"{codec}-{i:03d}-repeated text compresses "
                                                  f"well"} for i in range(50)], codec
