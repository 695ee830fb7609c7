"""The Spark session the rebuild job runs in: the active one, or a new one on the master
the caller or ``spark-submit`` chose; and the URIs of the local paths it reads and writes."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from fmq.errors import InvalidArgument

#: JVM options of a local session the job creates (unless the caller gives its own).
LOCAL_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
#: Names a JVM class archive (Java's class data sharing) for a local session the job
#: creates; used when the file exists, made by ``python -m fmq.spark.class_archive PATH``
#: (docs/spark.md, *A JVM class archive*).
CLASS_ARCHIVE_ENV = "FMQ_SPARK_CLASS_ARCHIVE"
#: Keeps the JVM's class-sharing warnings (a stale archive after a Java or Spark upgrade:
#: the JVM starts without it) off stdout, where the job's output goes.
QUIET_CLASS_SHARING = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: The Python daemon of a session the job creates: pyspark imported from the installed
#: package, not compiled from pyspark.zip in every worker (fmq/spark/worker_daemon.py).
DAEMON_MODULE = "fmq.spark.worker_daemon"


def local_java_options() -> str:
    """The JVM options of a local session the job creates: no optimising compiler, and
    the class archive :data:`CLASS_ARCHIVE_ENV` names when that file exists."""
    archive = os.environ.get(CLASS_ARCHIVE_ENV, "")
    if not archive or not os.path.isfile(archive):
        return LOCAL_JAVA_OPTIONS
    if any(c.isspace() for c in archive):
        raise InvalidArgument(f"{CLASS_ARCHIVE_ENV} {archive!r} holds a space: Spark splits "
                              f"the JVM options at spaces; use a path without one")
    return (f"{LOCAL_JAVA_OPTIONS} -XX:SharedArchiveFile={os.path.abspath(archive)} "
            f"{QUIET_CLASS_SHARING}")


def _java_options_given() -> bool:
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    return "driver-java-options" in submit_args or "extraJavaOptions" in submit_args


def _under_spark_submit() -> bool:
    # spark-submit starts the JVM first and hands its port to the Python driver.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _daemon_module_given() -> bool:
    if "spark.python.daemon.module" in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        return True
    if _under_spark_submit():
        from pyspark import SparkConf

        return SparkConf().contains("spark.python.daemon.module")
    return False


def spark_session(master: str | None, app_name: str = "fmq-index-rebuild",
                  java_options: str | None = None) -> tuple[SparkSession, bool]:
    """(session, created): the active session if there is one, else a new one on
    ``master`` (None: the master spark-submit was given, else ``local[*]``);
    ``java_options``: the JVM options of a new local session instead of
    :func:`local_java_options`."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    if master is None and not _under_spark_submit():
        master = "local[*]"
    if master is not None and master.startswith("local"):
        # Executors are local Python workers: they must run this interpreter (which has
        # fmq installed), and a host name that does not resolve must not stall startup.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    if not _daemon_module_given():
        # fmq is installed wherever the job's Python runs (docs/spark.md, Install).
        builder = builder.config("spark.python.daemon.module", DAEMON_MODULE)
    if master is not None and master.startswith("local"):
        # No web UI for a local job: it costs a second of start-up and nobody browses it.
        builder = builder.config("spark.ui.enabled", "false")
        if not _java_options_given():
            # The JVM only moves Arrow batches here (Python does the work): its optimising
            # compiler costs more CPU at start-up than it ever saves (measured: session
            # start and first job 15-25% faster on 2 cores; docs/spark.md, Throughput).
            builder = builder.config("spark.driver.extraJavaOptions",
                                     java_options or local_java_options())
    session = builder.getOrCreate()
    # Spark's default of 200 shuffle partitions turns every aggregation into 200 tasks
    # (and 200 Python workers where a Python function follows); the job's shuffles are
    # small next to its input, so one partition per core is plenty. A session the caller
    # created keeps its own setting.
    if not session.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        session.conf.set("spark.sql.shuffle.partitions",
                         str(max(2, session.sparkContext.defaultParallelism)))
    return session, True


def file_uri(path: str) -> str:
    """``path`` as a ``file://`` URI, so Spark reads and writes the local file system
    whatever its default file system is."""
    return "file://" + os.path.abspath(path)
