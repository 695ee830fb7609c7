"""Spark jobs writing to ``fmq-topic`` in their own local session (a child process: the
test session's shared one allows no task retry and must not be stopped).

``python -m tests.spark.sink_jobs retry ADDRESS TOPIC ROWS``: a batch write of ``ROWS``
rows in 3 partitions on ``local[2,3]`` (three attempts per task) where attempt 0 of
partition 0 fails in the middle of its rows and attempt 0 of partition 1 fails after it
prepared its transaction (its commit message never reaches the driver, as when an executor
is lost).

``python -m tests.spark.sink_jobs stream ADDRESS SOURCE DEST CHECKPOINT [FAIL_AFTER]``: the
pipeline of docs/spark.md: read ``SOURCE`` as a stream, upper-case the bodies, write them
to ``DEST`` exactly once, ``availableNow``, 50 messages per micro-batch. With
``FAIL_AFTER`` the sink's driver commit of that batch raises after it committed, before
Spark's commit log records the batch (as a driver killed there): the process exits 3 and
a restart runs the batch again.

``python -m tests.spark.sink_jobs lost-sweep ADDRESS TOPIC ROWS LOCAL_DIR``: a batch write
of ``ROWS`` rows in 3 partitions on ``local[2,3]`` where attempt 0 of partition 1 is lost
after its prepare (as in ``retry``), and the driver is killed with SIGKILL (itself, its JVM
and every Python worker: the whole session the test started it in) between the write's end
mark and its sweep, leaving that attempt's transaction open. The variable
``FMQ_SINK_KILL_BEFORE_SWEEP`` names a file the driver's commit writes just before the
kill; the process must lead its own session (``start_new_session``), so that nothing
outside it is killed.

``python -m tests.spark.sink_jobs lost-decision ADDRESS TOPIC ROWS LOCAL_DIR``: as
``lost-sweep``, but the driver is killed right after the first COMMIT of its commit
answered (after the write's decision, before its other COMMITs): the write's other
chosen transactions and the lost attempt's stay open. ``FMQ_SINK_KILL_AFTER_COMMIT``
names the file written just before the kill.

``python -m tests.spark.sink_jobs lost-between-decisions ADDRESS TOPIC ROWS LOCAL_DIR``: as
``lost-decision``, into a topic routed over several broker groups, each task's rows keyed
by its partition (so the tasks' transactions spread over the groups), and the driver is
killed right after its first broker group's decision answered, before the others':
``FMQ_SINK_KILL_AFTER_COMMIT`` names the file written just before the kill.

``python -m tests.spark.sink_jobs speculate ADDRESS TOPIC ROWS MASTER MARKS``: a batch write
of ``ROWS`` rows in 4 partitions with ``spark.speculation`` on, at ``MASTER`` (a standalone
cluster: Spark speculates only there, never in local mode), where attempt 0 of partition 0
prepares its transaction and then stalls (for at most :data:`STALL_S`), so Spark runs a
speculative copy of it; every attempt leaves a file in ``MARKS`` naming its partition,
attempt number and transactions once it prepared.

:class:`GatedSink` (``format("fmq-topic-gated")``, registered by the test itself in its own
session) writes as the sink does, but a task of partition 1 waits for the file
``GATE/open`` before it prepares, and every task leaves ``GATE/prepared-<partition>``
after its prepare: the test moves the servers under the write in between.

:class:`KeptIdSink` (``format("fmq-topic-kept")``) writes as the sink does and leaves the
write's id in the file its ``keep`` option names.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from fmq.errors import ConnectionLost
from fmq.spark.sink_commit import Committer
from fmq.spark.topic_sink import TopicBatchWriter, TopicStreamWriter, _SinkOptions
from fmq.spark.topic_source import TopicDataSource
from fmq.tx.state import TxState


class AttemptZeroLost(RuntimeError):
    """The injected failure of a first task attempt."""


class DriverDiedAfterCommit(RuntimeError):
    """The injected failure of the driver right after the sink's commit."""


class LosingBatchWriter(TopicBatchWriter):
    def write(self, iterator):
        message = super().write(iterator)
        ctx = TaskContext.get()
        if ctx.partitionId() == 1 and ctx.attemptNumber() == 0:
            raise AttemptZeroLost("attempt 0 of partition 1 is lost after its prepare")
        return message


class DyingStreamWriter(TopicStreamWriter):
    def commit(self, messages, batchId):  # noqa: N803
        super().commit(messages, batchId)
        if batchId == int(os.environ.get("FMQ_SINK_FAIL_AFTER", "-1")):
            raise DriverDiedAfterCommit(f"the driver dies after the commit of {batchId}")


