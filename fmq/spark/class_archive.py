"""A JVM class archive for the Spark jobs' local sessions: ``python -m
fmq.spark.class_archive PATH`` runs the rebuild job once on a small log it writes for the
purpose, in a local session whose JVM records the classes it loads
(``-XX:ArchiveClassesAtExit``, Java's dynamic class data sharing, JDK 13+), and puts the
archive at ``PATH`` once that JVM has exited. A session the job creates later starts from
it when ``FMQ_SPARK_CLASS_ARCHIVE=PATH`` (:func:`fmq.spark.session.local_java_options`):
the JVM maps the classes instead of loading, verifying and linking them one by one, which
is most of the first job's JVM time (docs/spark.md, *A JVM class archive*).

The archive is tied to the Java build and Spark's jars it was made with; a JVM that
cannot use it (after an upgrade) starts without it, so make it again then. The JVM writes
the archive as it exits, so it is written under a name of this process's own and renamed
into place: two makers at once never leave a half archive at ``PATH``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from pyspark import SparkContext

from fmq.config import BrokerConfig
from fmq.engine.broker import Broker
from fmq.message import Message
from fmq.spark.rebuild import run_rebuild
from fmq.spark.session import LOCAL_JAVA_OPTIONS, QUIET_CLASS_SHARING, spark_session
from fmq.spark.source import register
from fmq.tx.state import TxState

#: How long the maker waits for the JVM to write the archive and exit.
JVM_EXIT_TIMEOUT_S = 300.0


def write_sample_log(data_dir: str) -> None:
    """A small log with every kind of record the rebuild derives something from: plain
    messages with keys, a committed, a rolled-back and an open transaction, a consumer
    offset."""
    config = BrokerConfig(segment_size=16 << 20, checkpoint_interval_ms=0,
                              retention_interval_ms=0)
    with Broker.open(data_dir, config) as broker:
        for i in range(200):
            broker.send(Message("sample", b"x" * 100, key=f"k{i % 7}", tags="t"))
        tx = broker.transactions
        done = tx.prepare([Message("sample", b"y" * 300)], "sample-group")
        assert tx.commit(done, "sample-group") == TxState.COMMIT
        undone = tx.prepare([Message("sample", b"z")], "sample-group")
        tx.rollback(undone, "sample-group")
        tx.prepare([Message("sample", b"open")], "sample-group")
        broker.offsets.commit("sample-readers", [("sample", 0, 1)])


def _stop_jvm() -> None:
    """Stop the session's JVM and wait for it to exit (it writes the archive then): the
    gateway's JVM exits when its standard input closes."""
    gateway = SparkContext._gateway  # noqa: SLF001 - pyspark keeps its JVM there
    proc = getattr(gateway, "proc", None)
    if gateway is not None:
        gateway.shutdown()
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=JVM_EXIT_TIMEOUT_S)


def make_class_archive(path: str, master: str = "local[1]") -> int:
    """Run the rebuild once with class recording on; returns the archive's size in
    bytes. Must run in a process without a Spark session (the JVM is the one it starts)."""
    if SparkContext._active_spark_context is not None:  # noqa: SLF001
        raise RuntimeError("make the class archive in a process of its own: this one "
                           "already runs a Spark session, whose JVM would record nothing")
    path = os.path.abspath(path)
    if any(c.isspace() for c in path):
        raise ValueError(f"{path!r} holds a space: Spark splits the JVM options at spaces")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    recording = f"{path}.{os.getpid()}.tmp"
    work = tempfile.mkdtemp(prefix="fmq-class-archive-")
    try:
        data_dir = os.path.join(work, "data")
        write_sample_log(data_dir)
        spark, _created = spark_session(
            master, app_name="fmq-class-archive",
            java_options=f"{LOCAL_JAVA_OPTIONS} -XX:ArchiveClassesAtExit={recording} "
                         f"{QUIET_CLASS_SHARING}")
        run_rebuild(data_dir, master, os.path.join(work, "index"))
        register(spark)  # the data source's classes too
        spark.read.format("fmq").load(data_dir).select("offset").count()
        spark.stop()
        _stop_jvm()
        if not os.path.isfile(recording) or os.path.getsize(recording) == 0:
            raise RuntimeError("the JVM wrote no class archive (Java 13 or later is needed: "
                               "java -version)")
        os.replace(recording, path)
        return os.path.getsize(path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if os.path.exists(recording):
            os.unlink(recording)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fmq.spark.class_archive",
        description="Make the JVM class archive FMQ_SPARK_CLASS_ARCHIVE names.")
    parser.add_argument("path", help="where the archive goes (e.g. ~/.cache/fmq/spark.jsa)")
    parser.add_argument("--master", default="local[1]")
    args = parser.parse_args(argv)
    size = make_class_archive(os.path.expanduser(args.path), args.master)
    print(f"class archive {args.path}: {size / 1e6:.0f} MB; use it with "
          f"FMQ_SPARK_CLASS_ARCHIVE={args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
