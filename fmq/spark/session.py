"""The Spark session the rebuild job runs in: the active one, or a new one on the master
the caller or ``spark-submit`` chose; and the URIs of the local paths it reads and writes."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

#: JVM options of a local session the job creates (unless the caller gives its own).
LOCAL_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
#: The Python daemon of a session the job creates: pyspark imported from the installed
#: package, not compiled from pyspark.zip in every worker (fmq/spark/worker_daemon.py).
DAEMON_MODULE = "fmq.spark.worker_daemon"


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


def spark_session(master: str | None, app_name: str = "fmq-index-rebuild"
                  ) -> tuple[SparkSession, bool]:
    """(session, created): the active session if there is one, else a new one on
    ``master`` (None: the master spark-submit was given, else ``local[*]``)."""
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
            builder = builder.config("spark.driver.extraJavaOptions", LOCAL_JAVA_OPTIONS)
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