#: The session of the driver of ``lost-sweep``, set by that job in its own process: the
#: crash point kills this session's processes and nothing else.
DRIVER_SESSION = "FMQ_SINK_DRIVER_SESSION"


def _kill_driver_session() -> None:
    """SIGKILL every process of the driver's session (the Python driver, its JVM, the
    Python workers; this one last): the driver dies as a whole, and no shutdown code of
    Spark's (an ``abort`` of the write, say) runs."""
    session = int(os.environ[DRIVER_SESSION])
    if os.getsid(0) != session:
        raise RuntimeError(f"this process is not in the driver's session {session}")
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.getsid(int(entry)) == session:
                os.kill(int(entry), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    os.kill(me, signal.SIGKILL)


class DriverLostBeforeSweepWriter(LosingBatchWriter):
    """The driver dies between the write's end mark and its sweep: the transaction of the
    lost attempt 0 of partition 1 stays open in a closed scope."""

    def _sweep(self, c, chosen=frozenset()):
        with open(os.environ["FMQ_SINK_KILL_BEFORE_SWEEP"], "w") as f:
            f.write(self.scope)
        _kill_driver_session()


class DriverLostBeforeSweepSink(TopicDataSource):
    @classmethod
    def name(cls) -> str:
        return "fmq-topic-lost-sweep"

    def writer(self, schema, overwrite):
        return DriverLostBeforeSweepWriter(dict(self.options), schema)


class HookedCommitter(Committer):
    """A committer that does ``hook`` (:data:`COMMIT_HOOKS`) right after the first COMMIT
    of a chosen transaction answered, or in place of / right after its decision."""

    def __init__(self, *args, hook: str, argument: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.hook, self.argument, self.fired = hook, argument, False

    def _end(self, tx, state):
        super()._end(tx, state)
        if state == TxState.COMMIT and not self.fired:
            self.fired = True
            COMMIT_HOOKS[self.hook](self.argument)

    def decide(self, scope, chosen):
        if self.hook == "kill-driver-between-decisions":
            prepare = self.producer.prepare

            def first_decision_then_die(messages, tx_id=None, group=None):
                answer = prepare(messages, tx_id=tx_id, group=group)
                if tx_id == scope:
                    _kill_driver_after_commit(self.argument)
                return answer

            self.producer.prepare = first_decision_then_die
        if self.hook == "refuse-decision":
            raise ConnectionLost("the decision never reached the server (injected)")
        super().decide(scope, chosen)
        # Once per write (the marker file ``argument``): the abort's decide answers.
        if self.hook == "lose-decision-answer" and not os.path.exists(self.argument):
            with open(self.argument, "w") as f:
                f.write(scope)
            raise ConnectionLost("the decision's answer was lost (injected)")


def _kill_server(pid: str) -> None:
    os.kill(int(pid), signal.SIGKILL)


def _kill_driver_after_commit(marker: str) -> None:
    with open(marker, "w") as f:
        f.write("killed")
    _kill_driver_session()


#: What a :class:`HookedCommitter` does after its first COMMIT, with its argument.
COMMIT_HOOKS = {"kill-server": _kill_server, "kill-driver": _kill_driver_after_commit,
                "refuse-decision": lambda _a: None, "lose-decision-answer": lambda _a: None,
                "kill-driver-between-decisions": lambda _a: None}


class HookedOptions(_SinkOptions):
    """The sink's options with a :class:`HookedCommitter` for the driver."""

    def __init__(self, options, schema, hook: str, argument: str):
        super().__init__(options, schema)
        self.hook, self.argument = hook, argument

    def committer(self, prepared):
        topics = {t.topic for t in prepared} | {self.columns.topic or ""}
        return HookedCommitter(self.servers, self.producer_group, self.access, topics,
                               hook=self.hook, argument=self.argument)


class HookedWriter(TopicBatchWriter):
    """A batch writer whose driver's committer does the option ``hook`` (with the option
    ``target``): ``kill-server`` (SIGKILL to that pid) after the first COMMIT,
    ``refuse-decision`` / ``lose-decision-answer`` around the decision."""

    def __init__(self, options, schema):
        super().__init__(options, schema)
        self.opts = HookedOptions(options, schema, options["hook"], options["target"])


class HookedSink(TopicDataSource):
    @classmethod
    def name(cls) -> str:
        return "fmq-topic-hooked"

    def writer(self, schema, overwrite):
        return HookedWriter(dict(self.options), schema)


class DriverLostAfterDecisionWriter(LosingBatchWriter):
    """Attempt 0 of partition 1 is lost after its prepare, and the driver dies (SIGKILL)
    right after its first COMMIT answered."""

    def __init__(self, options, schema):
        super().__init__(options, schema)
        self.opts = HookedOptions(options, schema, "kill-driver",
                                  os.environ["FMQ_SINK_KILL_AFTER_COMMIT"])


class DriverLostAfterDecisionSink(TopicDataSource):
    @classmethod
    def name(cls) -> str:
        return "fmq-topic-lost-decision"

    def writer(self, schema, overwrite):
        return DriverLostAfterDecisionWriter(dict(self.options), schema)


class DriverLostBetweenDecisionsWriter(LosingBatchWriter):
    """Attempt 0 of partition 1 is lost after its prepare, and the driver dies (SIGKILL)
    right after its first broker group's decision answered, before the next group's."""

    def __init__(self, options, schema):
        super().__init__(options, schema)
        self.opts = HookedOptions(options, schema, "kill-driver-between-decisions",
                                  os.environ["FMQ_SINK_KILL_AFTER_COMMIT"])


class DriverLostBetweenDecisionsSink(TopicDataSource):
    @classmethod
    def name(cls) -> str:
        return "fmq-topic-lost-between-decisions"

    def writer(self, schema, overwrite):
        return DriverLostBetweenDecisionsWriter(dict(self.options), schema)


#: The longest the stalled first attempt of the speculation job waits to be killed.
STALL_S = 120.0


class SlowFirstAttemptWriter(TopicBatchWriter):
    """Attempt 0 of partition 0 prepares, then stalls: Spark's speculation runs a copy."""

    def __init__(self, options, schema):
        super().__init__(options, schema)
        self.marks = options["marks"]

    def write(self, iterator):
        message = super().write(iterator)
        ctx = TaskContext.get()
        mark = {"partition": ctx.partitionId(), "attempt": ctx.attemptNumber(),
                "transactions": [t.tx_id for t in message.transactions]}
        path = os.path.join(self.marks, f"{ctx.partitionId()}-{ctx.taskAttemptId()}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(mark, f)
        os.replace(path + ".tmp", path)
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            deadline = time.monotonic() + STALL_S
            while time.monotonic() < deadline:  # until Spark kills this attempt
                time.sleep(0.2)
        return message


class GatedWriter(TopicBatchWriter):
    """Partition 1 prepares only once ``GATE/open`` exists; every task marks its prepare."""

    #: The longest partition 1 waits for the gate.
    WAIT_S = 180.0

    def __init__(self, options, schema):
        super().__init__(options, schema)
        self.gate = options["gate"]

    def write(self, iterator):
        ctx = TaskContext.get()
        if ctx.partitionId() == 1:
            deadline = time.monotonic() + self.WAIT_S
            while (not os.path.exists(os.path.join(self.gate, "open"))
                   and time.monotonic() < deadline):
                time.sleep(0.1)
        message = super().write(iterator)
        with open(os.path.join(self.gate, f"prepared-{ctx.partitionId()}"), "w"):
            pass
        return message


class GatedSink(TopicDataSource):
    @classmethod
    def name(cls) -> str:
        return "fmq-topic-gated"

    def writer(self, schema, overwrite):
        return GatedWriter(dict(self.options), schema)


class KeptIdWriter(TopicBatchWriter):
    """A batch writer that leaves its write id in the file the ``keep`` option names: the
    test then stages a late task of that write (a Spark task preparing after the write's
    commit or abort, as a speculative copy or a task Spark was still killing)."""

    def __init__(self, options, schema):
        super().__init__(options, schema)
        with open(options["keep"] + ".tmp", "w") as f:
            f.write(self.write_id)
        os.replace(options["keep"] + ".tmp", options["keep"])


class KeptIdSink(TopicDataSource):
    @classmethod
    def name(cls) -> str:
        return "fmq-topic-kept"

    def writer(self, schema, overwrite):
        return KeptIdWriter(dict(self.options), schema)


class TestSinkSource(TopicDataSource):
    @classmethod
    def name(cls) -> str:
        return "fmq-topic-test"

    def writer(self, schema, overwrite):
        return LosingBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema, overwrite):
        return DyingStreamWriter(dict(self.options), schema)


class SpeculatedSink(TopicDataSource):
    @classmethod
    def name(cls) -> str:
        return "fmq-topic-speculated"

    def writer(self, schema, overwrite):
        return SlowFirstAttemptWriter(dict(self.options), schema)


def _session(master: str, **conf: str) -> SparkSession:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    builder = SparkSession.builder.master(master).appName("fmq-topic-sink")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = (builder
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "512m")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(TopicDataSource)
    spark.dataSource.register(TestSinkSource)
    spark.dataSource.register(SpeculatedSink)
    spark.dataSource.register(DriverLostBeforeSweepSink)
    spark.dataSource.register(DriverLostAfterDecisionSink)
    spark.dataSource.register(DriverLostBetweenDecisionsSink)
    return spark


def _fail_mid_partition_0(i: int) -> int:
    ctx = TaskContext.get()
    if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and i % 3 == 0 and i > 30:
        raise AttemptZeroLost("attempt 0 of partition 0 fails in the middle of its rows")
    return i


def retry(address: str, topic: str, rows: int) -> None:
    spark = _session("local[2,3]")
    guard = F.udf(_fail_mid_partition_0, "int")
    df = (spark.range(rows, numPartitions=3).select(guard(F.col("id").cast("int")).alias("i"))
          .select(F.format_string("r-%d", "i").alias("body"),
                  F.format_string("k%d", F.col("i") % 5).alias("key")))
    (df.write.format("fmq-topic-test").option("servers", address).option("topic", topic)
     .mode("append").save())
    spark.stop()


def lost_sweep(address: str, topic: str, rows: int, local_dir: str,
               sink: str = "fmq-topic-lost-sweep", partitions: int = 3) -> None:
    if os.getsid(0) != os.getpid():
        raise SystemExit("lost-sweep kills its whole session: start it in a new one")
    os.environ[DRIVER_SESSION] = str(os.getpid())  # before the JVM starts: it inherits it
    spark = _session("local[2,3]", **{"spark.local.dir": local_dir})
    # Over several broker groups a task's transaction goes to its first message's group:
    # keyed by partition there, the tasks spread over the groups.
    key = (F.format_string("k%d", F.col("id") % 5) if partitions == 3 else
           F.format_string("p%d", F.spark_partition_id()))
    df = spark.range(rows, numPartitions=partitions).select(
        F.format_string("l-%d", "id").alias("body"), key.alias("key"))
    (df.write.format(sink).option("servers", address)
     .option("topic", topic).mode("append").save())
    spark.stop()
    raise SystemExit("the driver outlived its crash point")


def speculate(address: str, topic: str, rows: int, master: str, marks: str) -> None:
    # Speculate early: as soon as half the tasks are done, a task running 1.5 times their
    # median (and over a second) gets a copy on another executor.
    spark = _session(master, **{
        "spark.speculation": "true", "spark.speculation.interval": "200ms",
        "spark.speculation.quantile": "0.5", "spark.speculation.multiplier": "1.5",
        "spark.speculation.minTaskRuntime": "1s", "spark.cores.max": "2",
        "spark.executor.memory": "512m",
        # The executors' Python workers import this module (the writer's class).
        "spark.executorEnv.PYTHONPATH": os.getcwd()})
    df = spark.range(rows, numPartitions=4).select(
        F.format_string("s-%d", "id").alias("body"),
        F.format_string("k%d", F.col("id") % 5).alias("key"))
    (df.write.format("fmq-topic-speculated").option("servers", address)
     .option("topic", topic).option("marks", marks).mode("append").save())
    spark.stop()


def stream(address: str, source: str, dest: str, checkpoint: str) -> None:
    spark = _session("local[2]")
    # The pipeline of docs/spark.md ("An exactly-once pipeline"), with the test's writer.
    upper = (spark.readStream.format("fmq-topic").option("servers", address)
             .option("subscribe", source).option("startingOffsets", "earliest")
             .option("maxMessagesPerTrigger", "50").load()
             .select("key", F.upper(F.col("body").cast("string")).alias("body"),
                     F.map_from_arrays(F.array(F.lit("from")),
                                       F.array(F.format_string("%s/%d/%d", "topic", "queue_id",
                                                               "queue_offset")))
                     .alias("properties")))
    query = (upper.writeStream.format("fmq-topic-test").option("servers", address)
             .option("topic", dest).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination()
    except Exception as exc:  # noqa: BLE001 - the injected failure ends the process
        print(f"query failed: {exc}"[:2000], flush=True)
        spark.stop()
        raise SystemExit(3) from None
    spark.stop()


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "retry":
        retry(args[0], args[1], int(args[2]))
    elif mode == "lost-sweep":
        lost_sweep(args[0], args[1], int(args[2]), args[3])
    elif mode == "lost-decision":
        lost_sweep(args[0], args[1], int(args[2]), args[3], "fmq-topic-lost-decision")
    elif mode == "lost-between-decisions":
        lost_sweep(args[0], args[1], int(args[2]), args[3],
                   "fmq-topic-lost-between-decisions", partitions=6)
    elif mode == "speculate":
        speculate(args[0], args[1], int(args[2]), args[3], args[4])
    else:
        stream(*args)
